"""Named initialisation schemes of a layer's kernel and bias, for the settings a paper leaves open.

`layer_init(name, fan_in)` gives `(kernel_init, bias_init)` of a Dense or Conv layer with
`fan_in` inputs per output (a 3x3 conv: 9 x input channels):

- "orthogonal": orthogonal kernels with scale sqrt(2), zero biases (the RL networks').
- "pytorch": PyTorch's default of `nn.Linear` and `nn.Conv2d` (`reset_parameters`):
  kaiming_uniform_(a=sqrt(5)) on the kernel, which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and
  the bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
- "lecun_normal", "he_normal": flax's (truncated normal, variance 1/fan_in and 2/fan_in), zero
  biases.
"""

import math
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.common import RELU_GAIN, default_init

INITS = ("orthogonal", "pytorch", "lecun_normal", "he_normal")
DEFAULT_INIT = "orthogonal"

Initializer = Callable[..., jax.Array]


def uniform(bound: float) -> Initializer:
    """U(-bound, bound) per entry."""

    def init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def layer_init(name: str, fan_in: int, scale: float = RELU_GAIN) -> tuple[Initializer,
                                                                           Initializer]:
    """(kernel_init, bias_init) of scheme `name` for a layer of `fan_in` inputs per output;
    `scale` is the orthogonal scheme's gain. ValueError for an unknown name."""
    if name == "orthogonal":
        return default_init(scale), nn.initializers.zeros_init()
    if name == "pytorch":
        bound = 1 / math.sqrt(fan_in)
        # kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain sqrt(3 / fan_in)
        return nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform"), uniform(bound)
    if name == "lecun_normal":
        return nn.initializers.lecun_normal(), nn.initializers.zeros_init()
    if name == "he_normal":
        return nn.initializers.he_normal(), nn.initializers.zeros_init()
    raise ValueError(f"init must be one of {', '.join(INITS)}, got {name!r}")
