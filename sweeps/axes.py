"""A sweep's varied settings (--vary=KEY=V1,V2, a grid file's "vary", --clip_cs): the axes of
run-script flags, read and validated, which jobs each applies to, and how a run name spells them.

Each job the axes apply to is crossed with their values, getting `--KEY=<value>` on its command
line and `-KEY=<value>` in its run name (`-<label><value>`, first, for a setting its method
labels: clip's c is `-c<c>`), e.g. `clip-c2-clip_sides=upper-seed0`. A method's setting applies
to the jobs whose intervention includes the method, a setting read only with an event
(EVENT_SETTINGS) to the jobs whose intervention has one, any other setting to every job.
"""

import difflib
import math
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from continual import config as continual_config
from experiment.config import SCHEDULE_FLAGS, TrainConfig
from interventions import registry
from sweeps.run_flags import (
    CLIP_C,
    CONTINUAL,
    GRID_KEYS,
    SET_BY_SWEEP,
    TRAIN_FLAGS,
    SweepError,
    extra_settings,
    listed,
)


def run_name_part(key: str, value: str) -> str:
    """A varied setting in a run name: `<label><value>` where its method gives it a label
    (interventions.setting(label=): clip's c is c2), else `<key>=<value>`."""
    label = registry.run_label(key)
    return f"{label}{value}" if label else f"{key}={value}"


def event_settings(agent: str) -> tuple[str, ...]:
    """The run-script settings of `agent` read only with an event: a --vary axis of them
    applies to the jobs whose intervention has one."""
    if agent == CONTINUAL:
        return tuple(getattr(continual_config, "EVENT_SETTINGS", ("intervention_every",)))
    return (*SCHEDULE_FLAGS, "intervention_steps")  # --intervention_steps needs an event


def applies(agent: str, key: str, intervention: str) -> bool:
    """Whether a varied setting `key` applies to the jobs of `intervention`: a method's
    setting where the intervention includes the method, an event's setting where it has an
    event, any other setting always."""
    method = registry.owner(key)
    if method is not None:
        return method.name in registry.split(intervention)
    if key in event_settings(agent):
        return registry.event_of(intervention) is not None
    return True


def _config_types(agent: str) -> dict[str, Any]:
    """{flag: type} of the settings of run_<agent>.py: its config's fields."""
    config = continual_config.ContinualConfig if agent == CONTINUAL else TrainConfig
    return typing.get_type_hints(config)


def vary_keys(agent: str) -> tuple[str, ...]:
    """The flags of run_<agent>.py a --vary axis may set: its config's fields, less those the
    sweep sets itself (SET_BY_SWEEP, and for the RL agents TRAIN_FLAGS, its grid settings)."""
    refused = {*SET_BY_SWEEP, "agent", *(() if agent == CONTINUAL else TRAIN_FLAGS)}
    return tuple(name for name in _config_types(agent) if name not in refused)


_TRUE, _FALSE = ("true", "t", "1"), ("false", "f", "0")  # as absl reads a boolean


def _value_text(label: str, value: Any, kind: Any) -> str:
    """A varied setting's value as its jobs' flag and run name spell it: booleans as true or
    false, integers and numbers normalised (1e-3 and 0.001 are one value, 0.001), the rest as
    given; SweepError for one a run name cannot hold or a flag of `kind` cannot take."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float | str):
        text = str(value).strip()
    else:
        raise SweepError(f"{label}: values must be strings or numbers, got {value!r}")
    if not text:
        return ""
    if "/" in text or any(c.isspace() for c in text):
        raise SweepError(f"{label}: the value {text!r} holds '/' or whitespace, which a run "
                         "directory's name cannot")
    if "," in text:
        raise SweepError(f"{label}: the value {text!r} holds ',', which separates values; give "
                         "each value on its own")
    if typing.get_origin(kind) is tuple:  # a list flag, given one item
        kind = typing.get_args(kind)[0]
    if kind is bool:
        if text.lower() not in (*_TRUE, *_FALSE):
            raise SweepError(f"{label} takes true or false, got {text!r}")
        return "true" if text.lower() in _TRUE else "false"
    if kind not in (int, float):
        return text
    if kind is int:
        try:
            return str(int(text))
        except ValueError:
            pass
    try:
        number = float(text)
    except ValueError:
        raise SweepError(f"{label} takes {'integers' if kind is int else 'numbers'}, got "
                         f"{text!r}") from None
    if kind is int:
        if not number.is_integer():
            raise SweepError(f"{label} takes integers, got {text!r}")
        return str(int(number))
    if not math.isfinite(number):
        return str(number)
    short = f"{number:g}"  # as --clip_cs named its runs: c2, c1.5, c1e+06
    return short if float(short) == number else repr(number)


def _typed(text: str, kind: Any) -> Any:
    """A value text of `_value_text` as the flag's type reads it (a list flag: one item)."""
    if typing.get_origin(kind) is tuple:
        return (_typed(text, typing.get_args(kind)[0]),)
    if kind is bool:
        return text == "true"
    return kind(text) if kind in (int, float) else text


