"""Time per call of each scheduled intervention (event) on SAC's default networks (256-256,
two critics) with humanoid-sized inputs (obs 67, act 21), as the training loop calls it.

    python benchmarks/events.py                  # 1 seed
    python benchmarks/events.py --seeds 1 4      # 1 and 4 seeds vmapped
    python benchmarks/events.py --events redo dash --rounds 5

Each event is built by launch.events.build_intervention, as a run builds it, and called with
seed-batched states. A call is what a run pays at a scheduled step: what the event needs (a
fresh init; replay minibatches, here already on the device, so the replay's gather is not in
it), the event, and the per-layer report written to interventions.csv, whose own time is a
column of its own. The yardstick is one SAC UTD-1 update of the same states (batch 256). All
are timed in interleaved rounds, so a machine's load changes them alike; the table gives each
one's median over the rounds, after a first call that compiles.
"""

import argparse
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from bench_utils import xla_flags  # sets the XLA:CPU options training runs with

from agents import make_agent
from agents.common import Batch
from interventions import clip_event_report, registered
from launch.config import TrainConfig
from launch.events import build_intervention, intervention_plan, with_hooks

OBS_DIM, ACT_DIM = 67, 21  # humanoid


def transitions(lead: tuple[int, ...], seed: int) -> Batch:
    """Random transitions with leading axes `lead`, on the device."""
    rng = np.random.default_rng(seed)
    shapes = [(OBS_DIM,), (ACT_DIM,), (), (OBS_DIM,), ()]
    return Batch(*(jnp.asarray(rng.normal(size=(*lead, *s)), jnp.float32) for s in shapes))


def event_call(name: str, seeds: int) -> Callable[[int], None]:
    """`call(env_step)`: event `name` on `seeds` seeds' states, waited on."""
    agent = make_agent("sac")
    cfg = TrainConfig(agent="sac", intervention=name, num_seeds=seeds, intervention_every=1000)
    plan = intervention_plan(agent, cfg)
    agent = with_hooks(agent, plan)
    init_fn = jax.jit(jax.vmap(lambda key: agent.init(key, OBS_DIM, ACT_DIM)))
    keys = jnp.stack([jax.random.key(s) for s in range(seeds)])
    states = init_fn(keys)
    data = lambda step, n, size: transitions((seeds, n, size), step)
    event = build_intervention(agent, cfg, plan, init_fn, keys, data)
    return lambda step: jax.block_until_ready(event.apply(states, step)[0])


def yardsticks(seeds: int) -> dict[str, Callable[[int], None]]:
    """The per-layer report alone, and one SAC UTD-1 update, on `seeds` seeds."""
    agent = make_agent("sac")
    states = jax.jit(jax.vmap(lambda key: agent.init(key, OBS_DIM, ACT_DIM)))(
        jnp.stack([jax.random.key(s) for s in range(seeds)]))
    weights = agent.weights(states)
    report = jax.jit(lambda a, b: {net: clip_event_report(a[net], b[net]) for net in a})
    update = jax.jit(jax.vmap(agent.update))
    batch = transitions((seeds, 1, 256), 0)
    return {"(report)": lambda _: jax.block_until_ready(report(weights, weights)),
            "(update)": lambda _: jax.block_until_ready(update(states, batch))}


def main() -> None:
    events = [n for n, m in registered().items() if m.kind == "event"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--events", nargs="+", default=events, choices=events)
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds after the first")
    args = parser.parse_args()
    print(f"SAC default networks, obs {OBS_DIM}, act {ACT_DIM}; {jax.devices()[0].platform}; "
          f"XLA_FLAGS {xla_flags()}")
    for seeds in args.seeds:
        calls = {name: event_call(name, seeds) for name in args.events} | yardsticks(seeds)
        first = {}
        for name, call in calls.items():
            start = time.perf_counter()
            call(1000)
            first[name] = time.perf_counter() - start
        times = {name: [] for name in calls}
        for i in range(args.rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                call(2000 + 1000 * i)
                times[name].append(time.perf_counter() - start)
        update = statistics.median(times["(update)"])
        print(f"\n{seeds} seed(s), medians of {args.rounds} rounds")
        print(f"{'call':<12} {'first s':>8} {'ms':>9} {'x update':>9}")
        for name in calls:
            ms = statistics.median(times[name])
            print(f"{name:<12} {first[name]:>8.1f} {1e3 * ms:>9.1f} {ms / update:>9.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
