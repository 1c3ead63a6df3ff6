"""Turns the run's intervention settings into one event `states -> states` and its report.

The interventions library knows nothing about agents; this glue takes from the agent which
state paths to clip or reset and where fresh initial weights come from.
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax

from agents import Agent
from interventions import (
    check_paths,
    clip_event_report,
    fresh_reset,
    get_part,
    initial_reset,
    make_schedule,
    map_parts,
    part_paths,
    singular_clip,
)
from interventions.matrices import is_weight_matrix
from launch import diagnose as diag
from launch.config import ConfigError, TrainConfig


class Intervention(NamedTuple):
    schedule: object  # .due(env_step) -> bool
    apply: Callable  # (states, env_step) -> (states, csv rows of the event)


def check_clip_parts(agent: Agent, cfg: TrainConfig) -> None:
    """Raise ConfigError unless each `--clip_parts` path exists in the agent's state, holds
    parameters only (SingularClip on an optimizer state would clip Adam's moment estimates:
    negative second moments, then NaN; SPEC.md keeps optimizer state) and holds a weight matrix
    (elsewhere, as in the temperature's parameters, the clip would change nothing). Traces the
    agent's init abstractly (any dimensions do: the paths do not depend on them); compiles
    nothing."""
    if cfg.intervention != "clip" or not cfg.clip_parts:
        return
    state = jax.eval_shape(lambda key: agent.init(key, 3, 2), jax.random.key(0))
    try:
        paths = check_paths(state, cfg.clip_parts)
    except ValueError as error:
        raise ConfigError(f"--clip_parts: {error}") from None
    for path in paths:
        inside = [path] + part_paths(get_part(state, path), f"{path}.")
        optimizer = [p for p in inside if p.split(".")[-1] == "opt_state"]
        if optimizer:
            params = [p for p in inside if p.split(".")[-1] == "params"]
            hint = f"; name its parameters instead: {', '.join(params)}" if params else ""
            raise ConfigError(f"--clip_parts={path} includes the optimizer state {optimizer[0]}, "
                              f"which SingularClip must not touch{hint}")
        leaves = jax.tree_util.tree_flatten_with_path(get_part(state, path))[0]
        if path.split(".")[-1] == "kernel":
            layer = path.rsplit(".", 1)[0]
            raise ConfigError(f"--clip_parts={path} names a kernel itself; name the layer that "
                              f"holds it ({layer}) or a part above it")
        if not any(is_weight_matrix(key_path, leaf) for key_path, leaf in leaves):
            raise ConfigError(f"--clip_parts={path} holds no weight matrix (a kernel), so "
                              "SingularClip would change nothing there; the parts it clips by "
                              f"default: {','.join(agent.clip_parts)}")


def optimizer_owners(state, paths) -> list[str]:
    """The parts that hold the optimizer of each path's parameters: the nearest part at or
    above the path with an `opt_state` and its `tx` (a flax TrainState: "actor" for
    "actor.params"), once each; a path with none (the target critic's) gives none."""
    owners = []
    for path in paths:
        names = path.split(".")
        for n in range(len(names), 0, -1):
            owner = ".".join(names[:n])
            node = get_part(state, owner)
            if hasattr(node, "opt_state") and hasattr(node, "tx"):
                if owner not in owners:
                    owners.append(owner)
                break
    return owners


def _initial_opt_state(train_state):
    """A seed-vmapped TrainState with its optimizer state as `tx.init` gives it."""
    return train_state.replace(opt_state=jax.vmap(train_state.tx.init)(train_state.params))


def _event(agent: Agent, cfg: TrainConfig, init_fn: Callable, init_keys: jax.Array) -> Callable:
    """`(states, env_step) -> states`: SingularClip (with `clip_opt_state="reset"`, then the
    clipped networks' optimizer states back to their initial values), or a reset of the
    agent's reset parts.

    `init_fn(keys)` is the jitted, seed-vmapped init the run started from. An "initial" reset
    calls it with the run's own keys, through the same compiled init, so the weights are
    bit-identical to the run's first ones; a "fresh" reset folds the env step into the keys.
    """
    if cfg.intervention == "clip":
        clip = functools.partial(
            singular_clip, c=cfg.clip_c, sides=cfg.clip_sides, method=cfg.clip_method,
            ns_steps=cfg.clip_ns_steps,
        )
        parts = cfg.clip_parts or agent.clip_parts

        @jax.jit
        def clip_event(states):
            states = map_parts(states, parts, clip)
            if cfg.clip_opt_state == "reset":
                states = map_parts(states, optimizer_owners(states, parts), _initial_opt_state)
            return states

        return lambda states, env_step: clip_event(states)
    if agent.reset_to == "initial":
        return lambda states, env_step: initial_reset(
            states, init_fn(init_keys), agent.reset_parts)
    fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))
    return lambda states, env_step: fresh_reset(
        states, agent.reset_parts, init_fn, fold(init_keys, env_step))


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
    def report(before, after):
        return {net: clip_event_report(before[net], after[net]) for net in before}

    def apply(states, env_step: int):
        new = event(states, env_step)
        values = jax.device_get(report(agent.weights(states), agent.weights(new)))
        return new, list(diag.rows(env_step, cfg.seeds, values, cfg.intervention))

    return Intervention(schedule, apply)
