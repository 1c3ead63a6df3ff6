"""A launched sweep's progress, read from its job records: the jobs recorded (recorded_jobs),
each job's status (collect), a line per job and the counts, and watch, which follows them."""

import os
import time
from collections.abc import Callable, Mapping, Sequence

from experiment import ctrl_c
from experiment.rundir.files import is_finished
from sweeps.jobspec import JobSpec
from sweeps.state import (
    FINAL_STATES,
    Status,
    SweepPaths,
    damaged_record,
    describe,
    read_json,
    slurm_queue,
)


def recorded_jobs(paths: SweepPaths) -> list[JobSpec]:
    """The jobs this logdir's sweeps have recorded."""
    specs = []
    for key in paths.recorded_keys():
        record = read_json(paths.record(key))
        if "spec" in record:
            with damaged_record(paths.record(key)):
                specs.append(JobSpec.from_dict(record["spec"]))
    return specs


def collect(paths: SweepPaths, keys: Sequence[str]) -> dict[str, Status]:
    """The status of each job, read from its record, its run directory and its launch."""
    records = {key: read_json(paths.record(key)) for key in keys}
    on_slurm = any(r.get("executor") == "slurm" and r.get("state") in ("queued", "running",
                                                                         "interrupted")
                   for r in records.values())
    if on_slurm:  # the queue first, then the records: a job gone from it has written its end
        queue = slurm_queue()
        records = {key: read_json(paths.record(key)) for key in keys}
    else:
        queue = None
    launches: dict[str, Mapping] = {}
    for record in records.values():
        if "launch" in record and record["launch"] not in launches:
            launches[record["launch"]] = read_json(paths.launch(record["launch"]))
    statuses = {}
    for key, record in records.items():
        with damaged_record(paths.record(key)):
            statuses[key] = describe(
                record, is_finished(os.path.join(paths.logdir, key)),
                launches.get(record.get("launch", ""), {}), queue)
    return statuses


def status_line(key: str, status: Status, paths: SweepPaths) -> str:
    """One line: state, job, and what is known (the error's last line for a failed job)."""
    line = f"{status.state:<11} {key}"
    if status.detail:
        line += f"  {status.detail}"
    if status.state in ("failed", "interrupted") and os.path.exists(paths.log(key, "err")):
        line += f"  [log: {paths.log(key, 'err')}]"  # a job that never started has none
    return line


def summary(statuses: Mapping[str, Status]) -> str:
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status.state] = counts.get(status.state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def watch(paths: SweepPaths, keys: Sequence[str], poll_s: float = 2.0,
          emit: Callable[[str], None] = print) -> dict[str, Status]:
    """Follow the jobs until each is done, failed or interrupted; a line per state change."""
    seen: dict[str, tuple[str, str]] = {}
    while True:
        ctrl_c.raise_dropped()  # a Ctrl-C that Python dropped in a callback since the last poll
        statuses = collect(paths, keys)
        for key, status in statuses.items():
            if seen.get(key) != (status.state, status.detail):
                seen[key] = (status.state, status.detail)
                emit(f"{time.strftime('%H:%M:%S')} {status_line(key, status, paths)}")
        if all(s.state in FINAL_STATES for s in statuses.values()):
            return statuses
        time.sleep(poll_s)
