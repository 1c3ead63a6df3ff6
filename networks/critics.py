"""Q-functions: one critic and an ensemble of independently initialised copies."""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.common import MLP, default_init
from networks.layers import Dense


class Critic(nn.Module):
    """Q(s, a) from concat(obs, action): `(..., obs), (..., act) -> (..., out_dim)`."""

    hidden_dims: Sequence[int]
    out_dim: int = 1
    layer_norm: bool = True

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], axis=-1)
        x = MLP(self.hidden_dims, self.layer_norm)(x)
        q = Dense(self.out_dim, kernel_init=default_init())(x)
        return q[..., 0] if self.out_dim == 1 else q


class Ensemble(nn.Module):
    """`num` independent copies of `net`, stacked on a leading parameter and output axis."""

    net: nn.Module
    num: int = 2

    @nn.compact
    def __call__(self, *args: jax.Array) -> jax.Array:
        stacked = nn.vmap(
            lambda module, *a: module(*a),
            variable_axes={"params": 0, "intermediates": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num,
        )
        return stacked(self.net, *args)
