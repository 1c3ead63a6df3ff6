"""Time per call of each scheduled intervention (event) on SAC's default networks (256-256,
two critics) with humanoid-sized inputs (obs 67, act 21), as the training loop calls it.

    python benchmarks/events.py                  # 1 seed
    python benchmarks/events.py --seeds 1 4      # 1 and 4 seeds vmapped
    python benchmarks/events.py --events redo dash

Each event is built by launch.events.build_intervention, as a run builds it, and called with
seed-batched states; a call includes what the event needs (a fresh init, replay minibatches
already on the device) and the per-layer report written to interventions.csv. Prints the first
call (compile included), the median of the calls after it, and the report's own share.
"""

import argparse
import statistics
import time

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


def replay_data(seeds: int):
    """`data_fn(env_step, batches, batch_size)`: random transitions (seeds, batches, batch,
    ...) already on the device, so the time is the event's, not the replay's gather."""
    def data_fn(env_step, batches, batch_size):
        rng = np.random.default_rng(env_step)
        lead = (seeds, batches, batch_size)
        shapes = [(OBS_DIM,), (ACT_DIM,), (), (OBS_DIM,), ()]
        return Batch(*(jnp.asarray(rng.normal(size=(*lead, *s)), jnp.float32) for s in shapes))

    return data_fn


def time_event(name: str, seeds: int, calls: int) -> tuple[float, float, float]:
    """(first call s, median call s, median report s) of event `name` with `seeds` seeds."""
    agent = make_agent("sac")
    cfg = TrainConfig(agent="sac", intervention=name, num_seeds=seeds, intervention_every=1000)
    plan = intervention_plan(agent, cfg)
    agent = with_hooks(agent, plan)
    init_fn = jax.jit(jax.vmap(lambda key: agent.init(key, OBS_DIM, ACT_DIM)))
    keys = jnp.stack([jax.random.key(s) for s in range(seeds)])
    states = init_fn(keys)
    event = build_intervention(agent, cfg, plan, init_fn, keys, replay_data(seeds))

    def call(step):
        new, _ = event.apply(states, step)
        jax.block_until_ready(new)

    start = time.perf_counter()
    call(1000)
    first = time.perf_counter() - start
    times = []
    for i in range(calls):
        start = time.perf_counter()
        call(2000 + 1000 * i)
        times.append(time.perf_counter() - start)
    report = jax.jit(lambda a, b: {net: clip_event_report(a[net], b[net]) for net in a})
    weights = agent.weights(states)
    jax.block_until_ready(report(weights, weights))
    report_times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(report(weights, weights))
        report_times.append(time.perf_counter() - start)
    return first, statistics.median(times), statistics.median(report_times)


def main() -> None:
    events = [n for n, m in registered().items() if m.kind == "event"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--events", nargs="+", default=events, choices=events)
    parser.add_argument("--calls", type=int, default=7, help="timed calls after the first")
    args = parser.parse_args()
    print(f"SAC default networks, obs {OBS_DIM}, act {ACT_DIM}; {jax.devices()[0].platform}; "
          f"XLA_FLAGS {xla_flags()}")
    print(f"{'event':<12} {'seeds':>5} {'first call s':>13} {'per call ms':>12} "
          f"{'report ms':>10}")
    for seeds in args.seeds:
        for name in args.events:
            first, per_call, report = time_event(name, seeds, args.calls)
            print(f"{name:<12} {seeds:>5} {first:>13.1f} {1e3 * per_call:>12.1f} "
                  f"{1e3 * report:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
