"""The run's interventions (`interventions.make_plan`) wired into the training loop: the plan's
per-step hooks go into the agent's update, its event becomes `states -> states` at scheduled
steps, vmapped over seeds, with what the event needs (keys, a fresh or the initial state,
replay data) and a per-layer report.

The interventions library knows nothing about agents; this glue reads from the agent (an
`interventions.registry.Learner`) which state paths to act on and how it resets.
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from agents import Agent, make_agent
from experiment import diagnose as diag
from experiment.config import ConfigError, TrainConfig, run_schedule
from interventions import (
    EventContext,
    Plan,
    check_parts,
    clip_event_report,
    event_report,
    make_plan,
    weight_extremes,
)
from interventions.diagnostics import shared_layers


class Intervention(NamedTuple):
    schedule: object  # .due(env_step) -> bool
    apply: Callable  # (states, env_step) -> (states, csv rows of the event)


def intervention_plan(agent: Agent, cfg: TrainConfig) -> Plan:
    """The run's plan, its parts checked against the agent's state (traced abstractly: any
    dimensions do, the paths do not depend on them; compiles nothing). ConfigError naming the
    flag of a setting that cannot work."""
    try:
        plan = make_plan(cfg.intervention, cfg.method_settings, agent)
        state = _abstract_state(agent.init)
        for bound in plan.bound:
            check_parts(state, bound, agent)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return plan


@functools.lru_cache(maxsize=8)
def _abstract_state(init: Callable):
    """The state `init` makes, traced once per agent (agents.make_agent) in a process."""
    return jax.eval_shape(lambda key: init(key, 3, 2), jax.random.key(0))


def with_hooks(agent: Agent, plan: Plan) -> Agent:
    """The agent with the plan's per-step hooks in its init and update."""
    return make_agent(agent.name, agent.config, plan.hooks)


def build_intervention(agent: Agent, cfg: TrainConfig, plan: Plan, init_fn: Callable,
                       init_keys: jax.Array, data_fn: Callable | None = None) -> Intervention:
    """The schedule and the event of the plan (none: never fires).

    `init_fn(keys)` is the jitted, seed-vmapped init the run started from: the initial state
    comes from it with the run's own keys, bit-identical to the run's first one, and a fresh
    state with the keys folded with the env step. `data_fn(env_step, batches, batch_size)`
    gives the replay minibatches an event needs, with leaves (seeds, batches, batch_size, ...).
    """
    if plan.event is None:
        return Intervention(run_schedule(cfg) or _Never(), lambda states, env_step: (states, []))
    return Intervention(run_schedule(cfg),
                        event_apply(agent, plan, cfg.seeds, init_fn, init_keys, data_fn))


def event_apply(learner, plan: Plan, seeds: list[int], init_fn: Callable, init_keys: jax.Array,
                data_fn: Callable | None = None) -> Callable:
    """`(states, step, spectra=None) -> (states, csv rows)`: the plan's event on every seed
    (vmapped, jitted), with what it needs, and its per-layer report. `learner` is an Agent or
    any other `interventions.registry.Learner` with `weights(states)`; `step` (an env step, a
    task boundary) keys its randomness and its rows; `spectra`, the diagnostics of the same
    states where they were just computed ({network: {layer: {"sigma_max", "sigma_min", ...}}}),
    spares the report computing their extreme singular values; `init_fn`, `init_keys` and
    `data_fn` as in `build_intervention`."""
    method, config = plan.event.method, plan.event.config
    needs = _needs(learner, plan)
    event = _event_program(learner, plan, init_fn)

    def arguments(states, env_step: int, spectra: dict | None = None) -> tuple:
        """The event's replay data (None: it needs none) and the large matrices' extremes."""
        data = data_fn(env_step, *method.data_shape(config)) if "data" in needs else None
        # The large matrices' extreme singular values, before and after, go through the
        # programs the diagnostics compiled (weight_extremes): each compiles once per run.
        extremes = _extremes(spectra)
        for net, params in learner.weights(states).items():
            have = extremes.setdefault(net, {})
            have.update(weight_extremes(params, layers=shared_layers(params) - have.keys()))
        return data, extremes

    def apply(states, env_step: int, spectra: dict | None = None):
        data, extremes = arguments(states, env_step, spectra)
        new, report, kept = event(states, env_step, data, extremes, init_keys)
        for net, params in learner.weights(new).items():
            if kept[net]:
                after = weight_extremes(params, skip=kept[net], layers=kept[net].keys())
                changes = {name: report[net][name]["fro_change"] for name in kept[net]}
                before = {name: extremes[net][name] for name in kept[net]}
                for name, metrics in _cond_after(changes, before, after).items():
                    report[net][name]["cond_after"] = metrics["cond_after"]
        return new, list(diag.rows(env_step, seeds, jax.device_get(report), method.name))

    # The event's program as it would compile for these arguments (jax.stages.Lowered).
    apply.lower = lambda states, env_step, spectra=None: event.lower(
        states, env_step, *arguments(states, env_step, spectra), init_keys)
    return apply


