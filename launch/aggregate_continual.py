"""Aggregate continual runs into the paper's figure and table.

    python launch/aggregate_continual.py --runs=runs/continual/random_label_digits \\
        --out=aggregate/random_label_digits

Per method (its --intervention; "(no LayerNorm)" for --layer_norm=false runs): the average
online accuracy of each task over seeds with a 95 % stratified-bootstrap band (curve.png,
curve.csv), a table of the mean over all tasks and over the last --last tasks with bootstrap
intervals over seeds, and the probability of improvement of --reference (clip) over every
other method (table.md, table.csv, summary.json).
"""

import collections
import csv
import json
import sys
from pathlib import Path

from launch import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags

from analysis.continual import (
    METRICS,
    code_versions,
    line_style,
    load_methods,
    markdown,
    summarize,
)
from analysis.errors import AggregationError
from launch import ctrl_c
from launch.cli import one_line_flag_parser

FLAGS = flags.FLAGS
flags.DEFINE_list("runs", [], "Run directories of one benchmark, or folders holding them "
                  "(searched below for config.json + tasks.csv).")
flags.DEFINE_enum("metric", "online_accuracy", list(METRICS), "Per-task score of tasks.csv.")
flags.DEFINE_list("group_by", [], "More config.json keys that split runs into methods "
                  "(e.g. clip_c).")
flags.DEFINE_string("reference", "clip", "The method whose probability of improvement over "
                    "each other method is reported.")
flags.DEFINE_integer("last", 10, "The table's second column: the mean over the last N tasks.")
flags.DEFINE_integer("reps", 10_000, "Bootstrap repetitions of the table's intervals.")
flags.DEFINE_integer("curve_reps", 2_000, "Bootstrap repetitions of each task's band.")
flags.DEFINE_float("confidence", 0.95, "Interval coverage.")
flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
flags.DEFINE_string("out", "aggregate_continual", "Output directory.")
flags.DEFINE_bool("plots", True, "Write curve.png.")


def plot(summary, methods, path: Path, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    for i, m in enumerate(methods):
        mean, lower, upper = summary.curves[m.label]
        tasks = range(1, len(mean) + 1)
        style = line_style(i)
        ax.plot(tasks, mean, **style, label=f"{m.label} ({m.scores.shape[0]} seeds)")
        ax.fill_between(tasks, lower, upper, color=style["color"], alpha=0.25, lw=0)
    ax.set_xlabel("task")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(f"{methods[0].task}: mean over seeds, {100 * FLAGS.confidence:g} % bootstrap "
                 "band")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run() -> None:
    if not FLAGS.runs:
        raise AggregationError("--runs is empty; give run directories or folders holding them")
    if FLAGS.last < 1 or FLAGS.reps < 1 or FLAGS.curve_reps < 1:
        raise AggregationError("--last, --reps and --curve_reps must be positive")
    if not 0 < FLAGS.confidence < 1:
        raise AggregationError(f"--confidence must be in (0, 1), got {FLAGS.confidence}")
    methods = load_methods(FLAGS.runs, FLAGS.metric, FLAGS.group_by)
    last = min(FLAGS.last, min(m.scores.shape[1] for m in methods))
    summary = summarize(methods, FLAGS.reference, last, FLAGS.reps, FLAGS.curve_reps,
                        FLAGS.confidence, FLAGS.seed)
    out = Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(summary, FLAGS.metric, last, FLAGS.confidence)
    (out / "table.md").write_text(text)
    with open(out / "table.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(summary.table[0]))
        writer.writeheader()
        writer.writerows(summary.table)
    with open(out / "curve.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "task", "mean", "lower", "upper"])
        for label, (mean, lower, upper) in summary.curves.items():
            writer.writerows((label, t, f"{a:.6g}", f"{b:.6g}", f"{c:.6g}")
                             for t, (a, b, c) in enumerate(zip(mean, lower, upper,
                                                                strict=True)))
    code = code_versions(methods)
    (out / "summary.json").write_text(json.dumps(
        {"benchmark": methods[0].task, "metric": FLAGS.metric, "last": last,
         "table": summary.table, "improvement": summary.improvement,
         "runs": {m.label: list(m.runs) for m in methods}, "code": code}, indent=2))
    made_by = collections.Counter(c for m in methods for c in m.code)
    if len(made_by) > 1:
        print(f"warning: the runs were made by {len(made_by)} versions of the code (" +
              ", ".join(f"{c}: {n} run(s)" for c, n in made_by.most_common()) +
              "); summary.json lists them by method, and --group_by=versions.code separates "
              "them", file=sys.stderr)
    if FLAGS.plots:
        plot(summary, methods, out / "curve.png", FLAGS.metric)
    print(text)
    print(f"written to {out}/", file=sys.stderr)


def main(argv: list[str]) -> None:
    try:
        ctrl_c.deliver()
        if len(argv) > 1:
            raise AggregationError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
        with ctrl_c.as_interrupt():
            run()
    except AggregationError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser())
