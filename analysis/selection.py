"""From evaluation curves to score matrices: the score at a step, shared tasks, shared steps.

Score matrices are (runs, tasks) float arrays; a task with fewer runs than the widest task is
padded with NaN below its runs (valid runs first), and every statistic counts only valid runs.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from analysis.errors import AggregationError, AggregationWarning
from analysis.run_curves import Run, canonical_task


@dataclasses.dataclass(frozen=True)
class ScoreMatrix:
    """values (runs, tasks [, steps]) NaN-padded per task; run_ids[m] names column m's rows."""

    values: np.ndarray
    tasks: tuple[str, ...]
    run_ids: tuple[tuple[str, ...], ...]
    used_steps: tuple[tuple[int, ...], ...] = ()

    @property
    def counts(self) -> np.ndarray:
        """(tasks,) number of valid runs per task."""
        return np.array([len(ids) for ids in self.run_ids], dtype=np.int64)

    @property
    def num_runs(self) -> int:
        """Valid runs over all tasks (runs x tasks cells that hold a score)."""
        return int(self.counts.sum())

    def select(self, tasks: Sequence[str]) -> ScoreMatrix:
        """The same scores restricted to `tasks` (in that order), padding trimmed."""
        cols = [self.tasks.index(t) for t in tasks]
        rows = max(int(self.counts[c]) for c in cols)
        return ScoreMatrix(self.values[:rows, cols], tuple(tasks),
                           tuple(self.run_ids[c] for c in cols),
                           tuple(self.used_steps[c] for c in cols) if self.used_steps else ())


def _pack(columns: Sequence[np.ndarray], trailing: tuple[int, ...] = ()) -> np.ndarray:
    rows = max(len(c) for c in columns)
    values = np.full((rows, len(columns), *trailing), np.nan)
    for m, column in enumerate(columns):
        values[: len(column), m] = column
    return values


def eval_interval(steps: np.ndarray) -> int | None:
    """The run's evaluation interval (median spacing of its steps); None for one evaluation."""
    return int(np.median(np.diff(steps))) if steps.size > 1 else None


def score_at_step(run: Run, step: int, window: int = 1) -> tuple[float, int] | str:
    """(mean return of the last `window` evaluations at or before `step`, the step used).

    The last evaluation at or before `step` is used when it lies within one evaluation
    interval of it (the median spacing of its evaluations; for a single one, the run's
    eval_every if its config records one), but never when the run stopped early (diverged)
    at or before `step`; otherwise the reason the run cannot be scored is returned
    as a string.
    """
    last = int(np.searchsorted(run.steps, step, side="right")) - 1
    if last < 0:
        return f"first evaluation at {int(run.steps[0])}, after step {step}"
    used = int(run.steps[last])
    if used != step and run.stopped_at is not None and step >= run.stopped_at:
        return f"last evaluation at {used}, before step {step}"  # the caller adds why
    interval = eval_interval(run.steps)
    if interval is None and isinstance(run.config.get("eval_every"), int):
        interval = run.config["eval_every"]  # one evaluation: the interval its run was given
    if used != step and interval is None:
        return f"its only evaluation is at {used}, before step {step}"
    if used != step and step - used > interval:
        return f"last evaluation at {used}, more than one eval interval before step {step}"
    return float(run.returns[max(0, last - window + 1): last + 1].mean()), used


def _warn_runs(label: str, what: str, items: list[str]) -> None:
    if items:
        shown = ", ".join(items[:8]) + (f", ... ({len(items)} in all)" if len(items) > 8 else "")
        warnings.warn(f"{label}: {len(items)} run(s) {what}: {shown}", AggregationWarning,
                      stacklevel=3)


def final_scores(runs: Sequence[Run], tasks: Sequence[str], step: int, window: int = 1,
                 label: str = "") -> ScoreMatrix:
    """Score matrix (runs, tasks) at `step`; runs without a usable evaluation are dropped."""
    if window < 1:
        raise AggregationError(f"window must be a positive number of evaluations, got {window}")
    columns, ids, used_steps = [], [], []
    dropped, shifted, short = [], [], []
    for task in tasks:
        scores, names, used = [], [], []
        for run in (r for r in runs if r.task == task):
            result = score_at_step(run, step, window)
            if isinstance(result, str):
                why = f"{result}; {run.stopped}" if run.stopped else result
                dropped.append(f"{task}/{run.run_id} ({why})")
                continue
            scores.append(result[0])
            names.append(run.run_id)
            used.append(result[1])
            if result[1] != step:
                shifted.append(f"{task}/{run.run_id} ({result[1]})")
            if window > 1 and np.searchsorted(run.steps, result[1], side="right") < window:
                short.append(f"{task}/{run.run_id}")
        columns.append(np.asarray(scores))
        ids.append(tuple(names))
        used_steps.append(tuple(used))
    _warn_runs(label, f"dropped at step {step}", dropped)
    _warn_runs(label, f"have no evaluation at step {step} and use the last one before it", shifted)
    _warn_runs(label, f"have fewer than window={window} evaluations and average what they have",
               short)
    if all(len(c) == 0 for c in columns):
        chosen = [r for r in runs if r.task in tasks]
        first, last = min(int(r.steps[0]) for r in chosen), max(int(r.steps[-1]) for r in chosen)
        raise AggregationError(f"{label}: no run has an evaluation usable at step {step} (the "
                               f"runs evaluated from step {first} to {last}); --step sets the "
                               "step each run is scored at")
    return ScoreMatrix(_pack(columns), tuple(tasks), tuple(ids), tuple(used_steps))


