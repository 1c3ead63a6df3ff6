"""The sweep's on-disk state under `<logdir>/.sweep/`, readable without submitit's pickles.

    jobs/<agent>/<env>/<run_name>.json     a job's record (spec, state, attempt, host, pid, error)
    logs/<agent>/<env>/<run_name>.out|err  the run script's stdout / stderr, every attempt
    launches/<id>.json                     one launch: executor, workers or scheduler ids
    launches/<id>.claims/                  local workers claim jobs here (one file per job)
    submitit/                              submitit's own folder (pickles, its logs)

A record is rewritten atomically under a lock by whoever changes it: the sweep writes
"queued" before it submits, the job wrapper writes "running" and its outcome. `describe`
turns a record into what is true now: a finished run (done.json) is done whatever the record
says (once a job on this host has recorded its end), and a "running" or "queued" record whose
process, worker or SLURM job is gone is "interrupted".
"""

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from experiment.rundir.record import write_json
from sweeps.run_flags import SweepError

SWEEP_DIR = ".sweep"
HEARTBEAT_S = 10.0
# A "running" record on another host is believed while its heartbeat is younger than this.
STALE_AFTER_S = 6 * HEARTBEAT_S
STATES = ("pending", "queued", "running", "done", "failed", "interrupted")
FINAL_STATES = ("done", "failed", "interrupted")


@dataclasses.dataclass(frozen=True)
class SweepPaths:
    """Where the sweep keeps its files for one logdir."""

    logdir: str

    @property
    def root(self) -> str:
        return os.path.join(self.logdir, SWEEP_DIR)

    @property
    def submitit(self) -> str:
        return os.path.join(self.root, "submitit")

    def record(self, key: str) -> str:
        return os.path.join(self.root, "jobs", f"{key}.json")

    def log(self, key: str, stream: str) -> str:
        return os.path.join(self.root, "logs", f"{key}.{stream}")

    def launch(self, launch_id: str) -> str:
        return os.path.join(self.root, "launches", f"{launch_id}.json")

    def claims(self, launch_id: str) -> str:
        return os.path.join(self.root, "launches", f"{launch_id}.claims")

    def launch_ids(self) -> list[str]:
        """Ids of every launch recorded, oldest first."""
        folder = os.path.join(self.root, "launches")
        names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        return [n.removesuffix(".json") for n in names if n.endswith(".json")]

    def recorded_keys(self) -> list[str]:
        """Keys of every job that has a record, sorted."""
        top = os.path.join(self.root, "jobs")
        keys = []
        for folder, _, files in os.walk(top):
            keys += [os.path.relpath(os.path.join(folder, f), top)[: -len(".json")]
                     for f in files if f.endswith(".json")]
        return sorted(k.replace(os.sep, "/") for k in keys)


def read_json(path: str) -> dict[str, Any]:
    """The JSON object in `path`, or {} if there is none; SweepError naming the file when it
    is not JSON (edited by hand, or cut short by a crash)."""
    try:
        with open(path) as f:
            record = json.load(f)
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise SweepError(f"{path} cannot be read ({e}); repair it or move it away") from None
    if not isinstance(record, dict):
        raise SweepError(f"{path} holds a JSON {type(record).__name__}, not the object it was "
                         "written with; repair it or move it away")
    return record


