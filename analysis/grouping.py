"""Split this project's runs into algorithms by values in their config.json."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence

from analysis.errors import AggregationError, AggregationWarning
from analysis.layouts import Run

POOLING_KEYS = ("agent", "intervention", "utd")


def config_value(config: dict, key: str, source: str) -> object:
    """config[key] where key may be a dotted path into nested objects ('agent_config.width')."""
    node: object = config
    for i, part in enumerate(key.split(".")):
        if not isinstance(node, dict) or part not in node:
            where = ".".join(key.split(".")[:i]) or "top level"
            known = sorted(node) if isinstance(node, dict) else []
            raise AggregationError(f"unknown group key '{key}' in {source}: no '{part}' at "
                                   f"{where}; keys there: {', '.join(known) or 'none'}")
        node = node[part]
    return node


def _format(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def group_label(config: dict, keys: Sequence[str], source: str) -> str:
    """'key=value,key=value' for the run's values of `keys`."""
    return ",".join(f"{k}={_format(config_value(config, k, source))}" for k in keys)


def group_runs(runs: Sequence[Run], keys: Sequence[str]) -> dict[str, list[Run]]:
    """One algorithm per distinct value tuple of `keys`, labelled like 'intervention=clip,utd=8'."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        source = run.config_source or run.source
        groups.setdefault(group_label(run.config, keys, source), []).append(run)
    return dict(sorted(groups.items()))


def warn_if_pooled(runs: Sequence[Run], label: str, keys: Sequence[str] = POOLING_KEYS) -> None:
    """Warn when runs pooled into one algorithm differ in a setting that usually separates them."""
    for key in keys:
        values = {_format(r.config[key]) for r in runs if key in r.config}
        if len(values) > 1:
            warnings.warn(f"{label}: runs differ in {key} ({', '.join(sorted(values))}) but are "
                          f"pooled into one algorithm; use --group_by={key} to separate them",
                          AggregationWarning, stacklevel=2)
