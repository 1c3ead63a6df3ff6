"""IQM interval estimates: this project's vectorised stratified bootstrap against rliable's,
same problem, same process; also the peak memory of ours (tracemalloc).

    python benchmarks/aggregate.py [--algorithms=5 --tasks=15 --runs=10 --reps=50000]
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
from absl import app, flags
from recording import record

from analysis import metrics
from analysis.bootstrap import generator, percentile_interval, stratified_bootstrap

FLAGS = flags.FLAGS
flags.DEFINE_integer("algorithms", 5, "Algorithms (score matrices).")
flags.DEFINE_integer("tasks", 15, "Tasks per matrix.")
flags.DEFINE_integer("runs", 10, "Runs per task.")
flags.DEFINE_integer("reps", 50_000, "Bootstrap repetitions, for both implementations.")
flags.DEFINE_float("chunk_mb", 256.0, "Our chunk budget in MB.")
flags.DEFINE_integer("seed", 0, "Seed of the random score matrices and of both bootstraps.")


def ours(scores: dict[str, np.ndarray]) -> tuple[dict, float, int]:
    """Intervals per algorithm, seconds, peak traced bytes."""
    tracemalloc.start()
    start = time.perf_counter()
    intervals = {
        label: percentile_interval(stratified_bootstrap(
            [s], metrics.iqm, FLAGS.reps, generator(FLAGS.seed, label), chunk_mb=FLAGS.chunk_mb))
        for label, s in scores.items()}
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return intervals, seconds, peak


def theirs(scores: dict[str, np.ndarray]) -> tuple[dict, float]:
    """rliable's intervals per algorithm and seconds."""
    from rliable import library
    from rliable import metrics as rliable_metrics

    np.random.seed(FLAGS.seed)
    start = time.perf_counter()
    _, intervals = library.get_interval_estimates(
        scores, lambda s: np.array([rliable_metrics.aggregate_iqm(s)]), reps=FLAGS.reps)
    return intervals, time.perf_counter() - start


def main(argv: list[str]) -> None:
    del argv
    rng = np.random.default_rng(FLAGS.seed)
    difficulty = rng.uniform(0.2, 1.0, size=FLAGS.tasks)
    scores = {f"algo{i}": rng.beta(2, 2, size=(FLAGS.runs, FLAGS.tasks)) * difficulty
              for i in range(FLAGS.algorithms)}
    shape = f"{FLAGS.algorithms} algorithms x {FLAGS.tasks} tasks x {FLAGS.runs} runs"
    print(f"IQM 95% intervals, {FLAGS.reps:,} repetitions, {shape}")
    our_ci, our_s, peak = ours(scores)
    print(f"ours:    {our_s:8.2f} s   peak traced memory {peak / 2**20:.1f} MB "
          f"(chunk budget {FLAGS.chunk_mb:g} MB)")
    their_ci, their_s = theirs(scores)
    print(f"rliable: {their_s:8.2f} s")
    print(f"speed-up: {their_s / our_s:.1f}x")
    worst = max(float(np.max(np.abs(our_ci[k] - their_ci[k].ravel()) / np.ptp(our_ci[k])))
                for k in scores)
    print(f"largest endpoint difference: {worst:.3f} x interval width (Monte-Carlo noise)")
    record("aggregate", [(f"IQM intervals, {shape}, ours", our_s, "s"),
                         (f"IQM intervals, {shape}, rliable", their_s, "s"),
                         (f"IQM intervals, {shape}, speed-up over rliable", their_s / our_s, "x"),
                         (f"IQM intervals, {shape}, our peak traced memory", peak / 2**20, "MiB")])


if __name__ == "__main__":
    app.run(main)
