"""Find the weight matrices of a Flax param tree and view each one as a batch of 2-D matrices.

A weight matrix is a leaf whose key is "kernel" with ndim >= 2. A Dense kernel is its last two
axes; all leading axes (an `nn.vmap` ensemble axis, a `jax.vmap` seed axis) are batch axes. A
kernel whose own module's name starts with "Conv" (flax's Conv_0, ConvTranspose_1, ...) has
layout (batch..., k_1..k_d, in, out) with d = `conv_spatial_ndim`; it is viewed as
(batch..., k_1*...*k_d*in, out). A conv given another name is taken for a Dense.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

PyTree = Any
MatrixFn = Callable[[jax.Array], jax.Array]

KERNEL_KEY = "kernel"
CONV_PREFIX = "Conv"
COLLECTION_KEY = "params"


def _key_name(key: Any) -> str:
    """The readable name of one pytree path entry (dict key, attribute, or sequence index)."""
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def is_weight_matrix(path: Sequence[Any], leaf: Any) -> bool:
    """True for a leaf named "kernel" with at least two axes."""
    return bool(path) and _key_name(path[-1]) == KERNEL_KEY and np.ndim(leaf) >= 2


def is_conv_kernel(path: Sequence[Any]) -> bool:
    """True when the kernel's own module is named "Conv..." (Conv_0, ConvTranspose_1, ...); a
    Dense inside a module named so (ConvEncoder_0/Dense_0) is a Dense."""
    return len(path) >= 2 and _key_name(path[-2]).startswith(CONV_PREFIX)


def layer_name(path: Sequence[Any]) -> str:
    """The "/"-joined path of the kernel's module, without Flax's "params" collection level."""
    names = [_key_name(key) for key in path[:-1] if _key_name(key) != COLLECTION_KEY]
    return "/".join(names) or KERNEL_KEY


def matrix_shape(path: Sequence[Any], shape: Sequence[int], conv_spatial_ndim: int) -> tuple:
    """Shape (batch..., m, n) of the matrix view of a kernel of the given shape."""
    if not is_conv_kernel(path):
        return tuple(shape)
    core = conv_spatial_ndim + 2
    if len(shape) < core:
        raise ValueError(
            f"conv kernel {layer_name(path)!r} has shape {tuple(shape)}, fewer than "
            f"conv_spatial_ndim + 2 = {core} axes; pass the right conv_spatial_ndim "
            "(1 for Conv1D, 2 for 2-D, 3 for 3-D convolutions)"
        )
    batch = tuple(shape[: len(shape) - core])
    return batch + (int(np.prod(shape[-core:-1])), int(shape[-1]))


def map_weight_matrices(fn: MatrixFn, params: PyTree, conv_spatial_ndim: int = 2) -> PyTree:
    """Apply `fn` ((batch..., m, n) -> same shape) to every weight matrix; other leaves are kept."""

    def visit(path, leaf):
        if not is_weight_matrix(path, leaf):
            return leaf
        view = leaf.reshape(matrix_shape(path, leaf.shape, conv_spatial_ndim))
        return fn(view).reshape(leaf.shape)

    return jax.tree_util.tree_map_with_path(visit, params)


def weight_matrices(params: PyTree, conv_spatial_ndim: int = 2) -> dict[str, jax.Array]:
    """Every weight matrix as (batch..., m, n), keyed by its layer name."""
    found = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        if not is_weight_matrix(path, leaf):
            continue
        name = layer_name(path)
        if name in found:
            raise ValueError(f"two kernels map to the layer name {name!r}; names must be unique")
        found[name] = leaf.reshape(matrix_shape(path, leaf.shape, conv_spatial_ndim))
    return found
