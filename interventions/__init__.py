"""Interventions on parameter pytrees, their registry and schedules, and diagnostics.

Everything here is a pure function of pytrees and knows nothing about SAC, BRO or the continual
learner:

    registry: Method, register, methods, parse    the plasticity methods, one entry each
    make_plan(spec, settings, learner)             a run's per-step hooks and scheduled event
    singular_clip(params, c, sides=, method=, ns_steps=)   clip every weight matrix's spectrum
    get_part / map_parts / replace_parts(state, ...)       address agent-state parts by dot-path
    fresh_reset / initial_reset                            SAC-style and BRO-style resets
    make_schedule(every=, steps=)                  when interventions fire (env steps)
    weight_metrics, feature_metrics, clip_event_report     plasticity diagnostics
    weight_extremes, weight_changes, event_report          the report in parts, outside jit
    layer_roles: hidden and output layers, the normalization after a layer (from param trees)
"""

from interventions.diagnostics import (
    clip_event_report,
    dormant_ratio,
    event_report,
    feature_metrics,
    srank,
    weight_changes,
    weight_extremes,
    weight_metrics,
)
from interventions.matrices import map_weight_matrices, weight_matrices
from interventions.newton_schulz import DEFAULT_NS_STEPS, msign, ns_clip_matrices
from interventions.parts import (
    check_paths,
    get_part,
    map_parts,
    optimizer_owners,
    part_paths,
    replace_parts,
    set_part,
)
from interventions.plan import (
    EVENT_OPT_STATES,
    NO_HOOKS,
    Bound,
    Hooks,
    Plan,
    check_parts,
    make_plan,
)
from interventions.registry import (
    EventContext,
    Method,
    SettingError,
    Settings,
    parse,
    register,
    registered,
    setting,
)
from interventions.reset import fresh_reset, initial_reset
from interventions.schedule import (
    Schedule,
    make_schedule,
)
from interventions.singular_clip import singular_clip, svd_clip_matrices

# isort: split
import interventions.catalog  # noqa: F401,E402 (registers the built-in methods)

__all__ = [
    "EVENT_OPT_STATES",
    "NO_HOOKS",
    "Bound",
    "EventContext",
    "Hooks",
    "Method",
    "Plan",
    "SettingError",
    "Settings",
    "check_parts",
    "make_plan",
    "registered",
    "optimizer_owners",
    "parse",
    "register",
    "set_part",
    "setting",
    "DEFAULT_NS_STEPS",
    "Schedule",
    "check_paths",
    "clip_event_report",
    "dormant_ratio",
    "event_report",
    "feature_metrics",
    "fresh_reset",
    "get_part",
    "initial_reset",
    "make_schedule",
    "map_parts",
    "map_weight_matrices",
    "msign",
    "ns_clip_matrices",
    "part_paths",
    "replace_parts",
    "singular_clip",
    "srank",
    "svd_clip_matrices",
    "weight_matrices",
    "weight_changes",
    "weight_extremes",
    "weight_metrics",
]
