"""Checkpoint size, save and restore time, and the memory they need, for a full buffer.

    python benchmarks/checkpoint.py                    # humanoid-stand, 1,000,000 transitions
    python benchmarks/checkpoint.py --capacity=100000  # quicker

Builds a real SAC Trainer (humanoid dimensions: obs 67, act 21), fills its replay buffer to
capacity with random transitions, then times `Trainer.save` and `Trainer.restore` (the code a
run uses). Memory: the peak resident set size during the save above the size before it, as a
multiple of the buffer's bytes (Linux: VmHWM, reset through /proc/self/clear_refs); for the
restore, which maps the checkpoint's files (their pages are the page cache's, which the system
can drop), the peak of the anonymous memory (RssAnon, sampled every 5 ms) above the size before
it: the restored buffer is allocated while the old one still exists, so about 1 x the buffer.
"""

import os
import tempfile
import threading
import time

import numpy as np
from absl import app, flags
from recording import record

from agents import make_agent
from experiment.config import TrainConfig
from experiment.train import Trainer

flags.DEFINE_string("env", "humanoid-stand", "Task whose dimensions are used.")
flags.DEFINE_integer("capacity", 1_000_000, "Replay capacity (transitions per seed).")
flags.DEFINE_integer("num_seeds", 1, "Seeds (buffer rings).")
FLAGS = flags.FLAGS


def rss_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_while(field: str, work):
    """`(work(), peak of the /proc/self/status field sampled every 5 ms while it ran)`."""
    peak, done = [rss_bytes(field)], threading.Event()

    def sample():
        while not done.wait(0.005):
            peak[0] = max(peak[0], rss_bytes(field))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = work()
    finally:
        done.set()
        sampler.join()
    return result, max(peak[0], rss_bytes(field))


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def fill(trainer: Trainer, steps: int) -> None:
    """Insert `steps` random transitions per seed, episodes of 1000 steps, in place."""
    rng = np.random.default_rng(0)
    n, obs_dim, act_dim = FLAGS.num_seeds, trainer.obs_dim, trainer.act_dim
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    for t in range(1, steps + 1):
        next_obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
        actions = rng.uniform(-1, 1, (n, act_dim)).astype(np.float32)
        ended = np.full(n, t % 1000 == 0)
        trainer.buffer.insert(obs, actions, rng.normal(size=n).astype(np.float32), next_obs,
                              np.zeros(n, bool), ended)
        obs = rng.normal(size=(n, obs_dim)).astype(np.float32) if ended.all() else next_obs


def directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


def main(_):
    with tempfile.TemporaryDirectory() as logdir:
        cfg = TrainConfig(agent="sac", env=FLAGS.env, num_seeds=FLAGS.num_seeds,
                          buffer_capacity=FLAGS.capacity, logdir=logdir, progress=False,
                          keep_final_buffer=True)  # saved at max_steps too: a full buffer
        trainer = Trainer(make_agent("sac"), cfg)
        loop = trainer.start()
        start = time.perf_counter()
        fill(trainer, FLAGS.capacity)
        print(f"filled {FLAGS.capacity:,} transitions x {FLAGS.num_seeds} seed(s) in "
              f"{time.perf_counter() - start:.1f} s; buffer arrays "
              f"{trainer.buffer.nbytes / 2**20:.0f} MiB")
        loop.env_step = FLAGS.capacity

        before = rss_bytes("VmRSS")
        reset_peak_rss()
        start = time.perf_counter()
        trainer.save(loop)
        save_seconds = time.perf_counter() - start
        extra = rss_bytes("VmHWM") - before
        step_dir = os.path.join(cfg.run_dir, "checkpoints", str(loop.env_step))
        size = directory_bytes(step_dir)

        template = trainer.fresh_loop()
        anonymous = rss_bytes("RssAnon")
        start = time.perf_counter()
        restored, anonymous_peak = peak_while("RssAnon", lambda: trainer.restore(template))
        restore_seconds = time.perf_counter() - start
        assert restored.env_step == loop.env_step

        print(f"checkpoint on disk: {size / 2**20:.0f} MiB")
        print(f"save: {save_seconds:.2f} s; restore: {restore_seconds:.2f} s")
        print(f"peak extra memory while saving: {extra / 2**20:.0f} MiB = "
              f"{extra / trainer.buffer.nbytes:.2f} x the buffer")
        restore_extra = anonymous_peak - anonymous
        print(f"peak extra anonymous memory while restoring: {restore_extra / 2**20:.0f} MiB = "
              f"{restore_extra / trainer.buffer.nbytes:.2f} x the buffer")
    what = f"checkpoint, {FLAGS.env}, {FLAGS.capacity:,} transitions x {FLAGS.num_seeds} seed(s)"
    record("checkpoint", [(f"{what}, on disk", size / 2**20, "MiB"),
                          (f"{what}, save", save_seconds, "s"),
                          (f"{what}, restore", restore_seconds, "s"),
                          (f"{what}, extra memory while saving", extra / trainer.buffer.nbytes,
                           "x buffer"),
                          (f"{what}, extra anonymous memory while restoring",
                           restore_extra / trainer.buffer.nbytes, "x buffer")])


if __name__ == "__main__":
    app.run(main)
