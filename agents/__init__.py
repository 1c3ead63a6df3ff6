"""Agents and their registry.

An agent is a module of pure functions over one state pytree (see agents/sac.py). `make_agent`
binds a config (and the interventions' per-step hooks) to them and says which parts of the
state the interventions act on, so the trainer and the interventions never need to know which
agent they run. `AGENTS` is the one list of agents; the run scripts are launch/run_<name>.py.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

from agents import bro, bro_state, sac


class Agent(NamedTuple):
    """An agent with its config bound; `deterministic` in `act` is static under jit. It is the
    `interventions.registry.Learner` the interventions act on."""

    name: str
    config: Any
    init: Callable  # (key, obs_dim, act_dim) -> state
    act: Callable  # (state, obs, key, deterministic) -> actions in [-1, 1]
    update: Callable  # (state, batches with leaves (utd, batch, ...)) -> (state, metrics)
    features: Callable  # (state, batch) -> {network: {layer: (..., batch, units)}}
    weights: Callable  # state -> {network: params}
    loss_grads: Callable  # (state, batch, key) -> {params path: gradient of its loss}
    networks: dict[str, str]  # network name (as in weights and features) -> its params path
    param_parts: tuple[str, ...]  # every network's parameters, targets included
    train_parts: tuple[str, ...]  # the parameters gradient steps train
    reset_parts: tuple[str, ...]  # state paths a reset re-initialises
    reset_to: str  # "fresh" (a new key) or "initial" (the run's first weights)
    # state -> the part of it that `act` reads, what each env step passes to the device: a jitted
    # call's dispatch grows with its input's leaves (SAC, 2 seeds, CPU: 190 us whole, 39 us acting)
    acting: Callable = lambda state: state


def _bind(module, config, hooks) -> dict:
    """init and update of an agent module with its config and the interventions' hooks."""

    def init(key, obs_dim, act_dim):
        state = module.init(key, obs_dim, act_dim, config=config)
        return state if hooks is None or hooks.init is None else hooks.init(state)

    return {"init": init, "update": functools.partial(module.update, config=config, hooks=hooks),
            "loss_grads": functools.partial(module.loss_grads, config=config)}


def _sac(config: "sac.SACConfig", hooks=None) -> Agent:
    networks = {"actor": "actor.params", "critic": "critic.params",
                "target_critic": "target_critic_params"}
    return Agent(
        name="sac",
        config=config,
        act=sac.act,
        acting=sac.acting,
        features=sac.features,
        weights=sac.weights,
        networks=networks,
        param_parts=tuple(networks.values()),
        train_parts=("actor.params", "critic.params"),
        reset_parts=("actor", "critic", "target_critic_params", "temp", "plasticity"),
        reset_to="fresh",
        **_bind(sac, config, hooks),
    )


def _bro(config: "bro_state.BROConfig", hooks=None) -> Agent:
    networks = {"actor": "actor.params", "optimistic_actor": "optimistic_actor.params",
                "critic": "critic.params", "target_critic": "target_critic_params"}
    return Agent(
        name="bro",
        config=config,
        act=bro.act,
        acting=bro.acting,
        features=bro.features,
        weights=bro.weights,
        networks=networks,
        param_parts=tuple(networks.values()),
        train_parts=("actor.params", "optimistic_actor.params", "critic.params"),
        reset_parts=(
            "actor",
            "optimistic_actor",
            "critic",
            "target_critic_params",
            "temp",
            "optimism",
            "kl_weight",
            "plasticity",
        ),
        reset_to="initial",
        **_bind(bro, config, hooks),
    )


class Registered(NamedTuple):
    """An agent of the registry: its config class, how it is built, and its run script's
    training defaults where they differ from experiment.config's TrainConfig (algorithms.md)."""

    config: type
    build: Callable[..., Agent]
    train_defaults: dict[str, Any]
    # (max_steps, utd) -> the env steps of the agent's own resets below max_steps, where an
    # event without a period of its own fires unless a schedule flag is given (BRO's); None:
    # the period of train_defaults' intervention_every (SAC's)
    reset_steps: Callable[[int, int], tuple[int, ...]] | None = None


AGENTS: dict[str, Registered] = {
    "sac": Registered(sac.SACConfig, _sac, {"utd": 1, "batch_size": 256, "start_steps": 10_000,
                                            "intervention": "none",
                                            "intervention_every": sac.RESET_EVERY}),
    "bro": Registered(bro_state.BROConfig, _bro,
                      {"utd": 10, "batch_size": 128, "start_steps": 2_500, "eval_every": 25_000,
                       "intervention": "reset"},
                      reset_steps=bro_state.reset_steps),
}


def make_agent(name: str, config: Any = None, hooks: Any = None) -> Agent:
    """The registered agent `name` with `config` (its default config when None) and the
    interventions' per-step `hooks` (interventions.Hooks; None: none). The same arguments give
    the same agent (its functions), so that the compiled programs made for one run serve the
    next run of the process with them (experiment/step_fns.py)."""
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; known: {', '.join(sorted(AGENTS))}")
    entry = AGENTS[name]
    config = config if config is not None else entry.config()
    try:
        hash((config, hooks))
    except TypeError:  # a config or hooks that cannot be a key: an agent of its own
        return entry.build(config, hooks)
    return _built(entry.build, config, hooks)


@functools.lru_cache(maxsize=8)
def _built(build: Callable[..., Agent], config: Any, hooks: Any) -> Agent:
    return build(config, hooks)
