"""Tables of a Summary: markdown for reading, CSV and JSON with every number."""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from analysis.datasets import Source
from analysis.summary import METRICS, Summary

# Every figure analysis.plots writes: the curves with evaluations over steps, the improvement
# with several algorithms. An aggregation into the --out of an earlier one removes those of its
# figures that it does not write again, so that no figure there shows other results.
FIGURES = ("interval_estimates.png", "performance_profiles.png", "sample_efficiency.png",
           "probability_of_improvement.png")

TABLES = {
    "aggregates.csv": "aggregates",
    "probability_of_improvement.csv": "improvement",
    "sample_efficiency.csv": "curves",
    "performance_profiles.csv": "profiles",
}


COLUMNS = {  # each CSV's header, written also when the table has no rows
    "aggregates.csv": ("algorithm", "metric", "estimate", "lower", "upper", "runs", "tasks",
                       "min_runs_per_task", "max_runs_per_task"),
    "probability_of_improvement.csv": ("x", "y", "probability", "lower", "upper", "tasks",
                                       "runs_x", "runs_y"),
    "sample_efficiency.csv": ("algorithm", "env_step", "iqm", "lower", "upper", "runs", "tasks"),
    "performance_profiles.csv": ("algorithm", "tau", "fraction", "lower", "upper"),
    "scores.csv": ("algorithm", "task", "run", "env_step", "score"),
}


def score_rows(summary: Summary) -> list[dict]:
    """One row per (algorithm, task, run): the score used and the env step it came from."""
    rows = []
    for label, matrix in summary.scores.items():
        for m, task in enumerate(matrix.tasks):
            for i, run_id in enumerate(matrix.run_ids[m]):
                rows.append(dict(algorithm=label, task=task, run=run_id,
                                 env_step=matrix.used_steps[m][i],
                                 score=float(matrix.values[i, m])))
    return rows


def _cell(value) -> str:
    """A markdown table cell: a '|' in a label or path would end the cell."""
    return str(value).replace("|", "\\|")


def _interval(row: dict, key: str, digits: int) -> str:
    return f"{row[key]:.{digits}f} [{row['lower']:.{digits}f}, {row['upper']:.{digits}f}]"


def markdown(summary: Summary, sources: Sequence[Source] = (),
             warnings: Sequence[str] = ()) -> str:
    """The results as a markdown document: aggregates, improvement, inputs, warnings."""
    s = summary.settings
    digits = 3 if s.normalize else 1
    units = f"returns / {s.max_return:g}" if s.normalize else "raw returns"
    window = ("its evaluation at" if s.window == 1 else
              f"the mean of its last {s.window} evaluations up to")
    lines = [
        f"# Aggregate results at env step {s.step:,}",
        "",
        f"Scores: {units}; each run scores {window} step {s.step:,} (or the last evaluation "
        "before it, within one evaluation interval; runs without one are dropped). "
        f"{100 * s.confidence:g}% stratified-bootstrap percentile intervals, {s.reps:,} "
        f"repetitions (curves and profiles: {s.curve_reps:,}), seed {s.seed}.",
        "",
        f"Tasks ({len(summary.tasks)}): {', '.join(summary.tasks)}",
        "",
        "| Algorithm | " + " | ".join(METRICS) + " | Runs | Tasks |",
        "| --- |" + " --- |" * (len(METRICS) + 2),
    ]
    by_algo: dict[str, dict[str, dict]] = {}
    for row in summary.aggregates:
        by_algo.setdefault(row["algorithm"], {})[row["metric"]] = row
    for label, rows in by_algo.items():
        first = rows[METRICS[0]]
        per_task = (f"{first['min_runs_per_task']}" if first["min_runs_per_task"] ==
                    first["max_runs_per_task"] else
                    f"{first['min_runs_per_task']}-{first['max_runs_per_task']}")
        cells = [_interval(rows[m], "estimate", digits) for m in METRICS]
        lines.append(f"| {_cell(label)} | " + " | ".join(cells) +
                     f" | {first['runs']} ({per_task} per task) | {first['tasks']} |")
    if summary.improvement:
        lines += ["", "## Probability of improvement", "",
                  "| X | Y | P(X > Y) | Runs X | Runs Y | Tasks |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {_cell(r['x'])} | {_cell(r['y'])} | {_interval(r, 'probability', 3)} | "
                  f"{r['runs_x']} | {r['runs_y']} | {r['tasks']} |" for r in summary.improvement]
    if sources:
        lines += ["", "## Inputs", "", "| Algorithm | Path | Layout | Runs read | Tasks |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {_cell(x.algorithm)} | {_cell(x.path)} | {x.layout} | {x.runs} | {x.tasks} |"
                  for x in sources]
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS[path.name], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def write_tables(summary: Summary, out: Path, sources: Sequence[Source] = (),
                 warnings: Sequence[str] = ()) -> list[Path]:
    """summary.md, results.json and one CSV per table under `out` -> the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    tables = {name: getattr(summary, attr) for name, attr in TABLES.items()}
    tables["scores.csv"] = score_rows(summary)
    for name, rows in tables.items():
        _write_csv(out / name, rows)
        written.append(out / name)
    document = dict(settings=dataclasses.asdict(summary.settings), tasks=summary.tasks,
                    sources=[dataclasses.asdict(x) for x in sources], warnings=list(warnings),
                    **{name.removesuffix(".csv"): rows for name, rows in tables.items()})
    (out / "results.json").write_text(json.dumps(document, indent=1))
    (out / "summary.md").write_text(markdown(summary, sources, warnings))
    return written + [out / "results.json", out / "summary.md"]
