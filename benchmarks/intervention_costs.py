"""What the plasticity interventions cost SAC, as ratios measured within one run.

    python benchmarks/intervention_costs.py              # 1 seed, 5 rounds
    python benchmarks/intervention_costs.py --seeds=4 --rounds=3

Per-step methods: the jitted, seed-vmapped SAC UTD-8 update (humanoid-stand dimensions, the
default networks and batch 256) with each method that acts inside it, at its default settings,
against the same update without any (none), in seed-updates/s. The updates are compiled first,
then timed in --rounds interleaved rounds (each times every update once, so the machine's
drift reaches them alike); the ratio to none is the median of the rounds' ratios. Beside it:
the FLOPs XLA's cost analysis counts for one gradient step, relative to none (the method's
arithmetic).

Events: every registered method that acts at scheduled steps, on the same SAC states, in
seconds per call as a run makes it (the event, its draws such as a fresh initialisation, and
the per-layer report of interventions.csv, whose spectra take SVDs of every weight matrix),
and the report alone.
"""

import time

import jax
import numpy as np
from absl import app, flags
from bench_utils import best_time, compile_update, random_batches, xla_flags

from agents import make_agent
from interventions import clip_event_report, registered
from launch.config import TrainConfig
from launch.events import build_intervention, intervention_plan, with_hooks

flags.DEFINE_integer("seeds", 1, "Seeds (vmapped) in each update and event call.")
flags.DEFINE_integer("rounds", 5, "Interleaved timing rounds of the updates.")
flags.DEFINE_list("methods", [], "The per-step methods timed against none (default: every "
                  "registered one).")
flags.DEFINE_boolean("events", True, "Time the events too.")
flags.DEFINE_integer("obs_dim", 67, "Observation size (humanoid-stand's).")
flags.DEFINE_integer("act_dim", 21, "Action size (humanoid-stand's).")
FLAGS = flags.FLAGS
UTD, BATCH = 8, 256


def agent_with(intervention: str, seeds: int):
    """SAC with the per-step hooks of `intervention` at its default settings, and the plan."""
    cfg = TrainConfig(agent="sac", intervention=intervention, num_seeds=seeds)
    agent = make_agent("sac")
    plan = intervention_plan(agent, cfg)
    return with_hooks(agent, plan), plan, cfg


def per_step(seeds: int, rounds: int) -> None:
    names = ["none"] + (FLAGS.methods or [n for n, m in registered().items()
                                          if m.kind != "event"])
    updates = {}
    for name in names:
        agent, _, _ = agent_with(name, seeds)
        updates[name] = compile_update(agent, FLAGS.obs_dim, FLAGS.act_dim, seeds, UTD, BATCH)
        print(f"  compiled {name} ({updates[name].compile_seconds:.1f} s)", flush=True)
    rates = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            rates[name].append(seeds * UTD / best_time(updates[name].call, repeats=3,
                                                       min_seconds=1.0))
    base = np.asarray(rates["none"])
    print(f"SAC update, UTD {UTD}, batch {BATCH}, {seeds} seed(s), humanoid dims "
          f"(obs {FLAGS.obs_dim}, act {FLAGS.act_dim}); median of {rounds} rounds:")
    for name in names:
        ratio = np.asarray(rates[name]) / base
        arithmetic = updates[name].step_flops / updates["none"].step_flops
        print(f"  {name:>13}: {np.median(rates[name]):7.1f} seed-updates/s, "
              f"{np.median(ratio):.3f} x none (rounds {ratio.min():.3f}-{ratio.max():.3f}), "
              f"FLOPs per step {arithmetic:.3f} x none")


def events(seeds: int) -> None:
    keys = jax.numpy.stack([jax.random.key(s) for s in range(seeds)])
    data_fn = lambda env_step, n, size: random_batches(seeds, n, size, FLAGS.obs_dim,
                                                       FLAGS.act_dim)
    report = jax.jit(lambda before, after: {net: clip_event_report(before[net], after[net])
                                            for net in before})
    print(f"events on SAC's default networks, {seeds} seed(s), seconds per call:")
    for name in [n for n, m in registered().items() if m.kind == "event"]:
        agent, plan, cfg = agent_with(name, seeds)
        init_fn = jax.jit(jax.vmap(lambda k, agent=agent: agent.init(k, FLAGS.obs_dim,
                                                                       FLAGS.act_dim)))
        states = init_fn(keys)
        event = build_intervention(agent, cfg, plan, init_fn, keys, data_fn)
        start = time.perf_counter()
        jax.block_until_ready(event.apply(states, 1000)[0])
        first = time.perf_counter() - start
        seconds = best_time(lambda event=event, states=states: jax.block_until_ready(
            event.apply(states, 1000)[0]), repeats=3, min_seconds=1.0)
        weights = agent.weights(states)
        alone = best_time(lambda weights=weights: jax.block_until_ready(
            report(weights, weights)), repeats=3, min_seconds=1.0)
        print(f"  {name:>14}: {seconds:.3f} s (first call, compiling: {first:.1f} s); the "
              f"report alone {alone:.3f} s")


def main(_):
    print(f"devices: {jax.devices()}; XLA_FLAGS: {xla_flags()}")
    per_step(FLAGS.seeds, FLAGS.rounds)
    if FLAGS.events:
        events(FLAGS.seeds)


if __name__ == "__main__":
    app.run(main)
