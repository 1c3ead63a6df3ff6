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


def _event(agent: Agent, cfg: TrainConfig) -> Callable:
    """`(states, source) -> states`: SingularClip, or the reset parts taken from `source`."""
    if cfg.intervention == "clip":
        clip = functools.partial(
            singular_clip, c=cfg.clip_c, sides=cfg.clip_sides, method=cfg.clip_method
        )
        parts = cfg.clip_parts or agent.clip_parts
        return lambda states, source: map_parts(states, parts, clip)
    return lambda states, source: replace_parts(states, source, agent.reset_parts)


def build_intervention(
    agent: Agent, cfg: TrainConfig, init_fn: Callable, init_keys: jax.Array
) -> Intervention:
    """The schedule and the event of `cfg.intervention` ("none" never fires).

    `init_fn(keys)` is the jitted, seed-vmapped init the run started from. A reset takes its
    parts from `init_fn(init_keys)` ("initial": called through the same compiled init, so the
    weights are bit-identical to the run's first ones) or from `init_fn` with keys folded with
    the env step ("fresh").
    """
    if cfg.intervention == "none":
        return Intervention(make_schedule(None, ()), lambda states, env_step: (states, []))
    schedule = make_schedule(
        None if cfg.intervention_steps else cfg.intervention_every, cfg.intervention_steps or None
    )
    event = _event(agent, cfg)

    def source(env_step: int):
        if cfg.intervention == "clip":
            return None
        if agent.reset_to == "initial":
            return init_fn(init_keys)
        return init_fn(jax.vmap(lambda k: jax.random.fold_in(k, env_step))(init_keys))

    @jax.jit
    def apply_and_report(states, source):
        new = event(states, source)
        before, after = agent.weights(states), agent.weights(new)
        report = {net: clip_event_report(before[net], after[net]) for net in before}
        return new, report

    def apply(states, env_step: int):
        new, report = apply_and_report(states, source(env_step))
        rows = list(diag.rows(env_step, cfg.seeds, jax.device_get(report), cfg.intervention))
        return new, rows

    return Intervention(schedule, apply)
