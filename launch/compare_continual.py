"""The full continual comparison in one command: every method on every benchmark, then the
figure and table of each benchmark.

    python launch/compare_continual.py --tasks=permuted_digits,random_label_digits \\
        --seeds=10 --logdir=runs/continual_comparison

Runs the grid with launch/sweep.py (--agent=continual; --interventions=all is none and every
method registered when it runs; finished runs are skipped, interrupted ones resumed), then
launch/aggregate_continual.py on each benchmark into <logdir>/aggregate/<task>/. Flags after
`--` go to every run_continual.py (e.g. -- --num_tasks=20). Prints the wall time of each part.

A study of one method's settings is one command too: --vary axes go to the sweep, and
--group_by (or --settings) to the aggregation, which then tells the settings' runs apart:

    python launch/compare_continual.py --tasks=random_label_mnist --interventions=none,clip \\
        --vary=clip_c=1.5,2,4 --vary=clip_sides=both,upper --group_by=clip_c,clip_sides
"""

import os
import subprocess
import sys
import time

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags

from experiment.cli import one_line_flag_parser

FLAGS = flags.FLAGS
flags.DEFINE_list("tasks", ["permuted_digits", "random_label_digits"], "Benchmarks.")
flags.DEFINE_list("interventions", ["all"], "Methods (all: none and every registered method).")
flags.DEFINE_list("clip_cs", [], "SingularClip c values to cross with clip (default: the run "
                  "script's, 2).")
flags.DEFINE_multi_string("vary", [], "KEY=V1,V2,...: the sweep's --vary (repeatable): each "
                          "job it applies to runs once per value of run_continual.py's --KEY.")
flags.DEFINE_integer("seeds", 10, "Seeds per method (one job trains them all, vmapped).")
flags.DEFINE_string("logdir", "runs/continual_comparison", "Results tree of the sweep.")
flags.DEFINE_integer("max_parallel", 1, "Jobs at once (each uses every core it gets); 0: as "
                     "many as the machine holds.")
flags.DEFINE_integer("reps", 10_000, "Bootstrap repetitions of the tables' intervals.")
flags.DEFINE_boolean("retry_failed", True, "Train the sweep's failed jobs again (the sweep's "
                     "--retry_failed); --noretry_failed leaves them alone.")
flags.DEFINE_list("group_by", [], "aggregate_continual.py's --group_by: more config.json keys "
                  "that split the runs into methods (e.g. clip_c,clip_sides).")
flags.DEFINE_list("settings", [], "aggregate_continual.py's --settings: config.json keys within "
                  "each combination of whose values the methods are compared; passed only when "
                  "given.")

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(args: list[str]) -> int:
    return subprocess.run([sys.executable, *args]).returncode


def flag_error() -> str | None:
    """What is wrong with this script's own flags (one line), or None; the sweep checks the
    grid's, and aggregate_continual.py its own."""
    if not FLAGS.tasks:
        return "--tasks is empty; give the benchmarks to compare"
    if not FLAGS.interventions:
        return "--interventions is empty; give the methods (all: none and every registered one)"
    for name, low in (("seeds", 1), ("reps", 1), ("max_parallel", 0)):
        if FLAGS[name].value < low:
            return f"--{name} must be an integer >= {low}, got {FLAGS[name].value}"
    if not FLAGS.logdir.strip():
        return "--logdir is empty; give the results tree of the sweep"
    axes = [axis.partition("=") for axis in FLAGS.vary]
    varied = [key.strip() for key, _, values in axes
              if len([v for v in values.split(",") if v.strip()]) > 1]
    if len(FLAGS.clip_cs) > 1:
        varied.insert(0, "clip_c")
    apart = {key.strip() for key in [*FLAGS.group_by, *FLAGS.settings]}
    pooled = [key for key in dict.fromkeys(varied) if key not in apart]
    if pooled:
        return (f"{', '.join(pooled)} {'takes' if len(pooled) == 1 else 'take'} several values "
                "(--vary, --clip_cs) that --group_by and --settings leave out, so the "
                "aggregation would pool their runs into one method and refuse their repeated "
                f"seeds; add {'it' if len(pooled) == 1 else 'them'} to --group_by (a method "
                "per value) or --settings")
    return None


def sweep_command(extra: list[str]) -> list[str]:
    """launch/sweep.py's arguments for this comparison."""
    sweep = [os.path.join(HERE, "sweep.py"), "--agent=continual",
             f"--envs={','.join(FLAGS.tasks)}",
             f"--interventions={','.join(FLAGS.interventions)}", f"--seeds={FLAGS.seeds}",
             f"--logdir={FLAGS.logdir}", f"--max_parallel={FLAGS.max_parallel}"]
    if FLAGS.clip_cs:
        sweep.append(f"--clip_cs={','.join(FLAGS.clip_cs)}")
    sweep += [f"--vary={axis}" for axis in FLAGS.vary]
    if FLAGS.retry_failed:
        sweep.append("--retry_failed")
    return sweep + (["--", *extra] if extra else [])


def aggregate_command(task: str) -> list[str]:
    """launch/aggregate_continual.py's arguments for one benchmark of this comparison."""
    out = os.path.join(FLAGS.logdir, "aggregate", task)
    command = [os.path.join(HERE, "aggregate_continual.py"),
               f"--runs={os.path.join(FLAGS.logdir, 'continual', task)}", f"--out={out}",
               f"--reps={FLAGS.reps}"]
    if FLAGS.group_by:
        command.append(f"--group_by={','.join(FLAGS.group_by)}")
    if FLAGS.settings:
        command.append(f"--settings={','.join(FLAGS.settings)}")
    return command


def damaged_finished_run() -> str | None:
    """What is wrong with the first finished run of the logdir whose config.json or tasks.csv
    the aggregation cannot read (one line naming the file), or None: said before any training,
    not after it. Unfinished runs are left to their resume, which cuts their files back to
    their last checkpoint."""
    from analysis.continual import find_runs, read_run
    from analysis.errors import AggregationError

    for task in FLAGS.tasks:
        root = os.path.join(FLAGS.logdir, "continual", task)
        if not os.path.isdir(root):
            continue
        try:
            folders = find_runs([root])
        except AggregationError:  # no run there yet
            continue
        for folder in folders:
            if not os.path.exists(os.path.join(folder, "done.json")):
                continue
            try:
                read_run(folder, "online_accuracy")
            except AggregationError as e:
                return (f"{e} (a finished run of {FLAGS.logdir}, which the comparison would "
                        "aggregate after training: mend it or move it away)")
    return None


def main(argv: list[str]) -> None:
    extra = argv[1:]
    if any(not a.startswith("-") for a in extra):
        print(f"error: unexpected arguments {extra}; flags for the run scripts go after `--`",
              file=sys.stderr)
        sys.exit(2)
    error = flag_error() or damaged_finished_run()
    if error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    started = time.time()
    code = _run(sweep_command(extra))
    trained = time.time() - started
    if code == 1:  # 2 (bad flags) and 130 (Ctrl-C): the sweep has said what happened
        print(f"error: a job of the sweep failed or was interrupted; --status shows each job "
              f"(python launch/sweep.py --logdir={FLAGS.logdir} --status)", file=sys.stderr)
    if code != 0:
        sys.exit(code)
    for task in FLAGS.tasks:
        code = _run(aggregate_command(task))
        if code != 0:
            sys.exit(code)
    print(f"training {trained / 60:.1f} min, in all {(time.time() - started) / 60:.1f} min",
          file=sys.stderr)


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser())
