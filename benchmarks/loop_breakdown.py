"""Where the training loop's time goes, per env step: each part inside a real run and alone.

    python benchmarks/loop_breakdown.py            # SAC, humanoid-stand, UTD 1, 2000 steps
    python benchmarks/loop_breakdown.py --utd=8 --steps=500

`benchmarks/throughput.py` reports how much the loop adds to env + update + eval time measured
apart. This script says which part it is: it runs real training iterations (`Trainer.iteration`)
with timers around the env (steps and resets), the replay insert and sample (its draw and its
gather) and the jitted calls: the update's dispatch (it then computes while the env steps,
where its minibatches leave out that step's transition) and the next actions' call, waited on
as the loop waits for them (and so for the update). It then times each part again in a tight
loop of its own, the update and the actions' call one after the other. The rest (the loop's
own Python, a train.csv row every 1,000 steps) is what remains. In the loop, the env steps
while the update computes, so its time there holds what the two cores' sharing costs it. The
env's time is split further, inside dm_control's step: MuJoCo's stepping (C), the task's
Python (reward, observation, before and after the step), and the rest (dm_control's and this
project's wrappers). A last row steps the env alone with a 16 MiB memory copy before each
step, which evicts the CPU caches as the update does without running any XLA code.
"""

import tempfile
import time
from collections import defaultdict

import jax
import numpy as np
from absl import app, flags
from bench_utils import env_seconds, sac_trainer, update_seconds, xla_flags
from recording import record

from experiment.step_fns import to_batch

flags.DEFINE_string("env", "humanoid-stand", "Task whose dimensions and physics are used.")
flags.DEFINE_integer("utd", 1, "Gradient steps per env step.")
flags.DEFINE_integer("steps", 2000, "Env steps timed (after 300 random ones and compilation).")
FLAGS = flags.FLAGS


