"""Hidden units of a Flax param tree: a unit's incoming and outgoing parameters, and a network's
layers in forward order, read from the module names that networks/ uses.

The rule, per module scope of a network's parameters:

- A weight layer holds a `kernel`: `Conv_i` or `Dense_i` (flax's automatic names) or a named head
  (`mean`, `log_std`, `quantiles`, `shift`, any other name). `BatchNorm_i` normalises `Conv_i`;
  `LayerNorm_i` normalises `Dense_i`. `block_i` is a residual block. Any other module holding
  modules is a body (`MLP_0`, `BroNet_0`, a critic's `net`).
- Forward order in a scope: Conv_0, Conv_1, ..., its body (at most one), Dense_0, Dense_1, ...,
  block_0, block_1, ..., then its named heads, which read the same input and count as one
  layer. A network's layers are this order with bodies and blocks expanded in place; each layer
  must read as many inputs as the one before gives (after a conv, a Dense reads the flattened
  (h, w, c) input: a multiple of the channels).
- A feature sown as `hidden_k` in a scope is the output (after normalisation and ReLU) of the
  scope's k-th Conv/Dense layer (Conv layers first); `relu` in a residual block is its Dense_0's.
  A unit's incoming parameters are its entry of that layer's kernel on the last axis, of its
  bias and of its normalisation's scale and bias; its outgoing weights are its input rows of the
  next layer in forward order (after a conv, the Dense rows r with r mod channels = the unit).
- A residual stream has no units of its own: `residual` features, and every feature of a scope
  that holds residual blocks (its stem's output is the start of the stream), are left out.

Leading kernel axes (an nn.vmap ensemble's: SAC critic kernels are (2, in, out)) are batch axes:
units are per member. Conv kernels are 2-D, (kh, kw, in, out). Whatever the rule does not cover
is a ValueError naming the module, so that no method recycles or resets weights it misreads.
"""

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from interventions.matrices import KERNEL_KEY, _key_name
from learners.features import RESIDUAL

PyTree = Any
NORM_OF = {"Conv": "BatchNorm", "Dense": "LayerNorm"}  # the normalisation each kind pairs with
WEIGHT_KEYS = {KERNEL_KEY, "bias"}
NORM_KEYS = {"scale", "bias"}
HIDDEN = re.compile(r"hidden_(\d+)")
BLOCK_FEATURE = "relu"  # a residual block's hidden units: its Dense_0's output after the ReLU
CONV_SPATIAL_NDIM = 2


class Layer(NamedTuple):
    """One layer in forward order: its weight modules ('/'-paths; several for parallel heads)
    and the normalisation module after it, if any."""

    kernels: tuple[str, ...]
    norm: str | None
    conv: bool

    @property
    def modules(self) -> tuple[str, ...]:
        return self.kernels + ((self.norm,) if self.norm else ())


class Topology(NamedTuple):
    """A network's layers in forward order, and each scope's own Conv/Dense layers (the
    producers of its `hidden_k` features) and whether it holds residual blocks."""

    layers: tuple[Layer, ...]
    own: dict[str, tuple[Layer, ...]]
    residual_scopes: frozenset[str]


def _join(scope: str, name: str) -> str:
    return f"{scope}/{name}" if scope else name


def _indexed(names: list[str], kind: str, scope: str) -> list[str]:
    """`kind_0, kind_1, ...` sorted by index; ValueError unless the indices are 0..n-1."""
    ordered = sorted(names, key=lambda n: int(n.rsplit("_", 1)[1]))
    if [int(n.rsplit("_", 1)[1]) for n in ordered] != list(range(len(ordered))):
        raise ValueError(f"{scope or 'the network'} has {', '.join(ordered)}: {kind} layers must "
                         f"be numbered 0, 1, ... to tell their order")
    return ordered


