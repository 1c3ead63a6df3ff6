"""Aggregates of continual runs (launch/run_continual.py): per method, the average online accuracy
of each task with a bootstrap band, the mean over all tasks and over the last ones with
intervals, and the probability that one method's run beats another's.

A method's scores are (seeds, tasks): each run directory's tasks.csv, its seeds as rows. The
band of a task resamples that task's seeds (stratified bootstrap, analysis/bootstrap.py); the
table's means resample whole runs (a seed's mean over the tasks is one observation), so their
intervals count each seed once.

With --settings the same comparison is made within each combination of config.json settings,
and how the reference ranks across them is said (analysis/continual_sensitivity.py).
"""

from __future__ import annotations

import collections
import csv
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from analysis.bootstrap import generator, percentile_interval, stratified_bootstrap
from analysis.errors import AggregationError, AggregationWarning
from analysis.grouping import code_of, config_value, inert, result_settings
from analysis.metrics import probability_of_improvement

METRICS = ("online_accuracy", "final_accuracy", "loss")


class Method(NamedTuple):
    label: str
    task: str  # the benchmark
    scores: np.ndarray  # (seeds, tasks)
    runs: tuple[str, ...]  # run directories
    code: tuple[str, ...] = ()  # each run's code (config.json's versions.code; "not recorded")


LINE_STYLES = ("-", "--", ":", "-.")


