"""Dense and LayerNorm with the parameters, initialisation and forward pass of flax's, whose
gradients are arranged for XLA:CPU's kernels when the computation runs on a CPU.

Four changes to the backward pass, for speed on a CPU; none changes what is computed beyond
float32 rounding (the benchmarks named below time them; benchmarks/results.csv has the results):

- Bias, scale and shift gradients (sums over the batch rows, a column reduction, which XLA's
  reduce runs slowly without the tree-reduction rewrite that `experiment.xla_flags` disables) are
  pairwise sums of row slices: `python benchmarks/batch_sums.py`.
- A layer's input gradient `g @ kernel.T` avoids XLA:CPU's slow product contracting the last
  axes of both operands: where the layer sees fewer rows than it has units it is computed as
  `(kernel @ g.T).T`, elsewhere as a plain product with the kernel transposed (copied) first:
  `python benchmarks/input_grad.py`.
- A layer with fewer outputs than inputs (the critics' 1-wide outputs, the policy heads)
  computes its kernel gradient `x.T @ g` as `(g.T @ x).T`, with the narrow side as the
  product's rows: `python benchmarks/update_matmuls.py` times each product of an update.
- LayerNorm's normalisation has its closed-form gradient, `(g - mean(g) - y mean(g y)) / std`,
  where autodiff through the mean and variance emits more, smaller XLA ops.

On any other backend `Dense` and `LayerNorm` compute what flax's layers compute, gradients
included (`jax.lax.platform_dependent`, resolved when the computation is lowered, so a GPU's
compiler never sees the CPU rules, which compile slowly there for many seeds). A process whose
default backend is the CPU traces the CPU rules alone: `platform_dependent` traces both branches
of every layer, about half of an update's tracing (`python benchmarks/compile_times.py
--parts=agents`, its tracing row).

The gradients are `jax.custom_vjp` rules, so reverse mode (jax.grad, grad of grad, and
jax.hessian's forward-over-reverse) goes through these layers; pure forward mode (jax.jvp,
jax.jacfwd) does not, on any backend (where a GPU is the default, both branches are traced):
`dense_cls(flax_layers=True)` and the agents' `flax_layers` setting give flax's own Dense and
LayerNorm (the same parameters).

`dense_heads` computes several Dense layers on the same input (a policy's mean and log-std
heads) as one product, each keeping its own parameters.
"""

import math
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


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


def _plain_add_bias(x: jax.Array, bias: jax.Array) -> jax.Array:
    """`x + bias` (bias broadcast over the leading axes)."""
    return x + bias


add_bias = jax.custom_vjp(_plain_add_bias)


def _add_bias_fwd(x, bias):
    return _plain_add_bias(x, bias), None


def _add_bias_bwd(_, g):
    return g, sum_rows(g)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)


def _plain_scale_shift(y: jax.Array, scale: jax.Array, shift: jax.Array) -> jax.Array:
    """`y * scale + shift` (scale and shift broadcast over the leading axes)."""
    return y * scale + shift


scale_shift = jax.custom_vjp(_plain_scale_shift)


def _scale_shift_fwd(y, scale, shift):
    return _plain_scale_shift(y, scale, shift), (y, scale)


def _scale_shift_bwd(res, g):
    y, scale = res
    return g * scale, sum_rows(g * y), sum_rows(g)


scale_shift.defvjp(_scale_shift_fwd, _scale_shift_bwd)


def _contract_last(a: jax.Array, b: jax.Array) -> jax.Array:
    """`a @ b.T` for `a (..., k)` and a matrix `b (n, k)`."""
    return jax.lax.dot_general(a, b, (((a.ndim - 1,), (1,)), ((), ())))


