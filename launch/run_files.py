"""What a run writes: config.json, CSV logs, per-seed `<seed>.txt`, done.json or diverged.json.

Files are opened in append mode and flushed after each write, so a run that stops leaves
every row it logged on disk; `offsets()` / `truncate_to()` let a resumed run cut the files
back to the moment of its checkpoint, so rows are neither duplicated nor lost.
"""

import contextlib
import copy
import csv
import dataclasses
import fcntl
import importlib.metadata
import json
import math
import os
import platform
import sys
import tempfile
from collections.abc import Iterable, Sequence

from interventions.registry import all_settings

CSV_HEADERS = {
    "eval.csv": ("env_step", "seed", "return", "wall_time"),
    "train.csv": ("env_step", "seed", "metric", "value"),
    "diagnostics.csv": ("env_step", "seed", "network", "layer", "metric", "value"),
    "interventions.csv": ("env_step", "seed", "kind", "network", "layer", "metric", "value"),
}
DIVERGED = "diverged.json"
LOSS_WARNINGS = "loss_warnings.json"  # losses past launch.train.LOSS_LIMIT, first crossings
PACKAGES = ("jax", "jaxlib", "flax", "optax", "mujoco", "dm_control", "orbax-checkpoint", "numpy")


class CannotResume(RuntimeError):
    """A run directory whose checkpoint or logs cannot be continued; the message says why."""


class RunDirInUse(RuntimeError):
    """Another process holds the run directory's lock (it trains that run now)."""


EXIT_IN_USE = 75  # a run script's exit code for RunDirInUse (EX_TEMPFAIL: try again later)
EXIT_STOPPED = 143  # a run script's exit code after a SIGTERM (128 + 15): it checkpointed


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "")
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


def done_problem(path: str) -> str | None:
    """Why a done.json cannot be read as the JSON object a finished run writes, or None."""
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:  # JSON and Unicode errors are ValueErrors
        return f"{type(e).__name__}: {e}"
    return None if isinstance(record, dict) else "it holds no JSON object"


def is_finished(run_dir: str) -> bool:
    """Whether the run directory holds a done.json that reads as a finished run's."""
    path = os.path.join(run_dir, "done.json")
    return os.path.exists(path) and done_problem(path) is None


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


def _in_use(run_dir: str, handle) -> RunDirInUse:
    handle.seek(0)
    holder = handle.read().strip() or "another process"
    handle.close()
    path = os.path.join(run_dir, ".lock")
    return RunDirInUse(f"{run_dir} is being trained by {holder}; wait for it to end or stop it "
                       "first (if that process is gone, as with a node that crashed, delete "
                       f"{path})")


def check_not_in_use(run_dir: str) -> None:
    """RunDirInUse when another process holds the run directory's lock; writes nothing."""
    try:
        handle = open(os.path.join(run_dir, ".lock"))  # noqa: SIM115 - closed below
    except OSError:  # no lock file: nothing trains there
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(run_dir, handle) from None
    except OSError:  # a filesystem without locks: a launch would warn and train
        pass
    handle.close()


def lock_run_dir(run_dir: str):
    """An exclusive lock on the run directory (its `.lock` file) for as long as the returned
    file stays open (the process's life); RunDirInUse naming the holder when another process
    has it, as when the same run is launched twice. A filesystem without locks warns."""
    path = os.path.join(run_dir, ".lock")
    handle = open(path, "a+")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(run_dir, handle) from None
    except OSError as e:  # a filesystem without locks (some Lustre and NFS mounts)
        print(f"warning: cannot lock {path} ({e.strerror}); a second launch of this run "
              "would not be refused", file=sys.stderr)
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {platform.node()}\n")
    handle.flush()
    return handle


