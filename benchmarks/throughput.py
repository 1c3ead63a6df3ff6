"""SAC throughput on humanoid-stand dimensions, as ratios measured within one run.

    python benchmarks/throughput.py            # the full set (a few minutes on 2 cores)
    python benchmarks/throughput.py --quick    # fewer steps
    python benchmarks/throughput.py --seeds=1,4,16   # the update at other seed counts
    python benchmarks/throughput.py --e2e_seeds=4 --replay_on_device --env_backend=envpool

Prints: pure env stepping (steps/s); the jitted UTD-8 update in seed-updates/s for 1 and 4
seeds (--seeds), its FLOP/s as a fraction of this machine's measured float32 matmul peak (in
--update_rounds rounds, each timing the peak just before the update, and their medians: the
machine's speed drifts, and a peak timed minutes apart from the update moves the fraction by
several points) next to the fractions that the critics' layers' matmuls reach alone, and the
seconds its compilation took; end-to-end training steps/s at UTD 1 and 8, against the sum of
env, update and eval time measured apart in between (the loop's overhead), in --rounds rounds
and their median (--e2e_seeds seeds trained together, with --env_backend and --replay_on_device
as a run takes them). Each round evaluates as often, per training step, as a run with the default
settings does (one episode per 1,000 steps: 10 every 10,000; with --quick, one per 300, so
more often); the spectral and feature diagnostics that a run writes with each evaluation are
timed apart and added at their default frequency (once per 10,000 steps), since a round is
shorter than the interval between two of them. The rounds write no checkpoint (the default
writes one every 50,000 steps; `benchmarks/checkpoint.py` times one with a full buffer) and
sample a buffer of a few thousand transitions, which stays in the CPU caches (a full 1M one
samples more slowly): a long run's loop adds somewhat more than these rounds measure.
`python benchmarks/loop_breakdown.py` splits that overhead into its parts.

"Seed-updates/s" counts gradient steps times seeds per second: a UTD-8 update call for 4 seeds
is 32 seed-updates. The fraction of the peak divides all the FLOPs XLA's cost analysis counts
for the update (elementwise work too) by the peak; the line after it gives the matmuls' share
of them and the fraction in matmul FLOPs alone.
"""

import tempfile
import time

import jax
import numpy as np
from absl import app, flags
from bench_utils import (
    best_time,
    critic_layer_flops,
    env_seconds,
    matmul_peak,
    sac_trainer,
    update_against_peak,
    update_seconds,
    xla_flags,
)
from recording import record

from agents import make_agent
from envs import make_vector_env
from experiment.config import TrainConfig
from experiment.step_fns import evaluate, to_batch

flags.DEFINE_string("env", "humanoid-stand", "Task whose dimensions and physics are used.")
flags.DEFINE_boolean("quick", False, "Fewer steps (a rough check).")
flags.DEFINE_list("seeds", ["1", "4"], "Seed counts at which the update is timed.")
flags.DEFINE_integer("rounds", 3, "End-to-end rounds (loop and parts measured apart) per UTD.")
flags.DEFINE_integer("update_rounds", 3, "Rounds of the update's timing, each after the peak's.")
flags.DEFINE_list("utds", ["1", "8"], "UTDs of the end-to-end rounds (1 and/or 8).")
flags.DEFINE_integer("e2e_seeds", 1, "Seeds trained together in the end-to-end rounds.",
                     lower_bound=1)
flags.DEFINE_enum("env_backend", "dm_control", ["dm_control", "envpool"],
                  "Simulator of the env stepping and end-to-end rounds.")
flags.DEFINE_boolean("replay_on_device", False, "End-to-end rounds with the replay buffer on "
                     "the device.")
FLAGS = flags.FLAGS


def env_steps_per_second(name: str, steps: int) -> float:
    env = make_vector_env(name, [0], backend=FLAGS.env_backend)
    env.reset()
    return steps / env_seconds(env, steps, np.random.default_rng(0))


def end_to_end(utd: int, steps: int, rounds: int, chunks: int = 10):
    """Per round: seconds of `steps` training iterations of a real run (one evaluation among
    them, of one episode per 1,000 steps), and of the same work measured apart: env stepping
    alone, the jitted update and next-actions calls alone, and the evaluation alone. Each round
    runs its iterations in `chunks` pieces, each followed by as many update calls and env steps
    alone, so that the machine's speed, which drifts by several percent over seconds here,
    reaches the loop and its parts alike. A first stretch of `steps` iterations (random phase,
    compilation, first evaluation) is not timed. Returns the rounds and the seconds of one
    diagnostics pass, which the timed iterations leave out (see the module notes)."""
    results = []
    seeds = FLAGS.e2e_seeds
    env = make_vector_env(FLAGS.env, list(range(seeds)), backend=FLAGS.env_backend)
    env.reset()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as logdir:
        episodes = max(1, round(steps / 1000))
        trainer = sac_trainer(logdir, FLAGS.env, utd, eval_every=steps, eval_episodes=episodes,
                              max_steps=10**7, checkpoint_every=10**7, num_seeds=seeds,
                              env_backend=FLAGS.env_backend,
                              replay_on_device=FLAGS.replay_on_device)
        loop = trainer.start()
        started = time.time()
        while loop.env_step < trainer.cfg.start_steps + steps:
            trainer.iteration(loop, started)
        jax.block_until_ready(loop.states)
        diagnose_seconds = best_time(lambda: trainer.log_diagnostics(loop), repeats=3)
        trainer.diagnose = None  # timed above; the loop's evaluations leave them out
        batch = to_batch(trainer.buffer.sample(trainer.cfg.batch_size, utd))
        for _ in range(rounds):
            r = {"loop": 0.0, "env": 0.0, "update": 0.0}
            end = loop.env_step + steps  # the round holds one multiple of eval_every
            for chunk in range(chunks):
                n = end - loop.env_step if chunk == chunks - 1 else steps // chunks
                start = time.perf_counter()
                for _ in range(n):
                    trainer.iteration(loop, started)
                jax.block_until_ready(loop.states)
                r["loop"] += time.perf_counter() - start
                r["update"] += update_seconds(trainer, loop, batch, n)
                r["env"] += env_seconds(env, n, rng)
            start = time.perf_counter()
            evaluate(trainer.eval_act, loop.states, trainer.eval_env, episodes)
            r["eval"] = time.perf_counter() - start
            results.append(r)
    return results, diagnose_seconds