@contextlib.contextmanager
def damaged_record(path: str) -> Iterator[None]:
    """A record whose fields were edited into other types (a pid of letters, a spec of null)
    as a SweepError naming it, rather than a traceback from the code that reads them."""
    try:
        yield
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise SweepError(f"{path} holds a damaged record ({type(e).__name__}: {e}); repair "
                         "it or move it away") from None


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def sweep_lock(paths: SweepPaths, doing: str, say: Callable[[str], None]) -> Iterator[None]:
    """Held while a launch reads the records and records and submits its jobs, and while
    --stop stops them. A second launch or --stop of the logdir waits for it (saying so), then
    reads what it left: a job another launch has just taken is followed, not launched again,
    and jobs a --stop has stopped are relaunched."""
    os.makedirs(paths.root, exist_ok=True)
    fd = os.open(os.path.join(paths.root, "sweep.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    with os.fdopen(fd, "r+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock.read().strip() or "another launch or --stop"
            say(f"waiting for {holder} of this sweep to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"{doing} (pid {os.getpid()} on {socket.gethostname()})")
        lock.flush()
        try:
            yield
        finally:
            lock.seek(0)
            lock.truncate()
            lock.flush()  # the lock goes with the file's closing


def update_record(path: str, **changes: Any) -> dict[str, Any]:
    """Merge `changes` into the record at `path` under its lock; returns the new record."""
    with _locked(path):
        record = {**read_json(path), **changes, "updated": time.time()}
        write_json(path, record, indent=1, sort_keys=True)
    return record


def set_once(path: str, name: str, value: Any) -> bool:
    """Set the record's `name` to `value` under its lock unless it holds that value already;
    whether this call set it (of two processes racing, one does)."""
    with _locked(path):
        record = read_json(path)
        if record.get(name) == value:
            return False
        write_json(path, {**record, name: value, "updated": time.time()}, indent=1,
                   sort_keys=True)
    return True


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, parent, ...), or None when
    there is no such process or it has exited (a zombie its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields


def process_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (tells a live process from a reused pid), or None when
    it is not running."""
    fields = _stat(pid)
    return None if fields is None else fields[19]


def process_parent(pid: int) -> int | None:
    """The pid of `pid`'s parent, or None when it is not running."""
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def this_process() -> dict[str, Any]:
    """Host, pid and start time of the calling process, as stored in records."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "pid_start": process_start(pid)}


def process_alive(proc: Mapping[str, Any]) -> bool | None:
    """Whether a process recorded by `this_process` still runs; None when it is on another host."""
    if proc.get("host") != socket.gethostname():
        return None
    start = process_start(int(proc["pid"]))
    return start is not None and start == proc.get("pid_start")


def slurm_queue() -> dict[str, str] | None:
    """This user's SLURM jobs (array tasks one by one) and their states, e.g. {"12_0":
    "PENDING"}, or None if squeue cannot tell."""
    if shutil.which("squeue") is None:
        return None
    try:
        out = subprocess.run(["squeue", "--me", "--noheader", "--array", "--format=%i %T"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) >= 2)


@dataclasses.dataclass(frozen=True)
class Status:
    """What is true of a job now: a state from STATES, a detail line, and its record."""

    state: str
    detail: str
    record: Mapping[str, Any]


def describe(record: Mapping[str, Any], done: bool, launch: Mapping[str, Any],
             queue: Mapping[str, str] | None) -> Status:
    """The job's state now from its record, whether done.json exists, its launch and the
    SLURM queue (`slurm_queue()`, taken before the record was read)."""
    state = record.get("state", "pending")
    detail = record.get("detail", "")
    alive = process_alive(record) if state == "running" else None
    if done and not alive:  # a job on this host is done once it has written its record
        return Status("done", detail if state == "done" else "", record)
    if state == "done":  # its run directory was moved or deleted since: a relaunch runs it
        return Status("interrupted", "recorded done, but its run directory holds no readable "
                      "done.json (moved, deleted or damaged?)", record)
    job_id = record.get("scheduler_id")
    on_slurm = record.get("executor") == "slurm" and queue is not None
    if state == "running":
        stale = time.time() - record.get("heartbeat", 0.0) > STALE_AFTER_S
        if alive is False or alive is None and (stale or on_slurm and job_id not in queue):
            state, detail = "interrupted", (f"job process {record.get('pid')} on "
                                            f"{record.get('host')} is gone (killed?)")
    if state == "interrupted" and on_slurm and job_id in queue:
        # SLURM requeues preempted jobs itself: not over while the job is in the queue.
        return Status("queued", f"SLURM job {job_id} is {queue[job_id]} after: {detail}", record)
    if state == "queued":
        gone = _queued_job_gone(record.get("key", ""), launch, queue)
        if gone:
            return Status("interrupted", gone, record)
    return Status(state, detail, record)


def _queued_job_gone(key: str, launch: Mapping[str, Any], queue: Mapping[str, str] | None,
                     ) -> str:
    """Why a queued job will never start (its workers or SLURM job are gone), or ''."""
    if not launch.get("submitted"):
        submitter = launch.get("submitter", {})
        if submitter and process_alive(submitter) is not False:
            return ""
        return "its launch stopped before submitting it"
    if launch["executor"] == "local":
        if any(process_alive(w) is not False for w in launch.get("workers", [])):
            return ""
        return "every local worker of its launch exited before running it"
    job_id = launch.get("scheduler_ids", {}).get(key)
    if queue is None or job_id is None or job_id in queue:
        return ""
    return f"SLURM job {job_id} left the queue without running it"
