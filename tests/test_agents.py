"""What every registered agent promises the loop beyond its update: `acting` keeps what `act`
reads, and only that."""

import jax
import numpy as np
import pytest

from agents import AGENTS, bro_state, make_agent, sac

SMALL = {"sac": sac.SACConfig(hidden_dims=(8, 8)),
         "bro": bro_state.BROConfig(critic_width=8, actor_width=8, optimistic_width=8,
                                    num_quantiles=4)}
OBS, ACT = 5, 2


def test_every_agent_has_a_small_config_here():
    assert set(SMALL) == set(AGENTS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_acting_keeps_what_act_reads_and_drops_the_critics_and_optimizers(name):
    agent = make_agent(name, SMALL[name])
    state = agent.init(jax.random.key(0), OBS, ACT)
    obs = jax.random.normal(jax.random.key(1), (3, OBS))
    small = agent.acting(state)
    for deterministic in (True, False):
        np.testing.assert_array_equal(
            agent.act(small, obs, jax.random.key(2), deterministic),
            agent.act(state, obs, jax.random.key(2), deterministic))
    kept = {jax.tree_util.keystr(path) for path, _ in jax.tree.leaves_with_path(small)}
    assert kept and all(".params" in path for path in kept), kept
    assert not [path for path in kept if "critic" in path], kept
    assert len(kept) < len(jax.tree.leaves(state)) / 2
