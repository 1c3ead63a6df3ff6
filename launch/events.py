"""Turns the run's intervention settings into one jitted `states -> states` event.

The interventions library knows nothing about agents; this glue takes from the agent which
state paths to clip or reset and where fresh initial weights come from.
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax

from agents import Agent
from interventions import clip_event_report, make_schedule, map_parts, replace_parts, singular_clip
from launch import diagnose as diag
from launch.config import TrainConfig


class Intervention(NamedTuple):
    schedule: object  # .due(env_step) -> bool
    apply: Callable  # (states, env_step) -> (states, csv rows of the event)


def _event(agent: Agent, cfg: TrainConfig, init_fn: Callable, init_keys: jax.Array) -> Callable:
    if cfg.intervention == "clip":
        clip = functools.partial(
            singular_clip, c=cfg.clip_c, sides=cfg.clip_sides, method=cfg.clip_method
        )
        parts = cfg.clip_parts or agent.clip_parts
        return lambda states, env_step: map_parts(states, parts, clip)

    def reset(states, env_step):
        if agent.reset_to == "initial":
            keys = init_keys
        else:
            keys = jax.vmap(lambda k: jax.random.fold_in(k, env_step))(init_keys)
        return replace_parts(states, init_fn(keys), agent.reset_parts)

    return reset


def build_intervention(
    agent: Agent, cfg: TrainConfig, init_fn: Callable, init_keys: jax.Array
) -> Intervention:
    """The schedule and the event of `cfg.intervention` ("none" never fires)."""
    if cfg.intervention == "none":
        return Intervention(make_schedule(None, ()), lambda states, env_step: (states, []))
    schedule = make_schedule(
        None if cfg.intervention_steps else cfg.intervention_every, cfg.intervention_steps or None
    )
    event = _event(agent, cfg, init_fn, init_keys)

    @jax.jit
    def apply_and_report(states, env_step):
        new = event(states, env_step)
        before, after = agent.weights(states), agent.weights(new)
        report = {net: clip_event_report(before[net], after[net]) for net in before}
        return new, report

    def apply(states, env_step: int):
        new, report = apply_and_report(states, env_step)
        rows = list(diag.rows(env_step, cfg.seeds, jax.device_get(report), cfg.intervention))
        return new, rows

    return Intervention(schedule, apply)
