"""Time per call of each scheduled intervention (event) on SAC's default networks (256-256,
two critics) with humanoid-sized inputs (obs 67, act 21).

    python benchmarks/events.py                  # 1 seed
    python benchmarks/events.py --seeds 1 4      # 1 and 4 seeds vmapped
    python benchmarks/events.py --events redo dash --rounds 5

Three times per event, each on seed-batched states: "event", the method itself (jitted and
vmapped over seeds, with what it needs ready: a fresh or the initial state, replay minibatches
on the device); "needs", the fresh init a run computes for it (SAC resets to fresh weights);
"loop", what a run pays at a scheduled step, built by experiment.events.build_intervention: the
needs, the event and the per-layer report written to interventions.csv (its singular values;
the replay's gather of the minibatches is not in it). The yardsticks are the report alone and
one SAC UTD-1 update (batch 256). All calls are timed in interleaved rounds after a first
call that compiles; the table gives the best and the median round, in ms.
"""

import argparse
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from bench_utils import xla_flags  # sets the XLA:CPU options training runs with
from recording import record

from agents import make_agent
from experiment.config import TrainConfig
from experiment.events import build_intervention, intervention_plan, with_hooks
from interventions import EventContext, clip_event_report, registered
from learners.batch import Batch

OBS_DIM, ACT_DIM = 67, 21  # humanoid
# The table's columns and yardsticks, as the recorded rows name them.
PARTS = {"event": "the event alone", "needs": "its fresh init", "loop": "the loop's whole call",
         "report": "the per-layer report alone", "update": "one UTD-1 update, batch 256"}


def transitions(lead: tuple[int, ...], seed: int) -> Batch:
    """Random transitions with leading axes `lead`, on the device."""
    rng = np.random.default_rng(seed)
    shapes = [(OBS_DIM,), (ACT_DIM,), (), (OBS_DIM,), ()]
    return Batch(*(jnp.asarray(rng.normal(size=(*lead, *s)), jnp.float32) for s in shapes))


def event_calls(name: str, seeds: int) -> dict[str, Callable[[int], object]]:
    """`call(env_step)` for event `name` on `seeds` seeds' states: the event alone, the fresh
    init it needs (if any) and the training loop's whole call."""
    agent = make_agent("sac")
    cfg = TrainConfig(agent="sac", intervention=name, num_seeds=seeds, intervention_every=1000)
    plan = intervention_plan(agent, cfg)
    agent = with_hooks(agent, plan)
    init_fn = jax.jit(jax.vmap(lambda key: agent.init(key, OBS_DIM, ACT_DIM)))
    keys = jnp.stack([jax.random.key(s) for s in range(seeds)])
    states = init_fn(keys)
    method = plan.event.method
    fresh_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, 1)
    needs_fresh = "fresh" in method.needs or ("reinit" in method.needs
                                              and agent.reset_to == "fresh")
    ctx = EventContext(
        key=fresh_keys if "key" in method.needs else None,
        initial=states if "initial" in method.needs or "reinit" in method.needs else None,
        fresh=init_fn(fresh_keys) if needs_fresh else None,
        data=transitions((seeds, *method.data_shape(plan.event.config)), 0)
        if "data" in method.needs else None)
    if "reinit" in method.needs:
        ctx = ctx._replace(reinit=ctx.fresh if agent.reset_to == "fresh" else ctx.initial)
    alone = jax.jit(jax.vmap(lambda state, ctx: plan.apply_event(state, ctx._replace(
        learner=agent))))
    data = lambda step, n, size: transitions((seeds, n, size), step)
    loop = build_intervention(agent, cfg, plan, init_fn, keys, data)
    calls = {"event": lambda _: alone(states, ctx),
             "loop": lambda step: loop.apply(states, step)[0]}
    if needs_fresh:
        calls["needs"] = lambda _: init_fn(fresh_keys)
    return calls


def yardsticks(seeds: int) -> dict[str, Callable[[int], object]]:
    """The per-layer report alone, and one SAC UTD-1 update, on `seeds` seeds."""
    agent = make_agent("sac")
    states = jax.jit(jax.vmap(lambda key: agent.init(key, OBS_DIM, ACT_DIM)))(
        jnp.stack([jax.random.key(s) for s in range(seeds)]))
    weights = agent.weights(states)
    report = jax.jit(lambda a, b: {net: clip_event_report(a[net], b[net]) for net in a})
    update = jax.jit(jax.vmap(agent.update))
    batch = transitions((seeds, 1, 256), 0)
    return {"report": lambda _: report(weights, weights), "update": lambda _: update(states, batch)}


def main() -> None:
    events = [n for n, m in registered().items() if m.kind == "event"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--events", nargs="+", default=events, choices=events)
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds after the first")
    args = parser.parse_args()
    print(f"SAC default networks, obs {OBS_DIM}, act {ACT_DIM}; {jax.devices()[0].platform}; "
          f"XLA_FLAGS {xla_flags()}")
    results = []
    for seeds in args.seeds:
        calls = {(name, part): call for name in args.events
                 for part, call in event_calls(name, seeds).items()}
        calls |= {("(yardstick)", part): call for part, call in yardsticks(seeds).items()}
        times = {key: [] for key in calls}
        for i in range(args.rounds + 1):
            for key, call in calls.items():
                start = time.perf_counter()
                jax.block_until_ready(call(1000 * (i + 1)))
                if i:  # the first round compiles
                    times[key].append(time.perf_counter() - start)
        print(f"\n{seeds} seed(s), {args.rounds} rounds: best / median ms")
        print(f"{'':<12} {'event':>17} {'needs':>17} {'loop':>17}")
        rows = dict.fromkeys(name for name, _ in calls if name != "(yardstick)")
        for name in rows:
            cells = [f"{1e3 * min(t):8.1f} {1e3 * statistics.median(t):8.1f}"
                     if (t := times.get((name, part))) else f"{'':>17}"
                     for part in ("event", "needs", "loop")]
            print(f"{name:<12} " + " ".join(cells), flush=True)
        for part in ("report", "update"):
            t = times[("(yardstick)", part)]
            print(f"{part:<12} {1e3 * min(t):8.1f} {1e3 * statistics.median(t):8.1f}")
        for name in [*rows, "(yardstick)"]:
            for part, described in PARTS.items():
                if (t := times.get((name, part))):
                    what = f"SAC, {seeds} seed(s), " + (described if name == "(yardstick)"
                                                        else f"{name}, {described}")
                    results += [(f"{what}, best of {args.rounds} rounds", 1e3 * min(t), "ms"),
                                (f"{what}, median of {args.rounds} rounds",
                                 1e3 * statistics.median(t), "ms")]
    record("events", results)


if __name__ == "__main__":
    main()
