"""Building blocks: orthogonal initialisation and the LayerNorm MLP."""

import math
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.layers import dense_cls, layer_norm_cls
from numerics import rng
from numerics.linalg import gram, stacked, unrolled


@stacked
def _qr(z: jax.Array) -> tuple[jax.Array, jax.Array]:
    return unrolled(jnp.linalg.qr, z)


def thin_q(z: jax.Array) -> jax.Array:
    """Q (m, n) of the reduced QR of z (m, n), m >= n, signed as jax's orthogonal init signs it.

    LAPACK's QR one matrix at a time, also under jax.vmap: jaxlib 0.10.2's batched CPU LAPACK
    kernels block XLA's thread pool and can deadlock when several run at once (an ensemble's or
    the seed axis' vmapped init); a single matrix runs inline, and the QRs of every vmapped seed
    and ensemble member are issued side by side (numerics/linalg.py). `python
    benchmarks/events.py --events reset` times a SAC init ("its fresh init").
    """
    q, r = _qr(z[None])
    return q[0] * jnp.sign(jnp.diagonal(r[0]))


# Gaussian draws (m, n) with n at least this and m >= CHOLESKY_QR_ASPECT n take Cholesky QR.
CHOLESKY_QR_MIN_SIDE = 128
CHOLESKY_QR_ASPECT = 25 / 9  # (sqrt m + sqrt n) / (sqrt m - sqrt n) <= 4


def _upper_inverse(r: jax.Array) -> jax.Array:
    eye = jnp.eye(r.shape[-1], dtype=r.dtype)
    return jax.lax.linalg.triangular_solve(r, eye, left_side=True, lower=False)


@stacked
def _cholesky_q(z: jax.Array) -> jax.Array:
    # The Cholesky factors in a loop, quick to run and to compile; the inverses side by side.
    r = jnp.swapaxes(jax.lax.map(jnp.linalg.cholesky, gram(z)), -1, -2)
    return jnp.matmul(z, unrolled(_upper_inverse, r), precision=jax.lax.Precision.HIGHEST)


def gaussian_q(z: jax.Array) -> jax.Array:
    """`thin_q(z)` for z (m, n) of independent standard normal entries.

    Tall, large draws (CHOLESKY_QR_MIN_SIDE, CHOLESKY_QR_ASPECT) take Cholesky QR: z^T z = R^T R
    and Q = z R^-1, R's diagonal positive as thin_q signs it, so Q is thin_q's up to float32
    rounding (1e-6) and as orthonormal, its work in matrix products, which run faster than
    LAPACK's Householder QR on such draws (`python benchmarks/clip.py` times both, "orthogonal
    init's Q"). Its error grows as
    eps cond(z)^2; such a draw's condition number is about (sqrt m + sqrt n) / (sqrt m - sqrt n)
    <= 4 and passes 100 with a probability under e^-25 (the Gaussian concentration of z's
    extreme singular values). Other draws take thin_q: bit for bit jax's orthogonal init.
    """
    m, n = z.shape
    if n >= CHOLESKY_QR_MIN_SIDE and m >= CHOLESKY_QR_ASPECT * n:
        return _cholesky_q(z[None])[0]
    return thin_q(z)


def orthogonal(scale: float = 1.0) -> nn.initializers.Initializer:
    """`jax.nn.initializers.orthogonal(scale)`: the same draws, and the same matrices (see
    `gaussian_q`); kernels `(..., out)` get orthonormal rows or columns."""

    def init(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        n_rows, n_cols = math.prod(shape) // shape[-1], shape[-1]
        z = rng.normal(key, (max(n_rows, n_cols), min(n_rows, n_cols)), dtype)
        q = gaussian_q(z)
        return jnp.asarray(scale, dtype) * (q.T if n_rows < n_cols else q).reshape(shape)

    return init


RELU_GAIN = math.sqrt(2.0)  # docs/algorithms.md's orthogonal init scale


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
    # fan_in -> (kernel_init, bias_init) of each Dense (networks/inits.py); None: orthogonal
    # kernels with scale init_scale, zero biases
    layer_init: Callable | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense, norm = dense_cls(self.flax_layers), layer_norm_cls(self.flax_layers)
        for i, width in enumerate(self.hidden_dims):
            if self.layer_init is None:
                inits = {"kernel_init": default_init(self.init_scale)}
            else:
                kernel_init, bias_init = self.layer_init(x.shape[-1])
                inits = {"kernel_init": kernel_init, "bias_init": bias_init}
            x = dense(width, **inits, name=f"Dense_{i}")(x)
            if self.layer_norm:
                x = norm(name=f"LayerNorm_{i}")(x)
            x = nn.relu(x)
            self.sow("intermediates", f"hidden_{i}", x)
        return x
