"""Resets: put chosen parts of an agent state back to initial values (docs/algorithms.md, Reset).

SAC re-initialises with a fresh key; BRO returns to the weights the run started from. Both take
the selected parts (actor, critic, target, temperature, optimizer states, ...) from a state of the
same structure and keep every other part bit-identical (e.g. the rng, the replay buffer outside).
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax

from interventions.parts import replace_parts

PyTree = Any


def fresh_reset(
    state: PyTree, paths: Sequence[str], init_fn: Callable[[jax.Array], PyTree], key: jax.Array
) -> PyTree:
    """Re-initialise the parts at `paths` from init_fn(key), a new state with a fresh key.

    With a seed axis, init_fn is the seed-vmapped init and key holds one key per seed (seeds,).
    """
    return replace_parts(state, init_fn(key), paths)


def initial_reset(state: PyTree, initial: PyTree, paths: Sequence[str]) -> PyTree:
    """Set the parts at `paths` back to their values in `initial`, the run's starting state."""
    return replace_parts(state, initial, paths)
