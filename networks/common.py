"""Building blocks: orthogonal initialisation and the LayerNorm MLP."""

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.layers import dense_cls, layer_norm_cls


def householder_q(z: jax.Array) -> jax.Array:
    """Q (m, n) of the reduced QR of z (m, n), m >= n, signed so that diag(R) > 0.

    Householder reflections in plain jnp: jaxlib 0.10.2's batched LAPACK QR on CPU can deadlock
    when several run at once (they wait on the thread pool they occupy), which happens whenever
    an ensemble or the seed axis vmaps an orthogonal init of matrices of a few hundred units.
    """
    m, n = z.shape
    rows = jnp.arange(m)

    def reflect(k, carry):
        r, q = carry
        x = jnp.where(rows >= k, r[:, k], 0.0)
        alpha = -jnp.where(r[k, k] >= 0, 1.0, -1.0) * jnp.linalg.norm(x)
        v = x - alpha * (rows == k)
        v = v / jnp.maximum(jnp.linalg.norm(v), jnp.finfo(z.dtype).tiny)
        return r - 2.0 * jnp.outer(v, v @ r), q - 2.0 * jnp.outer(q @ v, v)

    r, q = jax.lax.fori_loop(0, n, reflect, (z, jnp.eye(m, dtype=z.dtype)))
    return q[:, :n] * jnp.sign(jnp.diagonal(r))


def orthogonal(scale: float = 1.0) -> nn.initializers.Initializer:
    """`jax.nn.initializers.orthogonal(scale)` (the same draws and matrices, up to rounding) with
    the QR of `householder_q`; kernels `(..., out)` get orthonormal rows or columns."""

    def init(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        n_rows, n_cols = math.prod(shape) // shape[-1], shape[-1]
        z = jax.random.normal(key, (max(n_rows, n_cols), min(n_rows, n_cols)), dtype)
        q = householder_q(z)
        return jnp.asarray(scale, dtype) * (q.T if n_rows < n_cols else q).reshape(shape)

    return init


RELU_GAIN = math.sqrt(2.0)  # SPEC.md's orthogonal init scale


def default_init(scale: float = RELU_GAIN) -> nn.initializers.Initializer:
    """Orthogonal kernel initialisation (scale sqrt(2) unless told otherwise)."""
    return orthogonal(scale)


class MLP(nn.Module):
    """Dense -> LayerNorm -> ReLU per hidden layer; `x (..., in) -> (..., hidden_dims[-1])`.

    Each hidden layer's output (after the ReLU) is recorded with `sow("intermediates",
    "hidden_<i>", ...)` so the plasticity diagnostics can read the features without a second
    forward pass definition.
    """

    hidden_dims: Sequence[int]
    layer_norm: bool = True
    init_scale: float = RELU_GAIN
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm (networks.layers.dense_cls)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense, norm = dense_cls(self.flax_layers), layer_norm_cls(self.flax_layers)
        for i, width in enumerate(self.hidden_dims):
            x = dense(width, kernel_init=default_init(self.init_scale), name=f"Dense_{i}")(x)
            if self.layer_norm:
                x = norm(name=f"LayerNorm_{i}")(x)
            x = nn.relu(x)
            self.sow("intermediates", f"hidden_{i}", x)
        return x
