"""Stratified bootstrap (runs resampled with replacement within each task), vectorised and
chunked over repetitions so memory stays bounded, with percentile intervals."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np
from tqdm import tqdm

# Bytes one resampled score element costs while a statistic runs on it: the int64 index, the
# gathered float64 value and a few float64/bool temporaries (sort copy, NaN mask, where).
BYTES_PER_ELEMENT = 48


def generator(seed: int, *names: str) -> np.random.Generator:
    """A Generator that depends on the seed and the names only (stable across processes)."""
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


def valid_counts(scores: np.ndarray) -> np.ndarray:
    """(tasks,) valid runs per task of scores (runs, tasks, ...) whose NaN padding sits below."""
    valid = ~np.isnan(scores.reshape(*scores.shape[:2], -1)).all(axis=-1)
    counts = valid.sum(axis=0)
    if np.any(counts == 0):
        raise ValueError(f"every task needs at least one run; tasks {np.flatnonzero(counts == 0)} "
                         "have none")
    if np.any(valid != (np.arange(scores.shape[0])[:, None] < counts)):
        raise ValueError("NaN padding must come after a task's valid runs")
    return counts


def resample_indices(rng: np.random.Generator, counts: np.ndarray, rows: int,
                     reps: int) -> np.ndarray:
    """(reps, rows, tasks) row indices: slot k < counts[m] draws uniformly from task m's runs;
    the remaining slots point at row counts[m], which is NaN padding."""
    idx = rng.integers(0, counts, size=(reps, rows, counts.size))
    return np.where(np.arange(rows)[:, None] < counts, idx, counts)


def stratified_bootstrap(
    arrays: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray],
    reps: int,
    rng: np.random.Generator,
    *,
    work_elements: int | None = None,
    chunk_mb: float = 256.0,
    progress: bool = False,
    desc: str = "bootstrap",
) -> np.ndarray:
    """Bootstrap distribution (reps, ...) of statistic(*resampled arrays).

    Each array (runs, tasks, ...) is resampled independently, runs within each task, trailing
    axes carried along. Repetitions run in chunks of at most `chunk_mb` MB of working memory,
    estimated from `work_elements` per repetition (default: the resampled arrays' size).
    The result does not depend on the chunk size.
    """
    if reps < 1:
        raise ValueError(f"reps must be a positive integer, got {reps}")
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    counts = [valid_counts(a) for a in arrays]
    streams = rng.spawn(len(arrays))
    work = work_elements or sum(a.size for a in arrays)
    chunk = int(max(1, min(reps, chunk_mb * 2**20 // (BYTES_PER_ELEMENT * work))))
    out = None
    with tqdm(total=reps, desc=desc, unit="rep", disable=not progress, leave=False) as bar:
        for start in range(0, reps, chunk):
            size = min(chunk, reps - start)
            resampled = [
                a[resample_indices(s, c, a.shape[0], size), np.arange(a.shape[1])]
                for a, c, s in zip(arrays, counts, streams, strict=True)
            ]
            values = np.asarray(statistic(*resampled))
            if out is None:
                out = np.empty((reps, *values.shape[1:]), dtype=values.dtype)
            out[start: start + size] = values
            bar.update(size)
    return out


def percentile_interval(distribution: np.ndarray, size: float = 0.95) -> np.ndarray:
    """(2, ...) lower and upper percentile bounds of a bootstrap distribution (reps, ...)."""
    if not 0.0 < size < 1.0:
        raise ValueError(f"interval size must be strictly between 0 and 1, got {size}")
    alpha = 100 * (1.0 - size) / 2
    return np.percentile(distribution, [alpha, 100 - alpha], axis=0)
