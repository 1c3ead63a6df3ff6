"""Q-functions: one critic and an ensemble of independently initialised copies."""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.common import MLP, RELU_GAIN, default_init
from networks.layers import dense_cls


class Critic(nn.Module):
    """Q(s, a) from concat(obs, action): `(..., obs), (..., act) -> (..., out_dim)`."""

    hidden_dims: Sequence[int]
    out_dim: int = 1
    layer_norm: bool = True
    init_scale: float = RELU_GAIN  # orthogonal init scale of every kernel
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm (networks.layers.dense_cls)

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], axis=-1)
        x = MLP(self.hidden_dims, self.layer_norm, self.init_scale, self.flax_layers)(x)
        q = dense_cls(self.flax_layers)(self.out_dim, kernel_init=default_init(self.init_scale),
                                        name="Dense_0")(x)
        return q[..., 0] if self.out_dim == 1 else q


class Ensemble(nn.Module):
    """`num` independent copies of `net`, stacked on a leading parameter and output axis.

    Every copy sees the same inputs. By default the first layer is then one product of the
    inputs with all copies' kernels side by side, and XLA:CPU transposes its (..., rows, num,
    width) result to (..., num, rows, width), a copy of every first-layer activation. With
    `tile_inputs`, each copy gets the inputs broadcast to its own axis and every layer is a
    batched product with nothing to transpose. Parameters and values are the same either way
    (input gradients are summed over copies in another order). SAC tiles: at its sizes (256
    wide, batch 256) the transpose tiling saves is a sizeable part of the update, more so with
    several seeds. BRO keeps the default: at its sizes (512 wide, batch 128) the difference is
    within run-to-run noise. `python benchmarks/ensemble_tiling.py` times both, for both.
    """

    net: nn.Module
    num: int = 2
    tile_inputs: bool = False

    @nn.compact
    def __call__(self, *args: jax.Array) -> jax.Array:
        if self.tile_inputs:
            args = tuple(jnp.broadcast_to(a, (self.num, *a.shape)) for a in args)
        stacked = nn.vmap(
            lambda module, *a: module(*a),
            variable_axes={"params": 0, "intermediates": 0},
            split_rngs={"params": True},
            in_axes=0 if self.tile_inputs else None,
            out_axes=0,
            axis_size=self.num,
        )
        return stacked(self.net, *args)
