"""networks.critics: the critic ensemble, with and without tiled inputs."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.sac import SACConfig, init, networks, update
from learners.batch import Batch
from networks import Critic, Ensemble

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out

SEEDS, BATCH, OBS, ACT, WIDTH = 3, 24, 5, 2, 16


def ensemble(tile: bool) -> Ensemble:
    return Ensemble(Critic((WIDTH, WIDTH)), 2, tile_inputs=tile)


def inputs(seed: int = 0):
    k_obs, k_act = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(k_obs, (SEEDS, BATCH, OBS)),
            jax.random.uniform(k_act, (SEEDS, BATCH, ACT), minval=-1.0, maxval=1.0))


def seed_params(tile: bool):
    obs, act = inputs()
    return jax.vmap(lambda k, o, a: ensemble(tile).init(k, o, a)["params"])(
        jax.random.split(jax.random.key(1), SEEDS), obs, act)


def test_tiled_inputs_give_the_same_parameters_values_and_gradients():
    """Per seed (vmapped, as the agents run): identical initial parameters, and the same Q
    values, parameter gradients and action gradients up to float32 rounding."""
    params = seed_params(tile=False)
    jax.tree.map(np.testing.assert_array_equal, params, seed_params(tile=True))
    obs, act = inputs(2)

    def q_and_grads(tile):
        def loss(p, o, a):
            return jnp.sum(jnp.tanh(ensemble(tile).apply({"params": p}, o, a)))

        def one_seed(p, o, a):
            q = ensemble(tile).apply({"params": p}, o, a)
            return q, jax.grad(loss, argnums=(0, 2))(p, o, a)

        return jax.vmap(one_seed)(params, obs, act)

    (q, (g_params, g_act)), (q_tiled, (g_params_tiled, g_act_tiled)) = (
        q_and_grads(False), q_and_grads(True))
    assert q.shape == (SEEDS, 2, BATCH)
    assert not np.allclose(q[:, 0], q[:, 1])  # the two critics differ
    np.testing.assert_allclose(q_tiled, q, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(g_act_tiled, g_act, rtol=1e-5, atol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 g_params_tiled, g_params)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="checks XLA:CPU's compiled update")
def test_sac_update_never_holds_critic_activations_with_rows_before_members():
    """SAC's critic ensemble tiles its inputs: the compiled seed-vmapped update has no array
    shaped (seeds, rows, members, width), the first layer's output order without tiling, which
    XLA:CPU transposes (a copy of every first-layer activation) before the next layer."""
    config = SACConfig(hidden_dims=(WIDTH, WIDTH))
    assert networks(config, ACT)[1].tile_inputs
    states = jax.vmap(lambda k: init(k, OBS, ACT, config))(
        jax.random.split(jax.random.key(0), SEEDS))
    shape = (SEEDS, 1, BATCH)
    batch = Batch(observations=jnp.ones((*shape, OBS)), actions=jnp.zeros((*shape, ACT)),
                  rewards=jnp.ones(shape), next_observations=jnp.ones((*shape, OBS)),
                  masks=jnp.ones(shape))
    hlo = jax.jit(jax.vmap(lambda s, b: update(s, b, config))).lower(
        states, batch).compile().as_text()
    assert re.search(rf"f32\[{SEEDS},{BATCH},{2 * WIDTH}\]", hlo) is None
    assert re.search(rf"f32\[{SEEDS},{BATCH},2,{WIDTH}\]", hlo) is None
