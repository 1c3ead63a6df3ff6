"""ReDo (Sokar et al. 2023, "The Dormant Neuron Phenomenon in Deep RL"): recycle dormant units.

A unit's score on a batch is s_i = E|h_i| / (mean_j E|h_j| + 1e-9) (the expectation over the
batch, and a conv's positions). Each unit with s_i <= tau gets its incoming kernel column and
normalisation scale from a fresh initialisation and its biases zeroed; its outgoing weights are
zeroed, and so are the Adam moments of all of these (the step count is kept). Which parameters
those are: interventions/units.py. The rule follows google/dopamine
dopamine/labs/redo/weight_recyclers.py (`NeuronRecycler`, `estimate_neuron_score`); the bias
moments are zeroed too, as timoklein/redo src/redo.py `_reset_adam_moments` does.
"""

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from interventions import units
from interventions.moments import map_moments
from interventions.parts import check_networks, get_part, optimizer_owners, set_part
from interventions.registry import (
    EventContext,
    Method,
    SettingError,
    Settings,
    parts_setting,
    setting,
)

PyTree = Any


@dataclasses.dataclass(frozen=True)
class RedoConfig(Settings):
    tau: float = setting(0.025, "Dormancy threshold: a unit whose mean |activation|, divided by "
                         "its layer's mean, is <= tau is recycled (Plasticine's ReDo for DMC; "
                         "timoklein/redo uses 0.1).")
    batch_size: int = setting(64, "Replay transitions the scores are measured on (ReDo's 64).")
    parts: tuple[str, ...] = parts_setting("ReDo (trained networks' parameters)")

    def check(self):
        if not (isinstance(self.tau, int | float) and 0 <= self.tau < math.inf):
            raise SettingError("tau", f"tau must be a finite number >= 0, got {self.tau}")
        if not (isinstance(self.batch_size, int) and self.batch_size > 0):
            raise SettingError("batch_size", f"batch_size must be a positive int, got "
                               f"{self.batch_size}")


def _merge(masks: dict, new: dict) -> None:
    for path, mask in new.items():
        masks[path] = masks[path] | mask if path in masks else mask


def recycle(params: PyTree, fresh: PyTree, features: dict[str, jax.Array],
            tau: float) -> tuple[PyTree, dict[str, jax.Array]]:
    """`params` (one network, one seed) with the dormant units of each feature in `features`
    ({sown path: (lead..., batch, ..., units)}) recycled from `fresh` (a new initialisation of
    the same network), and {leaf path: mask} of the entries changed."""
    leaves = units.leaves_by_path(params)
    incoming, outgoing = {}, {}
    for path, unit in units.unit_layers(params, list(features)).items():
        kernel = leaves[f"{unit.producer.kernels[0]}/kernel"]
        scores = units.dormant_scores(features[path], units.batch_axes(unit.producer, kernel))
        new_in, new_out = units.unit_masks(params, unit, scores <= tau)
        _merge(incoming, new_in)
        _merge(outgoing, new_out)
    fresh_leaves = units.leaves_by_path(fresh)

    def one(path, x):
        if path in incoming:
            new = jnp.zeros_like(x) if path.endswith("/bias") else fresh_leaves[path]
            x = jnp.where(incoming[path], new, x)
        if path in outgoing:
            x = jnp.where(outgoing[path], jnp.zeros_like(x), x)
        return x

    changed = {}
    # In a fixed order: the traced program, and with it its compilation cache key, must not
    # depend on a set's (hash seeded) order.
    for path in sorted(incoming.keys() | outgoing.keys()):
        shape = leaves[path].shape
        changed[path] = (jnp.broadcast_to(incoming.get(path, False), shape)
                         | jnp.broadcast_to(outgoing.get(path, False), shape))
    return units.map_by_path(one, params), changed


def zero_moments(opt_state: PyTree, params: PyTree, changed: dict[str, jax.Array]) -> PyTree:
    """`opt_state` with every per-parameter moment zeroed where `changed` ({leaf path: mask})
    says; step counts and other entries kept."""
    def zero(moments):
        return units.map_by_path(
            lambda path, m: jnp.where(changed[path], jnp.zeros_like(m), m)
            if path in changed else m, moments)

    return map_moments(opt_state, params, zero)


def apply(state, parts, cfg: RedoConfig, ctx: EventContext):
    """Recycle the dormant units of each part's network, scored on `ctx.data` (all its
    minibatches together), from `ctx.fresh`; the optimizer moments of what changed zeroed."""
    batch = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), ctx.data)
    features = ctx.learner.features(state, batch)
    network = {path: name for name, path in ctx.learner.networks.items()}
    for part in parts:
        params, changed = recycle(get_part(state, part), get_part(ctx.fresh, part),
                                  features[network[part]], cfg.tau)
        state = set_part(state, part, params)
        for owner in optimizer_owners(state, [part]):
            train_state = get_part(state, owner)
            within = part.removeprefix(f"{owner}.params").lstrip(".").replace(".", "/")
            changed = {f"{within}/{path}" if within else path: mask
                       for path, mask in changed.items()}
            opt_state = zero_moments(train_state.opt_state, train_state.params, changed)
            state = set_part(state, owner, train_state.replace(opt_state=opt_state))
    return state


def validate(state, parts, cfg: RedoConfig, learner) -> None:
    """Each part is a trained network's parameters whose units the rule of units.py reads."""
    flag = METHOD.flag("parts")
    check_networks(parts, learner, flag, trained=True)
    for part in parts:
        try:
            units.topology(get_part(state, part))
        except ValueError as error:
            raise ValueError(f"--{flag}={part}: {error}") from None


METHOD = Method(
    name="redo",
    kind="event",
    config=RedoConfig,
    summary="ReDo: recycle dormant units (incoming weights re-initialised, outgoing zeroed, "
            "their Adam moments zeroed), scored on a replay batch.",
    default_parts="train_parts",
    apply=apply,
    needs=("fresh", "data"),
    data_shape=lambda cfg: (1, cfg.batch_size),
    every=(1000, "grad_steps"),
    validate=validate,
)
