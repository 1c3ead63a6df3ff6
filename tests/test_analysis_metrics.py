"""Aggregate statistics against rliable's metrics and against direct computations."""

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from rliable import metrics as rm

from analysis import metrics

matrices = st.tuples(st.integers(1, 12), st.integers(1, 9)).flatmap(
    lambda shape: arrays(np.float64, shape, elements=st.integers(0, 20).map(float) | st.floats(
        -5.0, 5.0, allow_nan=False)))


@settings(max_examples=60, deadline=None)
@given(matrices)
def test_aggregates_equal_rliable(scores):
    pairs = [(metrics.iqm, rm.aggregate_iqm), (metrics.mean, rm.aggregate_mean),
             (metrics.median, rm.aggregate_median)]
    pairs += [(lambda s, g=g: metrics.optimality_gap(s, g),
               lambda s, g=g: rm.aggregate_optimality_gap(s, g)) for g in (1.0, 7.5)]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours(scores), theirs(scores), rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 8), st.integers(1, 6), st.integers(0, 2**31 - 1),
       st.booleans())
def test_probability_of_improvement_equals_rliable(nx, ny, tasks, seed, identical):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, size=(nx, tasks)).astype(float)
    y = x.copy() if identical else rng.integers(0, 4, size=(ny, tasks)).astype(float)
    np.testing.assert_allclose(metrics.probability_of_improvement(x, y),
                               rm.probability_of_improvement(x, y), rtol=1e-12, atol=1e-12)


def ragged(seed):
    rng = np.random.default_rng(seed)
    columns = [rng.normal(m, 1.0, size=n) for m, n in zip((0, 3, -2, 5), (4, 7, 1, 7),
                                                           strict=True)]
    padded = np.full((7, 4), np.nan)
    for m, c in enumerate(columns):
        padded[: c.size, m] = c
    return columns, padded


def test_nan_padding_counts_only_valid_runs():
    columns, padded = ragged(0)
    flat = np.concatenate(columns)
    task_means = np.array([c.mean() for c in columns])
    np.testing.assert_allclose(metrics.iqm(padded), scipy.stats.trim_mean(flat, 0.25))
    np.testing.assert_allclose(metrics.mean(padded), task_means.mean())
    np.testing.assert_allclose(metrics.median(padded), np.median(task_means))
    np.testing.assert_allclose(metrics.optimality_gap(padded, 2.0),
                               2.0 - np.mean([np.minimum(c, 2.0).mean() for c in columns]))
    taus = np.array([-1.0, 0.0, 2.5, 9.0])
    np.testing.assert_allclose(metrics.performance_profile(padded, taus),
                               [(flat > t).mean() for t in taus])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=8), st.integers(0, 2**31 - 1),
       st.sampled_from([1.0, 1000.0]))
def test_mean_plus_optimality_gap_is_gamma_with_ragged_runs_per_task(runs, seed, gamma):
    """Tasks weigh the same in the gap as in the mean, whatever each task's number of runs;
    the IQM keeps pooling every run x task score."""
    rng = np.random.default_rng(seed)
    columns = [rng.uniform(0.0, gamma, size=n) for n in runs]
    padded = np.full((max(runs), len(runs)), np.nan)
    for m, c in enumerate(columns):
        padded[: c.size, m] = c
    np.testing.assert_allclose(metrics.mean(padded) + metrics.optimality_gap(padded, gamma),
                               gamma, rtol=1e-12)
    np.testing.assert_allclose(metrics.iqm(padded),
                               scipy.stats.trim_mean(np.concatenate(columns), 0.25), rtol=1e-12)
    above = padded + gamma / 2  # scores above gamma count as gamma in the gap only
    expected = gamma - np.mean([np.minimum(c + gamma / 2, gamma).mean() for c in columns])
    np.testing.assert_allclose(metrics.optimality_gap(above, gamma), expected, rtol=1e-12,
                               atol=1e-12 * gamma)


def test_probability_of_improvement_with_padding_counts_pairs_of_valid_runs():
    cx, x = ragged(1)
    cy, y = ragged(2)
    expected = np.mean([np.mean([[1.0 if a > b else 0.5 if a == b else 0.0 for b in cb]
                                 for a in ca]) for ca, cb in zip(cx, cy, strict=True)])
    np.testing.assert_allclose(metrics.probability_of_improvement(x, y), expected)
    np.testing.assert_allclose(metrics.probability_of_improvement(x, y)
                               + metrics.probability_of_improvement(y, x), 1.0)


def test_leading_axes_are_independent_replicates():
    batch = np.random.default_rng(3).normal(size=(3, 5, 6, 4))
    for f in (metrics.iqm, metrics.mean, metrics.median, metrics.optimality_gap):
        expected = [[f(batch[i, j]) for j in range(5)] for i in range(3)]
        np.testing.assert_allclose(f(batch), expected, rtol=1e-12, atol=1e-12)


def test_performance_profile_is_fraction_above_threshold():
    scores = np.random.default_rng(4).random((10, 15))
    taus = np.linspace(0, 1, 11)
    np.testing.assert_allclose(metrics.performance_profile(scores, taus),
                               [np.mean(scores > t) for t in taus])


def test_unequal_valid_counts_across_replicates_are_rejected():
    scores = np.ones((2, 3, 4))
    scores[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="same positive number of valid"):
        metrics.iqm(scores)
