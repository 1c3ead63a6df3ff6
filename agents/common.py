"""Pieces the agents share: the batch type, the temperature module, Polyak averaging."""

import dataclasses
import math
from collections.abc import Callable
from typing import NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState


def check_finite_numbers(config) -> None:
    """ValueError naming the first float field of a config dataclass that is NaN or infinite
    (comparisons with NaN are all false, so range checks alone let it through)."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{field.name} must be a finite number, got {value}")


class Batch(NamedTuple):
    """Transitions; every field has the same leading axes, e.g. `(batch,)` or `(utd, batch)`."""

    observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    next_observations: jax.Array
    masks: jax.Array


class Temperature(nn.Module):
    """A learned positive scalar stored as its logarithm."""

    init_value: float = 1.0

    @nn.compact
    def __call__(self) -> jax.Array:
        log_value = self.param("log_value", nn.initializers.constant(jnp.log(self.init_value)), ())
        return jnp.exp(log_value)


def polyak(online, target, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


def sow_features(apply_fn: Callable, params, *inputs: jax.Array) -> dict[str, jax.Array]:
    """Hidden activations recorded by `sow(...)`, keyed by their '/'-joined module path."""
    _, state = apply_fn({"params": params}, *inputs, mutable=["intermediates"])
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(state["intermediates"]), sep="/")
    return {path: value[0] for path, value in flat.items()}


def train_state(apply_fn: Callable, params, tx: optax.GradientTransformation) -> TrainState:
    """A TrainState whose step counter is a strongly typed int32 array.

    `TrainState.create` stores the Python int 0, which jit caches differently from the array
    the first update returns; that would compile the update twice.
    """
    state = TrainState.create(apply_fn=apply_fn, params=params, tx=tx)
    return state.replace(step=jnp.zeros((), jnp.int32))
