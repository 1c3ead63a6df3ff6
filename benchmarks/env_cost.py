"""What each seed of a run costs on the host before and while it trains: its two dm_control envs
(training and evaluation), built and stepped one after another by the run's process.

    python benchmarks/env_cost.py
    python benchmarks/env_cost.py --envs=cheetah-run --count=50 --steps=200

Per task: the time to build (and reset) one env, the resident memory one adds, the bytes of
its MuJoCo model and data (what `experiment.memory.env_nbytes` counts for the memory check), and
the time of one env step with zero actions; then what a process with --num_seeds at
experiment.config.MAX_SEEDS spends building its envs (two per seed) and stepping all of them once,
and what 1M such steps take in env stepping alone.
"""

import gc
import os
import time

from absl import app, flags

os.environ.setdefault("MUJOCO_GL", "disabled")

import numpy as np  # noqa: E402
from recording import record  # noqa: E402

from envs import make_env  # noqa: E402
from experiment.config import MAX_SEEDS
from experiment.memory import env_nbytes, process_memory_bytes  # noqa: E402

flags.DEFINE_list("envs", ["cartpole-swingup", "cheetah-run", "humanoid-run", "dog-run"],
                  "Tasks to measure.")
flags.DEFINE_integer("count", 20, "Envs built per task.")
flags.DEFINE_integer("steps", 50, "Steps of every env, per task.")
FLAGS = flags.FLAGS


def measure(name: str, count: int, steps: int) -> dict[str, float]:
    make_env(name, 10**6).reset()  # the task's imports and assets, loaded once per process
    gc.collect()
    before, start = process_memory_bytes(), time.perf_counter()
    envs = [make_env(name, seed) for seed in range(count)]
    for env in envs:
        env.reset()
    build = (time.perf_counter() - start) / count
    resident = (process_memory_bytes() - before) / count
    action = np.zeros(envs[0].act_dim)
    start = time.perf_counter()
    for _ in range(steps):
        for env in envs:
            env.step(action)
    step = (time.perf_counter() - start) / (steps * count)
    return {"build": build, "resident": resident, "nbytes": env_nbytes(envs[0]), "step": step}


def main(argv):
    del argv
    print(f"{'task':<18} {'build':>9} {'resident':>10} {'model+data':>11} {'step':>9}   "
          f"{MAX_SEEDS:,} seeds: build, one step, 1M steps")
    rows = []
    for name in FLAGS.envs:
        m = measure(name, FLAGS.count, FLAGS.steps)
        envs = 2 * MAX_SEEDS
        print(f"{name:<18} {m['build'] * 1e3:>6.1f} ms {m['resident'] / 2**20:>6.1f} MiB "
              f"{m['nbytes'] / 2**20:>7.1f} MiB {m['step'] * 1e6:>6.0f} us   "
              f"{envs * m['build']:>5.0f} s, {MAX_SEEDS * m['step'] * 1e3:>5.0f} ms, "
              f"{MAX_SEEDS * m['step'] * 1e6 / 3600:>5.1f} h")
        seeds = f"{name}, {MAX_SEEDS:,} seeds"
        rows += [(f"{name}, one env, build and reset", m["build"] * 1e3, "ms"),
                 (f"{name}, one env, resident memory", m["resident"] / 2**20, "MiB"),
                 (f"{name}, one env, MuJoCo model and data", m["nbytes"] / 2**20, "MiB"),
                 (f"{name}, one env step, zero actions", m["step"] * 1e6, "us"),
                 (f"{seeds}, building their {envs:,} envs", envs * m["build"], "s"),
                 (f"{seeds}, one step of each", MAX_SEEDS * m["step"] * 1e3, "ms"),
                 (f"{seeds}, 1M steps of each, env stepping alone",
                  MAX_SEEDS * m["step"] * 1e6 / 3600, "h")]
    record("env_cost", rows)


if __name__ == "__main__":
    app.run(main)
