"""The continual supervised benchmarks' classifiers (docs/algorithms.md, "Continual benchmarks").

`Classifier`: the LayerNorm MLP (`networks.MLP`, as MLP_0) then a Dense head (Dense_0).
`ConvClassifier`: `len(channels)` x (Conv_i 3x3 -> BatchNorm_i -> ReLU -> 2x2 max-pool), flatten
(row-major over height, width, channels: channel c of position p feeds row p * C + c of the next
Dense), then the same MLP and head. BatchNorm's running statistics live in the "batch_stats"
collection, state like the parameters. Each hidden layer's features are recorded with `sow`:
the MLP's "MLP_0/hidden_i" (batch, units) and conv block i's "hidden_i" as (batch, channels),
the mean over positions of the block's ReLU output (a channel's mean activation, the quantity
dormant-unit scores of conv layers average), named as `interventions.units` reads a scope's
features (its Conv layers first).
"""

import functools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.common import MLP, RELU_GAIN
from networks.inits import DEFAULT_INIT, layer_init
from networks.layers import Dense

BATCH_NORM_MOMENTUM = 0.9  # flax's nn.BatchNorm default is 0.99; 0.9 is PyTorch's 0.1
BATCH_NORM_EPSILON = 1e-5  # PyTorch's BatchNorm2d default


class Classifier(nn.Module):
    """Inputs (..., features) -> MLP (Dense -> LayerNorm -> ReLU per hidden layer) -> logits."""

    hidden_dims: Sequence[int]
    num_classes: int
    layer_norm: bool = True
    init_scale: float = RELU_GAIN
    init_scheme: str = DEFAULT_INIT  # networks/inits.py: the kernels' and biases' scheme

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        return _mlp_head(self, x)


def _layer_init(module: nn.Module):
    """fan_in -> (kernel_init, bias_init) of the module's scheme."""
    return functools.partial(layer_init, module.init_scheme, scale=module.init_scale)


def _mlp_head(module: nn.Module, x: jax.Array) -> jax.Array:
    """The MLP (MLP_0) and the Dense head (Dense_0) of either classifier."""
    inits = _layer_init(module)
    x = MLP(module.hidden_dims, module.layer_norm, module.init_scale, layer_init=inits,
            name="MLP_0")(x)
    kernel_init, bias_init = inits(x.shape[-1])
    return Dense(module.num_classes, kernel_init=kernel_init, bias_init=bias_init,
                 name="Dense_0")(x)


class ConvClassifier(nn.Module):
    """Images (..., height, width, channels) -> conv blocks -> MLP -> logits; `train` uses the
    batch's statistics in BatchNorm and updates the running ones (mutable "batch_stats")."""

    channels: Sequence[int]
    hidden_dims: Sequence[int]
    num_classes: int
    layer_norm: bool = True
    init_scale: float = RELU_GAIN
    init_scheme: str = DEFAULT_INIT

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        for i, width in enumerate(self.channels):
            kernel_init, bias_init = _layer_init(self)(9 * x.shape[-1])  # 3 x 3 taps
            x = nn.Conv(width, (3, 3), padding="SAME", kernel_init=kernel_init,
                        bias_init=bias_init, name=f"Conv_{i}")(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=BATCH_NORM_MOMENTUM,
                             epsilon=BATCH_NORM_EPSILON, name=f"BatchNorm_{i}")(x)
            x = nn.relu(x)
            self.sow("intermediates", f"hidden_{i}", jnp.mean(x, axis=(-3, -2)))
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape(*x.shape[:-3], -1)
        return _mlp_head(self, x)
