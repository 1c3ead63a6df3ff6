"""Normalize-and-Project (Lyle et al. 2024, "Normalization and effective learning rates in
reinforcement learning"): after every gradient step, each projected kernel goes back to its
initial Frobenius norm, and each normalization layer's scale and offset, together, to theirs.

A kernel that a normalization layer follows is scale-invariant (the network computes the same
function at any norm of it), so its projection changes only its effective learning rate; those
are the kernels projected by default. Output layers (nothing normalizes them: their norm sets
the scale of Q-values and action means) are projected with `layers=all`. Dense biases are left
alone: they start at zero, so there is no initial norm to keep. Kernels with leading axes (a
critic ensemble's) are projected per member. Adam's state is not touched.
"""

import dataclasses

import jax.numpy as jnp

from interventions import layer_roles
from interventions.matrices import KERNEL_KEY, matrix_shape
from interventions.registry import Method, Settings, parts_setting, setting

LAYERS = ("normalized", "all")


@dataclasses.dataclass(frozen=True)
class NapConfig(Settings):
    layers: str = setting("normalized", "Which kernels go back to their initial norm: those a "
                          "normalization layer follows (normalized; the projection leaves the "
                          "function as it is), or every kernel, output layers too (all). Every "
                          "normalization layer's scale and offset are projected either way.",
                          LAYERS)
    parts: tuple[str, ...] = parts_setting("NaP")


def _groups(params, cfg: NapConfig) -> list[tuple[int, ...]]:
    """The leaf indices projected together: one kernel, or one normalization layer's scale and
    offset; ValueError when a part holds nothing to project."""
    flat = layer_roles.flatten(params)
    normalized = layer_roles.norm_after(params)
    chosen = set(layer_roles.layers(params) if cfg.layers == "all" else normalized)
    groups, norms = [], {}
    for i, path in enumerate(flat.paths):
        module = path[:-1]
        if path[-1] == KERNEL_KEY and module in chosen:
            groups.append((i,))
        elif layer_roles.is_norm(module):
            norms.setdefault(module, []).append(i)
    if not any(flat.paths[g[0]][-1] == KERNEL_KEY for g in groups):
        raise ValueError("no kernel here is followed by a normalization layer (LayerNorm_i "
                         "beside Dense_i), which NaP's projection needs; use --nap_layers=all "
                         "to project every kernel")
    return groups + [tuple(indices) for indices in norms.values()]


def _member_norm(flat, group: tuple[int, ...]) -> jnp.ndarray:
    """The Frobenius norm of a group's leaves over their own axes, per leading (ensemble) axis:
    shape (batch...,), () for a single network."""
    total = 0.0
    for i in group:
        leaf, path = flat.leaves[i], flat.paths[i]
        if path[-1] == KERNEL_KEY:
            view = leaf.reshape(matrix_shape(path, leaf.shape, 2))  # a conv's as (.., k*in, out)
            total = total + jnp.sum(jnp.square(view), axis=(-2, -1))
        else:
            total = total + jnp.sum(jnp.square(leaf), axis=-1)
    return jnp.sqrt(total)


def init(params, cfg: NapConfig) -> tuple:
    """The initial norm of every projected group, in `_groups` order."""
    flat = layer_roles.flatten(params)
    return tuple(_member_norm(flat, group) for group in _groups(params, cfg))


def project(params, aux: tuple, cfg: NapConfig):
    """Each group rescaled to its initial norm (a zero group stays zero); other leaves as given."""
    flat = layer_roles.flatten(params)
    leaves = list(flat.leaves)
    for group, initial in zip(_groups(params, cfg), aux, strict=True):
        norm = _member_norm(flat, group)
        factor = jnp.where(norm > 0, initial / norm, 1.0)
        for i in group:
            extra = leaves[i].ndim - factor.ndim
            leaves[i] = leaves[i] * factor.reshape(factor.shape + (1,) * extra)
    return flat.rebuild(leaves)


METHOD = Method(
    name="nap",
    kind="projection",
    config=NapConfig,
    summary="NaP: after every gradient step, kernels and normalization parameters go back to "
            "their initial norms (Lyle et al. 2024).",
    default_parts="train_parts",
    init=init,
    project=project,
)
