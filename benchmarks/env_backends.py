"""Pure env stepping, dm_control against EnvPool (--env_backend), as ratios within one run.

    python benchmarks/env_backends.py                       # humanoid-stand and cheetah-run,
                                                            # 1, 4 and 16 envs
    python benchmarks/env_backends.py --envs=walker-run --counts=1,8 --rounds=5

For each task and env count: env steps per second (all envs' steps together) of the loop's
vector env on each backend, stepping uniform random actions and resetting at episode ends, in
--rounds interleaved rounds (dm_control, then EnvPool, each round), and the median of
EnvPool's rate over dm_control's. EnvPool runs its envs in a C++ thread pool of as many threads
as this machine has cores (at most one per env); dm_control steps them one after another.
"""

import os
import time

import numpy as np
from absl import app, flags, logging
from recording import record

from envs import make_vector_env

flags.DEFINE_list("envs", ["humanoid-stand", "cheetah-run"], "Tasks to step.")
flags.DEFINE_list("counts", ["1", "4", "16"], "Numbers of envs (seeds) stepped together.")
flags.DEFINE_integer("steps", 1000, "Vector-env steps per round and backend.", lower_bound=1)
flags.DEFINE_integer("rounds", 3, "Interleaved rounds.", lower_bound=1)
FLAGS = flags.FLAGS


def steps_per_second(env, steps: int, rng: np.random.Generator) -> float:
    """All envs' steps per second over `steps` vector steps (resets included)."""
    actions = rng.uniform(-1, 1, (steps, env.num_envs, env.act_dim)).astype(np.float32)
    start = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated = env.step(a)
        if (terminated | truncated).all():
            env.reset()
    return steps * env.num_envs / (time.perf_counter() - start)


def main(_):
    logging.set_verbosity(logging.WARNING)  # dm_control's INFO lines on loading MuJoCo
    print(f"{os.cpu_count()} CPU cores; {FLAGS.steps} vector steps per round, "
          f"{FLAGS.rounds} rounds")
    rows = []
    try:
        for name in FLAGS.envs:
            for count in map(int, FLAGS.counts):
                envs = {backend: make_vector_env(name, list(range(count)), backend=backend)
                        for backend in ("dm_control", "envpool")}
                for env in envs.values():
                    env.reset()
                    steps_per_second(env, 50, np.random.default_rng(1))  # warm up
                rates = {backend: [] for backend in envs}
                for _ in range(FLAGS.rounds):
                    for backend, env in envs.items():
                        rates[backend].append(
                            steps_per_second(env, FLAGS.steps, np.random.default_rng(0)))
                ratios = np.array(rates["envpool"]) / np.array(rates["dm_control"])
                print(f"{name}, {count} env(s): dm_control "
                      f"{np.median(rates['dm_control']):,.0f} steps/s, envpool "
                      f"{np.median(rates['envpool']):,.0f} steps/s (medians); envpool / "
                      f"dm_control {np.median(ratios):.2f}x (rounds "
                      f"{ratios.min():.2f}-{ratios.max():.2f})", flush=True)
                what = f"{name}, {count} env(s)"
                rows += [(f"{what}, {backend}, all envs' steps (median of {FLAGS.rounds} "
                          "rounds)", np.median(rates[backend]), "steps/s")
                         for backend in ("dm_control", "envpool")]
                rows += [(f"{what}, envpool over dm_control (median of {FLAGS.rounds} rounds)",
                          np.median(ratios), "x"),
                         (f"{what}, envpool over dm_control, lowest round", ratios.min(), "x"),
                         (f"{what}, envpool over dm_control, highest round", ratios.max(), "x")]
    finally:  # the tasks measured before one EnvPool refuses are recorded too
        record("env_backends", rows)


if __name__ == "__main__":
    app.run(main)
