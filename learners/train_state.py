"""The TrainState (parameters, optimizer and its state) every learner trains its networks in."""

import functools
from collections.abc import Callable

import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState


def train_state(apply_fn: Callable, params, tx: optax.GradientTransformation) -> TrainState:
    """A TrainState whose step counter is a strongly typed int32 array.

    `TrainState.create` stores the Python int 0, which jit caches differently from the array
    the first update returns; that would compile the update twice.
    """
    state = TrainState.create(apply_fn=apply_fn, params=params, tx=tx)
    return state.replace(step=jnp.zeros((), jnp.int32))


@functools.lru_cache(maxsize=256)
def shared(make: Callable, *args, **kwargs):
    """`make(*args, **kwargs)` (a network module, an optimizer), one object per process for equal
    arguments. A TrainState's apply function and optimizer are static parts of its pytree
    structure: states made of the same objects have equal structures, so a jitted function
    called with the state of a later run of one config reuses the programs of an earlier one."""
    return make(*args, **kwargs)