def _vary_entries(vary: Any) -> list[tuple[str, Any]]:
    """(key, values) of each axis: from KEY=V1,V2 strings (--vary) or an object {key: values}
    (a grid file's "vary")."""
    if vary is None:
        return []
    if isinstance(vary, Mapping):
        return [(str(key), values) for key, values in vary.items()]
    entries = [vary] if isinstance(vary, str) else vary
    if not isinstance(entries, Iterable) or any(not isinstance(e, str) for e in entries):
        raise SweepError("vary must be KEY=V1,V2,... strings or an object {key: [values]}, got "
                         f"{vary!r}")
    out = []
    for entry in entries:
        key, eq, values = entry.partition("=")
        if not eq or not key.strip():
            raise SweepError(f"--vary takes KEY=V1,V2,... (a flag of the run script and its "
                             f"values), got {entry!r}")
        out.append((key.strip(), values))
    return out


def _axis_values(label: str, values: Any, kind: Any) -> tuple[str, ...]:
    if isinstance(values, str):
        items: Iterable[Any] = values.split(",")
    elif isinstance(values, bool | int | float):
        items = [values]
    elif isinstance(values, list | tuple):
        items = values
    else:
        raise SweepError(f"{label}: give its values as \"V1,V2\" or a list, got {values!r}")
    texts = [_value_text(label, value, kind) for value in items]
    return tuple(dict.fromkeys(text for text in texts if text))


def vary_axes(agent: str, vary: Any, clip_cs: Any, extra: Sequence[str],
          chosen: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The grid's varied-setting axes (key, values), validated; clip_cs is the axis clip_c."""
    entries = [(key, values, f"--vary={key}") for key, values in _vary_entries(vary)]
    if listed(clip_cs):
        if any(key == CLIP_C for key, _, _ in entries):
            raise SweepError("--clip_cs and --vary=clip_c both give clip c values; give them "
                             "once (--clip_cs=1.5,2 is --vary=clip_c=1.5,2)")
        entries.insert(0, (CLIP_C, clip_cs, "--clip_cs"))
    types = _config_types(agent)
    accepted = vary_keys(agent)
    in_extra = {name for name, _, _ in extra_settings(extra)}
    axes: dict[str, tuple[str, ...]] = {}
    for key, values, label in entries:
        if key in axes:
            raise SweepError(f"--vary={key} given twice; give each key once, its values "
                             "comma-separated")
        if key in types and key not in accepted:
            raise SweepError(f"{label}: --{key} is set by the sweep for each job; use the "
                             f"sweep's own settings ({', '.join(GRID_KEYS)})")
        if key not in accepted:
            near = difflib.get_close_matches(key, accepted, n=1)
            raise SweepError(f"{label}: {key!r} is not a flag of run_{agent}.py"
                             + (f" (did you mean {near[0]!r}?)" if near else "")
                             + f"; accepted: {', '.join(sorted(accepted))}")
        if key in in_extra:
            raise SweepError(f"{label} and the extra flag --{key} both set --{key} (the extra "
                             "flag, last on each command line, would override the axis); give "
                             "it once")
        texts = _axis_values(label, values, types[key])
        if not texts:
            raise SweepError(f"{label} gives no values; give {key}=V1,V2,...")
        for text in texts:  # a method's own checks of its setting's value
            try:
                registry.check_value(key, _typed(text, types[key]))
            except registry.SettingError as e:
                raise SweepError(f"{label}: --{e}") from None
        if not any(applies(agent, key, intervention) for intervention in chosen):
            method = registry.owner(key)
            what = (f"a setting of {method.name}, crossed with the interventions that include "
                    "it" if method is not None else "read only with an event, crossed with the "
                    "interventions that have one")
            raise SweepError(f"{label}: --{key} is {what}; none of {', '.join(chosen)} does")
        axes[key] = texts
    return tuple(axes.items())