def main(_):
    quick = FLAGS.quick
    peak, size = matmul_peak()
    print(f"devices: {jax.devices()}; XLA_FLAGS: {xla_flags()}")
    print(f"matmul peak (float32, jit, {size}x{size}): {peak / 1e9:.1f} GFLOP/s")
    env_rate = env_steps_per_second(FLAGS.env, 2000 if quick else 10000)
    print(f"pure env stepping, {FLAGS.env} ({FLAGS.env_backend}): {env_rate:.0f} steps/s")
    rows = [("matmul peak (float32)", peak / 1e9, "GFLOP/s"),
            (f"pure env stepping, {FLAGS.env} ({FLAGS.env_backend})", env_rate, "steps/s")]

    agent = make_agent("sac")
    for seeds in map(int, FLAGS.seeds):
        rates, fractions, peaks, compile_seconds, share = update_against_peak(
            agent, 67, 21, seeds=seeds, utd=8, batch=256, peak_size=size,
            rounds=FLAGS.update_rounds)
        print(f"SAC update, UTD 8, {seeds} seed(s): {np.median(rates):.0f} seed-updates/s = "
              f"{100 * np.median(fractions):.1f} % of the matmul peak (medians of "
              f"{len(rates)} rounds, each against the peak timed just before it: "
              f"{min(rates):.0f}-{max(rates):.0f} seed-updates/s, {100 * min(fractions):.1f}-"
              f"{100 * max(fractions):.1f} % of {min(peaks) / 1e9:.0f}-{max(peaks) / 1e9:.0f} "
              f"GFLOP/s; compiled in {compile_seconds:.1f} s)")
        print(f"  those are all the FLOPs XLA's cost analysis counts; the matmuls are "
              f"{100 * share:.1f} % of them: counting only theirs, "
              f"{100 * share * np.median(fractions):.1f} % of the peak")
        what = f"SAC update, UTD 8, {seeds} seed(s)"
        rows += [(what, np.median(rates), "seed-updates/s"),
                 (what, 100 * np.median(fractions), "% of matmul peak"),
                 (f"{what}, compilation", compile_seconds, "s")]
        peak = np.median(peaks)
        first, hidden = critic_layer_flops(seeds, 88), critic_layer_flops(seeds, 256)
        print(f"  its critics' layers' matmuls alone (forward, input and weight gradient, "
              f"{2 * seeds} critics batched): {100 * hidden / peak:.1f} % of the peak for the "
              f"256x256 hidden layer, {100 * first / peak:.1f} % for the 88x256 first layer")

    for utd, steps in ((1, 2000), (8, 1000)):  # whole thousands: the default eval share
        if str(utd) not in FLAGS.utds:
            continue
        steps = 300 if quick else steps
        rounds, diagnose = end_to_end(utd, steps, FLAGS.rounds)
        every = TrainConfig().eval_every
        added = []
        for r in rounds:
            parts = r["env"] + r["update"] + r["eval"]
            loop_part = 100 * (r["loop"] / parts - 1)
            diagnostics = 100 * diagnose / (every * parts / steps)  # per `every` steps' parts
            added.append(loop_part + diagnostics)
            print(f"end to end, UTD {utd}, {FLAGS.e2e_seeds} seed(s) ({FLAGS.env_backend}, "
                  f"replay on the {'device' if FLAGS.replay_on_device else 'host'}): "
                  f"{steps / r['loop']:.0f} env steps/s while training; loop {r['loop']:.2f} s "
                  f"vs env {r['env']:.2f} s + update "
                  f"{r['update']:.2f} s + eval {r['eval']:.2f} s measured apart: the loop adds "
                  f"{loop_part:+.1f} %, and the diagnostics {diagnostics:.2f} % ({diagnose:.3f} s "
                  f"once per {every} steps): {added[-1]:+.1f} %")
        print(f"  the loop adds {np.median(added):+.1f} % at UTD {utd} (median of {len(added)} "
              f"rounds, {min(added):+.1f} to {max(added):+.1f} %)")
        rows += [(f"end to end, UTD {utd}", np.median([steps / r["loop"] for r in rounds]),
                  "env steps/s"),
                 (f"loop overhead over its parts, UTD {utd}", np.median(added), "%")]
    record("throughput", rows)


if __name__ == "__main__":
    app.run(main)
