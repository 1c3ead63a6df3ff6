"""A minibatch of transitions, the RL learners' data (the replay buffers sample it)."""

from typing import NamedTuple

import jax


class Batch(NamedTuple):
    """Transitions; every field has the same leading axes, e.g. `(batch,)` or `(utd, batch)`."""

    observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    next_observations: jax.Array
    masks: jax.Array
