"""Tanh-squashed diagonal Gaussian policy and its sampling / log-density."""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.common import MLP, RELU_GAIN, default_init
from networks.layers import linear_heads
from numerics import rng


def squash_log_std(raw: jax.Array, low: float, high: float) -> jax.Array:
    """Map an unbounded head output smoothly into [low, high] with tanh."""
    return low + 0.5 * (high - low) * (jnp.tanh(raw) + 1.0)


class TanhGaussianPolicy(nn.Module):
    """`obs (..., obs_dim) -> (mean, log_std)`, each `(..., act_dim)`, pre-tanh."""

    hidden_dims: Sequence[int]
    act_dim: int
    log_std_min: float = -10.0
    log_std_max: float = 2.0
    layer_norm: bool = True
    init_scale: float = RELU_GAIN  # orthogonal init scale of every kernel, heads included
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm (networks.layers.dense_cls)

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = MLP(self.hidden_dims, self.layer_norm, self.init_scale, self.flax_layers)(obs)
        init = default_init(self.init_scale)
        mean, raw = linear_heads(x, [(self.act_dim, init, "mean"), (self.act_dim, init, "log_std")],
                                 self.flax_layers)
        return mean, squash_log_std(raw, self.log_std_min, self.log_std_max)


def tanh_gaussian_log_prob(pre_tanh: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    """log pi(tanh(u)) for pre-tanh sample u; sums over the last (action) axis."""
    z = (pre_tanh - mean) / jnp.exp(log_std)
    normal = -0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi)
    # log |d tanh(u) / du| = log(1 - tanh(u)^2), written stably.
    log_det = 2.0 * (jnp.log(2.0) - pre_tanh - jax.nn.softplus(-2.0 * pre_tanh))
    return jnp.sum(normal - log_det, axis=-1)


def tanh_gaussian_sample(
    key: jax.Array, mean: jax.Array, log_std: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Reparameterised sample `a = tanh(mean + std * eps)` and its log-probability."""
    pre_tanh = mean + jnp.exp(log_std) * rng.normal(key, mean.shape, mean.dtype)
    return jnp.tanh(pre_tanh), tanh_gaussian_log_prob(pre_tanh, mean, log_std)