def _scope(tree: Mapping, scope: str, own: dict, residual: set) -> list[Layer]:
    """The layers of one scope in forward order, its sub-scopes expanded."""
    weights = {"Conv": [], "Dense": []}
    norms, blocks, bodies, heads = {}, [], [], []
    for name, child in tree.items():
        path = _join(scope, name)
        if not isinstance(child, Mapping):
            raise ValueError(f"{path}: a parameter outside any layer module; the unit rule "
                             "(interventions/units.py) covers Dense, Conv, LayerNorm and "
                             "BatchNorm modules")
        kind = re.fullmatch(r"(Conv|Dense|LayerNorm|BatchNorm|block)_(\d+)", name)
        leaves = [k for k, v in child.items() if not isinstance(v, Mapping)]
        if KERNEL_KEY in child:
            if set(child) - WEIGHT_KEYS:
                raise ValueError(f"{path} holds {sorted(child)}; a weight layer holds a kernel "
                                 "and a bias")
            if kind and kind[1] in weights:
                weights[kind[1]].append(name)
            else:
                heads.append(path)
        elif kind and kind[1] in NORM_OF.values():
            if set(child) - NORM_KEYS:
                raise ValueError(f"{path} holds {sorted(child)}; a normalisation holds a scale "
                                 "and a bias")
            norms[name] = path
        elif leaves:
            raise ValueError(f"{path} holds parameters {sorted(leaves)} but is no Dense_i, "
                             "Conv_i, LayerNorm_i, BatchNorm_i or named layer with a kernel")
        elif kind and kind[1] == "block":
            blocks.append(name)
        else:
            bodies.append(name)
    if len(bodies) > 1:
        raise ValueError(f"{scope or 'the network'} holds the modules {', '.join(bodies)}, whose "
                         "order the unit rule cannot tell; give a scope one body module")
    mine = []
    for kind in ("Conv", "Dense"):
        for name in _indexed(weights[kind], kind, scope):
            norm = f"{NORM_OF[kind]}_{name.rsplit('_', 1)[1]}"
            mine.append(Layer((_join(scope, name),), norms.pop(norm, None), kind == "Conv"))
    if norms:
        extra = sorted(norms.values())
        raise ValueError(f"{extra[0]} normalises no layer: BatchNorm_i follows Conv_i, "
                         "LayerNorm_i follows Dense_i")
    own[scope] = tuple(mine)
    if blocks:
        residual.add(scope)
    convs, denses = mine[:len(weights["Conv"])], mine[len(weights["Conv"]):]
    body = [layer for name in bodies for layer in _scope(tree[name], _join(scope, name), own,
                                                         residual)]
    stream = [layer for name in _indexed(blocks, "block", scope)
              for layer in _scope(tree[name], _join(scope, name), own, residual)]
    tail = [Layer(tuple(sorted(heads)), None, False)] if heads else []
    return convs + body + denses + stream + tail


def _path(key_path) -> str:
    return "/".join(_key_name(k) for k in key_path)


