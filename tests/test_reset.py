"""Parts of an agent state by dot-path, and resets (fresh key / same init) on a seeded state."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct
from flax.training.train_state import TrainState

from interventions import (
    fresh_reset,
    get_part,
    initial_reset,
    map_parts,
    part_paths,
    replace_parts,
    singular_clip,
)
from tests.helpers.fixtures import shared_fixture

SEEDS = 3
OBS, ACT = 5, 2
ALL = ["actor", "critic", "target_critic_params", "temp"]
PARAMS = ["actor.params", "critic.params", "target_critic_params", "temp.params"]


class Actor(nn.Module):
    hidden: int = 8

    @nn.compact
    def __call__(self, obs):
        h = nn.relu(nn.LayerNorm()(nn.Dense(self.hidden)(obs)))
        return nn.Dense(ACT)(h)


class Critic(nn.Module):
    @nn.compact
    def __call__(self, obs, act):
        h = nn.relu(nn.LayerNorm()(nn.Dense(8)(jnp.concatenate([obs, act], -1))))
        return nn.Dense(1)(h)


class Ensemble(nn.Module):
    @nn.compact
    def __call__(self, obs, act):
        vmapped = nn.vmap(
            Critic,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=2,
        )
        return vmapped()(obs, act)


class Temperature(nn.Module):
    @nn.compact
    def __call__(self):
        return jnp.exp(self.param("log_temp", nn.initializers.zeros, ()))


@struct.dataclass
class AgentState:
    actor: TrainState
    critic: TrainState
    target_critic_params: dict
    temp: TrainState
    rng: jax.Array
    step: jax.Array


def init(key: jax.Array, hidden: int = 8) -> AgentState:
    k_actor, k_critic, k_rng = jax.random.split(key, 3)
    obs, act = jnp.ones((1, OBS)), jnp.ones((1, ACT))
    actor = Actor(hidden)
    critic = Ensemble()
    critic_params = critic.init(k_critic, obs, act)
    temp = Temperature()
    return AgentState(
        actor=TrainState.create(
            apply_fn=actor.apply, params=actor.init(k_actor, obs), tx=optax.adam(1e-3)
        ),
        critic=TrainState.create(apply_fn=critic.apply, params=critic_params, tx=optax.adam(1e-3)),
        target_critic_params=critic_params,
        temp=TrainState.create(apply_fn=temp.apply, params=temp.init(key), tx=optax.adam(1e-3)),
        rng=jax.random.key_data(k_rng),
        step=jnp.zeros((), jnp.int32),
    )


def train(state: AgentState, key: jax.Array) -> AgentState:
    """A few Adam steps on random gradients, so every parameter and optimizer moment moves."""

    def step(state, key):
        keys = jax.random.split(key, 3)

        def noise(tree, k):
            leaves, treedef = jax.tree.flatten(tree)
            ks = jax.random.split(k, len(leaves))
            return treedef.unflatten(
                [jax.random.normal(q, x.shape) for q, x in zip(ks, leaves, strict=True)]
            )

        actor = state.actor.apply_gradients(grads=noise(state.actor.params, keys[0]))
        critic = state.critic.apply_gradients(grads=noise(state.critic.params, keys[1]))
        temp = state.temp.apply_gradients(grads=noise(state.temp.params, keys[2]))
        target = optax.incremental_update(critic.params, state.target_critic_params, 0.5)
        return state.replace(
            actor=actor,
            critic=critic,
            target_critic_params=target,
            temp=temp,
            step=state.step + 1,
        ), None

    return jax.lax.scan(step, state, jax.random.split(key, 3))[0]


seeded_init = jax.jit(jax.vmap(init))


@shared_fixture
def states():
    initial = seeded_init(jax.random.split(jax.random.key(0), SEEDS))
    trained = jax.jit(jax.vmap(train))(initial, jax.random.split(jax.random.key(1), SEEDS))
    return initial, trained


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def assert_identical(a, b):
    """Same leaf paths and bit-identical leaves (static fields such as tx may be new objects)."""
    paths = lambda t: [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(t)]
    assert paths(a) == paths(b)
    for x, y in zip(leaves(a), leaves(b), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def kernels(tree):
    return [
        np.asarray(x)
        for path, x in jax.tree_util.tree_leaves_with_path(tree)
        if getattr(path[-1], "key", None) == "kernel"
    ]


@pytest.mark.slow
def test_training_moved_every_part(states):
    initial, trained = states
    for path in ALL:
        for a, b in zip(
            leaves(get_part(initial, path)), leaves(get_part(trained, path)), strict=True
        ):
            if a.dtype.kind == "f":
                assert not np.array_equal(a, b), path


@pytest.mark.slow
def test_fresh_key_reset_is_a_new_init(states):
    initial, trained = states
    key = jax.random.split(jax.random.key(99), SEEDS)
    # a new trace of init builds new optax objects (static fields); the reset must accept them
    reset = jax.jit(lambda s, k: fresh_reset(s, ALL, jax.vmap(init), k))(trained, key)
    fresh = seeded_init(key)
    for path in ALL:
        assert_identical(get_part(reset, path), get_part(fresh, path))
        for new, old in zip(
            leaves(get_part(reset, path)), leaves(get_part(trained, path)), strict=True
        ):
            if new.dtype.kind == "f" and new.size:
                assert not np.array_equal(new, old), path
    for path in PARAMS:
        for new, old, start in zip(
            kernels(get_part(reset, path)),
            kernels(get_part(trained, path)),
            kernels(get_part(initial, path)),
            strict=True,
        ):
            assert np.all(new != old) and np.all(new != start)
    assert np.all(np.asarray(reset.actor.step) == 0) and np.all(
        np.asarray(reset.temp.params["params"]["log_temp"]) == 0.0
    )
    assert_identical(reset.rng, trained.rng)
    assert_identical(reset.step, trained.step)


def test_same_init_reset_restores_initial_weights(states):
    initial, trained = states
    reset = jax.jit(lambda s, i: initial_reset(s, i, ALL))(trained, initial)
    for path in ALL:
        assert_identical(get_part(reset, path), get_part(initial, path))
    assert_identical(reset.rng, trained.rng)
    assert_identical(reset.step, trained.step)


@pytest.mark.parametrize(
    "paths", [["critic"], ["actor.params"], ["critic.opt_state", "temp"], ["target_critic_params"]]
)
def test_parts_not_reset_stay_bit_identical(states, paths):
    initial, trained = states
    reset = initial_reset(trained, initial, paths)
    for path in paths:
        assert_identical(get_part(reset, path), get_part(initial, path))
    kept = [
        p
        for p in part_paths(trained)
        if not any(p == q or p.startswith(q + ".") or q.startswith(p + ".") for q in paths)
    ]
    assert kept
    for path in kept:
        assert_identical(get_part(reset, path), get_part(trained, path))


@pytest.mark.slow
def test_get_and_map_parts(states):
    _, trained = states
    assert get_part(trained, "actor.params") is trained.actor.params
    assert (
        get_part(trained, "critic.params.params.VmapCritic_0")
        is (trained.critic.params["params"]["VmapCritic_0"])
    )
    grown = jax.tree.map(lambda x: 10.0 * x, trained)
    paths = ["actor.params", "critic.params", "target_critic_params"]
    clipped = map_parts(grown, paths, lambda p: singular_clip(p, 2.0))
    for path in paths:
        for k in kernels(get_part(clipped, path)):
            s = np.linalg.svd(k.astype(np.float64), compute_uv=False)
            assert s.max() <= 2.0 * (1 + 1e-5) and s.min() >= 0.5 * (1 - 1e-5)
    for path in ["actor.opt_state", "critic.opt_state", "temp", "rng", "step"]:
        assert_identical(get_part(clipped, path), get_part(grown, path))
    assert map_parts(grown, ["temp"], lambda t: t).temp is grown.temp


def test_part_paths_lists_pytree_fields(states):
    paths = part_paths(states[0])
    assert {
        "actor",
        "actor.params",
        "actor.opt_state",
        "actor.step",
        "critic.params",
        "target_critic_params",
        "temp.params",
        "rng",
        "step",
    } <= set(paths)
    assert "actor.apply_fn" not in paths and "actor.tx" not in paths


@pytest.mark.slow
@pytest.mark.parametrize(
    "paths, match",
    [
        (["actor.parms"], r"unknown part 'actor.parms'.*known: actor, actor.step, actor.params"),
        (["critic.params.params.Dense_9"], r"keys here: VmapCritic_0"),
        (["actor", "actor.params"], "overlap"),
        (["temp", "temp"], "overlap"),
        ("actor", "sequence of dot-paths"),
    ],
)
def test_bad_paths_raise(states, paths, match):
    initial, trained = states
    with pytest.raises(ValueError, match=match):
        replace_parts(trained, initial, paths)


@pytest.mark.slow
def test_source_of_another_structure_is_rejected(states):
    _, trained = states
    other = jax.vmap(lambda k: init(k, hidden=16))(jax.random.split(jax.random.key(3), SEEDS))
    with pytest.raises(ValueError, match="'actor' of the source differs"):
        replace_parts(trained, other, ["actor"])
    replace_parts(trained, other, ["critic"])
