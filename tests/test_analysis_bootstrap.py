"""Stratified bootstrap: stratification, exactness per resample, determinism, chunking, memory."""

import tracemalloc

import numpy as np
import pytest
from rliable import metrics as rm

from analysis import metrics
from analysis.bootstrap import (
    generator,
    percentile_interval,
    resample_indices,
    stratified_bootstrap,
    valid_counts,
)
from analysis.summary import aggregate_statistics


def padded_scores(seed=0):
    rng = np.random.default_rng(seed)
    scores = rng.normal(np.arange(6) * 2.0, 1.0, size=(8, 6))
    for m, n in enumerate((8, 5, 8, 1, 3, 8)):
        scores[n:, m] = np.nan
    return scores


def test_resample_indices_draw_uniformly_within_each_task():
    counts = np.array([8, 5, 1, 3])
    idx = resample_indices(np.random.default_rng(0), counts, 8, 20_000)
    for m, n in enumerate(counts):
        valid, padding = idx[:, :n, m], idx[:, n:, m]
        assert np.all(padding == n)
        frequencies = np.bincount(valid.ravel(), minlength=n) / valid.size
        np.testing.assert_allclose(frequencies, 1.0 / n, atol=0.01)


def test_valid_counts_require_padding_below_runs():
    scores = padded_scores()
    np.testing.assert_array_equal(valid_counts(scores), [8, 5, 8, 1, 3, 8])
    scores[0, 1], scores[6, 1] = np.nan, 1.0
    with pytest.raises(ValueError, match="padding must come after"):
        valid_counts(scores)


def test_distribution_is_the_statistic_of_each_stratified_resample():
    scores = np.random.default_rng(1).normal(size=(6, 5)) + np.arange(5)
    reps = 300
    dist = stratified_bootstrap([scores], lambda s: aggregate_statistics(s, 1.0), reps,
                                np.random.default_rng(7), chunk_mb=0.01)
    (stream,) = np.random.default_rng(7).spawn(1)
    idx = resample_indices(stream, np.full(5, 6), 6, reps)
    for r in range(reps):
        resample = np.take_along_axis(scores, idx[r], axis=0)
        expected = [rm.aggregate_iqm(resample), rm.aggregate_mean(resample),
                    rm.aggregate_median(resample), rm.aggregate_optimality_gap(resample, 1.0)]
        np.testing.assert_allclose(dist[r], expected, rtol=1e-12)


def test_improvement_distribution_resamples_both_algorithms_independently():
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 5, (5, 4)).astype(float), rng.integers(0, 5, (7, 4)).astype(float)
    reps = 200
    dist = stratified_bootstrap([x, y], metrics.probability_of_improvement, reps,
                                np.random.default_rng(3))
    sx, sy = np.random.default_rng(3).spawn(2)
    ix, iy = resample_indices(sx, np.full(4, 5), 5, reps), resample_indices(sy, np.full(4, 7), 7,
                                                                          reps)
    expected = [rm.probability_of_improvement(np.take_along_axis(x, ix[r], 0),
                                              np.take_along_axis(y, iy[r], 0))
                for r in range(reps)]
    np.testing.assert_allclose(dist, expected, rtol=1e-12)


def test_task_with_one_run_never_varies():
    scores = padded_scores()
    dist = stratified_bootstrap([scores], metrics.task_means, 2000, np.random.default_rng(0))
    assert np.all(dist[:, 3] == scores[0, 3])
    assert np.std(dist[:, 0]) > 0


def test_same_seed_same_result_and_chunking_does_not_matter():
    x, y = padded_scores(0), padded_scores(1)
    stat = lambda s: aggregate_statistics(s, 1.0)
    a = stratified_bootstrap([x], stat, 5000, generator(4, "agg", "sac"), chunk_mb=0.05)
    b = stratified_bootstrap([x], stat, 5000, generator(4, "agg", "sac"), chunk_mb=512)
    c = stratified_bootstrap([x], stat, 5000, generator(5, "agg", "sac"))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    poi = metrics.probability_of_improvement
    p = stratified_bootstrap([x, y], poi, 3000, generator(4, "poi"), chunk_mb=0.05)
    q = stratified_bootstrap([x, y], poi, 3000, generator(4, "poi"), chunk_mb=512)
    np.testing.assert_array_equal(p, q)


def test_generator_depends_only_on_seed_and_names():
    draw = lambda *args: generator(*args).integers(0, 2**62, 4)
    np.testing.assert_array_equal(draw(0, "a", "b"), draw(0, "a", "b"))
    assert not np.array_equal(draw(0, "a", "b"), draw(0, "a", "c"))
    assert not np.array_equal(draw(0, "a"), draw(1, "a"))


TAUS = np.linspace(0, 1, 101)
MEMORY_CASES = {
    "curve": ((10, 15, 40), lambda s: metrics.iqm(np.moveaxis(s, -1, -3)), None),
    "profile": ((10, 15), lambda s: metrics.performance_profile(s, TAUS), 150 * TAUS.size),
}


@pytest.mark.parametrize("case", MEMORY_CASES)
def test_memory_stays_within_the_chunk_budget(case):
    shape, stat, work = MEMORY_CASES[case]
    scores = np.random.default_rng(0).random(shape)
    reps, budget_mb = 20_000, 8
    tracemalloc.start()
    dist = stratified_bootstrap([scores], stat, reps, np.random.default_rng(0),
                                work_elements=work, chunk_mb=budget_mb)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    unchunked = reps * (work or scores.size) * 8
    assert unchunked > 40 * budget_mb * 2**20
    assert peak < budget_mb * 2**20 + dist.nbytes + scores.nbytes


def test_percentile_interval_uses_the_two_tails():
    dist = np.random.default_rng(0).normal(size=(10_001, 3))
    low, high = percentile_interval(dist, 0.9)
    np.testing.assert_allclose(low, np.percentile(dist, 5, axis=0))
    np.testing.assert_allclose(high, np.percentile(dist, 95, axis=0))
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        percentile_interval(dist, 1.0)
