"""What the plasticity interventions cost SAC, as ratios measured within one run.

    python benchmarks/intervention_costs.py              # 1 seed, 15 rounds
    python benchmarks/intervention_costs.py --seeds=4 --methods=nap,parseval --noevents

Per-step methods: the jitted, seed-vmapped SAC UTD-8 update (humanoid-stand dimensions, the
default networks and batch 256) with each method that acts inside it, at its default settings,
against the same update without any (none), in seed-updates/s. The updates are compiled first,
then timed in --rounds interleaved rounds of --calls calls each (every round times every
update, so the machine's drift reaches them alike); the speed relative to none's is the median
of the rounds' ratios. Beside it: the same ratio in updates per CPU second of this process (all
threads), which moves less than wall time where other processes share the cores, and the FLOPs
XLA's cost analysis counts for one gradient step relative to none's (the method's arithmetic).

Events: every registered method that acts at scheduled steps, on the same SAC states, in
seconds (wall and CPU) per call as a run makes it: the event, its draws such as a fresh
initialisation, and the per-layer report of interventions.csv, whose spectra take SVDs of every
weight matrix; and the report alone. --rounds interleaved rounds of one call each.
"""

import resource
import time

import jax
import numpy as np
from absl import app, flags
from bench_utils import compile_update, random_batches, xla_flags
from recording import record

from agents import make_agent
from experiment.config import TrainConfig
from experiment.events import build_intervention, intervention_plan, with_hooks
from interventions import clip_event_report, registered

flags.DEFINE_integer("seeds", 1, "Seeds (vmapped) in each update and event call.")
flags.DEFINE_integer("rounds", 15, "Interleaved timing rounds of the updates.")
flags.DEFINE_integer("calls", 10, "UTD-8 update calls per method in each round.")
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


def per_step(seeds: int, rounds: int) -> list[tuple[str, float, str]]:
    """Time each per-step method's update against none's; its printed numbers as result rows."""
    names = ["none"] + (FLAGS.methods or [n for n, m in registered().items()
                                          if m.kind != "event"])
    updates, rows = {}, []
    for name in names:
        agent, _, _ = agent_with(name, seeds)
        updates[name] = compile_update(agent, FLAGS.obs_dim, FLAGS.act_dim, seeds, UTD, BATCH)
        print(f"  compiled {name} ({updates[name].compile_seconds:.1f} s)", flush=True)
        rows.append((f"SAC update with {name}, UTD {UTD}, {seeds} seed(s), compilation",
                     updates[name].compile_seconds, "s"))
    walls, cpus = {name: [] for name in names}, {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            wall, cpu = timed(updates[name].call, FLAGS.calls)
            walls[name].append(wall)
            cpus[name].append(cpu)
    print(f"SAC update, UTD {UTD}, batch {BATCH}, {seeds} seed(s), humanoid dims "
          f"(obs {FLAGS.obs_dim}, act {FLAGS.act_dim}); medians of {rounds} rounds of "
          f"{FLAGS.calls} calls:")
    for name in names:
        ratio = np.asarray(walls["none"]) / np.asarray(walls[name])
        cpu_ratio = np.asarray(cpus["none"]) / np.asarray(cpus[name])
        arithmetic = updates[name].step_flops / updates["none"].step_flops
        print(f"  {name:>13}: {seeds * UTD / np.median(walls[name]):6.1f} seed-updates/s, "
              f"{np.median(ratio):.3f} x none's (rounds {ratio.min():.3f}-{ratio.max():.3f}); "
              f"per CPU second {np.median(cpu_ratio):.3f} x none's; FLOPs per step "
              f"{arithmetic:.3f} x none's")
        what = f"SAC update with {name}, UTD {UTD}, {seeds} seed(s)"
        median = f"median of {rounds} rounds"
        rows += [(f"{what} ({median})", seeds * UTD / np.median(walls[name]), "seed-updates/s"),
                 (f"{what}, over none's ({median})", np.median(ratio), "x"),
                 (f"{what}, over none's, lowest round", ratio.min(), "x"),
                 (f"{what}, over none's, highest round", ratio.max(), "x"),
                 (f"{what}, per CPU second over none's ({median})", np.median(cpu_ratio), "x"),
                 (f"{what}, FLOPs per step over none's", arithmetic, "x")]
    return rows


def cpu_seconds() -> float:
    """CPU time of this process so far, all threads, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(call, calls: int) -> tuple[float, float]:
    """Wall and CPU seconds per call of `call` (which waits for its result), after one call."""
    call()
    wall, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(calls):
        call()
    return (time.perf_counter() - wall) / calls, (cpu_seconds() - cpu) / calls


def events(seeds: int, rounds: int) -> list[tuple[str, float, str]]:
    """Time each event as a run calls it, and the report alone; the printed times as rows."""
    keys = jax.numpy.stack([jax.random.key(s) for s in range(seeds)])
    data_fn = lambda env_step, n, size: random_batches(seeds, n, size, FLAGS.obs_dim,
                                                       FLAGS.act_dim)
    report = jax.jit(lambda before, after: {net: clip_event_report(before[net], after[net])
                                            for net in before})
    calls = {}
    for name in [n for n, m in registered().items() if m.kind == "event"]:
        agent, plan, cfg = agent_with(name, seeds)
        init_fn = jax.jit(jax.vmap(lambda k, agent=agent: agent.init(k, FLAGS.obs_dim,
                                                                       FLAGS.act_dim)))
        states = init_fn(keys)
        event = build_intervention(agent, cfg, plan, init_fn, keys, data_fn)
        calls[name] = lambda event=event, states=states: jax.block_until_ready(
            event.apply(states, 1000)[0])
        weights = agent.weights(states)
    calls["(the report alone)"] = lambda: jax.block_until_ready(report(weights, weights))
    walls, cpus = {name: [] for name in calls}, {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            wall, cpu = timed(call, 1)
            walls[name].append(wall)
            cpus[name].append(cpu)
    print(f"events on SAC's default networks, {seeds} seed(s), as a run calls them (with the "
          f"per-layer report), medians of {rounds} rounds:")
    rows = []
    for name in calls:
        print(f"  {name:>18}: {np.median(walls[name]):.3f} s, {np.median(cpus[name]):.3f} CPU s")
        what = f"{name.strip('()')}, SAC, {seeds} seed(s), one call (median of {rounds} rounds)"
        rows += [(f"{what}, wall", np.median(walls[name]), "s"),
                 (f"{what}, CPU", np.median(cpus[name]), "CPU s")]
    return rows


def main(_):
    print(f"devices: {jax.devices()}; XLA_FLAGS: {xla_flags()}")
    rows = per_step(FLAGS.seeds, FLAGS.rounds)
    if FLAGS.events:
        rows += events(FLAGS.seeds, FLAGS.rounds)
    record("intervention_costs", rows)


if __name__ == "__main__":
    app.run(main)
