"""SAC: shapes, target and temperature updates, determinism, a trivial task, no recompiles."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import make_agent, sac
from learners.batch import Batch
from tests.helpers import batches
from tests.helpers.fixtures import shared_fixture

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out

OBS, ACT = 5, 3
SMALL = dataclasses.replace(sac.SACConfig(), hidden_dims=(32, 32))


def random_batch(key, utd=2, batch=16, obs=OBS, act=ACT):
    return batches.random_batch(key, utd, batch, obs, act)


@shared_fixture
def update():
    return jax.jit(functools.partial(sac.update, config=SMALL))


def test_act_shapes_and_bounds():
    state = sac.init(jax.random.key(0), OBS, ACT, SMALL)
    obs = jax.random.normal(jax.random.key(1), (7, OBS)) * 10
    for deterministic in (True, False):
        a = sac.act(state, obs, jax.random.key(2), deterministic)
        assert a.shape == (7, ACT)
        assert jnp.all(jnp.abs(a) <= 1.0)


def test_default_config_matches_spec():
    state = sac.init(jax.random.key(0), 67, 21, sac.SACConfig())
    assert float(state.target_entropy) == -10.5
    assert float(state.temp.apply_fn({"params": state.temp.params})) == pytest.approx(1.0)
    critic_kernels = state.critic.params["net"]["MLP_0"]
    assert critic_kernels["Dense_0"]["kernel"].shape == (2, 88, 256)
    assert critic_kernels["Dense_1"]["kernel"].shape == (2, 256, 256)
    assert "LayerNorm_0" in critic_kernels


def test_update_consumes_utd_minibatches(update):
    state = sac.init(jax.random.key(0), OBS, ACT, SMALL)
    new, metrics = update(state, random_batch(jax.random.key(1), utd=3))
    assert int(new.step) == 3
    assert set(metrics) >= {"critic_loss", "actor_loss", "temperature", "entropy"}
    assert all(m.shape == () for m in metrics.values())


def test_target_is_polyak_average_of_online(update):
    state = sac.init(jax.random.key(0), OBS, ACT, SMALL)
    batch = random_batch(jax.random.key(1), utd=1)
    new, _ = update(state, batch)
    expected = jax.tree.map(lambda o, t: SMALL.tau * o + (1 - SMALL.tau) * t,
                            new.critic.params, state.target_critic_params)
    chex_close = jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                              new.target_critic_params, expected)
    assert chex_close is not None
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()),
                         new.target_critic_params, state.target_critic_params)
    assert max(jax.tree.leaves(moved)) > 0


def test_temperature_moves_toward_target_entropy(update):
    state = sac.init(jax.random.key(0), OBS, ACT, SMALL)
    for target, direction in ((-100.0, -1), (100.0, 1)):
        s = state.replace(target_entropy=jnp.float32(target))
        new, m = update(s, random_batch(jax.random.key(1), utd=5))
        # entropy above a very low target: temperature falls; below a very high one: it rises.
        assert direction * (float(m["temperature"]) - 1.0) > 0


def test_same_seed_same_parameters(update):
    def run(seed):
        state = sac.init(jax.random.key(seed), OBS, ACT, SMALL)
        for i in range(5):
            state, _ = update(state, random_batch(jax.random.key(100 + i)))
        return state

    a, b, c = run(0), run(0), run(1)
    same = jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), a.actor.params, b.actor.params)
    assert all(jax.tree.leaves(same))
    diff = jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), a.actor.params, c.actor.params)
    assert not all(jax.tree.leaves(diff))


def test_no_recompilation_after_first_update(update):
    fresh = jax.jit(functools.partial(sac.update, config=SMALL))
    state = sac.init(jax.random.key(0), OBS, ACT, SMALL)
    for i in range(4):
        state, _ = fresh(state, random_batch(jax.random.key(i)))
    assert fresh._cache_size() == 1


def test_solves_a_one_step_bandit():
    """r = -(a - 0.5)^2 with terminal next states: the greedy action must approach 0.5.

    Over 8 seeds (vmapped): one seed's end point moves by a few hundredths with float32 rounding
    (the learned temperature keeps it a little short of 0.5), the mean over seeds does not.
    """
    agent = make_agent("sac", dataclasses.replace(SMALL, init_temperature=0.1))

    def step(state, key):
        k_obs, k_act = jax.random.split(key)
        obs = jax.random.normal(k_obs, (1, 64, 1)) * 0.1
        actions = jax.random.uniform(k_act, (1, 64, 1), minval=-1, maxval=1)
        batch = Batch(obs, actions, -((actions[..., 0] - 0.5) ** 2), obs, jnp.zeros((1, 64)))
        return agent.update(state, batch)[0], None

    def train(seed):
        state = agent.init(jax.random.key(seed), 1, 1)
        state, _ = jax.lax.scan(step, state, jax.random.split(jax.random.key(seed + 1), 1500))
        return agent.act(state, jnp.zeros((1, 1)), None, True)[0, 0]

    greedy = np.asarray(jax.jit(jax.vmap(train))(jnp.arange(8)))
    assert abs(greedy.mean() - 0.5) < 0.1, greedy
    assert np.all(np.abs(greedy - 0.5) < 0.2), greedy


def test_orthogonal_init_under_vmap():
    """Kernels are orthogonal times sqrt(2), also for the vmapped critic ensemble and seeds."""
    keys = jax.random.split(jax.random.key(0), 3)
    states = jax.vmap(lambda k: sac.init(k, OBS, ACT, SMALL))(keys)
    wide = states.critic.params["net"]["MLP_0"]["Dense_1"]["kernel"]  # (seeds, critics, 32, 32)
    assert wide.shape == (3, 2, 32, 32)
    gram = jnp.einsum("...ij,...ik->...jk", wide, wide)
    np.testing.assert_allclose(gram, 2.0 * jnp.broadcast_to(jnp.eye(32), gram.shape), atol=1e-4)
    assert not np.allclose(wide[0, 0], wide[0, 1]) and not np.allclose(wide[0, 0], wide[1, 0])
    tall = states.actor.params["MLP_0"]["Dense_0"]["kernel"]  # (seeds, 5, 32): orthonormal rows
    rows = jnp.einsum("...ij,...kj->...ik", tall, tall)
    np.testing.assert_allclose(rows, 2.0 * jnp.broadcast_to(jnp.eye(OBS), rows.shape), atol=1e-4)


def test_init_scale_sets_every_kernels_singular_values():
    state = sac.init(jax.random.key(0), OBS, ACT, dataclasses.replace(SMALL, init_scale=0.5))
    kernels = [x for path, x in jax.tree_util.tree_leaves_with_path(
        (state.actor.params, state.critic.params)) if "kernel" in jax.tree_util.keystr(path)]
    assert len(kernels) == 3 + 4  # the critics' 3 layers (stacked), actor 2 layers + 2 heads
    for kernel in kernels:
        np.testing.assert_allclose(np.linalg.svd(kernel, compute_uv=False), 0.5, rtol=1e-5)