def shared_tasks(datasets: Mapping[str, Sequence[Run]],
                 requested: Sequence[str] | None = None) -> list[str]:
    """Tasks every algorithm has (or the requested ones, all of which every algorithm must have)."""
    have = {label: {r.task for r in runs} for label, runs in datasets.items()}
    if requested:
        named: dict[str, list[str]] = {}
        for task in requested:
            named.setdefault(canonical_task(task), []).append(task)
        repeated = {task: names for task, names in named.items() if len(names) > 1}
        if repeated:
            detail = "; ".join(f"{task} as {', '.join(names)}" for task, names in repeated.items())
            raise AggregationError(f"tasks requested more than once (each would count again in "
                                   f"every aggregate): {detail}")
        requested = list(named)
        missing = {label: sorted(set(requested) - t) for label, t in have.items()}
        missing = {label: m for label, m in missing.items() if m}
        if missing:
            detail = "; ".join(f"{label} lacks {', '.join(m)}" for label, m in missing.items())
            raise AggregationError(f"requested tasks not available: {detail}")
        return list(requested)
    common = set.intersection(*have.values())
    if not common:
        detail = "; ".join(f"{label}: {', '.join(sorted(t))}" for label, t in have.items())
        raise AggregationError(f"no task is shared by all algorithms ({detail})")
    for label, t in have.items():
        if t - common:
            warnings.warn(f"{label}: tasks not shared by all algorithms are left out: "
                          f"{', '.join(sorted(t - common))}", AggregationWarning, stacklevel=2)
    return sorted(common)


def _even_subset(steps: np.ndarray, max_points: int) -> np.ndarray:
    if max_points <= 0 or steps.size <= max_points:
        return steps
    if max_points == 1:
        return steps[-1:]
    return steps[np.unique(np.linspace(0, steps.size - 1, max_points).round().astype(int))]


def curve_scores(runs: Sequence[Run], tasks: Sequence[str], max_points: int = 0,
                 label: str = "") -> tuple[np.ndarray, ScoreMatrix] | None:
    """(steps (T,), scores (runs, tasks, T)) at the evaluation steps all the runs share.

    Runs that stopped early (diverged) are left out, with a warning, so that they do not end
    every curve where they stopped; a task whose runs all stopped keeps them (and its curve
    ends there, with the warning that says so).

    Every shared step, or at most `max_points` > 0 evenly spaced ones (the last always kept);
    None (with a warning) when the runs share no evaluation step.
    """
    chosen = [r for r in runs if r.task in tasks]
    stopped = [r for r in chosen if r.stopped]
    kept_tasks = {r.task for r in chosen if not r.stopped}
    _warn_runs(label, "stopped early and are left out of the sample-efficiency curve",
               sorted(f"{r.task}/{r.run_id} ({r.stopped})" for r in stopped
                      if r.task in kept_tasks))
    chosen = [r for r in chosen if not r.stopped or r.task not in kept_tasks]
    _warn_runs(label, "stopped early, as did every other run of their task, and stay in the "
               "sample-efficiency curve, which ends by their last evaluation",
               sorted(f"{r.task}/{r.run_id} ({r.stopped})" for r in chosen if r.stopped))
    shared = chosen[0].steps
    for run in chosen[1:]:
        shared = np.intersect1d(shared, run.steps)
    if shared.size == 0:
        warnings.warn(f"{label}: the runs share no evaluation step; no sample-efficiency curve",
                      AggregationWarning, stacklevel=2)
        return None
    longest = max(int(r.steps[-1]) for r in chosen)
    if shared[-1] < longest:
        ends = sorted({f"{r.task}/{r.run_id} ({int(r.steps[-1])}"
                       + (f"; {r.stopped})" if r.stopped else ")") for r in chosen
                       if r.steps[-1] < longest})
        _warn_runs(label, f"end before step {longest}; its curve stops at {int(shared[-1])}",
                   ends)
    steps = _even_subset(shared, max_points)
    columns, ids = [], []
    for task in tasks:
        task_runs = [r for r in chosen if r.task == task]
        columns.append(np.stack([r.returns[np.searchsorted(r.steps, steps)] for r in task_runs]))
        ids.append(tuple(r.run_id for r in task_runs))
    return steps, ScoreMatrix(_pack(columns, (steps.size,)), tuple(tasks), tuple(ids))
