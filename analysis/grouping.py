"""Split this project's runs into algorithms by values in their config.json."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence

from analysis.errors import AggregationError, AggregationWarning
from analysis.run_curves import Run
from experiment.rundir.code import recorded_code
from experiment.rundir.record import WATCH_SETTINGS, flat_settings
from interventions import registry

POOLING_KEYS = ("agent", "intervention", "utd")
# Settings of a run's scheduled event, read by runs whose --intervention holds an event only.
EVENT_SETTINGS = ("intervention_every", "event_opt_state")


def config_value(config: dict, key: str, source: str, what: str = "group key") -> object:
    """config[key] where key may be a dotted path into nested objects ('agent_config.width');
    AggregationError naming the `what` (the flag's word for it) and `source` for a key the run
    does not record."""
    node: object = config
    for i, part in enumerate(key.split(".")):
        if not isinstance(node, dict) or part not in node:
            where = ".".join(key.split(".")[:i]) or "top level"
            known = sorted(node) if isinstance(node, dict) else []
            raise AggregationError(f"unknown {what} '{key}' in {source}: no '{part}' at "
                                   f"{where}; keys there: {', '.join(known) or 'none'}")
        node = node[part]
    return node


def inert(config: dict, key: str) -> bool:
    """Whether the run does not read setting `key` (a config.json key), so that its value
    there is no part of what the run is: a method's setting (registry.owner) in a run whose
    --intervention leaves that method out, or one of EVENT_SETTINGS in a run without an event
    method. Every other key, and every key of a run whose --intervention names a method this
    installation does not know, counts."""
    method = registry.owner(key)
    if method is None and key not in EVENT_SETTINGS:
        return False
    spec = str(config.get("intervention", registry.NONE))
    try:
        if method is not None:
            return method.name not in {m.name for m in registry.parse(spec)}
        return registry.event_of(spec) is None
    except ValueError:
        return False


def code_of(config: dict) -> str:
    """The code a run recorded (config.json's versions.code), "not recorded" for a run from
    before runs recorded it."""
    return recorded_code(config) or "not recorded"


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


# config.json settings that cannot change how a run's evaluation returns are distributed, so
# runs that differ in them may be pooled: the seeds and how they are split into processes (the
# seeds of one process are vmapped and independent; the replay and random-action generators are
# seeded from a process's first seed, so a seed's numbers depend on its process, not their
# distribution), the task (an algorithm spans tasks), the run's length (at the steps two runs
# share, a longer one has computed the same: interventions come after their step's evaluation,
# and a shorter run only leaves out those at or past its end, so intervention_steps are compared
# below the shortest run's max_steps: BRO records its resets cut to the run's length), where and
# under which name the run is written, how it resumes, shows progress and checkpoints (a resumed
# run continues exactly; whether its final checkpoint keeps the buffer), what it logs besides
# evaluations (train.csv every log_every steps; diagnostics.csv, whose replay batch has its own
# generator, with its dormant_taus, srank_threshold and diagnostics_batch_size), and the library
# versions. eval_every, eval_episodes and eval_seed_offset do count: they set which steps are
# evaluated (the steps curves share, the evaluation a run is scored by) and what one evaluation
# averages over. The dashboards a run logs to (--log_to, --wandb_*) change nothing either.
IGNORED_SETTINGS = ("seed", "num_seeds", "env", "max_steps", "logdir", "run_name", "resume",
                    "progress", "checkpoint_every", "keep_final_buffer", "log_every",
                    "diagnostics", "dormant_taus", "srank_threshold", "diagnostics_batch_size",
                    "versions", "earlier_versions", *WATCH_SETTINGS)
LISTED_DIFFERENCES = 3


def _value_order(text: str) -> tuple:
    try:
        return 0, float(text), text
    except ValueError:
        return 1, 0.0, text


def _inert(config: dict) -> set[str]:
    """Settings the run's interventions do not read: those of every registered method it does
    not use, the schedule when it has no scheduled event, intervention_every and its unit when
    intervention_steps gives the steps."""
    try:
        chosen = registry.parse(str(config.get("intervention", registry.NONE)))
    except ValueError:  # a method this installation does not know: its settings all count
        return set()
    inert = {flag for flag, (method, _, _) in registry.all_settings().items()
             if method not in chosen}
    if not any(method.kind == "event" for method in chosen):
        inert |= {"intervention_every", "intervention_unit", "intervention_steps"}
    elif config.get("intervention_steps"):
        inert |= {"intervention_every", "intervention_unit"}
    return inert


def shared_length(configs: Sequence[dict]) -> int | None:
    """The shortest max_steps the configs record (None when none records one): the steps
    pooled runs share."""
    lengths = [c["max_steps"] for c in configs if isinstance(c.get("max_steps"), int)]
    return min(lengths) if lengths else None


def result_settings(config: dict, until: int | None = None) -> dict[str, str]:
    """{dotted key: value as text} of the config.json settings that can change a run's results:
    every one but IGNORED_SETTINGS and the settings of an intervention the run does not make;
    with `until`, the intervention_steps below it only (those a run of that length makes)."""
    ignored = {*IGNORED_SETTINGS, *_inert(config)}
    steps = config.get("intervention_steps")
    if until is not None and isinstance(steps, list):
        config = {**config, "intervention_steps": [s for s in steps if s < until]}
    return {key: _format(value) for key, value in flat_settings(config).items()
            if key.split(".")[0] not in ignored}


def _order(key: str) -> tuple:
    """The usual separating settings first, then top-level settings, then nested ones."""
    first = POOLING_KEYS.index(key) if key in POOLING_KEYS else len(POOLING_KEYS)
    return first, key.count("."), key


def warn_if_pooled(runs: Sequence[Run], label: str, group_by: Sequence[str] = ()) -> None:
    """Warn when runs pooled into one algorithm (the runs of one --runs entry, or one group of
    --group_by keys `group_by`) differ in a setting that can change their results, naming the
    settings (dotted paths for nested ones; a setting one run does not record counts as a
    value of its own, one its intervention does not read as none) and the --group_by that
    separates them."""
    configs = [r.config for r in runs if r.config]
    until = shared_length(configs)
    settings = [result_settings(c, until) for c in configs]
    keys = sorted({k for s in settings for k in s}, key=_order)
    found: dict[str, set[str]] = {k: set() for k in keys}
    for config, setting in zip(configs, settings, strict=True):
        recorded = flat_settings(config)
        for key in keys:
            if key in setting:
                found[key].add(setting[key])
            elif key not in recorded:  # recorded but not read by its intervention: no value
                found[key].add("(not recorded)")
    values = {k: sorted(v, key=_value_order) for k, v in found.items()}
    differ = [k for k in keys if len(values[k]) > 1]
    if not differ:
        return
    shown = []
    for key in differ[:LISTED_DIFFERENCES]:
        vals = values[key]
        text = ", ".join(vals[:4]) + (f", ... ({len(vals)} values)" if len(vals) > 4 else "")
        shown.append(f"{key} ({text})")
    more = len(differ) - LISTED_DIFFERENCES
    detail = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
    suggestion = ",".join([*group_by, differ[0]])
    warnings.warn(f"{label}: runs differ in {detail} but are pooled into one algorithm; use "
                  f"--group_by={suggestion} to separate them"
                  + (" (add more keys, comma-separated, as needed)" if len(differ) > 1 else ""),
                  AggregationWarning, stacklevel=2)
