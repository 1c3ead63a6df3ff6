"""Agents and their registry.

An agent is a module of pure functions over one state pytree (see agents/sac.py). `make_agent`
binds a config to them and says which parts of the state the interventions act on, so the
trainer and the interventions never need to know which agent they run.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

from agents import bro, sac


class Agent(NamedTuple):
    """An agent with its config bound; `deterministic` in `act` is static under jit."""

    name: str
    config: Any
    init: Callable  # (key, obs_dim, act_dim) -> state
    act: Callable  # (state, obs, key, deterministic) -> actions in [-1, 1]
    update: Callable  # (state, batches with leaves (utd, batch, ...)) -> (state, metrics)
    features: Callable  # (state, batch) -> {network: {layer: (..., batch, units)}}
    weights: Callable  # state -> {network: params}
    clip_parts: tuple[str, ...]  # state paths SingularClip acts on by default
    reset_parts: tuple[str, ...]  # state paths a reset re-initialises
    reset_to: str  # "fresh" (a new key) or "initial" (the run's first weights)


def _sac(config: "sac.SACConfig") -> Agent:
    return Agent(
        name="sac",
        config=config,
        init=functools.partial(sac.init, config=config),
        act=sac.act,
        update=functools.partial(sac.update, config=config),
        features=sac.features,
        weights=sac.weights,
        clip_parts=("actor.params", "critic.params", "target_critic_params"),
        reset_parts=("actor", "critic", "target_critic_params", "temp"),
        reset_to="fresh",
    )


def _bro(config: "bro.BROConfig") -> Agent:
    return Agent(
        name="bro",
        config=config,
        init=functools.partial(bro.init, config=config),
        act=bro.act,
        update=functools.partial(bro.update, config=config),
        features=bro.features,
        weights=bro.weights,
        clip_parts=(
            "actor.params",
            "optimistic_actor.params",
            "critic.params",
            "target_critic_params",
        ),
        reset_parts=(
            "actor",
            "optimistic_actor",
            "critic",
            "target_critic_params",
            "temp",
            "optimism",
            "kl_weight",
        ),
        reset_to="initial",
    )


AGENTS: dict[str, tuple[type, Callable[[Any], Agent]]] = {
    "sac": (sac.SACConfig, _sac),
    "bro": (bro.BROConfig, _bro),
}


def make_agent(name: str, config: Any = None) -> Agent:
    """The registered agent `name` with `config` (its default config when None)."""
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; known: {', '.join(sorted(AGENTS))}")
    config_cls, build = AGENTS[name]
    return build(config if config is not None else config_cls())
