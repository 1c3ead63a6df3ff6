"""config.json: the record of a run's settings, written once a run starts, and read back for
resumes, sweeps and aggregation (settings added since a run was recorded get the value it ran
with). Imports no command line and no JAX."""

import contextlib
import copy
import dataclasses
import importlib.metadata
import json
import math
import os
import platform
import sys
import tempfile

from experiment.rundir.code import CODE

PACKAGES = ("jax", "jaxlib", "flax", "optax", "mujoco", "dm_control", "orbax-checkpoint", "numpy")
# The dashboards' settings (experiment/dashboards.py): how a run is watched, not what it computes,
# so a resume may change them and aggregation pools runs that differ in them.
WATCH_SETTINGS = ("log_to", "wandb_project", "wandb_entity", "wandb_group", "wandb_mode")


class CannotResume(RuntimeError):
    """A run directory whose checkpoint or logs cannot be continued; the message says why."""


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "")
    out["code"] = CODE  # this checkout's commit (experiment/rundir/code.py)
    return out


def config_record(train_config, agent_config) -> dict:
    """The JSON-able record of a run's settings, as written to config.json."""
    record = dataclasses.asdict(train_config)
    record["run_name"] = train_config.name
    record["agent_config"] = dataclasses.asdict(agent_config)
    record["versions"] = versions()
    return record


# Settings added after runs were recorded without them, with the value those runs had
# ("a.b" is key b of the record's object a). The interventions' settings are added by
# `added_settings` from the registry: a run recorded before a method existed ran without it.
ADDED_SETTINGS = {"dormant_taus": [0.0, 0.025], "srank_threshold": 0.99,
                  "diagnostics_batch_size": 0, "eval_seed_offset": 42,
                  "agent_config.init_scale": math.sqrt(2.0), "intervention_unit": "env_steps",
                  "agent_config.flax_layers": False, "env_backend": "dm_control",
                  "replay_on_device": False}


def added_settings() -> dict:
    """ADDED_SETTINGS and every registered intervention's setting at its default (as JSON)."""
    # Here, not at the top: the methods' registry loads JAX, which a sweep's job process (that
    # reads only whether its run finished) never needs.
    from interventions.registry import all_settings

    methods = {flag: list(field.default) if isinstance(field.default, tuple) else field.default
               for flag, (_, field, _) in all_settings().items()}
    return {**methods, **ADDED_SETTINGS}


def with_added_settings(record: dict) -> dict:
    """A config.json record with each setting of `added_settings()` it lacks at the value it
    ran with (resume compares runs this way, and aggregation groups them)."""
    record = copy.deepcopy(record)
    for key, value in added_settings().items():
        *parents, name = key.split(".")
        node = record
        for parent in parents:
            node = node.get(parent)
            if not isinstance(node, dict):
                break
        else:
            node.setdefault(name, value)
    return record


def flat_settings(record: dict, prefix: str = "") -> dict:
    """A config record's settings by dotted name: {"agent_config.hidden_dims": [...], ...}."""
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(flat_settings(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def with_resolved_settings(record: dict) -> dict:
    """A config.json record with --diagnostics_batch_size=0 spelled as the --batch_size it
    stands for, so that a run resumes (and a sweep relaunches it) given either."""
    if record.get("diagnostics_batch_size") == 0 and "batch_size" in record:
        return {**record, "diagnostics_batch_size": record["batch_size"]}
    return record


def read_config(run_dir: str) -> dict | None:
    """The config.json of a run directory, or None when there is none; CannotResume when it
    is not a JSON object."""
    path = os.path.join(run_dir, "config.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:  # JSON and Unicode errors are ValueErrors
        raise CannotResume(f"{path} cannot be read ({type(e).__name__}: {e}); move the run "
                           "directory away or use another --run_name") from None
    if not isinstance(record, dict):
        raise CannotResume(f"{path} holds no JSON object; move the run directory away or use "
                           "another --run_name")
    return record


def _set(versions: dict) -> dict:
    """The versions and options a record sets: one it lacks and one set empty are alike."""
    return {k: v for k, v in versions.items() if v not in (None, "")}


# What a resume's earlier part ran up to: config.json's key, and how the warning says it.
UNTIL = {"env_step": ("until_env_step", "up to env step {}"),
         "task": ("until_task", "for the tasks before task {}")}


def with_earlier_versions(run_dir: str, record: dict, until: int, unit: str = "env_step") -> dict:
    """The config record of a resumed run, keeping (in `earlier_versions`) the library
    versions, code and XLA options its earlier part ran with when they differ from today's;
    that part ran up to `until` (an env step, or for `unit="task"` the tasks done)."""
    key, span = UNTIL[unit]
    before = read_config(run_dir) or {}
    earlier = list(before.get("earlier_versions", []))
    then = before.get("versions")
    was, new = _set(then or {}), _set(record["versions"])
    changed = sorted(k for k in {*was, *new} if was.get(k) != new.get(k))
    if then is not None and changed:
        print("warning: resuming with other versions than the run's earlier part: " +
              ", ".join(f"{k} {was.get(k, '(unset)')} -> {new.get(k, '(unset)')}"
                        for k in changed) +
              f"; config.json keeps those {span.format(until)} in earlier_versions",
              file=sys.stderr)
        earlier.append({key: until, "versions": then})
    return {**record, "earlier_versions": earlier} if earlier else record


def _umask() -> int:
    """The process's umask (read by setting it, so read once, at import, before any thread of
    this process writes files)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _umask()


def write_json(path: str, record: dict, **dump_args) -> None:
    """Write `record` to `path` (json.dump's `dump_args`) atomically: a reader, a crash or a
    concurrent writer sees the old file or the new one, never part of one. The file gets the
    permissions `open` would give it (mkstemp's are owner-only)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            with contextlib.suppress(OSError):  # a filesystem without modes keeps its own
                os.fchmod(f.fileno(), 0o666 & ~_UMASK)
            json.dump(record, f, **dump_args)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
