"""Aggregates of continual runs (launch/run_continual.py): per method, the average online accuracy
of each task with a bootstrap band, the mean over all tasks and over the last ones with
intervals, and the probability that one method's run beats another's.

A method's scores are (seeds, tasks): each run directory's tasks.csv, its seeds as rows. The
band of a task resamples that task's seeds (stratified bootstrap, analysis/bootstrap.py); the
table's means resample whole runs (a seed's mean over the tasks is one observation), so their
intervals count each seed once.
"""

from __future__ import annotations

import collections
import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from analysis.bootstrap import generator, percentile_interval, stratified_bootstrap
from analysis.errors import AggregationError
from analysis.grouping import code_of, config_value
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
    `group_by` settings as key=value (dotted keys reach into nested ones: versions.code);
    AggregationError naming `source` for a key the run does not record."""
    label = config.get("intervention", "?")
    if config.get("layer_norm") is False:
        label += " (no LayerNorm)"
    extra = [f"{key}={config_value(config, key, source)}" for key in group_by]
    return label + (f" [{', '.join(extra)}]" if extra else "")


def read_run(folder: str, metric: str) -> tuple[dict, np.ndarray]:
    """(config.json, scores (seeds, tasks done by every seed)) of one run directory."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "tasks.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    seeds = sorted({int(r["seed"]) for r in rows})
    tasks = sorted({int(r["task"]) for r in rows})
    scores = np.full((len(seeds), len(tasks)), np.nan)
    for r in rows:
        scores[seeds.index(int(r["seed"])), tasks.index(int(r["task"]))] = float(r[metric])
    complete = ~np.isnan(scores).any(axis=0)
    done = len(tasks) if complete.all() else int(np.argmin(complete))
    return config, scores[:, :done]


def load_methods(roots: Sequence[str], metric: str = "online_accuracy",
                 group_by: Sequence[str] = ()) -> list[Method]:
    """The runs under `roots` grouped into methods (one benchmark only), seeds of runs of the
    same method stacked; every method cut to the tasks all of them finished."""
    grouped: dict[str, list] = {}
    benchmarks = set()
    for folder in find_runs(roots):
        config, scores = read_run(folder, metric)
        benchmarks.add(config.get("task"))
        label = label_of(config, group_by, os.path.join(folder, "config.json"))
        grouped.setdefault(label, []).append((folder, scores, code_of(config)))
    if len(benchmarks) > 1:
        raise AggregationError("--runs hold runs of several benchmarks ("
                               f"{', '.join(sorted(map(str, benchmarks)))}); aggregate one at "
                               "a time")
    benchmark = benchmarks.pop()
    tasks = min(s.shape[1] for runs in grouped.values() for _, s, _ in runs)
    if tasks == 0:
        raise AggregationError("a run under --runs has no finished task")
    return [Method(label, benchmark, np.concatenate([s[:, :tasks] for _, s, _ in runs]),
                   tuple(f for f, _, _ in runs), tuple(c for _, _, c in runs))
            for label, runs in grouped.items()]


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
              seed: int = 0) -> Summary:
    """Curves, table and probability of improvement of `reference` (a label) over the others."""
    curves, table, improvement = {}, [], []
    for m in methods:
        dist = stratified_bootstrap([m.scores], lambda x: x.mean(axis=-2), curve_reps,
                                    generator(seed, "curve", m.label))
        lower, upper = percentile_interval(dist, confidence)
        curves[m.label] = np.stack([m.scores.mean(axis=0), lower, upper])
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
    return Summary(curves, table, improvement)


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