def leaves_by_path(params: PyTree) -> dict[str, jax.Array]:
    """Every leaf of a param tree by its '/'-joined key path ("MLP_0/Dense_0/kernel")."""
    return {_path(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}


def map_by_path(fn, tree: PyTree) -> PyTree:
    """`tree` with each leaf replaced by fn('/'-joined key path, leaf)."""
    return jax.tree_util.tree_map_with_path(lambda path, leaf: fn(_path(path), leaf), tree)


def batch_axes(layer: Layer, kernel: jax.Array) -> int:
    """How many leading (ensemble) axes a layer's kernel carries."""
    core = CONV_SPATIAL_NDIM + 2 if layer.conv else 2
    if kernel.ndim < core:
        raise ValueError(f"{layer.kernels[0]}: kernel of shape {kernel.shape} has fewer than "
                         f"{core} axes")
    return kernel.ndim - core


def _inputs(leaves: dict, layer: Layer) -> list[int]:
    return [leaves[f"{k}/{KERNEL_KEY}"].shape[-2] for k in layer.kernels]


def _check_chain(leaves: dict, layers: tuple[Layer, ...]) -> None:
    """ValueError unless each layer reads what the one before gives (unit rows, or after a conv
    a multiple of its channels)."""
    for before, after in zip(layers, layers[1:], strict=False):
        units = leaves[f"{before.kernels[0]}/{KERNEL_KEY}"].shape[-1]
        for kernel, rows in zip(after.kernels, _inputs(leaves, after), strict=True):
            flattened = before.conv and not after.conv and rows % units == 0
            if rows != units and not flattened:
                raise ValueError(f"{kernel} reads {rows} inputs after {before.kernels[0]}, "
                                 f"which gives {units}: the unit rule's forward order does not "
                                 "fit this network")


def topology(params: PyTree) -> Topology:
    """The layers of a network's param tree (one seed; may be abstract) in forward order;
    ValueError (naming the module) for a tree the rule does not cover."""
    own, residual = {}, set()
    layers = tuple(_scope(params, "", own, residual))
    if not layers:
        raise ValueError("the network holds no weight layer")
    leaves = leaves_by_path(params)
    for layer in layers:
        for kernel in layer.kernels:
            batch_axes(layer, leaves[f"{kernel}/{KERNEL_KEY}"])
    _check_chain(leaves, layers)
    return Topology(layers, own, frozenset(residual))


def last_layers(params: PyTree, k: int) -> tuple[str, ...]:
    """The module paths (weight layers and their normalisations) of a network's last k layers;
    parallel heads count as one layer."""
    layers = topology(params).layers
    if not 1 <= k <= len(layers):
        raise ValueError(f"the network has {len(layers)} layers "
                         f"({', '.join('+'.join(layer.kernels) for layer in layers)}), so its "
                         f"last {k} cannot be taken")
    return tuple(m for layer in layers[-k:] for m in layer.modules)


class UnitLayer(NamedTuple):
    """A feature's hidden units: the layer producing them and the layer reading them."""

    producer: Layer
    consumer: Layer


def unit_layers(params: PyTree, features: list[str]) -> dict[str, UnitLayer]:
    """The producer and consumer of each feature (by its sown path, e.g. "MLP_0/hidden_1")
    with hidden units; residual-stream features are left out. ValueError for a feature the rule
    does not cover."""
    topo = topology(params)
    out = {}
    for path in features:
        scope, _, name = path.rpartition("/")
        if name == RESIDUAL or scope in topo.residual_scopes:
            continue
        hidden = HIDDEN.fullmatch(name)
        block = re.fullmatch(r"(.*/)?block_\d+", scope) and name == BLOCK_FEATURE
        if not (hidden or block) or scope not in topo.own:
            raise ValueError(f"feature {path!r}: the unit rule knows hidden_k in a module "
                             "scope and relu in a residual block (interventions/units.py)")
        k = int(hidden[1]) if hidden else 0
        mine = topo.own[scope]
        if k >= len(mine):
            raise ValueError(f"feature {path!r}: {scope or 'the network'} has {len(mine)} "
                             f"Conv/Dense layers, none numbered {k}")
        at = topo.layers.index(mine[k])
        if at + 1 == len(topo.layers):
            raise ValueError(f"feature {path!r} is the network's output, which has no units to "
                             "recycle")
        out[path] = UnitLayer(mine[k], topo.layers[at + 1])
    return out


def dormant_scores(features: jax.Array, lead: int) -> jax.Array:
    """Each unit's mean |activation| over the batch (and a conv's positions), divided by the
    layer's mean over units (+ 1e-9, as dopamine's ReDo): (lead..., batch, ..., units) ->
    (lead..., units)."""
    axes = tuple(range(lead, features.ndim - 1))
    score = jnp.mean(jnp.abs(features), axis=axes)
    return score / (jnp.mean(score, axis=-1, keepdims=True) + 1e-9)


def unit_masks(params: PyTree, unit: UnitLayer, dead: jax.Array) -> tuple[dict, dict]:
    """Masks of the entries of `dead` units (bool (lead..., units)), as ({leaf path: mask} of
    their incoming parameters, {leaf path: mask} of their outgoing weights), each mask
    broadcastable to its leaf."""
    leaves = leaves_by_path(params)
    producer, consumer = unit.producer, unit.consumer
    kernel = leaves[f"{producer.kernels[0]}/{KERNEL_KEY}"]
    lead = batch_axes(producer, kernel)
    batch, units = kernel.shape[:lead], kernel.shape[-1]
    if dead.shape != (*batch, units):
        raise ValueError(f"{producer.kernels[0]} has {units} units (batch axes {batch}), the "
                         f"feature {dead.shape}")
    incoming = {f"{producer.kernels[0]}/{KERNEL_KEY}":
                dead.reshape(*batch, *(1,) * (kernel.ndim - lead - 1), units)}
    for module in producer.modules:
        for key in ("bias", "scale"):
            if f"{module}/{key}" in leaves:
                incoming[f"{module}/{key}"] = dead
    outgoing = {}
    for name in consumer.kernels:
        nxt = leaves[f"{name}/{KERNEL_KEY}"]
        if batch_axes(consumer, nxt) != lead or nxt.shape[:lead] != batch:
            raise ValueError(f"{name} has other leading (ensemble) axes than "
                             f"{producer.kernels[0]}: {nxt.shape} and {kernel.shape}")
        rows = nxt.shape[-2]
        # After a conv, a Dense reads the (h, w, c) map flattened: row r is channel r mod c.
        per_row = dead if rows == units else jnp.tile(dead, (*(1,) * lead, rows // units))
        outgoing[f"{name}/{KERNEL_KEY}"] = per_row.reshape(
            *batch, *(1,) * (nxt.ndim - lead - 2), rows, 1)
    return incoming, outgoing
