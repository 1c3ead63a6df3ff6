"""Parseval regularization (Chung et al. 2024, "Parseval regularization for continual
reinforcement learning"): a loss term keeping each hidden layer's rows orthogonal with squared
norm s,

    lambda * sum_l c_l * ||W_l W_l^T - s I||_F^2,

as the official code (wechu/parseval_reg parseval_reg/agent.py) computes it: W is the weight
matrix (out, in) with rows the output units (flax's kernel transposed: W W^T = K^T K), every
hidden layer is regularized and the output layers are not, s = gain^2 with the networks'
orthogonal gain sqrt(2) (s = 2), and c_l = (64 / out_l)^2 rescales lambda for widths other than
the 64 it was tuned at. Kernels with leading axes (a critic ensemble's) count per member.
"""

import dataclasses

import jax
import jax.numpy as jnp

from interventions import layer_roles
from interventions.matrices import KERNEL_KEY, matrix_shape
from interventions.registry import Method, SettingError, Settings, parts_setting, setting


@dataclasses.dataclass(frozen=True)
class ParsevalConfig(Settings):
    coef: float = setting(1e-4, "Regularization strength lambda (wechu/parseval_reg: 1e-4 on "
                          "DMC and LunarLander, 1e-3 on MetaWorld and the gridworld).")
    scale: float = setting(2.0, "s in ||W W^T - s I||^2: the squared gain of the orthogonal "
                           "initialisation (sqrt(2)^2).")
    reference_width: int = setting(64, "lambda is multiplied by (reference_width / n)^2 for a "
                                   "layer of n output units, as the official code scales it "
                                   "from the width 64 it was tuned at; 0: no rescaling.")
    parts: tuple[str, ...] = parts_setting("Parseval regularization")

    def check(self):
        self.positive("coef", "scale")
        if not (isinstance(self.reference_width, int) and self.reference_width >= 0):
            raise SettingError("reference_width", "reference_width must be an int >= 0, got "
                               f"{self.reference_width}")


def _hidden_kernels(params) -> list[int]:
    """Leaf indices of the hidden layers' kernels; ValueError when there is none."""
    flat = layer_roles.flatten(params)
    hidden = set(layer_roles.hidden_layers(params))
    found = [i for i, path in enumerate(flat.paths)
             if path[-1] == KERNEL_KEY and path[:-1] in hidden]
    if not found:
        raise ValueError("holds no hidden layer (only output layers), which Parseval "
                         "regularization leaves out")
    return found


def init(params, cfg: ParsevalConfig) -> tuple:
    """No per-step state; checks that the part holds a hidden layer."""
    _hidden_kernels(params)
    return ()


def _transposed(kernel: jax.Array) -> jax.Array:
    """kernel (batch..., in, out) as (batch..., out, in), copied: the barrier keeps XLA from
    folding the transpose into the next product, which XLA:CPU runs slowly with both operands
    contracted on their first axes."""
    return jax.lax.optimization_barrier(jnp.swapaxes(kernel, -1, -2))


def _parseval_fwd(kernel: jax.Array, scale: float):
    """||W W^T - s I||_F^2 per leading index of kernel (batch..., in, out), W = kernel^T, from
    the smaller Gram matrix: W W^T - s I itself when out <= in, else (in < out, the first
    layer) through ||W W^T||_F = ||W^T W||_F, which costs in^2 out instead of out^2 in."""
    kernel_t = _transposed(kernel)
    n_in, n_out = kernel.shape[-2:]
    if n_out <= n_in:
        residual = kernel_t @ kernel - scale * jnp.eye(n_out, dtype=kernel.dtype)
        return jnp.sum(jnp.square(residual), axis=(-2, -1)), (kernel, residual)
    gram = kernel @ kernel_t  # W^T W, (batch..., in, in)
    value = (jnp.sum(jnp.square(gram), axis=(-2, -1))
             - 2 * scale * jnp.sum(jnp.square(kernel), axis=(-2, -1)) + scale**2 * n_out)
    return value, (kernel, gram)


def _parseval_bwd(scale: float, res, g):
    """d/dK ||K^T K - s I||^2 = 4 K (K^T K - s I) = 4 (K K^T - s I) K: one product."""
    kernel, product = res
    g = g[..., None, None]
    if product.shape[-1] == kernel.shape[-1]:  # the residual (batch..., out, out)
        return (4 * g * (kernel @ product),)
    return (4 * g * (product @ kernel - scale * kernel),)


parseval_residual = jax.custom_vjp(lambda kernel, scale: _parseval_fwd(kernel, scale)[0],
                                   nondiff_argnums=(1,))
parseval_residual.defvjp(_parseval_fwd, _parseval_bwd)


def penalty(params, aux: tuple, cfg: ParsevalConfig) -> jax.Array:
    flat = layer_roles.flatten(params)
    total = jnp.zeros((), jnp.float32)
    for i in _hidden_kernels(params):
        kernel = flat.leaves[i]
        kernel = kernel.reshape(matrix_shape(flat.paths[i], kernel.shape, 2))
        rows = kernel.shape[-1]  # W = kernel^T has a row per output unit
        weight = (cfg.reference_width / rows) ** 2 if cfg.reference_width else 1.0
        total = total + weight * jnp.sum(parseval_residual(kernel, cfg.scale))
    return cfg.coef * total


METHOD = Method(
    name="parseval",
    kind="loss",
    config=ParsevalConfig,
    summary="Parseval regularization: lambda * sum_l ||W_l W_l^T - s I||_F^2 over the hidden "
            "layers (Chung et al. 2024).",
    default_parts="train_parts",
    init=init,
    penalty=penalty,
)
