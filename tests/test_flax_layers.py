"""`flax_layers`: the agents' networks built from flax.linen's Dense and LayerNorm have the
same parameters and outputs, and forward-mode autodiff (jax.jvp and jax.jacfwd, as NTK spectra
need; jax.hessian) goes through them, where this project's CPU gradient rules, custom VJPs,
take reverse mode only (forward over reverse, as jax.hessian does, works on both)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import make_agent
from agents.bro_state import BROConfig
from agents.sac import SACConfig

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out

OBS, ACT = 5, 2


def _agents(name):
    if name == "sac":
        config = dataclasses.replace(SACConfig(), hidden_dims=(8, 8))
    else:
        config = dataclasses.replace(BROConfig(), critic_width=8, actor_width=8,
                                     optimistic_width=8, num_quantiles=4)
    return (make_agent(name, config),
            make_agent(name, dataclasses.replace(config, flax_layers=True)))


@pytest.mark.parametrize("name", ["sac", "bro"])
def test_flax_layers_have_the_same_parameters_and_outputs(name):
    ours, flax_ = _agents(name)
    key = jax.random.key(3)
    a, b = ours.init(key, OBS, ACT), flax_.init(key, OBS, ACT)
    assert jax.tree.structure(a.critic.params) == jax.tree.structure(b.critic.params)
    for x, y in zip(jax.tree.leaves(a.critic.params), jax.tree.leaves(b.critic.params),
                    strict=True):
        np.testing.assert_array_equal(x, y)
    obs = jax.random.normal(jax.random.key(1), (6, OBS))
    np.testing.assert_allclose(ours.act(a, obs, None, True), flax_.act(b, obs, None, True),
                               rtol=1e-5, atol=1e-6)


def test_forward_mode_goes_through_the_critic_with_flax_layers_only():
    ours, flax_ = _agents("sac")
    state = flax_.init(jax.random.key(0), OBS, ACT)
    obs, act = jnp.ones((1, OBS)), jnp.full((1, ACT), 0.5)

    def q_of(agent, state):
        return lambda a: state.critic.apply_fn({"params": state.critic.params}, obs, a).sum()

    hessian = jax.hessian(q_of(flax_, state))(act)
    assert hessian.shape == (1, ACT, 1, ACT) and bool(jnp.isfinite(hessian).all())
    # the same Hessian from reverse-over-reverse mode, which the CPU rules allow too
    rev = jax.jacrev(jax.jacrev(q_of(ours, ours.init(jax.random.key(0), OBS, ACT))))(act)
    np.testing.assert_allclose(hessian, rev, rtol=1e-4, atol=1e-5)
    jacobian = jax.jacfwd(q_of(flax_, state))(act)
    np.testing.assert_allclose(jacobian, jax.grad(q_of(flax_, state))(act), rtol=1e-5)
    with pytest.raises(TypeError, match="forward-mode autodiff"):
        jax.jacfwd(q_of(ours, ours.init(jax.random.key(0), OBS, ACT)))(act)