def _input_grad_kernel_first(g: jax.Array, kernel: jax.Array) -> jax.Array:
    """`g @ kernel.T` as a plain product with the kernel transposed (copied) first."""
    # The barrier keeps XLA from folding the transpose into the product's dimensions.
    kernel_t = jax.lax.optimization_barrier(kernel.T)
    return jax.lax.dot_general(g, kernel_t, (((g.ndim - 1,), (0,)), ((), ())))


def _input_grad_transposed(g: jax.Array, kernel: jax.Array) -> jax.Array:
    """`g @ kernel.T` as `(kernel @ g.T).T`."""
    rows = math.prod(g.shape[:-1])
    grad_t = _contract_last(kernel, g.reshape(rows, g.shape[-1]))  # (in, rows)
    # The barrier keeps XLA from folding the transpose back into the product.
    grad = jax.lax.optimization_barrier(grad_t).T
    return grad.reshape(*g.shape[:-1], kernel.shape[0])


def _input_grad(g: jax.Array, kernel: jax.Array) -> jax.Array:
    """`g @ kernel.T`, the gradient of `x @ kernel` with respect to `x`, in the form that the
    layer's rows and units call for; see the module notes."""
    if math.prod(g.shape[:-1]) >= min(kernel.shape):
        return _input_grad_kernel_first(g, kernel)
    return _input_grad_transposed(g, kernel)


def _plain_matmul(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """`x @ kernel` for `x (..., in)` and `kernel (in, out)`."""
    return jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))


matmul = jax.custom_vjp(_plain_matmul)


def _matmul_fwd(x, kernel):
    return _plain_matmul(x, kernel), (x, kernel)


def _kernel_grad(x: jax.Array, g: jax.Array) -> jax.Array:
    """`x.T @ g` over all rows, the gradient of `x @ kernel` with respect to `kernel`; see the
    module notes."""
    x_rows, g_rows = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    if g_rows.shape[-1] < x_rows.shape[-1]:  # fewer outputs than inputs: (g.T @ x).T
        grad_t = jax.lax.dot_general(g_rows, x_rows, (((0,), (0,)), ((), ())))  # (out, in)
        # The barrier keeps XLA from folding the transpose back into the product.
        return jax.lax.optimization_barrier(grad_t).T
    return jax.lax.dot_general(x_rows, g_rows, (((0,), (0,)), ((), ())))


def _matmul_bwd(res, g):
    x, kernel = res
    return _input_grad(g, kernel), _kernel_grad(x, g)


matmul.defvjp(_matmul_fwd, _matmul_bwd)


def _on_cpu(custom: Callable, plain: Callable, *args: jax.Array) -> jax.Array:
    """`custom(*args)` (the same forward as `plain`, with the gradient rules above) where the
    computation runs on a CPU, `plain(*args)` (autodiff's gradients, as flax's layers)
    elsewhere; see the module notes."""
    if default_is_cpu():
        return custom(*args)
    return jax.lax.platform_dependent(*args, cpu=custom, default=plain)


def default_is_cpu() -> bool:
    """Whether this process computes on the CPU by default (no GPU or TPU backend comes first);
    its layers then trace the CPU rules alone (see the module notes)."""
    return jax.default_backend() == "cpu"


def _kernel_and_bias(layer: nn.Module, fan_in: int, use_bias: bool = True):
    """`layer`'s kernel and bias (None without one), with flax.linen.Dense's names, shapes and
    initialisation; called from `layer`'s compact method."""
    kernel = layer.param("kernel", layer.kernel_init, (fan_in, layer.features),
                         layer.param_dtype)
    if not use_bias:
        return kernel, None
    return kernel, layer.param("bias", layer.bias_init, (layer.features,), layer.param_dtype)


def _dense(x: jax.Array, kernel: jax.Array, bias: jax.Array | None) -> jax.Array:
    """`x @ kernel (+ bias)`, with the CPU gradient rules where it runs on a CPU."""
    y = _on_cpu(matmul, _plain_matmul, x, kernel)
    return y if bias is None else _on_cpu(add_bias, _plain_add_bias, y, bias)


