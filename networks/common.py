"""Building blocks: orthogonal initialisation and the LayerNorm MLP."""

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from interventions import rng
from interventions.linalg import stacked, unrolled
from networks.layers import dense_cls, layer_norm_cls


@stacked
def _qr(z: jax.Array) -> tuple[jax.Array, jax.Array]:
    return unrolled(jnp.linalg.qr, z)


def thin_q(z: jax.Array) -> jax.Array:
    """Q (m, n) of the reduced QR of z (m, n), m >= n, signed as jax's orthogonal init signs it.

    LAPACK's QR one matrix at a time, also under jax.vmap: jaxlib 0.10.2's batched CPU LAPACK
    kernels block XLA's thread pool and can deadlock when several run at once (an ensemble's or
    the seed axis' vmapped init); a single matrix runs inline, and the QRs of every vmapped seed
    and ensemble member are issued side by side (interventions/linalg.py). A SAC init takes
    6-7 ms (`benchmarks/events.py --events reset`, "its fresh init").
    """
    q, r = _qr(z[None])
    return q[0] * jnp.sign(jnp.diagonal(r[0]))


def orthogonal(scale: float = 1.0) -> nn.initializers.Initializer:
    """`jax.nn.initializers.orthogonal(scale)` (the same draws and matrices) with the QR of
    `thin_q`; kernels `(..., out)` get orthonormal rows or columns."""

    def init(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        n_rows, n_cols = math.prod(shape) // shape[-1], shape[-1]
        z = rng.normal(key, (max(n_rows, n_cols), min(n_rows, n_cols)), dtype)
        q = thin_q(z)
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
