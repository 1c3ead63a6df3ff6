"""Everything the results section needs, computed from runs grouped by algorithm."""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from analysis import metrics
from analysis.bootstrap import generator, percentile_interval, stratified_bootstrap
from analysis.errors import AggregationError, AggregationWarning
from analysis.run_curves import Run
from analysis.selection import ScoreMatrix, curve_scores, final_scores, shared_tasks

METRICS = ("IQM", "Mean", "Median", "Optimality gap")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What to aggregate and how; the CLI flags map onto these fields one to one."""

    step: int = 1_000_000
    window: int = 1
    reps: int = 50_000
    curve_reps: int = 2_000
    confidence: float = 0.95
    seed: int = 0
    normalize: bool = False
    max_return: float = 1000.0
    curve_points: int = 0
    profile_points: int = 101
    chunk_mb: float = 256.0
    tasks: tuple[str, ...] = ()
    progress: bool = False

    @property
    def scale(self) -> float:
        """The best possible score in the units the statistics use."""
        return 1.0 if self.normalize else self.max_return


@dataclasses.dataclass
class Summary:
    """Tables of every number, as lists of flat dict rows (one list per output table)."""

    settings: Settings
    tasks: list[str]
    scores: dict[str, ScoreMatrix]
    aggregates: list[dict]
    improvement: list[dict]
    curves: list[dict]
    profiles: list[dict]


def check_settings(s: Settings) -> None:
    """AggregationError naming the first setting out of its accepted range."""
    checks = [
        (s.step >= 0, f"--step must be >= 0, got {s.step}"),
        (s.window >= 1, f"--window must be >= 1 evaluation, got {s.window}"),
        (s.reps >= 1, f"--reps must be >= 1, got {s.reps}"),
        (s.curve_reps >= 1, f"--curve_reps must be >= 1, got {s.curve_reps}"),
        (0.0 < s.confidence < 1.0, f"--confidence must be in (0, 1), got {s.confidence}"),
        (math.isfinite(s.max_return) and s.max_return > 0,
         f"--max_return must be a finite number > 0, got {s.max_return}"),
        (s.curve_points >= 0, f"--curve_points must be >= 0, got {s.curve_points}"),
        (s.profile_points >= 2, f"--profile_points must be >= 2, got {s.profile_points}"),
        (s.seed >= 0, f"--seed must be >= 0, got {s.seed}"),
        (s.chunk_mb > 0, f"--chunk_mb must be > 0, got {s.chunk_mb}"),
    ]
    for ok, message in checks:
        if not ok:
            raise AggregationError(message)


def aggregate_statistics(scores: np.ndarray, gamma: float) -> np.ndarray:
    """(..., runs, tasks) -> (..., 4): IQM, mean, median, optimality gap."""
    return np.stack([metrics.iqm(scores), metrics.mean(scores), metrics.median(scores),
                     metrics.optimality_gap(scores, gamma)], axis=-1)


def _interval_rows(label: str, matrix: ScoreMatrix, s: Settings, gamma: float) -> list[dict]:
    stat = lambda x: aggregate_statistics(x, gamma)
    point = stat(matrix.values)
    dist = stratified_bootstrap([matrix.values], stat, s.reps, generator(s.seed, "aggregate",
                                label), chunk_mb=s.chunk_mb, progress=s.progress,
                                desc=f"{label}: aggregates")
    low, high = percentile_interval(dist, s.confidence)
    counts = matrix.counts
    return [dict(algorithm=label, metric=name, estimate=float(point[i]), lower=float(low[i]),
                 upper=float(high[i]), runs=matrix.num_runs, tasks=len(matrix.tasks),
                 min_runs_per_task=int(counts.min()), max_runs_per_task=int(counts.max()))
            for i, name in enumerate(METRICS)]


def _improvement_rows(scores: Mapping[str, ScoreMatrix], s: Settings) -> list[dict]:
    rows = []
    for a, b in itertools.combinations(scores, 2):
        x, y = scores[a].values, scores[b].values
        point = metrics.probability_of_improvement(x, y)
        work = x.shape[0] * y.shape[0] * x.shape[1] * 2
        dist = stratified_bootstrap([x, y], metrics.probability_of_improvement, s.reps,
                                    generator(s.seed, "improvement", a, b), work_elements=work,
                                    chunk_mb=s.chunk_mb, progress=s.progress,
                                    desc=f"P({a} > {b})")
        low, high = percentile_interval(dist, s.confidence)
        rows.append(dict(x=a, y=b, probability=float(point), lower=float(low), upper=float(high),
                         tasks=x.shape[1], runs_x=scores[a].num_runs, runs_y=scores[b].num_runs))
    return rows


def _curve_rows(label: str, runs: Sequence[Run], tasks: list[str], s: Settings) -> list[dict]:
    curve = curve_scores(runs, tasks, s.curve_points, label)
    if curve is None:
        return []
    steps, matrix = curve
    values = matrix.values / (s.max_return if s.normalize else 1.0)
    stat = lambda x: metrics.iqm(np.moveaxis(x, -1, -3))
    point = stat(values)
    dist = stratified_bootstrap([values], stat, s.curve_reps, generator(s.seed, "curve", label),
                                chunk_mb=s.chunk_mb, progress=s.progress,
                                desc=f"{label}: curve")
    low, high = percentile_interval(dist, s.confidence)
    return [dict(algorithm=label, env_step=int(step), iqm=float(point[i]), lower=float(low[i]),
                 upper=float(high[i]), runs=matrix.num_runs, tasks=len(tasks))
            for i, step in enumerate(steps)]


def _profile_rows(label: str, matrix: ScoreMatrix, s: Settings) -> list[dict]:
    taus = np.linspace(0.0, s.scale, s.profile_points)
    stat = lambda x: metrics.performance_profile(x, taus)
    point = stat(matrix.values)
    dist = stratified_bootstrap([matrix.values], stat, s.curve_reps,
                                generator(s.seed, "profile", label),
                                work_elements=matrix.values.size * taus.size,
                                chunk_mb=s.chunk_mb, progress=s.progress,
                                desc=f"{label}: profile")
    low, high = percentile_interval(dist, s.confidence)
    return [dict(algorithm=label, tau=float(tau), fraction=float(point[i]), lower=float(low[i]),
                 upper=float(high[i])) for i, tau in enumerate(taus)]


def _scored_tasks(scores: Mapping[str, ScoreMatrix], tasks: list[str]) -> list[str]:
    """Tasks where every algorithm kept at least one run; warns about the others."""
    empty = {t: [a for a, m in scores.items() if m.counts[m.tasks.index(t)] == 0] for t in tasks}
    empty = {t: algos for t, algos in empty.items() if algos}
    for task, algos in empty.items():
        warnings.warn(f"task {task} left out for every algorithm: no usable run in "
                      f"{', '.join(algos)}", AggregationWarning, stacklevel=3)
    kept = [t for t in tasks if t not in empty]
    if not kept:
        raise AggregationError("no task has a usable run in every algorithm")
    return kept


def summarize(datasets: Mapping[str, Sequence[Run]], settings: Settings = Settings()) -> Summary:
    """Score matrices at settings.step, interval estimates, improvement, curves and profiles."""
    check_settings(settings)
    if not datasets:
        raise AggregationError("no algorithms to aggregate")
    tasks = shared_tasks(datasets, settings.tasks)
    raw = {label: final_scores(runs, tasks, settings.step, settings.window, label)
           for label, runs in datasets.items()}
    tasks = _scored_tasks(raw, tasks)
    divisor = settings.max_return if settings.normalize else 1.0
    kept = {label: m.select(tasks) for label, m in raw.items()}
    for label, m in kept.items():
        above = m.values > settings.max_return
        if above.any():
            warnings.warn(f"{label}: {int(above.sum())} of its {above.size} scores exceed "
                          f"--max_return={settings.max_return:g} (up to {m.values.max():g}); "
                          "the optimality gap counts them as no gap, and normalised scores "
                          "pass 1: is --max_return the best return of these tasks (DMC: "
                          "1000)?",
                          AggregationWarning, stacklevel=2)
    scores = {label: dataclasses.replace(m, values=m.values / divisor) for label, m in kept.items()}
    gamma = settings.scale
    return Summary(
        settings=settings,
        tasks=tasks,
        scores=scores,
        aggregates=[r for label, m in scores.items() for r in _interval_rows(label, m, settings,
                                                                             gamma)],
        improvement=_improvement_rows(scores, settings),
        curves=[r for label, runs in datasets.items()
                for r in _curve_rows(label, runs, tasks, settings)],
        profiles=[r for label, m in scores.items() for r in _profile_rows(label, m, settings)],
    )
