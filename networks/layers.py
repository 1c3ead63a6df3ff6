"""Dense and LayerNorm with the parameters, initialisation and forward pass of flax's, whose
gradients for bias, scale and shift are pairwise sums over the batch.

Why: the gradient of a per-feature parameter is a sum over the batch rows, a column reduction.
Without the tree-reduction rewrite (one of the XLA:CPU options of `launch.xla_flags`, which
speeds up the row reductions), XLA's reduce runs these slowly. `python benchmarks/batch_sums.py`
on 2 cores: 130-145 us for 2 x 256 x 256 floats, where a pairwise sum of row slices (fused
elementwise loops, which XLA also splits across threads) takes 69-82 us; 3.0 ms against
0.25 ms for 2 x 2560 x 256 (stock XLA's reduce: 79 us and 0.22 ms). They were a large part of
what is not matmul in a SAC or BRO gradient step. The sums differ from XLA's only by float32
rounding (pairwise summation is, if anything, more accurate).

The gradients are `jax.custom_vjp` rules, so reverse mode (jax.grad, and grad of grad for
Hessian-vector products) goes through these layers; forward mode (jax.jvp, jax.jacfwd,
jax.hessian) does not: use flax's Dense and LayerNorm (the same parameters) for that.
"""

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp


def sum_rows(x: jax.Array) -> jax.Array:
    """Sum of `x (..., n)` over every axis but the last, as a pairwise tree of row additions."""
    x = x.reshape(-1, x.shape[-1])
    if x.shape[0] == 0:
        return jnp.zeros(x.shape[-1], x.dtype)
    while x.shape[0] > 1:
        half = x.shape[0] // 2
        summed = x[:half] + x[half:2 * half]
        if x.shape[0] % 2:
            summed = jnp.concatenate([summed[:1] + x[2 * half:], summed[1:]])
        x = summed
    return x[0]


@jax.custom_vjp
def add_bias(x: jax.Array, bias: jax.Array) -> jax.Array:
    """`x + bias` (bias broadcast over the leading axes)."""
    return x + bias


def _add_bias_fwd(x, bias):
    return x + bias, None


def _add_bias_bwd(_, g):
    return g, sum_rows(g)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)


@jax.custom_vjp
def scale_shift(y: jax.Array, scale: jax.Array, shift: jax.Array) -> jax.Array:
    """`y * scale + shift` (scale and shift broadcast over the leading axes)."""
    return y * scale + shift


def _scale_shift_fwd(y, scale, shift):
    return y * scale + shift, (y, scale)


def _scale_shift_bwd(res, g):
    y, scale = res
    return g * scale, sum_rows(g * y), sum_rows(g)


scale_shift.defvjp(_scale_shift_fwd, _scale_shift_bwd)


class Dense(nn.Module):
    """`x @ kernel + bias`, as `flax.linen.Dense` (same parameter names, shapes and init)."""

    features: int
    use_bias: bool = True
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()
    param_dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features),
                            self.param_dtype)
        y = jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))
        if not self.use_bias:
            return y
        return add_bias(y, self.param("bias", self.bias_init, (self.features,), self.param_dtype))


class LayerNorm(nn.Module):
    """Normalisation over the last axis, then a learned scale and shift, as
    `flax.linen.LayerNorm` with its defaults (epsilon 1e-6, variance as E[x^2] - E[x]^2)."""

    epsilon: float = 1e-6
    param_dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        features = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones_init(), (features,), self.param_dtype)
        shift = self.param("bias", nn.initializers.zeros_init(), (features,), self.param_dtype)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.maximum(jnp.mean(jnp.square(x), axis=-1, keepdims=True) - jnp.square(mean), 0.0)
        y = (x - mean) * jax.lax.rsqrt(var + self.epsilon)
        return scale_shift(y, scale, shift)
