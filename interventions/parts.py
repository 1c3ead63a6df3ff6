"""Address parts of an agent state by dot-paths ("actor.params", "target_critic_params").

A path walks the pytree fields of dataclasses (`flax.struct.dataclass`, flax `TrainState`) and the
keys of mappings (param dicts). Paths are resolved in Python, so these functions are jittable.
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

PyTree = Any


def _pytree_fields(node: Any) -> list[str]:
    """Names of a dataclass node's pytree fields (not static ones such as apply_fn, tx)."""
    return [f.name for f in dataclasses.fields(node) if f.metadata.get("pytree_node", True)]


def part_paths(state: PyTree, prefix: str = "") -> list[str]:
    """Every dot-path to a dataclass field of `state`, outermost first."""
    if not dataclasses.is_dataclass(state):
        return []
    paths = []
    for name in _pytree_fields(state):
        path = f"{prefix}{name}"
        paths += [path] + part_paths(getattr(state, name), f"{path}.")
    return paths


def _unknown(state: PyTree, path: str, node: Any, name: str) -> ValueError:
    known = ", ".join(part_paths(state)) or "(none: state is not a dataclass)"
    here = f"; keys here: {', '.join(map(str, node))}" if isinstance(node, Mapping) else ""
    return ValueError(f"unknown part {path!r}: no field or key {name!r}{here}; known: {known}")


def _child(state: PyTree, path: str, node: Any, name: str) -> Any:
    if dataclasses.is_dataclass(node) and name in _pytree_fields(node):
        return getattr(node, name)
    if isinstance(node, Mapping) and name in node:
        return node[name]
    raise _unknown(state, path, node, name)


def get_part(state: PyTree, path: str) -> PyTree:
    """The subtree of `state` at a dot-path, e.g. get_part(state, "critic.params")."""
    node = state
    for name in path.split("."):
        node = _child(state, path, node, name)
    return node


def _set(node: Any, names: list[str], value: Any) -> Any:
    """A copy of `node` with the subtree at `names` replaced by `value`."""
    if not names:
        return value
    name, rest = names[0], names[1:]
    if dataclasses.is_dataclass(node):
        return dataclasses.replace(node, **{name: _set(getattr(node, name), rest, value)})
    return type(node)({**node, name: _set(node[name], rest, value)})


def set_part(state: PyTree, path: str, value: PyTree) -> PyTree:
    """A copy of `state` with the subtree at a dot-path replaced by `value`."""
    get_part(state, path)
    return _set(state, path.split("."), value)


def check_paths(state: PyTree, paths: Sequence[str]) -> list[str]:
    """Validate the paths: all exist, none repeats or lies inside another."""
    if isinstance(paths, str):
        raise ValueError(f"paths must be a sequence of dot-paths, got the string {paths!r}")
    paths = list(paths)
    for path in paths:
        get_part(state, path)
    for i, outer in enumerate(paths):
        for j, inner in enumerate(paths):
            if i != j and (inner == outer or inner.startswith(outer + ".")):
                raise ValueError(f"parts {outer!r} and {inner!r} overlap; give each part once")
    return paths


def map_parts(state: PyTree, paths: Sequence[str], fn: Callable[[PyTree], PyTree]) -> PyTree:
    """`state` with fn applied to each selected subtree, e.g. fn = partial(singular_clip, c=4.0)."""
    for path in check_paths(state, paths):
        state = _set(state, path.split("."), fn(get_part(state, path)))
    return state


def _signature(tree: PyTree) -> list:
    """Leaf paths, shapes and dtypes; static fields (apply_fn, tx) may differ between inits."""
    return [
        (jax.tree_util.keystr(path), np.shape(x), getattr(x, "dtype", type(x)))
        for path, x in jax.tree_util.tree_leaves_with_path(tree)
    ]


def replace_parts(state: PyTree, source: PyTree, paths: Sequence[str]) -> PyTree:
    """`state` with the selected subtrees taken from `source`, a state of the same structure
    (a fresh init for a fresh-key reset, the stored initial state for a same-init reset)."""
    for path in check_paths(state, paths):
        new = get_part(source, path)
        if _signature(new) != _signature(get_part(state, path)):
            raise ValueError(
                f"part {path!r} of the source differs in leaf paths, shapes or dtypes from the "
                "state's; the source must be a state built with the same config and seeds"
            )
        state = _set(state, path.split("."), new)
    return state


def optimizer_owners(state: PyTree, paths: Sequence[str]) -> list[str]:
    """The parts that hold the optimizer of each path's parameters: the nearest part at or
    above the path with an `opt_state` and its `tx` (a flax TrainState: "actor" for
    "actor.params"), once each; a path with none (a target network's) gives none."""
    owners = []
    for path in paths:
        names = path.split(".")
        for n in range(len(names), 0, -1):
            owner = ".".join(names[:n])
            node = get_part(state, owner)
            if hasattr(node, "opt_state") and hasattr(node, "tx"):
                if owner not in owners:
                    owners.append(owner)
                break
    return owners


def check_networks(parts: Sequence[str], learner: Any, flag: str, trained: bool) -> None:
    """ValueError naming `--flag` unless each part is a whole network's parameters (a value of
    `learner.networks`) and, with `trained`, one that gradient steps train (its features and loss
    gradients exist: `learner.train_parts`). Nothing is checked without a learner."""
    if learner is None:
        return
    known = tuple(learner.train_parts if trained else learner.networks.values())
    for path in parts:
        if path not in known:
            what = "the parameters of a trained network" if trained else "a network's parameters"
            raise ValueError(f"--{flag}={path} is not {what}; accepted: {', '.join(known)}")
