"""Layer reset (Nikishin et al. 2022, "The Primacy Bias in Deep RL", Atari): re-initialise only
the last k layers of each network, with their optimizer moments.

A network's layers in forward order are those of interventions/units.py; its heads (a policy's
mean and log-std, a critic's output) count as one layer, its last. Each of the last k layers
(kernel, bias and its normalisation) comes from what a reset of this learner goes back to
(SAC: a fresh initialisation; BRO: the run's first weights), and so do the Adam moments of
those entries; step counts and every other parameter are kept.
"""

import dataclasses
import functools
from typing import Any

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
class LayerResetConfig(Settings):
    layers: int = setting(1, "How many of each network's last layers are reset (its heads "
                          "count as one layer).")
    parts: tuple[str, ...] = parts_setting("a layer reset (networks' parameters)")

    def check(self):
        if not (isinstance(self.layers, int) and self.layers > 0):
            raise SettingError("layers", f"layers must be a positive int, got {self.layers}")


def _under(modules: tuple[str, ...], within: str = ""):
    """Whether a leaf path ('/'-joined) lies in one of `modules`, all below `within`."""
    prefix = f"{within}/" if within else ""
    return lambda path: any(path.startswith(f"{prefix}{m}/") for m in modules)


def take_layers(tree: PyTree, source: PyTree, inside) -> PyTree:
    """`tree` with the leaves whose path `inside` accepts taken from `source` (same tree)."""
    new = units.leaves_by_path(source)
    return units.map_by_path(lambda path, x: new[path] if inside(path) else x, tree)


def apply(state, parts, cfg: LayerResetConfig, ctx: EventContext):
    """The last `cfg.layers` layers of each part, and their moments, from `ctx.reinit`."""
    for part in parts:
        modules = units.last_layers(get_part(state, part), cfg.layers)
        state = set_part(state, part, take_layers(get_part(state, part),
                                                  get_part(ctx.reinit, part), _under(modules)))
        for owner in optimizer_owners(state, [part]):
            train_state = get_part(state, owner)
            within = part.removeprefix(f"{owner}.params").lstrip(".").replace(".", "/")
            opt_state = map_moments(
                train_state.opt_state, train_state.params,
                functools.partial(take_layers, inside=_under(modules, within)),
                get_part(ctx.reinit, owner).opt_state)
            state = set_part(state, owner, train_state.replace(opt_state=opt_state))
    return state


def validate(state, parts, cfg: LayerResetConfig, learner) -> None:
    """Each part is a network's parameters with at least `cfg.layers` layers under the rule
    of units.py."""
    flag = METHOD.flag("parts")
    check_networks(parts, learner, flag, trained=False)
    for part in parts:
        try:
            layers = units.topology(get_part(state, part)).layers
        except ValueError as error:
            raise ValueError(f"--{flag}={part}: {error}") from None
        if cfg.layers > len(layers):
            names = ", ".join("+".join(layer.kernels) for layer in layers)
            raise ValueError(f"--{METHOD.flag('layers')}={cfg.layers}: {part} has "
                             f"{len(layers)} layers ({names}); give at most {len(layers)}")


METHOD = Method(
    name="layer_reset",
    kind="event",
    config=LayerResetConfig,
    summary="Layer reset: re-initialise the last k layers of each network (heads = the last "
            "layer) and their optimizer moments, as a reset would.",
    default_parts="param_parts",
    apply=apply,
    needs=("reinit",),
    validate=validate,
)
