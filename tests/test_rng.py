"""numerics.rng draws the same numbers as jax.random, compiled differently."""

import jax
import jax.numpy as jnp
import pytest

from numerics import rng


@pytest.mark.parametrize("shape", [(256, 10), (3, 5, 7), (6,), (), (0, 4)])
def test_normal_is_bit_identical_to_jax_random_normal(shape):
    keys = jax.random.split(jax.random.key(3), 4)
    ours = jax.jit(jax.vmap(lambda k: rng.normal(k, shape)))(keys)
    theirs = jax.jit(jax.vmap(lambda k: jax.random.normal(k, shape)))(keys)
    assert ours.shape == (4, *shape)
    assert jnp.array_equal(ours, theirs)


def test_normal_keeps_the_dtype():
    assert rng.normal(jax.random.key(0), (2, 3), jnp.bfloat16).dtype == jnp.bfloat16