class Dense(nn.Module):
    """`x @ kernel + bias`, as `flax.linen.Dense` (same parameter names, shapes and init)."""

    features: int
    use_bias: bool = True
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()
    param_dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return _dense(x, *_kernel_and_bias(self, x.shape[-1], self.use_bias))


class DenseParams(nn.Module):
    """The kernel and bias that `Dense(features)` would create on `fan_in` inputs (the same
    names, shapes and initialisation), returned instead of applied; see `dense_heads`."""

    features: int
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()
    param_dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, fan_in: int) -> tuple[jax.Array, jax.Array]:
        return _kernel_and_bias(self, fan_in)


def dense_heads(x: jax.Array, heads: Sequence[DenseParams]) -> list[jax.Array]:
    """Several Dense layers on the same input, computed as one: `x @ [k_1 .. k_n] + [b_1 ..
    b_n]`, split into each head's outputs. Each head keeps its own parameters under its own
    name, as `Dense(name=...)` would, and each output column is the same dot product.

    A policy's mean and log-std heads are narrow (21 units each on humanoid), and XLA:CPU runs
    such products slowly; one wider product is faster (`python benchmarks/policy_heads.py`).
    """
    kernels, biases = zip(*(head(x.shape[-1]) for head in heads), strict=True)
    y = _dense(x, jnp.concatenate(kernels, axis=1), jnp.concatenate(biases))
    return jnp.split(y, np.cumsum([head.features for head in heads])[:-1], axis=-1)


def _normalize_fwd(x, epsilon):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.maximum(jnp.mean(jnp.square(x), axis=-1, keepdims=True) - jnp.square(mean), 0.0)
    inv_std = jax.lax.rsqrt(var + epsilon)
    y = (x - mean) * inv_std
    return y, (y, inv_std)


def _normalize_bwd(epsilon, res, g):
    del epsilon  # in inv_std already
    y, inv_std = res
    mean_g = jnp.mean(g, axis=-1, keepdims=True)
    mean_gy = jnp.mean(g * y, axis=-1, keepdims=True)
    return (inv_std * (g - mean_g - y * mean_gy),)


def _plain_normalize(x: jax.Array, epsilon: float) -> jax.Array:
    """`(x - mean) / sqrt(var + epsilon)` over the last axis, var = max(E[x^2] - E[x]^2, 0)."""
    return _normalize_fwd(x, epsilon)[0]


normalize = jax.custom_vjp(_plain_normalize, nondiff_argnums=(1,))
normalize.defvjp(_normalize_fwd, _normalize_bwd)


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
        epsilon = self.epsilon
        y = _on_cpu(lambda x: normalize(x, epsilon), lambda x: _plain_normalize(x, epsilon), x)
        return _on_cpu(scale_shift, _plain_scale_shift, y, scale, shift)


def dense_cls(flax_layers: bool = False) -> type[nn.Module]:
    """This module's Dense, or flax.linen.Dense (the same parameters and forward pass; its
    plain gradients let forward-mode autodiff, jax.jvp and jax.jacfwd, through)."""
    return nn.Dense if flax_layers else Dense


def layer_norm_cls(flax_layers: bool = False) -> type[nn.Module]:
    """This module's LayerNorm, or flax.linen.LayerNorm (see `dense_cls`)."""
    return nn.LayerNorm if flax_layers else LayerNorm


def linear_heads(x: jax.Array, specs: Sequence[tuple[int, Callable, str]],
                 flax_layers: bool = False) -> list[jax.Array]:
    """Dense heads `(features, kernel_init, name)` on one input: `dense_heads`' one product,
    or one flax.linen.Dense each (the same parameters)."""
    if flax_layers:
        return [nn.Dense(n, kernel_init=init, name=name)(x) for n, init, name in specs]
    return dense_heads(x, [DenseParams(n, init, name=name) for n, init, name in specs])
