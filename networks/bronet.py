"""BroNet (Nauman et al. 2024) and BRO's networks built on it: quantile critic, two actors.

Every hidden feature is recorded with `sow("intermediates", ...)`: the stem's ReLU output
(`hidden_0`), each block's inner ReLU output (`block_i/relu`) and each block's output, the
residual stream (`block_i/residual`, a sum with no activation after it), so the plasticity
diagnostics read the same features for any depth; they give the residual stream an srank but
no dormant ratios (`learners.features.RESIDUAL`).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from learners.features import RESIDUAL
from networks.common import RELU_GAIN, default_init
from networks.layers import dense_cls, layer_norm_cls, linear_heads
from networks.policies import squash_log_std


class BroBlock(nn.Module):
    """`x + LN(Dense(ReLU(LN(Dense(x)))))`, no activation after the sum: `(..., w) -> (..., w)`."""

    width: int
    init_scale: float = RELU_GAIN
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm (networks.layers.dense_cls)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense, norm = dense_cls(self.flax_layers), layer_norm_cls(self.flax_layers)
        h = dense(self.width, kernel_init=default_init(self.init_scale), name="Dense_0")(x)
        h = nn.relu(norm(name="LayerNorm_0")(h))
        self.sow("intermediates", "relu", h)
        h = dense(self.width, kernel_init=default_init(self.init_scale), name="Dense_1")(h)
        out = x + norm(name="LayerNorm_1")(h)
        self.sow("intermediates", RESIDUAL, out)
        return out


class BroNet(nn.Module):
    """Dense(width) -> LayerNorm -> ReLU, then `depth` (>= 0) BroBlocks: `(..., in) -> (..., w)`."""

    width: int
    depth: int
    init_scale: float = RELU_GAIN  # orthogonal init scale of every kernel
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm (networks.layers.dense_cls)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.width <= 0 or self.depth < 0:
            raise ValueError(
                f"BroNet needs width > 0 and depth >= 0, got width={self.width}, depth={self.depth}"
            )
        x = dense_cls(self.flax_layers)(self.width, kernel_init=default_init(self.init_scale),
                                        name="Dense_0")(x)
        x = nn.relu(layer_norm_cls(self.flax_layers)(name="LayerNorm_0")(x))
        self.sow("intermediates", "hidden_0", x)
        for i in range(self.depth):
            x = BroBlock(self.width, self.init_scale, self.flax_layers, name=f"block_{i}")(x)
        return x


class QuantileCritic(nn.Module):
    """Quantiles of the return from concat(obs, action): `(..., obs), (..., act) -> (..., n)`."""

    width: int = 512
    depth: int = 2
    num_quantiles: int = 100
    init_scale: float = RELU_GAIN  # orthogonal init scale of every kernel
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm (networks.layers.dense_cls)

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = BroNet(self.width, self.depth, self.init_scale, self.flax_layers)(
            jnp.concatenate([obs, action], -1))
        return dense_cls(self.flax_layers)(self.num_quantiles,
                                           kernel_init=default_init(self.init_scale),
                                           name="quantiles")(x)


class BroActor(nn.Module):
    """`obs (..., obs_dim) -> (mean, log_std)`, each `(..., act_dim)`, pre-tanh.

    As in the BRO reference, the mean head is initialised orthogonal with scale `init_scale`
    (sqrt(2), as the BroNet) and the log-std head with scale 1; the log-std is squashed with
    tanh into [log_std_min, log_std_max].
    """

    act_dim: int
    width: int = 256
    depth: int = 1
    log_std_min: float = -10.0
    log_std_max: float = 2.0
    init_scale: float = RELU_GAIN
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm (networks.layers.dense_cls)

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = BroNet(self.width, self.depth, self.init_scale, self.flax_layers)(obs)
        mean_init = default_init(self.init_scale)
        mean, raw = linear_heads(x, [(self.act_dim, mean_init, "mean"),
                                     (self.act_dim, default_init(1.0), "log_std")],
                                 self.flax_layers)
        return mean, squash_log_std(raw, self.log_std_min, self.log_std_max)


class OptimisticActor(nn.Module):
    """BRO's exploration policy around the conservative one, all `(..., act_dim)`:
    mean_o = mean_c + shift(concat(obs, mean_c)), std_o = std_multiplier * std_c.

    The shift head is a bias-free Dense with orthogonal init of scale `shift_init_scale`, so the
    optimistic policy starts close to the conservative one.
    """

    width: int = 256
    depth: int = 1
    std_multiplier: float = 0.75
    shift_init_scale: float = 0.01
    init_scale: float = RELU_GAIN  # of the BroNet's kernels
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm (networks.layers.dense_cls)

    @nn.compact
    def __call__(
        self, obs: jax.Array, mean_c: jax.Array, log_std_c: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        x = BroNet(self.width, self.depth, self.init_scale, self.flax_layers)(
            jnp.concatenate([obs, mean_c], -1))
        shift = dense_cls(self.flax_layers)(
            mean_c.shape[-1],
            use_bias=False,
            kernel_init=default_init(self.shift_init_scale),
            name="shift",
        )(x)
        return mean_c + shift, log_std_c + jnp.log(self.std_multiplier)
