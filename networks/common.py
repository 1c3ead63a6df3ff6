"""Building blocks: orthogonal initialisation and the LayerNorm MLP."""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def default_init(scale: float = jnp.sqrt(2.0)) -> nn.initializers.Initializer:
    """Orthogonal kernel initialisation (scale sqrt(2) unless told otherwise)."""
    return nn.initializers.orthogonal(scale)


class MLP(nn.Module):
    """Dense -> LayerNorm -> ReLU per hidden layer; `x (..., in) -> (..., hidden_dims[-1])`.

    Each hidden activation is recorded with `sow("intermediates", "features", ...)` so the
    plasticity diagnostics can read the features without a second forward pass definition.
    """

    hidden_dims: Sequence[int]
    layer_norm: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, width in enumerate(self.hidden_dims):
            x = nn.Dense(width, kernel_init=default_init(), name=f"Dense_{i}")(x)
            if self.layer_norm:
                x = nn.LayerNorm(name=f"LayerNorm_{i}")(x)
            x = nn.relu(x)
            self.sow("intermediates", f"hidden_{i}", x)
        return x
