"""Aggregate throughput of a local sweep's jobs run side by side, with and without pinning.

    python benchmarks/sweep_parallel.py
    python benchmarks/sweep_parallel.py --parallel=2 --max_steps=4000 --rounds=2

Each case launches `launch/sweep.py` on the local executor as a user would: N one-seed SAC jobs
on cheetah-run (--seeds=N --seeds_per_job=1) with --max_parallel=N, either --pin_cores (each
job on its own share of the cores, XLA's CPU thread pools sized to it) or --pin_cores=false
(every job's threads on every core). A case's aggregate throughput is its env steps of all
seeds over the span from the first job's start to the last one's end, as the jobs' records
give them: what a sweep of such jobs gets through. Its efficiency is the same steps over the
CPU time (user + system) the jobs' run scripts used, taken by a wrapper the sweep starts in
their place: on a machine other processes share, the first counts the CPU share the jobs won
from them, the second only what the jobs did with the CPU they had. The jobs share one
compilation cache, filled before the first case, so they load the update compiled instead of
compiling it each.
With one job, pinning gives it every core, which changes nothing, so it runs once. Cases run
in turn, round after round, so the machine's drift between rounds falls on each alike.
"""

import os
import subprocess
import sys
import tempfile

from absl import app, flags
from recording import record

from sweeps.state import SweepPaths, read_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

flags.DEFINE_list("parallel", ["1", "2", "4"], "Jobs at once (each one seed).")
flags.DEFINE_integer("max_steps", 3000, "Env steps of each job.")
flags.DEFINE_integer("start_steps", 1000, "Random-action steps of each job, before updates.")
flags.DEFINE_integer("rounds", 1, "Times each case runs.")
flags.DEFINE_string("env", "cheetah-run", "Task of every job.")
FLAGS = flags.FLAGS


# Stands in for run_sac.py: runs it and appends the CPU seconds it used to CPU_LOG.
WRAPPER = """import os, resource, subprocess, sys
code = subprocess.call([sys.executable, {script!r}, *sys.argv[1:]])
used = resource.getrusage(resource.RUSAGE_CHILDREN)
if "--dry_run" not in sys.argv:
    with open(os.environ["CPU_LOG"], "a") as f:
        f.write(f"{{used.ru_utime + used.ru_stime}}\\n")
sys.exit(code)
"""


def sweep(logdir: str, cache: str, jobs: int, pinned: bool, max_steps: int,
          scripts: str) -> None:
    """One local sweep of `jobs` one-seed jobs, all at once, waited for."""
    argv = [sys.executable, os.path.join(ROOT, "launch", "sweep.py"), f"--logdir={logdir}",
            f"--script_dir={scripts}",
            f"--envs={FLAGS.env}", f"--seeds={jobs}", "--seeds_per_job=1",
            f"--max_parallel={jobs}", f"--pin_cores={str(pinned).lower()}",
            f"--max_steps={max_steps}", f"--start_steps={FLAGS.start_steps}",
            f"--eval_every={max_steps}", "--eval_episodes=1", f"--compilation_cache={cache}",
            "--poll_s=0.5", "--", "--progress=false"]
    env = {**os.environ, "CPU_LOG": os.path.join(logdir, "cpu_seconds.txt")}
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"the sweep failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def throughput(logdir: str, max_steps: int) -> tuple[float, float, float, int]:
    """(aggregate seed-steps/s, span in s, seed-steps per CPU second, jobs), from the sweep's
    job records and the wrapper's CPU times."""
    paths = SweepPaths(logdir)
    records = [read_json(paths.record(key)) for key in paths.recorded_keys()]
    span = max(r["finished"] for r in records) - min(r["started"] for r in records)
    with open(os.path.join(logdir, "cpu_seconds.txt")) as f:
        cpu = sum(float(line) for line in f)
    steps = len(records) * max_steps
    return steps / span, span, steps / cpu, len(records)


def main(argv):
    del argv
    counts = [int(n) for n in FLAGS.parallel]
    cases = [(n, pinned) for n in counts for pinned in ((False,) if n == 1 else (False, True))]
    print(f"{os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable); {FLAGS.env}, "
          f"{FLAGS.max_steps:,} env steps per job, one seed each")
    with tempfile.TemporaryDirectory() as tmp:
        scripts = os.path.join(tmp, "scripts")
        os.makedirs(scripts)
        with open(os.path.join(scripts, "run_sac.py"), "w") as f:
            f.write(WRAPPER.format(script=os.path.join(ROOT, "launch", "run_sac.py")))
        cache = os.path.join(tmp, "cache")
        sweep(os.path.join(tmp, "warm"), cache, 1, False, FLAGS.start_steps + 10, scripts)
        results: dict[tuple[int, bool], list[tuple[float, float]]] = {c: [] for c in cases}
        for round_ in range(FLAGS.rounds):
            for n, pinned in cases:
                logdir = os.path.join(tmp, f"r{round_}-{n}-{pinned}")
                sweep(logdir, cache, n, pinned, FLAGS.max_steps, scripts)
                rate, span, per_cpu, jobs = throughput(logdir, FLAGS.max_steps)
                assert jobs == n, f"{jobs} job records, {n} jobs launched"
                results[(n, pinned)].append((rate, per_cpu))
                print(f"round {round_ + 1}: {n} job(s) {'pinned' if pinned else 'unpinned':>8}: "
                      f"{rate:7.1f} seed-steps/s ({span:.1f} s), {per_cpu:5.1f} per CPU "
                      "second", flush=True)
    alone = max(rate for rate, _ in results[(counts[0], False)])
    print(f"\nbest of {FLAGS.rounds} round(s): aggregate seed-steps/s (x {counts[0]} job(s) "
          "alone), seed-steps per CPU second")
    rows = []
    for n in counts:
        row = [f"{n} job(s):"]
        for pinned in ((False,) if n == 1 else (False, True)):
            rate = max(r for r, _ in results[(n, pinned)])
            per_cpu = max(c for _, c in results[(n, pinned)])
            row.append(f"{'pinned' if pinned else 'unpinned'} {rate:.1f} ({rate / alone:.2f}x), "
                       f"{per_cpu:.1f}")
            what = (f"{FLAGS.env}, {n} one-seed job(s) at once, {FLAGS.max_steps:,} env steps "
                    f"each, {'pinned' if pinned else 'unpinned'} (best of {FLAGS.rounds} "
                    "round(s))")
            rows += [(f"{what}, aggregate", rate, "seed-steps/s"),
                     (f"{what}, over {counts[0]} job(s) alone", rate / alone, "x"),
                     (f"{what}, per CPU second", per_cpu, "seed-steps/CPU s")]
        print("  ".join(row))
    record("sweep_parallel", rows)


if __name__ == "__main__":
    app.run(main)