def timed(fn, totals: dict, name: str, wait: bool = False):
    """`fn` with its seconds added to totals[name]; `wait` blocks on JAX results first."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        if wait:
            jax.block_until_ready(out)
        totals[name] += time.perf_counter() - start
        return out

    return wrapper


def time_env_parts(env, totals: dict[str, dict]) -> None:
    """Timers inside the first env's dm_control step, adding to totals["now"] (swapped between
    the loop and the env alone): MuJoCo's stepping and the task's Python."""
    dm = env.envs[0].env

    def wrap(owner, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            totals["now"][name] += time.perf_counter() - start
            return out

        setattr(owner, attr, wrapper)

    wrap(dm.physics, "step", "MuJoCo stepping")
    for attr in ("before_step", "after_step", "get_reward", "get_observation"):
        wrap(dm.task, attr, "the task's Python")


def main(_):
    steps, utd = FLAGS.steps, FLAGS.utd
    print(f"devices: {jax.devices()}; XLA_FLAGS: {xla_flags()}")
    with tempfile.TemporaryDirectory() as logdir:
        trainer = sac_trainer(logdir, FLAGS.env, utd, max_steps=10**7, eval_every=10**7,
                              checkpoint_every=10**7)
        cfg = trainer.cfg
        loop = trainer.start()
        started = time.time()
        while loop.env_step <= max(cfg.start_steps + steps // 4, cfg.log_every):  # compilations
            trainer.iteration(loop, started)
        jax.block_until_ready(loop.states)

        inside = defaultdict(float)
        env_parts = {"loop": defaultdict(float), "alone": defaultdict(float)}
        env_parts["now"] = env_parts["loop"]
        time_env_parts(trainer.env, env_parts)
        env_step, env_reset = trainer.env.step, trainer.env.reset
        insert, sample = trainer.buffer.insert, trainer.buffer.sample
        draw, gather = trainer.buffer.draw, trainer.buffer.gather
        update_step, next_actions = trainer.update_step, trainer.next_actions
        trainer.env.step = timed(env_step, inside, "env")
        trainer.env.reset = timed(env_reset, inside, "env")
        trainer.buffer.insert = timed(insert, inside, "replay insert")
        trainer.buffer.draw = timed(draw, inside, "replay sample")
        trainer.buffer.gather = timed(gather, inside, "replay sample")
        trainer.update_step = timed(update_step, inside, "update + act (jit)")
        trainer.next_actions = timed(next_actions, inside, "update + act (jit)", wait=True)
        start = time.perf_counter()
        for _ in range(steps):
            trainer.iteration(loop, started)
        jax.block_until_ready(loop.states)
        loop_seconds = time.perf_counter() - start
        trainer.env.step, trainer.env.reset, trainer.buffer.insert = env_step, env_reset, insert
        trainer.buffer.draw, trainer.buffer.gather = draw, gather
        trainer.update_step, trainer.next_actions = update_step, next_actions

        rng = np.random.default_rng(0)
        trainer.env.reset()
        env_parts["now"] = env_parts["alone"]
        apart = {"env": env_seconds(trainer.env, steps, rng)}
        env_parts["now"] = defaultdict(float)  # the evicted run below is not split
        obs, actions, rewards = loop.obs, loop.actions, np.zeros(cfg.num_seeds, np.float32)
        no = np.zeros(cfg.num_seeds, bool)
        start = time.perf_counter()
        for _ in range(steps):  # the obs repeat, so each is its own next obs: a valid episode
            insert(obs, actions, rewards, obs, no, no)
        apart["replay insert"] = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(steps):
            batch = sample(cfg.batch_size, utd)
        apart["replay sample"] = time.perf_counter() - start
        apart["update + act (jit)"] = update_seconds(trainer, loop, to_batch(batch), steps)
        source, target = np.ones(4 * 2**20, np.float32), np.empty(4 * 2**20, np.float32)
        evicted = env_seconds(trainer.env, steps, rng, lambda: np.copyto(target, source))

    ms = 1e3 / steps
    print(f"SAC, {FLAGS.env}, UTD {utd}, 1 seed, {steps} env steps: "
          f"{loop_seconds * ms:.3f} ms per env step in the loop")
    what = f"SAC, {FLAGS.env}, UTD {utd}, 1 seed"
    rows = [(f"{what}, loop", loop_seconds * ms, "ms per env step")]
    print(f"{'part':<20} {'in loop (ms)':>12} {'alone (ms)':>10} {'added (ms)':>10} "
          f"{'added / loop':>12}")
    for name, seconds in inside.items():
        added = seconds - apart[name]
        rows += [(f"{what}, {name} in the loop", seconds * ms, "ms per env step"),
                 (f"{what}, {name} alone", apart[name] * ms, "ms per env step")]
        print(f"{name:<20} {seconds * ms:>12.3f} {apart[name] * ms:>10.3f} {added * ms:>10.3f} "
              f"{100 * added / loop_seconds:>11.1f}%")
        if name == "env":
            split = {part: (env_parts["loop"][part], env_parts["alone"][part])
                     for part in env_parts["loop"]}
            split["  the rest"] = (seconds - sum(a for a, _ in split.values()),
                                   apart[name] - sum(b for _, b in split.values()))
            for part, (in_loop, alone) in split.items():
                print(f"  {part.strip():<18} {in_loop * ms:>12.3f} {alone * ms:>10.3f} "
                      f"{(in_loop - alone) * ms:>10.3f} "
                      f"{100 * (in_loop - alone) / loop_seconds:>11.1f}%")
    rest = loop_seconds - sum(inside.values())
    overhead = 100 * (loop_seconds / sum(apart.values()) - 1)
    rows += [(f"{what}, everything else in the loop", rest * ms, "ms per env step"),
             (f"{what}, loop over its parts timed alone", overhead, "%"),
             (f"{what}, env alone after a 16 MiB memory copy", evicted * ms, "ms per env step")]
    print(f"{'everything else':<20} {rest * ms:>12.3f} {'':>10} {rest * ms:>10.3f} "
          f"{100 * rest / loop_seconds:>11.1f}%")
    print(f"the loop adds {overhead:+.1f} % to its parts timed alone")
    print(f"env alone, a 16 MiB memory copy before each step: {evicted * ms:.3f} ms per step "
          f"({evicted / apart['env']:.2f}x its time alone)")
    record("loop_breakdown", rows)


if __name__ == "__main__":
    app.run(main)
