"""Interval estimates, improvement and profiles against rliable's own bootstrap, on random
score matrices and on the published reference data (point estimates identical, interval
endpoints within Monte-Carlo tolerance)."""

import numpy as np
import pytest
from rliable import library as rly
from rliable import metrics as rm

from analysis import metrics
from analysis.bootstrap import generator, percentile_interval, stratified_bootstrap
from analysis.layouts import load_runs
from analysis.selection import final_scores
from analysis.summary import aggregate_statistics
from tests.helpers.runs import REFERENCE

SAC_UTD1 = (REFERENCE / "rl_with_resets_sac"
            / "max_steps_2000000_resets_False_config.updates_per_step_1")


def rliable_aggregates(scores):
    return np.array([rm.aggregate_iqm(scores), rm.aggregate_mean(scores),
                     rm.aggregate_median(scores), rm.aggregate_optimality_gap(scores, 1.0)])


def compare_intervals(scores, reps_rliable=2000, tolerance=0.1):
    """Our point estimates equal rliable's; each endpoint within `tolerance` x interval width."""
    np.random.seed(0)
    point, ci = rly.get_interval_estimates({"a": scores}, rliable_aggregates, reps=reps_rliable)
    ours = lambda s: aggregate_statistics(s, 1.0)
    np.testing.assert_allclose(ours(scores), point["a"], rtol=1e-12)
    interval = percentile_interval(stratified_bootstrap([scores], ours, 50_000,
                                                        generator(0, "test")))
    width = interval[1] - interval[0]
    assert np.all(np.abs(interval - ci["a"]) <= tolerance * width), (interval, ci["a"])


def test_intervals_match_rliable_on_random_scores():
    scores = np.random.default_rng(0).random((10, 15)) * np.linspace(0.2, 3.0, 15)
    compare_intervals(scores)


def reference_matrix(path, **kwargs):
    _, runs = load_runs(path, **kwargs)
    tasks = sorted({r.task for r in runs})
    matrix = final_scores(runs, tasks, 1_000_000)
    assert not np.isnan(matrix.values).any()
    return matrix.values / 1000.0


@pytest.mark.parametrize("path", [SAC_UTD1, REFERENCE / "bro_dmc"], ids=["sac", "bro"])
def test_intervals_match_rliable_on_reference_data(path):
    compare_intervals(reference_matrix(path))


def test_improvement_matches_rliable():
    rng = np.random.default_rng(1)
    x = rng.random((10, 6)) * np.linspace(0.5, 2.0, 6)
    y = rng.random((8, 6)) * np.linspace(0.6, 1.5, 6)
    np.random.seed(0)
    point, ci = rly.get_interval_estimates({"xy": [x, y]}, rm.probability_of_improvement,
                                           reps=300)
    assert metrics.probability_of_improvement(x, y) == pytest.approx(point["xy"], rel=1e-12)
    ours = percentile_interval(stratified_bootstrap(
        [x, y], metrics.probability_of_improvement, 50_000, generator(0, "poi")))
    width = ours[1] - ours[0]
    assert np.all(np.abs(ours - ci["xy"].ravel()) <= 0.15 * width), (ours, ci["xy"])


def test_performance_profile_matches_rliable():
    scores = reference_matrix(REFERENCE / "bro_fast_dmc")
    taus = np.linspace(0.0, 1.0, 21)
    np.random.seed(0)
    profiles, cis = rly.create_performance_profile({"a": scores}, taus, reps=1000)
    np.testing.assert_allclose(metrics.performance_profile(scores, taus), profiles["a"])
    ours = percentile_interval(stratified_bootstrap(
        [scores], lambda s: metrics.performance_profile(s, taus), 20_000, generator(0, "p")))
    assert np.all(np.abs(ours - cis["a"]) <= 0.05), (ours, cis["a"])
