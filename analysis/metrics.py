"""Aggregate statistics as rliable defines them, vectorised over leading (replicate) axes.

Scores are (..., runs, tasks) arrays; NaN marks a missing run (a task with fewer runs), and
every statistic uses only the valid runs. With no NaN the values equal rliable's metrics.

With ragged data (tasks with different numbers of valid runs) pooling the runs and averaging
per-task means no longer agree. IQM and the performance profile pool every valid run x task
score (rliable's flattening: each run weighs the same, so a task with more runs weighs more);
mean, median and optimality gap take the per-task mean over runs first and weigh every task
the same, so mean + optimality gap = gamma whenever no score exceeds gamma, ragged or not.
"""

from __future__ import annotations

import numpy as np


def _flat(scores: np.ndarray) -> np.ndarray:
    return scores.reshape(*scores.shape[:-2], -1)


def _valid_total(flat: np.ndarray) -> int:
    counts = np.count_nonzero(~np.isnan(flat), axis=-1)
    total = int(counts.flat[0]) if counts.size else 0
    if total == 0 or np.any(counts != total):
        raise ValueError("scores need the same positive number of valid (non-NaN) entries in "
                         f"every replicate, got counts {np.unique(counts)}")
    return total


def iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean: 25 % trimmed mean of all runs x tasks, (..., runs, tasks) -> (...)."""
    flat = _flat(scores)
    total = _valid_total(flat)
    cut = int(0.25 * total)
    return np.sort(flat, axis=-1)[..., cut: total - cut].mean(axis=-1)


def task_means(scores: np.ndarray) -> np.ndarray:
    """Per-task mean over valid runs, (..., runs, tasks) -> (..., tasks)."""
    valid = ~np.isnan(scores)
    return np.where(valid, scores, 0.0).sum(axis=-2) / valid.sum(axis=-2)


def mean(scores: np.ndarray) -> np.ndarray:
    """Mean over tasks of the per-task mean, (..., runs, tasks) -> (...)."""
    return task_means(scores).mean(axis=-1)


def median(scores: np.ndarray) -> np.ndarray:
    """Median over tasks of the per-task mean, (..., runs, tasks) -> (...)."""
    return np.median(task_means(scores), axis=-1)


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """gamma - mean over tasks of the per-task mean of min(score, gamma), (..., runs, tasks)
    -> (...).

    Tasks weigh the same, as in `mean`, also when they have different numbers of valid runs
    (rliable's gamma - mean(min(scores, gamma)) over the (runs, tasks) array is the same thing
    when every task has every run); so the gap is gamma - mean when no score exceeds gamma.
    """
    return gamma - mean(np.minimum(scores, gamma))


def performance_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Fraction of valid runs x tasks above each tau: (..., runs, tasks), (K,) -> (..., K)."""
    flat = _flat(scores)
    total = _valid_total(flat)
    return (flat[..., None] > np.asarray(taus)).sum(axis=-2) / total


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y): per task U / (n_x n_y) with ties 1/2, averaged over tasks.

    x (..., runs_x, tasks), y (..., runs_y, tasks) -> (...).
    """
    xs, ys = x[..., :, None, :], y[..., None, :, :]
    wins = (xs > ys).sum(axis=(-3, -2)) + 0.5 * (xs == ys).sum(axis=(-3, -2))
    pairs = (~np.isnan(x)).sum(axis=-2) * (~np.isnan(y)).sum(axis=-2)
    return (wins / pairs).mean(axis=-1)
