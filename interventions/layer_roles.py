"""The roles of a network's parameters, read from its Flax param tree: which modules are layers
(hold a kernel), which are normalization layers, which normalization follows which layer, and
which layers are the network's outputs.

Flax names submodules by class and index (`Dense_0`, `LayerNorm_0`, `Conv_1`, `BatchNorm_1`),
and the networks here pair a layer with the normalization after it by that index (`Dense_i`
then `LayerNorm_i`, as `networks.MLP` and `BroBlock` build them). An output layer is a layer at
the network's top level that no normalization follows: the SAC critic's `net/Dense_0`, the
policy heads `mean` and `log_std`, BRO's `quantiles` and `shift`; everything inside a trunk
(`MLP_0`, `BroNet_0`) is hidden. The top level is the tree's root below single-key wrappers
(an ensemble's `net`). Roles are read within the tree given, so a part that is a subtree of a
network has its own top level.
"""

import re
from typing import Any, NamedTuple

import jax

from interventions.matrices import KERNEL_KEY, _key_name

PyTree = Any
Path = tuple[str, ...]  # a module's or a leaf's keys from the tree's root
NORM_PREFIXES = ("LayerNorm", "BatchNorm")
_INDEXED = re.compile(r"^(Dense|Conv)_(\d+)$")


class Leaves(NamedTuple):
    """A param tree flattened: each leaf with its path of key names, and how to rebuild it."""

    paths: list[Path]
    leaves: list[Any]
    treedef: Any

    def rebuild(self, leaves: list[Any]) -> PyTree:
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


def flatten(params: PyTree) -> Leaves:
    """The leaves of a param tree with their key-name paths, in `jax.tree.leaves` order."""
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(params)
    paths = [tuple(_key_name(key) for key in path) for path, _ in with_paths]
    return Leaves(paths, [leaf for _, leaf in with_paths], treedef)


def is_norm(module: Path) -> bool:
    """True for a normalization layer's module (named LayerNorm... or BatchNorm...)."""
    return bool(module) and module[-1].startswith(NORM_PREFIXES)


def layers(params: PyTree) -> list[Path]:
    """The modules that hold a kernel (Dense, Conv, the heads), in leaf order."""
    return [path[:-1] for path, leaf in zip(*flatten(params)[:2], strict=True)
            if path[-1] == KERNEL_KEY and getattr(leaf, "ndim", 0) >= 2]


def norm_after(params: PyTree) -> dict[Path, Path]:
    """{layer: the normalization layer that follows it}: `Dense_i` or `Conv_i` with a
    `LayerNorm_i` or `BatchNorm_i` beside it."""
    modules = {path[:-1] for path in flatten(params).paths}
    found = {}
    for layer in layers(params):
        match = _INDEXED.match(layer[-1]) if layer else None
        if match is None:
            continue
        for prefix in NORM_PREFIXES:
            norm = (*layer[:-1], f"{prefix}_{match.group(2)}")
            if norm in modules:
                found[layer] = norm
    return found


def top_level(params: PyTree) -> Path:
    """The path of the network's top level: the root below single-key wrappers that are not
    themselves layers (`{"net": {...}}` for an ensemble's vmapped network)."""
    node, path = params, ()
    while (hasattr(node, "keys") and len(node) == 1 and KERNEL_KEY not in node
           and hasattr(next(iter(node.values())), "keys")):
        key = next(iter(node))
        node, path = node[key], (*path, str(key))
    return path


def output_layers(params: PyTree) -> set[Path]:
    """The layers at the network's top level that no normalization follows."""
    top, normalized = top_level(params), norm_after(params)
    return {layer for layer in layers(params)
            if layer[:-1] == top and layer not in normalized}


def hidden_layers(params: PyTree) -> list[Path]:
    """Every layer but the output layers, in leaf order."""
    outputs = output_layers(params)
    return [layer for layer in layers(params) if layer not in outputs]
