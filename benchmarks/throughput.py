"""SAC throughput on humanoid-stand dimensions, as ratios measured within one run.

    python benchmarks/throughput.py            # the full set (a few minutes on 2 cores)
    python benchmarks/throughput.py --quick    # fewer steps
    python benchmarks/throughput.py --seeds=1,4,16   # the update at other seed counts

Prints: pure env stepping (steps/s); the jitted UTD-8 update in seed-updates/s for 1 and 4
seeds (--seeds) and its FLOP/s as a fraction of this machine's measured float32 matmul peak;
end-to-end training steps/s at UTD 1 and 8, against the sum of env, update and eval time
measured apart (the loop's overhead).
"""

import tempfile
import time

import jax
import numpy as np
from absl import app, flags
from bench_utils import best_time, matmul_peak, update_throughput, xla_flags

from agents import make_agent
from envs import make_vector_env
from launch.config import TrainConfig
from launch.train import Trainer, evaluate, to_batch

flags.DEFINE_string("env", "humanoid-stand", "Task whose dimensions and physics are used.")
flags.DEFINE_boolean("quick", False, "Fewer steps (a rough check).")
flags.DEFINE_list("seeds", ["1", "4"], "Seed counts at which the update is timed.")
FLAGS = flags.FLAGS


def env_steps_per_second(name: str, steps: int) -> float:
    env = make_vector_env(name, [0])
    env.reset()
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, 1, env.act_dim)).astype(np.float32)
    start = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated = env.step(a)
        if (terminated | truncated).any():
            env.reset()
    return steps / (time.perf_counter() - start)


def end_to_end(utd: int, steps: int, start_steps: int) -> dict[str, float]:
    """Seconds of `steps` training iterations of a real run (one evaluation among them, after
    compilation), and of the same work measured piece by piece: env stepping alone, the jitted
    update+act call alone, and the evaluation alone."""
    with tempfile.TemporaryDirectory() as logdir:
        cfg = TrainConfig(agent="sac", env=FLAGS.env, utd=utd, max_steps=start_steps + 2 * steps,
                          start_steps=start_steps, eval_every=start_steps + steps,
                          log_every=1000, eval_episodes=1, logdir=logdir, progress=False,
                          checkpoint_every=10 * steps, buffer_capacity=100_000)
        trainer = Trainer(make_agent("sac"), cfg)
        loop = trainer.start()
        started = time.time()
        while loop.env_step < start_steps + steps:  # random phase, compilation, first eval
            trainer.iteration(loop, started)
        jax.block_until_ready(loop.states)
        start = time.perf_counter()
        while loop.env_step < start_steps + 2 * steps:  # includes the second evaluation
            trainer.iteration(loop, started)
        jax.block_until_ready(loop.states)
        loop_seconds = time.perf_counter() - start

        start = time.perf_counter()
        evaluate(trainer.eval_act, loop.states, trainer.eval_env, cfg.eval_episodes)
        eval_seconds = time.perf_counter() - start
        diagnose_seconds = best_time(lambda: trainer.log_diagnostics(loop), repeats=3)
        batch = to_batch(trainer.buffer.sample(cfg.batch_size, utd))
        start = time.perf_counter()
        for _ in range(steps):
            loop.states, actions, loop.keys, loop.metric_sums = trainer.train_step(
                loop.states, batch, loop.obs, loop.keys, loop.metric_sums)
            np.asarray(actions)
        update_seconds = time.perf_counter() - start
    env_seconds = steps / env_steps_per_second(FLAGS.env, steps)
    return {"loop": loop_seconds, "env": env_seconds, "update": update_seconds,
            "eval": eval_seconds, "diagnose": diagnose_seconds, "steps": steps}


def main(_):
    quick = FLAGS.quick
    peak, size = matmul_peak()
    print(f"devices: {jax.devices()}; XLA_FLAGS: {xla_flags()}")
    print(f"matmul peak (float32, jit, {size}x{size}): {peak / 1e9:.1f} GFLOP/s")
    env_rate = env_steps_per_second(FLAGS.env, 2000 if quick else 10000)
    print(f"pure env stepping, {FLAGS.env}: {env_rate:.0f} steps/s")

    agent = make_agent("sac")
    for seeds in map(int, FLAGS.seeds):
        rate, achieved = update_throughput(agent, 67, 21, seeds=seeds, utd=8, batch=256)
        print(f"SAC update, UTD 8, {seeds} seed(s): {rate:.0f} seed-updates/s, "
              f"{achieved / 1e9:.1f} GFLOP/s = {100 * achieved / peak:.1f} % of the matmul peak")

    for utd in (1, 8):
        r = end_to_end(utd, steps=300 if quick else 2000, start_steps=300)
        parts = r["env"] + r["update"] + r["eval"]
        print(f"end to end, UTD {utd}: {r['steps'] / r['loop']:.0f} env steps/s while training; "
              f"loop {r['loop']:.2f} s vs env {r['env']:.2f} s + update {r['update']:.2f} s + "
              f"eval {r['eval']:.2f} s measured apart: the loop adds "
              f"{100 * (r['loop'] / parts - 1):+.1f} %")
        interval = TrainConfig().eval_every * r["loop"] / r["steps"]
        print(f"  diagnostics: {r['diagnose']:.3f} s per evaluation = "
              f"{100 * r['diagnose'] / interval:.2f} % of the {TrainConfig().eval_every} "
              f"training steps between evaluations at this rate")


if __name__ == "__main__":
    app.run(main)