class RunFiles:
    """The files of one run directory; every `write_*` appends and flushes."""

    def __init__(self, run_dir: str, seeds: Sequence[int], fresh: bool, dashboards=None,
                 headers: dict[str, Sequence[str]] = CSV_HEADERS, seed_files: bool = True):
        """Open the logs (`headers`: CSV file name -> header; `seed_files`: a <seed>.txt per
        seed too); `fresh` empties them (a run starting over), else they are appended.
        `dashboards` (launch.dashboards.Dashboards, or None) get every CSV row too."""
        self.run_dir = run_dir
        self.seeds = list(seeds)
        self.dashboards = dashboards
        if dashboards is not None and fresh:
            dashboards.rewind({})
        os.makedirs(run_dir, exist_ok=True)
        self._files = {}
        names = [*headers, *(f"{seed}.txt" for seed in self.seeds if seed_files)]
        for name in names:
            path = os.path.join(run_dir, name)
            handle = open(path, "w" if fresh else "a", newline="")  # noqa: SIM115 - see close()
            if fresh and name in headers:
                csv.writer(handle, lineterminator="\n").writerow(headers[name])
                handle.flush()
            self._files[name] = handle

    def forget_end(self) -> None:
        """Remove done.json and diverged.json: about the run as it was, which goes on now
        (called once a resume has restored its checkpoint, or for a fresh start)."""
        for name in ("done.json", DIVERGED):
            path = os.path.join(self.run_dir, name)
            if os.path.exists(path):
                os.remove(path)

    def write_config(self, record: dict) -> None:
        write_json(os.path.join(self.run_dir, "config.json"), record, indent=2, sort_keys=True)

    def write_rows(self, name: str, rows: Iterable[Sequence]) -> None:
        """Append rows to the CSV file `name` (one of the headers')."""
        self._rows(name, rows)

    def _rows(self, name: str, rows: Iterable[Sequence]) -> None:
        if self.dashboards is not None:
            rows = list(rows)
            self.dashboards.rows(name, rows)
        handle = self._files[name]
        csv.writer(handle, lineterminator="\n").writerows(rows)
        handle.flush()

    def write_eval(self, env_step: int, returns: Sequence[float], wall_time: float) -> None:
        self._rows("eval.csv", [(env_step, s, f"{r:.6g}", f"{wall_time:.1f}")
                                for s, r in zip(self.seeds, returns, strict=True)])
        for seed, ret in zip(self.seeds, returns, strict=True):
            handle = self._files[f"{seed}.txt"]
            handle.write(f"{env_step} {ret:.6g}\n")
            handle.flush()

    def last_eval_return(self) -> float | None:
        """The mean over seeds of the newest eval.csv row's returns (a resumed run's last
        evaluation), or None before the first evaluation."""
        self._files["eval.csv"].flush()
        with open(os.path.join(self.run_dir, "eval.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            return None
        newest = [float(r["return"]) for r in rows if r["env_step"] == rows[-1]["env_step"]]
        return sum(newest) / len(newest)

    def write_train(self, env_step: int, metrics: dict[str, Sequence[float]]) -> None:
        self._rows("train.csv", [(env_step, seed, name, f"{values[i]:.6g}")
                                 for name, values in sorted(metrics.items())
                                 for i, seed in enumerate(self.seeds)])

    def write_diagnostics(self, rows: Iterable[Sequence]) -> None:
        self._rows("diagnostics.csv", rows)

    def write_interventions(self, rows: Iterable[Sequence]) -> None:
        self._rows("interventions.csv", rows)

    def write_done(self, record: dict) -> None:
        write_json(os.path.join(self.run_dir, "done.json"), record, indent=2)

    def write_diverged(self, record: dict) -> None:
        """diverged.json: where and for which seed training stopped on a NaN or inf."""
        write_json(os.path.join(self.run_dir, DIVERGED), record, indent=2)

    def offsets(self) -> dict[str, int]:
        """Byte length of every log file now, for a checkpoint. The files are synced to disk
        first, as the checkpoint is: after a machine crash they hold at least these bytes."""
        for handle in self._files.values():
            handle.flush()
            os.fsync(handle.fileno())
        lengths = {name: handle.tell() for name, handle in self._files.items()}
        if self.dashboards is not None:  # their event files, by path below the run directory
            lengths.update(self.dashboards.offsets())
        return lengths

    def truncate_to(self, offsets: dict[str, int]) -> None:
        """Cut every log file back to `offsets` (rows written after a checkpoint). A file
        shorter than its offset lost rows the checkpoint counts: an error, never padding.
        The dashboards' entries go to them (a dashboard left off now is left alone)."""
        for name, size in offsets.items():
            if name not in self._files:
                continue
            handle = self._files[name]
            handle.flush()
            if os.fstat(handle.fileno()).st_size < size:
                raise CannotResume(f"{os.path.join(self.run_dir, name)} is shorter than when the "
                                   f"checkpoint was written ({size} bytes); it lost rows, so the "
                                   "run cannot continue it")
            handle.truncate(size)
            handle.seek(size)
        if self.dashboards is not None:
            self.dashboards.rewind({k: v for k, v in offsets.items() if k not in self._files})

    def read_rows(self, name: str) -> list[list[str]]:
        """The rows a CSV file holds now, without its header (what the dashboards catch up on)."""
        self._files[name].flush()
        with open(os.path.join(self.run_dir, name), newline="") as f:
            return list(csv.reader(f))[1:]

    def open_dashboards(self, record: dict, env_step: int) -> None:
        """Start the dashboards at `env_step`, once the logs are rewound to it."""
        if self.dashboards is not None:
            self.dashboards.open(record, env_step, self.read_rows)

    def end_step(self) -> None:
        """The env step's rows are all written: the dashboards send them."""
        if self.dashboards is not None:
            self.dashboards.end_step()

    def close_dashboards(self, failed: bool = False) -> None:
        if self.dashboards is not None:
            self.dashboards.close(failed)
            self.dashboards = None

    def close(self) -> None:
        self.close_dashboards()
        for handle in self._files.values():
            handle.close()
