"""Random minibatch stacks for the agent tests."""

import jax
import jax.numpy as jnp

from learners.batch import Batch


def random_batch(key: jax.Array, utd: int, batch: int, obs: int, act: int) -> Batch:
    """A `(utd, batch, ...)` stack of random transitions, none terminal."""
    k = jax.random.split(key, 4)
    return Batch(
        observations=jax.random.normal(k[0], (utd, batch, obs)),
        actions=jax.random.uniform(k[1], (utd, batch, act), minval=-1, maxval=1),
        rewards=jax.random.normal(k[2], (utd, batch)),
        next_observations=jax.random.normal(k[3], (utd, batch, obs)),
        masks=jnp.ones((utd, batch)),
    )