_cond_after = jax.jit(event_report)


def _needs(learner, plan: Plan) -> set[str]:
    """What the plan's event needs (`Method.needs_of`), "reinit" resolved to the learner's."""
    needs = set(plan.event.method.needs_of(plan.event.config))
    if "reinit" in needs:
        needs.add("fresh" if learner.reset_to == "fresh" else "initial")
    return needs


class _Same:
    """A cache key equal only to a key of the same object (an Agent holds a dict: no hash)."""

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


def _event_program(learner, plan: Plan, init_fn: Callable) -> Callable:
    """The jitted event of `event_apply`, one per (learner, plan, init_fn) in a process: a
    later run with the same agent (agents.make_agent), plan and init calls its compiled
    program."""
    try:
        hash((plan, init_fn))
    except TypeError:  # a setting that cannot be a key: a program of its own
        return _make_event_program(_Same(learner), plan, init_fn)
    return _cached_event_program(_Same(learner), plan, init_fn)


def _make_event_program(same: _Same, plan: Plan, init_fn: Callable) -> Callable:
    learner = same.obj
    needs = _needs(learner, plan)
    config = plan.event.config
    spectral_map = (None if plan.event.method.spectral_map is None
                    else plan.event.method.spectral_map(config))
    fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))

    def one(state, key, initial, fresh, data):
        reinit = fresh if learner.reset_to == "fresh" else initial
        ctx = EventContext(key=key, initial=initial, fresh=fresh,
                           reinit=reinit if "reinit" in needs else None, data=data,
                           learner=learner)
        return plan.apply_event(state, ctx)

    @jax.jit
    def event(states, step, data, extremes, init_keys):
        """The event and its report in one call: the inits it needs are part of it, so the
        parts of a fresh state it does not read are never computed (a layer reset's). The
        large matrices' cond_after is left to `weight_extremes`' shared programs; `kept`
        says for each of those layers whether the event changed none of its matrices."""
        step_keys = fold(init_keys, step)
        key = fold(step_keys, 1) if "key" in needs else None
        initial = init_fn(init_keys) if "initial" in needs else None
        fresh = init_fn(step_keys) if "fresh" in needs else None
        new = jax.vmap(one)(states, key, initial, fresh, data)
        before, after = learner.weights(states), learner.weights(new)
        report, kept = {}, {}
        for net in before:
            defer = set() if spectral_map is not None else shared_layers(before[net])
            report[net] = clip_event_report(before[net], after[net], extremes=extremes.get(net),
                                            spectral_map=spectral_map, defer=defer)
            kept[net] = {name: jnp.all(report[net][name]["fro_change"] == 0)
                         for name in sorted(defer)}  # not in a set's (hash-seeded) order
        return new, report, kept

    return event


_cached_event_program = functools.lru_cache(maxsize=8)(_make_event_program)


def _extremes(spectra: dict | None) -> dict:
    """{network: {layer: (sigma_max, sigma_min)}} of the diagnostics' weight spectra."""
    return {net: {layer: (m["sigma_max"], m["sigma_min"]) for layer, m in layers.items()
                  if "sigma_max" in m and "sigma_min" in m}
            for net, layers in (spectra or {}).items()}


class _Never:
    """The schedule of a run without an event."""

    @staticmethod
    def due(env_step: int) -> bool:
        return False
