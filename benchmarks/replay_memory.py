"""Replay buffer memory and speed: bytes against the obs + next_obs layout, insert and sample times.

python benchmarks/replay_memory.py --num_seeds=4 --capacity=1000000 --domain=humanoid
"""

import time

import numpy as np
from absl import app, flags
from recording import record

from replay import ReplayBuffer

DIMS = {"humanoid": (67, 21), "dog": (223, 38)}
EPISODE_LENGTH = 1000

flags.DEFINE_integer("num_seeds", 4, "Seeds (rings) in the timed buffer.")
flags.DEFINE_integer("capacity", 1_000_000, "Transitions per seed.")
flags.DEFINE_enum("domain", "humanoid", list(DIMS), "Observation and action sizes to time.")
flags.DEFINE_integer("fill", None, "Env steps inserted before timing samples (default: capacity).")
flags.DEFINE_integer("repeats", 200, "Sample calls timed per setting.")
FLAGS = flags.FLAGS


def naive_nbytes(capacity: int, obs_dim: int, act_dim: int) -> int:
    """Bytes of one seed storing obs, next_obs, action, reward and mask separately in float32."""
    return capacity * (2 * obs_dim + act_dim + 2) * 4


def memory_table(capacity: int) -> list[tuple]:
    """Print this buffer's bytes per seed and its ratio to the naive layout for each domain;
    returns them as result rows."""
    print(f"memory per seed at capacity {capacity:,}")
    rows = []
    for domain, (obs_dim, act_dim) in DIMS.items():
        ours = ReplayBuffer(1, capacity, obs_dim, act_dim).nbytes
        naive = naive_nbytes(capacity, obs_dim, act_dim)
        print(
            f"  {domain:9s} obs {obs_dim:3d} act {act_dim:2d}: {ours / 2**20:8.1f} MiB vs "
            f"{naive / 2**20:8.1f} MiB naive, ratio {ours / naive:.4f}"
        )
        what = f"replay buffer, {domain}, {capacity:,} transitions"
        rows += [(f"{what}, bytes per seed", ours / 2**20, "MiB"),
                 (f"{what}, bytes against obs and next_obs stored apart", ours / naive, "x")]
    return rows


def fill(buffer: ReplayBuffer, steps: int, rng: np.random.Generator) -> float:
    """Insert `steps` steps of 1000-step random episodes; return seconds per insert."""
    n = buffer.num_seeds
    episode = rng.standard_normal((EPISODE_LENGTH + 1, n, buffer.obs_dim), dtype=np.float32)
    actions = rng.uniform(-1, 1, (EPISODE_LENGTH, n, buffer.act_dim)).astype(np.float32)
    rewards = rng.uniform(0, 1, (EPISODE_LENGTH, n)).astype(np.float32)
    never = np.zeros(n, bool)
    start = time.perf_counter()
    for step in range(steps):
        t = step % EPISODE_LENGTH
        truncated = np.full(n, t == EPISODE_LENGTH - 1)
        buffer.insert(episode[t], actions[t], rewards[t], episode[t + 1], never, truncated)
    return (time.perf_counter() - start) / max(steps, 1)


def time_sample(buffer: ReplayBuffer, batch_size: int, utd: int, repeats: int) -> np.ndarray:
    """Seconds per `sample(batch_size, utd)` call, one entry per repeat."""
    buffer.sample(batch_size, utd)
    times = np.empty(repeats)
    for i in range(repeats):
        start = time.perf_counter()
        buffer.sample(batch_size, utd)
        times[i] = time.perf_counter() - start
    return times


def main(_):
    rows = memory_table(FLAGS.capacity)
    obs_dim, act_dim = DIMS[FLAGS.domain]
    buffer = ReplayBuffer(FLAGS.num_seeds, FLAGS.capacity, obs_dim, act_dim)
    steps = FLAGS.capacity if FLAGS.fill is None else FLAGS.fill
    per_insert = fill(buffer, steps, np.random.default_rng(0))
    print(
        f"{FLAGS.domain}, {FLAGS.num_seeds} seeds, {len(buffer):,} transitions each, "
        f"{buffer.nbytes / 2**30:.2f} GiB: insert {per_insert * 1e6:.1f} us/step"
    )
    what = f"replay buffer, {FLAGS.domain}, {FLAGS.num_seeds} seed(s), {len(buffer):,} transitions"
    rows.append((f"{what}, insert", per_insert * 1e6, "us per env step"))
    for name, batch_size, utd in [("SAC", 256, 1), ("SAC", 256, 8), ("BRO", 128, 10)]:
        times = time_sample(buffer, batch_size, utd, FLAGS.repeats) * 1e3
        print(
            f"  sample {name} batch {batch_size} utd {utd:2d}: median {np.median(times):.2f} ms,"
            f" p90 {np.percentile(times, 90):.2f} ms"
        )
        rows.append((f"{what}, sample {name} batch {batch_size} UTD {utd} (median)",
                     np.median(times), "ms"))
    record("replay_memory", rows)


if __name__ == "__main__":
    app.run(main)