def line_style(i: int) -> dict:
    """Matplotlib colour and dash of the i-th method's line: tab10's ten colours, then the same
    colours dashed, so eleven or more methods stay apart."""
    return {"color": f"C{i % 10}", "linestyle": LINE_STYLES[(i // 10) % len(LINE_STYLES)]}


def find_runs(roots: Sequence[str]) -> list[str]:
    """Run directories (holding config.json and tasks.csv) at or below each root."""
    found = []
    for root in roots:
        if not os.path.isdir(root):
            raise AggregationError(f"--runs: {root} is not a directory")
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "checkpoints" and not d.startswith("."))
            if "tasks.csv" in files and "config.json" in files:
                found.append(folder)
    if not found:
        from analysis.layouts import find_project_run_dirs  # RL run dirs, for the hint alone

        rl = any(find_project_run_dirs(Path(root)) for root in roots)
        raise AggregationError(f"--runs: no continual run (config.json and tasks.csv) under "
                               f"{', '.join(roots)}" + (
                                   "; it holds RL runs (config.json + eval.csv), which "
                                   "launch/aggregate.py aggregates and launch/plot_run.py draws"
                                   if rl else ""))
    return found


def label_of(config: dict, group_by: Sequence[str], source: str = "config.json") -> str:
    """The method's name: its --intervention, "(no LayerNorm)" without LayerNorm, then the
    `group_by` settings the run reads as key=value (dotted keys reach into nested ones:
    versions.code; a key inert for the run, grouping.inert, is left out: "none", not
    "none [clip_c=2]"); AggregationError naming `source` for a key the run does not record."""
    label = config.get("intervention", "?")
    if config.get("layer_norm") is False:
        label += " (no LayerNorm)"
    extra = [f"{key}={config_value(config, key, source)}" for key in group_by
             if not inert(config, key)]
    return label + (f" [{', '.join(extra)}]" if extra else "")


class RunScores(NamedTuple):
    folder: str  # the run directory
    config: dict  # its config.json
    seeds: tuple[int, ...]  # the seeds of tasks.csv, the rows of scores
    scores: np.ndarray  # (seeds, tasks done by every seed)


def _read_config(path: str) -> dict:
    try:
        with open(path) as f:
            config = json.load(f)
    except json.JSONDecodeError as e:
        raise AggregationError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}, column "
                               f"{e.colno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AggregationError(f"{path} cannot be read ({e})") from None
    if not isinstance(config, dict):
        raise AggregationError(f"{path} holds a JSON {type(config).__name__}, not an object of "
                               "settings")
    return config


def _read_tasks(path: str, metric: str) -> list[tuple[int, int, float]]:
    """(seed, task, score) of each row of a tasks.csv."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ("task", "seed", metric) if c not in (reader.fieldnames or [])]
            if missing:
                raise AggregationError(f"{path} has no column {', '.join(missing)} (its header: "
                                       f"{','.join(reader.fieldnames or []) or 'none'})")
            rows = []
            for line, r in enumerate(reader, start=2):
                try:
                    rows.append((int(r["seed"]), int(r["task"]), float(r[metric])))
                except (TypeError, ValueError):
                    shown = {k: r.get(k) for k in ("task", "seed", metric)}
                    raise AggregationError(f"{path} line {line}: task, seed and {metric} must be "
                                           f"numbers, got {shown}") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise AggregationError(f"{path} cannot be read ({e})") from None
    return rows


def read_run(folder: str, metric: str) -> RunScores:
    """config.json and the scores (seeds, tasks done by every seed) of one run directory;
    AggregationError naming the file for a damaged config.json or tasks.csv."""
    config = _read_config(os.path.join(folder, "config.json"))
    rows = _read_tasks(os.path.join(folder, "tasks.csv"), metric)
    seeds = sorted({seed for seed, _, _ in rows})
    tasks = sorted({task for _, task, _ in rows})
    scores = np.full((len(seeds), len(tasks)), np.nan)
    for seed, task, value in rows:
        scores[seeds.index(seed), tasks.index(task)] = value
    complete = ~np.isnan(scores).any(axis=0)
    done = len(tasks) if complete.all() else int(np.argmin(complete))
    return RunScores(folder, config, tuple(seeds), scores[:, :done])


def read_runs(roots: Sequence[str], metric: str = "online_accuracy") -> list[RunScores]:
    """Every run under `roots` (one benchmark only; AggregationError otherwise)."""
    runs = [read_run(folder, metric) for folder in find_runs(roots)]
    benchmarks = {str(r.config.get("task")) for r in runs}
    if len(benchmarks) > 1:
        raise AggregationError("--runs hold runs of several benchmarks ("
                               f"{', '.join(sorted(benchmarks))}); aggregate one at a time")
    empty = [r.folder for r in runs if r.scores.shape[1] == 0]
    if empty:
        raise AggregationError(f"a run under --runs has no finished task: {empty[0]}"
                               + (f" and {len(empty) - 1} more" if len(empty) > 1 else ""))
    return runs


LISTED_RUNS = 5


def cut_to_shortest(runs: Sequence[RunScores],
                    require_equal_length: bool = False) -> list[RunScores]:
    """Every run cut to the tasks all of them finished. Runs of unequal length are an
    AggregationWarning naming the runs cut and to how many tasks, or an AggregationError with
    `require_equal_length`."""
    tasks = min(r.scores.shape[1] for r in runs)
    cut = [r for r in runs if r.scores.shape[1] > tasks]
    if cut:
        shortest = next(r.folder for r in runs if r.scores.shape[1] == tasks)
        names = ", ".join(f"{r.folder} ({r.scores.shape[1]})" for r in cut[:LISTED_RUNS])
        more = len(cut) - LISTED_RUNS
        message = (f"runs of unequal length: {len(cut)} run(s) cut to the {tasks} task(s) of the "
                   f"shortest ({shortest}): {names}" + (f" and {more} more" if more > 0 else ""))
        if require_equal_length:
            raise AggregationError(f"{message}; --require_equal_length is set")
        warnings.warn(f"{message}; --require_equal_length makes this an error",
                      AggregationWarning, stacklevel=2)
    return [r._replace(scores=r.scores[:, :tasks]) for r in runs]


def _check_seeds(label: str, runs: Sequence[RunScores]) -> None:
    """AggregationError for a seed in two run directories of one method: they would be pooled
    as two independent seeds."""
    where: dict[int, RunScores] = {}
    for run in runs:
        for seed in run.seeds:
            if seed in where:
                first = where[seed]
                ours, theirs = (result_settings(c) for c in (first.config, run.config))
                differ = sorted(k for k in {*ours, *theirs} if ours.get(k) != theirs.get(k))
                hint = (f"they differ in {', '.join(differ[:3])}: split them with --settings or "
                        f"--group_by={differ[0]}" if differ else
                        "their settings are the same: keep one of them")
                raise AggregationError(f"{label}: seed {seed} is in two run directories, "
                                       f"{first.folder} and {run.folder}, which would count as "
                                       f"two independent seeds; {hint}")
            where[seed] = run


def group_methods(runs: Sequence[RunScores], group_by: Sequence[str] = ()) -> list[Method]:
    """Runs grouped into methods by label_of, the seeds of runs of one method stacked (all runs
    of the same length); AggregationError for a seed in two runs of one method."""
    grouped: dict[str, list[RunScores]] = {}
    for run in runs:
        label = label_of(run.config, group_by, os.path.join(run.folder, "config.json"))
        grouped.setdefault(label, []).append(run)
    methods = []
    for label, members in grouped.items():
        _check_seeds(label, members)
        methods.append(Method(label, str(members[0].config.get("task")),
                              np.concatenate([r.scores for r in members]),
                              tuple(r.folder for r in members),
                              tuple(code_of(r.config) for r in members)))
    return methods


def load_methods(roots: Sequence[str], metric: str = "online_accuracy",
                 group_by: Sequence[str] = (), require_equal_length: bool = False
                 ) -> list[Method]:
    """The runs under `roots` grouped into methods (one benchmark only), seeds of runs of the
    same method stacked; every method cut to the tasks all of them finished (cut_to_shortest)."""
    return group_methods(cut_to_shortest(read_runs(roots, metric), require_equal_length),
                         group_by)


def code_versions(methods: Sequence[Method]) -> dict[str, dict[str, int]]:
    """{method: {code version: runs}}: which code made the runs of each method."""
    return {m.label: dict(collections.Counter(m.code)) for m in methods}


class Summary(NamedTuple):
    curves: dict[str, np.ndarray]  # label -> (3, tasks): mean, lower, upper per task
    table: list[dict]  # per method: mean over all tasks and the last ones, with intervals
    improvement: list[dict]  # P(reference > each other method) with intervals


def _run_means(scores: np.ndarray, last: int) -> tuple[np.ndarray, np.ndarray]:
    return scores.mean(axis=1), scores[:, -last:].mean(axis=1)


def summarize(methods: Sequence[Method], reference: str = "clip", last: int = 10,
              reps: int = 10_000, curve_reps: int = 2_000, confidence: float = 0.95,
              seed: int = 0, curves: bool = True) -> Summary:
    """Curves (none with `curves` false), table and probability of improvement of `reference`
    (a label) over the others."""
    bands, table, improvement = {}, [], []
    for m in methods:
        if curves:
            dist = stratified_bootstrap([m.scores], lambda x: x.mean(axis=-2), curve_reps,
                                        generator(seed, "curve", m.label))
            lower, upper = percentile_interval(dist, confidence)
            bands[m.label] = np.stack([m.scores.mean(axis=0), lower, upper])
        row = {"method": m.label, "seeds": m.scores.shape[0], "tasks": m.scores.shape[1]}
        for name, values in zip(("all", f"last{last}"), _run_means(m.scores, last),
                                strict=True):
            dist = stratified_bootstrap([values[:, None]], lambda x: x.mean(axis=(-2, -1)), reps,
                                        generator(seed, name, m.label))
            lo, hi = percentile_interval(dist, confidence)
            row.update({f"{name}_mean": float(values.mean()), f"{name}_lower": float(lo),
                        f"{name}_upper": float(hi)})
        table.append(row)
    by_label = {m.label: m for m in methods}
    if reference in by_label:
        x = by_label[reference].scores.mean(axis=1)[:, None]
        for m in methods:
            if m.label == reference:
                continue
            y = m.scores.mean(axis=1)[:, None]
            dist = stratified_bootstrap([x, y], probability_of_improvement, reps,
                                        generator(seed, "poi", m.label))
            lo, hi = percentile_interval(dist, confidence)
            improvement.append({"method": reference, "over": m.label,
                                "probability": float(probability_of_improvement(x, y)),
                                "lower": float(lo), "upper": float(hi)})
    return Summary(bands, table, improvement)


def markdown(summary: Summary, metric: str, last: int, confidence: float) -> str:
    pct = f"{100 * confidence:g} %"
    lines = [f"| method | seeds | tasks | mean {metric}, all tasks ({pct} CI) | last {last} "
             f"tasks ({pct} CI) |", "| --- | ---: | ---: | --- | --- |"]
    for r in sorted(summary.table, key=lambda r: -r["all_mean"]):
        lines.append(f"| {r['method']} | {r['seeds']} | {r['tasks']} | {r['all_mean']:.3f} "
                     f"[{r['all_lower']:.3f}, {r['all_upper']:.3f}] | {r[f'last{last}_mean']:.3f} "
                     f"[{r[f'last{last}_lower']:.3f}, {r[f'last{last}_upper']:.3f}] |")
    if summary.improvement:
        lines += ["", f"| P(X > Y), run means over all tasks | estimate ({pct} CI) |",
                  "| --- | --- |"]
        lines += [f"| P({r['method']} > {r['over']}) | {r['probability']:.3f} "
                  f"[{r['lower']:.3f}, {r['upper']:.3f}] |" for r in summary.improvement]
    return "\n".join(lines) + "\n"
