"""The full continual comparison in one command: every method on every benchmark, then the
figure and table of each benchmark.

    python launch/compare_continual.py --tasks=permuted_digits,random_label_digits \\
        --seeds=10 --logdir=runs/continual_comparison

Runs the grid with launch/sweep.py (--agent=continual; --interventions=all is none and every
method registered when it runs; finished runs are skipped, interrupted ones resumed), then
launch/aggregate_continual.py on each benchmark into <logdir>/aggregate/<task>/. Flags after
`--` go to every run_continual.py (e.g. -- --num_tasks=20). Prints the wall time of each part.
"""

import os
import subprocess
import sys
import time

from launch import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags

from launch.cli import one_line_flag_parser

FLAGS = flags.FLAGS
flags.DEFINE_list("tasks", ["permuted_digits", "random_label_digits"], "Benchmarks.")
flags.DEFINE_list("interventions", ["all"], "Methods (all: none and every registered method).")
flags.DEFINE_list("clip_cs", [], "SingularClip c values to cross with clip (default: the run "
                  "script's, 2).")
flags.DEFINE_integer("seeds", 10, "Seeds per method (one job trains them all, vmapped).")
flags.DEFINE_string("logdir", "runs/continual_comparison", "Results tree of the sweep.")
flags.DEFINE_integer("max_parallel", 1, "Jobs at once (each uses every core it gets).")
flags.DEFINE_integer("reps", 10_000, "Bootstrap repetitions of the tables' intervals.")

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(args: list[str]) -> int:
    return subprocess.run([sys.executable, *args]).returncode


def main(argv: list[str]) -> None:
    extra = argv[1:]
    if any(not a.startswith("-") for a in extra):
        print(f"error: unexpected arguments {extra}; flags for the run scripts go after `--`",
              file=sys.stderr)
        sys.exit(2)
    started = time.time()
    sweep = [os.path.join(HERE, "sweep.py"), "--agent=continual",
             f"--envs={','.join(FLAGS.tasks)}",
             f"--interventions={','.join(FLAGS.interventions)}", f"--seeds={FLAGS.seeds}",
             f"--logdir={FLAGS.logdir}", f"--max_parallel={FLAGS.max_parallel}"]
    if FLAGS.clip_cs:
        sweep.append(f"--clip_cs={','.join(FLAGS.clip_cs)}")
    code = _run(sweep + (["--", *extra] if extra else []))
    trained = time.time() - started
    if code == 1:  # 2 (bad flags) and 130 (Ctrl-C): the sweep has said what happened
        print(f"error: a job of the sweep failed or was interrupted; --status shows each job "
              f"(python launch/sweep.py --logdir={FLAGS.logdir} --status)", file=sys.stderr)
    if code != 0:
        sys.exit(code)
    for task in FLAGS.tasks:
        out = os.path.join(FLAGS.logdir, "aggregate", task)
        code = _run([os.path.join(HERE, "aggregate_continual.py"),
                     f"--runs={os.path.join(FLAGS.logdir, 'continual', task)}", f"--out={out}",
                     f"--reps={FLAGS.reps}"])
        if code != 0:
            sys.exit(code)
    print(f"training {trained / 60:.1f} min, in all {(time.time() - started) / 60:.1f} min",
          file=sys.stderr)


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser())
