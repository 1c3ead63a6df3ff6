"""Random draws that compile fast.

XLA's CPU compiler is slow over `jax.random.normal(key, (m, n))` when n is small (a classifier
head's (256, 10) under a seed vmap takes longer than a hidden layer's (784, 256)); drawn flat and
reshaped, the same numbers compile quickly (`python benchmarks/compile_times.py --parts=draws`
times both). With
`jax_threefry_partitionable` (JAX's default) a draw depends only on the flat index of each
entry, so the two are bit-identical (tests/test_rng.py).
"""

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp


def normal(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
    """`jax.random.normal(key, shape, dtype)`, drawn flat and reshaped."""
    shape = tuple(shape)
    return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)
