"""Pytree comparisons for the tests, PRNG keys compared by their raw key data."""

import jax
import numpy as np


def numeric_leaves(tree) -> list[np.ndarray]:
    """The tree's leaves as numpy arrays, PRNG keys as their raw key data."""
    is_key = lambda x: jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)
    return [np.asarray(jax.random.key_data(x) if is_key(x) else x) for x in jax.tree.leaves(tree)]


def assert_bit_identical(a, b) -> None:
    """As many leaves in `a` as in `b`, each equal bit for bit (static fields are not compared:
    a TrainState's apply_fn or tx may be another object)."""
    for x, y in zip(numeric_leaves(a), numeric_leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
