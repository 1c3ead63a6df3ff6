"""Agents with an --intervention's per-step hooks, built as the trainer builds them, for the
plasticity methods' tests."""

import dataclasses

import jax

from agents import bro_state, make_agent, sac
from experiment.config import TrainConfig
from experiment.events import intervention_plan, with_hooks

OBS, ACT = 5, 2
TINY = {"sac": dataclasses.replace(sac.SACConfig(), hidden_dims=(16, 16)),
        "bro": dataclasses.replace(bro_state.BROConfig(), critic_width=16, critic_depth=1,
                                   actor_width=8, actor_depth=1, optimistic_width=8,
                                   optimistic_depth=0, num_quantiles=5)}


def hooked(agent_name: str, intervention: str, config=None, **settings):
    """(agent with the hooks, plan, TrainConfig) for `intervention` with method `settings`
    (flag names: nap_layers=...), the agent's config `config` (default: TINY's)."""
    cfg = TrainConfig(agent=agent_name, intervention=intervention, **settings)
    agent = make_agent(agent_name, config or TINY[agent_name])
    plan = intervention_plan(agent, cfg)
    return with_hooks(agent, plan), plan, cfg


def init_states(agent, seeds=(0,)):
    """The seed-vmapped init (jitted) and the states it gives for `seeds`."""
    init_fn = jax.jit(jax.vmap(lambda key: agent.init(key, OBS, ACT)))
    keys = jax.numpy.stack([jax.random.key(s) for s in seeds])
    return init_fn, keys, init_fn(keys)
