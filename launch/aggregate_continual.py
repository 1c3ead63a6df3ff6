"""Aggregate continual runs into the paper's figure and table.

    python launch/aggregate_continual.py --runs=runs/continual/random_label_digits \\
        --out=aggregate/random_label_digits

Per method (its --intervention; "(no LayerNorm)" for --layer_norm=false runs): the average
online accuracy of each task over seeds with a 95-percent stratified-bootstrap band (curve.png,
curve.csv), a table of the mean over all tasks and over the last --last tasks with bootstrap
intervals over seeds, and the probability of improvement of --reference (clip) over every
other method (table.md, table.csv, summary.json).

    python launch/aggregate_continual.py --runs=runs/continual/permuted_digits \\
        --settings=init,weight_decay,event_opt_state --out=aggregate/permuted_digits_settings

compares the methods within each combination of those config.json settings instead (a run that
does not read a setting counts in each of its values): a table per combination
(settings/<k=v,...>/table.md, table.csv), and the reference's rank, mean and probabilities of
improvement across the combinations, with which setting moves its rank (sensitivity.md,
sensitivity.csv, summary.json).
"""

import collections
import csv
import json
import sys
import warnings
from pathlib import Path

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags

from analysis.continual import (
    METRICS,
    code_versions,
    cut_to_shortest,
    group_methods,
    label_of,
    line_style,
    markdown,
    read_runs,
    summarize,
)
from analysis.continual_sensitivity import (
    combination_name,
    combinations,
    factors,
    sensitivity_markdown,
    sensitivity_row,
    sensitivity_table,
)
from analysis.errors import AggregationError, AggregationWarning
from analysis.grouping import code_of
from experiment import ctrl_c
from experiment.cli import one_line_flag_parser

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
flags.DEFINE_list("settings", [], "config.json settings (e.g. init,weight_decay,event_opt_state) "
                  "within each combination of which the methods are compared: a table per "
                  "combination under <out>/settings/ and the reference's standing across them "
                  "(sensitivity.md, sensitivity.csv, summary.json) instead of the whole set's "
                  "table and curve.")
flags.DEFINE_bool("require_equal_length", False, "Stop with an error when the runs finished "
                  "different numbers of tasks, instead of warning and cutting every run to the "
                  "shortest.")


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


def write_table(folder: Path, summary, last: int, heading: str = "") -> str:
    """table.md (returned) and table.csv of a summary."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (f"{heading}\n\n" if heading else "") + markdown(summary, FLAGS.metric, last,
                                                            FLAGS.confidence)
    (folder / "table.md").write_text(text)
    write_csv(folder / "table.csv", summary.table)
    return text


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def warn_code_versions(runs) -> None:
    made_by = collections.Counter(code_of(r.config) for r in runs)
    if len(made_by) > 1:
        print(f"warning: the runs were made by {len(made_by)} versions of the code (" +
              ", ".join(f"{c}: {n} run(s)" for c, n in made_by.most_common()) +
              "); summary.json lists them by method, and --group_by=versions.code separates "
              "them", file=sys.stderr)


def whole_set(runs, last: int, out: Path) -> str:
    """The methods of every run: table, curve and summary.json."""
    methods = group_methods(runs, FLAGS.group_by)
    summary = summarize(methods, FLAGS.reference, last, FLAGS.reps, FLAGS.curve_reps,
                        FLAGS.confidence, FLAGS.seed)
    text = write_table(out, summary, last)
    with open(out / "curve.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "task", "mean", "lower", "upper"])
        for label, (mean, lower, upper) in summary.curves.items():
            writer.writerows((label, t, f"{a:.6g}", f"{b:.6g}", f"{c:.6g}")
                             for t, (a, b, c) in enumerate(zip(mean, lower, upper,
                                                                strict=True)))
    (out / "summary.json").write_text(json.dumps(
        {"benchmark": methods[0].task, "metric": FLAGS.metric, "last": last,
         "table": summary.table, "improvement": summary.improvement,
         "runs": {m.label: list(m.runs) for m in methods}, "code": code_versions(methods)},
        indent=2))
    warn_code_versions(runs)
    if FLAGS.plots:
        plot(summary, methods, out / "curve.png", FLAGS.metric)
    return text


def by_settings(runs, last: int, out: Path) -> str:
    """--settings: the methods within each combination, and the reference across them."""
    keys = FLAGS.settings
    if len(set(keys)) < len(keys):
        raise AggregationError(f"--settings names a setting twice: {','.join(keys)}")
    rows, empty, members = [], [], {}
    for combo in combinations(runs, keys):
        if not combo.runs:
            empty.append(combo.settings)
            continue
        name = combination_name(combo.settings)
        methods = group_methods(combo.runs, FLAGS.group_by)
        summary = summarize(methods, FLAGS.reference, last, FLAGS.reps, FLAGS.curve_reps,
                            FLAGS.confidence, FLAGS.seed, curves=False)
        write_table(out / "settings" / name, summary, last,
                    f"# {', '.join(f'{k}={v}' for k, v in combo.settings.items())}")
        rows.append({**sensitivity_row(combo.settings, summary, FLAGS.reference),
                     "table": f"settings/{name}/table.md"})
        members[name] = {m.label: list(m.runs) for m in methods}
    labels = {label_of(r.config, FLAGS.group_by) for r in runs}
    if FLAGS.reference not in labels:
        print(f"warning: --reference={FLAGS.reference} is none of the methods ("
              f"{', '.join(sorted(labels))}); its rank is left empty", file=sys.stderr)
    factor_rows = factors(rows, keys, FLAGS.reference)
    text = sensitivity_markdown(rows, factor_rows, keys, FLAGS.reference, FLAGS.metric,
                                FLAGS.confidence, empty)
    (out / "sensitivity.md").write_text(text)
    write_csv(out / "sensitivity.csv", sensitivity_table(rows, keys, FLAGS.reference))
    code: dict[str, collections.Counter] = {}
    for r in runs:
        code.setdefault(label_of(r.config, FLAGS.group_by), collections.Counter())[
            code_of(r.config)] += 1
    (out / "summary.json").write_text(json.dumps(
        {"benchmark": str(runs[0].config.get("task")), "metric": FLAGS.metric, "last": last,
         "reference": FLAGS.reference, "settings": keys, "sensitivity": rows,
         "factors": factor_rows, "without_runs": empty, "runs": members,
         "code": {label: dict(c) for label, c in code.items()}}, indent=2))
    warn_code_versions(runs)
    return text


def run() -> None:
    if not FLAGS.runs:
        raise AggregationError("--runs is empty; give run directories or folders holding them")
    if FLAGS.last < 1 or FLAGS.reps < 1 or FLAGS.curve_reps < 1:
        raise AggregationError("--last, --reps and --curve_reps must be positive")
    if not 0 < FLAGS.confidence < 1:
        raise AggregationError(f"--confidence must be in (0, 1), got {FLAGS.confidence}")
    runs = cut_to_shortest(read_runs(FLAGS.runs, FLAGS.metric), FLAGS.require_equal_length)
    last = min(FLAGS.last, runs[0].scores.shape[1])
    out = Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    text = by_settings(runs, last, out) if FLAGS.settings else whole_set(runs, last, out)
    print(text)
    print(f"written to {out}/", file=sys.stderr)


show_default = warnings.showwarning


def show(message, category, *args, **kwargs) -> None:
    """An AggregationWarning as one line on stderr."""
    if issubclass(category, AggregationWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        show_default(message, category, *args, **kwargs)


def main(argv: list[str]) -> None:
    warnings.showwarning = show
    warnings.simplefilter("always", AggregationWarning)
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
