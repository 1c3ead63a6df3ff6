"""Aggregate evaluation returns across tasks: IQM, mean, median, optimality gap with
stratified-bootstrap intervals, probability of improvement, sample-efficiency curves and
performance profiles, written as markdown, CSV, JSON and PNG.

    python launch/aggregate.py --runs=<dir>[,<dir>...] [--labels=...] [--step=1000000] \\
        [--group_by=intervention,utd] [--out=<dir>]
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags

from analysis.datasets import load_datasets
from analysis.errors import AggregationError, AggregationWarning
from analysis.report import FIGURES, write_tables
from analysis.summary import Settings, check_settings, summarize
from experiment import ctrl_c
from experiment.cli import one_line_flag_parser

FLAGS = flags.FLAGS
flags.DEFINE_list("runs", [], "Run directories, one algorithm each (or split by --group_by). "
                  "Layouts: run dirs with config.json + eval.csv, <task>/<seed>.txt, <task>.npy.")
flags.DEFINE_list("labels", [], "One label per --runs entry (default: directory names).")
flags.DEFINE_list("group_by", [], "Config keys (dotted paths allowed) that split this "
                  "project's runs into algorithms labelled like 'intervention=clip,utd=8' "
                  "(prefixed by the entry's label when there are several entries or --labels).")
flags.DEFINE_list("tasks", [], "Tasks to aggregate over (default: those all algorithms have).")
flags.DEFINE_integer("step", 1_000_000, "Env step whose evaluation each run is scored by.")
flags.DEFINE_integer("window", 1, "Average the last this many evaluations at or before --step.")
flags.DEFINE_integer("reps", 50_000, "Bootstrap repetitions for aggregates and improvement.")
flags.DEFINE_integer("curve_reps", 2_000, "Bootstrap repetitions for curves and profiles.")
flags.DEFINE_float("confidence", 0.95, "Interval coverage.")
flags.DEFINE_integer("seed", 0, "Bootstrap seed: the same seed gives the same intervals.")
flags.DEFINE_bool("normalize", False, "Divide returns by --max_return (DMC: 1000).")
flags.DEFINE_float("max_return", 1000.0, "Best possible return: normaliser, optimality-gap "
                   "threshold and top of the profile thresholds.")
flags.DEFINE_integer("curve_points", 0, "Most evaluation steps per sample-efficiency curve "
                     "(0: every step the runs share).")
flags.DEFINE_integer("profile_points", 101, "Thresholds per performance profile.")
flags.DEFINE_integer("npy_eval_every", 25_000, "Env steps between evaluations in <task>.npy.")
flags.DEFINE_integer("npy_first_step", None, "Env step of the first .npy evaluation "
                     "(default: --npy_eval_every).")
flags.DEFINE_float("chunk_mb", 256.0, "Most memory (MB) one chunk of bootstrap repetitions uses.")
flags.DEFINE_string("out", "aggregate", "Output directory.")
flags.DEFINE_bool("plots", True, "Write PNG plots.")
flags.DEFINE_bool("progress", True, "Show bootstrap progress bars on stderr.")


def settings_from_flags() -> Settings:
    """Settings with every field taken from its flag."""
    return Settings(step=FLAGS.step, window=FLAGS.window, reps=FLAGS.reps,
                    curve_reps=FLAGS.curve_reps, confidence=FLAGS.confidence, seed=FLAGS.seed,
                    normalize=FLAGS.normalize, max_return=FLAGS.max_return,
                    curve_points=FLAGS.curve_points, profile_points=FLAGS.profile_points,
                    chunk_mb=FLAGS.chunk_mb, tasks=tuple(FLAGS.tasks), progress=FLAGS.progress)


def run(collected: list[str]) -> None:
    """Read, aggregate, write; warnings are printed as they arise and kept in `collected`."""
    settings = settings_from_flags()
    check_settings(settings)
    datasets, sources = load_datasets(FLAGS.runs, FLAGS.labels, FLAGS.group_by,
                                      FLAGS.npy_eval_every, FLAGS.npy_first_step, FLAGS.tasks)
    out = Path(FLAGS.out)
    created = not out.exists()
    try:  # once the inputs are read (bad ones create nothing), before the bootstrap
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise AggregationError(f"--out={out}: cannot create the output directory there "
                               f"({type(error).__name__}: {error})") from None
    for x in sources:
        print(f"{x.path}: detected {x.layout} layout -> algorithm '{x.algorithm}', "
              f"{x.runs} runs on {x.tasks} tasks", file=sys.stderr)
    try:
        summary = summarize(datasets, settings)
    except (AggregationError, MemoryError) as error:
        if created and not any(out.iterdir()):  # nothing to show for it: leave no empty dir
            out.rmdir()
        if isinstance(error, MemoryError):
            raise AggregationError(
                f"out of memory ({str(error) or 'MemoryError'}); --reps, --curve_reps, "
                "--profile_points and --curve_points set the bootstrap's size: lower them"
            ) from None
        raise
    try:
        written = write_tables(summary, out, sources, collected)
        if FLAGS.plots:
            from analysis.plots import write_plots

            written += write_plots(summary, out)
    except OSError as error:
        raise AggregationError(f"--out={out}: cannot write the results there "
                               f"({type(error).__name__}: {error})") from None
    stale = [out / name for name in FIGURES if out / name not in written
             and (out / name).is_file()]
    for path in stale:
        path.unlink()
    print((out / "summary.md").read_text())
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    if stale:
        print(f"removed {', '.join(str(p) for p in stale)}: an earlier aggregation's figures, "
              "which this one does not draw", file=sys.stderr)


def main(argv: list[str]) -> None:
    ctrl_c.deliver()  # raises one held while this script imported its libraries
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; pass everything as --flags",
              file=sys.stderr)
        sys.exit(2)
    collected: list[str] = []

    def show(message, category, *args, **kwargs):
        if issubclass(category, AggregationWarning):
            collected.append(str(message))
        print(f"warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("always", AggregationWarning)
        warnings.showwarning = show
        try:
            run(collected)
        except AggregationError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser())
