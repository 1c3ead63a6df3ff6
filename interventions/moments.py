"""An optimizer state's per-parameter moments: the subtrees shaped like the parameters they
optimise (optax's Adam mu and nu, a momentum trace), whatever optax transformation holds them.

Scalars such as Adam's step count are not shaped like the parameters, so a method that edits
moments this way keeps them.
"""

from collections.abc import Callable
from typing import Any

import jax

PyTree = Any


def map_moments(opt_state: PyTree, params: PyTree, fn: Callable[..., PyTree],
                *others: PyTree) -> PyTree:
    """`opt_state` with each subtree of the same tree structure as `params` replaced by
    fn(subtree, *the same subtree of each of `others`), optimizer states of the same
    structure (e.g. a fresh one); every other leaf kept."""
    shape = jax.tree.structure(params)
    is_moment = lambda node: jax.tree.structure(node) == shape

    def visit(node, *other):
        return fn(node, *other) if is_moment(node) else node

    return jax.tree.map(visit, opt_state, *others, is_leaf=is_moment)
