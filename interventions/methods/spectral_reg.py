"""Spectral regularization (Lewandowski et al., ICLR 2025, arXiv 2406.06811): a loss term that
keeps each layer's largest singular value near 1 and its biases near 0,

    lambda * (sum_l (sigma_max(W_l)^k - 1)^2 + sum_l ||b_l||^2),

over every kernel (per ensemble member), every normalization layer's scale (a diagonal matrix:
sigma_max = max |scale|) and every bias and offset. sigma_max of a kernel K (in, out; the
transpose of W, with the same singular values) is estimated by power iteration with a
persistent right singular vector v of K per kernel (the per-step state): the penalty uses
sigma = ||K v|| with v held fixed, whose gradient is u v^T (u = K v / ||K v||), and after each
gradient step `iterations` power iterations v <- K^T K v / ||K^T K v|| move v on.
"""

import dataclasses

import jax
import jax.numpy as jnp

from interventions import layer_roles
from interventions.matrices import KERNEL_KEY, matrix_shape
from interventions.registry import Method, SettingError, Settings, parts_setting, setting
from numerics import rng

SCALE_KEY, BIAS_KEY = "scale", "bias"  # a normalization layer's scale; biases and offsets


@dataclasses.dataclass(frozen=True)
class SpectralRegConfig(Settings):
    coef: float = setting(1e-4, "Regularization strength lambda.")
    k: float = setting(2.0, "Exponent k of sigma_max in (sigma_max^k - 1)^2 (the paper's: 2).")
    iterations: int = setting(1, "Power iterations per gradient step for each kernel's largest "
                              "singular vector (one, as spectral normalization does).")
    parts: tuple[str, ...] = parts_setting("spectral regularization")

    def check(self):
        self.positive("coef", "k")
        if not (isinstance(self.iterations, int) and self.iterations > 0):
            raise SettingError("iterations", f"iterations must be a positive int, got "
                               f"{self.iterations}")


def _matrix(path, kernel: jax.Array) -> jax.Array:
    """A kernel as (batch..., in, out) (a conv's spatial axes folded into in)."""
    return kernel.reshape(matrix_shape(path, kernel.shape, 2))


def _kernels(flat) -> list[int]:
    return [i for i, (path, leaf) in enumerate(zip(flat.paths, flat.leaves, strict=True))
            if path[-1] == KERNEL_KEY and leaf.ndim >= 2]


def _normalize(x: jax.Array) -> jax.Array:
    norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
    return x / jnp.where(norm > 0, norm, 1.0)


def power_iteration(matrix: jax.Array, v: jax.Array, iterations: int) -> jax.Array:
    """v (batch..., out) moved on by `iterations` steps v <- K^T K v / ||K^T K v|| of the
    kernel K (batch..., in, out)."""
    for _ in range(iterations):
        v = _normalize(jnp.einsum("...io,...i->...o", matrix, jnp.einsum("...io,...o->...i",
                                                                          matrix, v)))
    return v


def sigma_max(matrix: jax.Array, v: jax.Array) -> jax.Array:
    """||K v||: the largest singular value of the kernel K (batch..., in, out) when v is its
    right singular vector, a lower bound otherwise; shape (batch...,). Where K v = 0 (a zero
    kernel) it is 0 with a zero gradient rather than the NaN of the norm's."""
    squared = jnp.sum(jnp.square(jnp.einsum("...io,...o->...i", matrix, v)), axis=-1)
    positive = squared > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, squared, 1.0)), 0.0)


def init(params, cfg: SpectralRegConfig) -> tuple:
    """A start vector per kernel (the same fixed draw for every run), moved on by
    `iterations` power iterations."""
    flat = layer_roles.flatten(params)
    vectors = []
    for n, i in enumerate(_kernels(flat)):
        matrix = _matrix(flat.paths[i], flat.leaves[i])
        v = rng.normal(jax.random.fold_in(jax.random.key(0), n),
                       matrix.shape[:-2] + matrix.shape[-1:], matrix.dtype)
        vectors.append(power_iteration(matrix, _normalize(v), cfg.iterations))
    return tuple(vectors)


def penalty(params, aux: tuple, cfg: SpectralRegConfig) -> jax.Array:
    flat = layer_roles.flatten(params)
    total = jnp.zeros((), jnp.float32)
    for i, v in zip(_kernels(flat), aux, strict=True):
        sigma = sigma_max(_matrix(flat.paths[i], flat.leaves[i]), jax.lax.stop_gradient(v))
        total = total + jnp.sum(jnp.square(sigma ** cfg.k - 1.0))
    for path, leaf in zip(flat.paths, flat.leaves, strict=True):
        if path[-1] == SCALE_KEY and layer_roles.is_norm(path[:-1]):
            sigma = jnp.max(jnp.abs(leaf), axis=-1)  # of the diagonal matrix diag(scale)
            total = total + jnp.sum(jnp.square(sigma ** cfg.k - 1.0))
        elif path[-1] == BIAS_KEY:
            total = total + jnp.sum(jnp.square(leaf))
    return cfg.coef * total


def update_aux(params, aux: tuple, cfg: SpectralRegConfig) -> tuple:
    flat = layer_roles.flatten(params)
    return tuple(power_iteration(_matrix(flat.paths[i], flat.leaves[i]), v, cfg.iterations)
                 for i, v in zip(_kernels(flat), aux, strict=True))


METHOD = Method(
    name="spectral_reg",
    kind="loss",
    config=SpectralRegConfig,
    summary="Spectral regularization: lambda * sum_l (sigma_max(W_l)^k - 1)^2 plus biases "
            "towards 0, sigma_max by power iteration (Lewandowski et al. 2025).",
    default_parts="train_parts",
    init=init,
    penalty=penalty,
    update_aux=update_aux,
)
