"""What the dashboards (`--log_to=tensorboard,wandb`) add to whole SAC runs, as a user starts
them: pairs of `launch/run_sac.py` runs, one writing the CSV files alone and one also writing
TensorBoard event files and an offline wandb run, one after the other (the plain one first in
odd pairs, second in even ones).

    python benchmarks/logging_runs.py                     # 3 pairs of 6,000-step cheetah-run runs
    python benchmarks/logging_runs.py --pairs=5 --max_steps=20000

Each run evaluates one episode every 1,000 env steps (as many evaluation steps per training
step as the defaults, 10 episodes every 10,000) and is timed by its own eval.csv: the
`wall_time` from the first row 1,000 steps after the random steps to the last, so the process
start, the imports and the compilations are left out and the dashboards' steady cost is what
remains (their start and close are in logging_overhead.py). Prints each pair's two times and
ratio and the median ratio. Complements logging_overhead.py, which alternates two trainers
inside one process.
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

from recording import record

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARDS = ("--log_to=tensorboard,wandb", "--wandb_mode=offline")


def steady_seconds(run_dir: str, after: int) -> float:
    """Seconds of a run's training loop from its first evaluation at or after env step `after`
    to its last, from eval.csv."""
    with open(os.path.join(run_dir, "eval.csv"), newline="") as f:
        times = [float(row["wall_time"]) for row in csv.DictReader(f)
                 if int(row["env_step"]) >= after]
    if len(times) < 2:
        raise SystemExit(f"error: {run_dir}/eval.csv has {len(times)} rows from env step "
                         f"{after}; raise --max_steps")
    return times[-1] - times[0]


def one_run(logdir: str, name: str, env: str, args: argparse.Namespace, logged: bool) -> float:
    command = [sys.executable, os.path.join(ROOT, "launch", "run_sac.py"), f"--env={env}",
               f"--max_steps={args.max_steps}", f"--start_steps={args.start_steps}",
               f"--logdir={logdir}", f"--run_name={name}", "--progress=false",
               "--eval_every=1000", "--eval_episodes=1",
               *(DASHBOARDS if logged else ())]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} exited {done.returncode}:\n"
                         f"{done.stderr[-2000:]}")
    return steady_seconds(os.path.join(logdir, "sac", env, name), args.start_steps + 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--env", default="cheetah-run")
    parser.add_argument("--max_steps", type=int, default=6000)
    parser.add_argument("--start_steps", type=int, default=1000)
    args = parser.parse_args()
    if args.max_steps < args.start_steps + 2000:
        parser.error("--max_steps must be at least --start_steps + 2,000 (two eval.csv rows "
                     "while learning)")
    ratios, rows = [], []
    with tempfile.TemporaryDirectory() as logdir:
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            seconds = {logged: one_run(logdir, f"{'logged' if logged else 'plain'}{pair}",
                                       args.env, args, logged) for logged in order}
            ratio = seconds[True] / seconds[False]
            ratios.append(ratio)
            print(f"pair {pair + 1}: {seconds[False]:.1f} s without the dashboards, "
                  f"{seconds[True]:.1f} s with them ({100 * (ratio - 1):+.2f} %)", flush=True)
    median = statistics.median(ratios)
    print(f"median {100 * (median - 1):+.2f} % (pairs {100 * (min(ratios) - 1):+.2f} % to "
          f"{100 * (max(ratios) - 1):+.2f} %), load average now {os.getloadavg()[0]:.1f}")
    what = f"SAC {args.env}, {args.max_steps} env steps, whole runs with the dashboards"
    rows += [(f"{what}, over without (median of {args.pairs} pairs)", median, "x"),
             (f"{what}, lowest pair", min(ratios), "x"),
             (f"{what}, highest pair", max(ratios), "x")]
    record("logging_runs", rows)


if __name__ == "__main__":
    main()
