"""Stopping a logdir's local jobs (`sweep.py --stop`) so that a relaunch resumes them.

Queued jobs are claimed before any worker of their launch does, so none starts them; a running
run script gets SIGTERM, which it answers at its next episode end with a checkpoint (exit 143).
The workers then find nothing left to claim and exit. SLURM jobs are the scheduler's: --stop
names the `scancel` that stops them.
"""

import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from sweeps.job import claim
from sweeps.state import (
    SweepPaths,
    damaged_record,
    process_alive,
    process_parent,
    read_json,
    set_once,
    update_record,
)

STOPPED = "stopped by sweep.py --stop before it started"


def _running_script(record: Mapping[str, Any]) -> int | None:
    """The pid of the run script a running record's job process (alive, on this host) started."""
    if record.get("state") != "running" or not process_alive(record):
        return None
    child = record.get("child_pid")
    return child if child is not None and process_parent(child) == record.get("pid") else None


def stop(paths: SweepPaths, poll_s: float, say: Callable[[str], None]) -> int:
    """Stop every local job of this logdir that runs on this host; returns how many ran."""
    launches = {i: read_json(paths.launch(i)) for i in paths.launch_ids()}
    local = {i: launch for i, launch in launches.items() if launch.get("executor") == "local"
             and any(process_alive(w) for w in launch.get("workers", []))}
    elsewhere = [i for i, launch in launches.items() if launch.get("executor") == "local"
                 and any(process_alive(w) is None for w in launch.get("workers", []))]
    if elsewhere:
        say(f"launches {', '.join(elsewhere)} have workers on other hosts: run --stop there")
    for i, launch in launches.items():
        ids = sorted({str(j).split("_")[0] for j in launch.get("scheduler_ids", {}).values()})
        if launch.get("executor") == "slurm" and ids:
            say(f"launch {i} is on SLURM: `scancel {' '.join(ids)}` stops its jobs (each run "
                "checkpoints at its next episode end if SLURM's KillWait allows)")
    if not local:
        say("no local worker of this sweep runs on this host: nothing to stop here")
        return 0
    jobs = [(i, key) for i, launch in local.items() for key in launch.get("keys", [])]
    workers = [w for launch in local.values() for w in launch.get("workers", [])]
    unstarted = 0
    for i, key in jobs:
        if claim(paths.claims(i), key):  # no worker had: it never starts
            record = read_json(paths.record(key))
            if record.get("launch") == i and record.get("state") == "queued":
                unstarted += 1
                update_record(paths.record(key), state="interrupted", detail=STOPPED)
    seen: set[int] = set()  # run scripts found running, signalled here or before
    signalled: set[int] = set()
    while True:
        for i, key in jobs:
            record = read_json(paths.record(key))
            with damaged_record(paths.record(key)):
                script = _running_script(record)
            if script is None or script in seen or record.get("launch") != i:
                continue
            seen.add(script)
            # A second SIGTERM would stop the script at once, without its checkpoint: the
            # signal is recorded, and another --stop (earlier or racing) does not send it.
            if not set_once(paths.record(key), "stop_sent_to", script):
                say(f"{key} is stopping already (an earlier --stop)")
                continue
            os.kill(script, signal.SIGTERM)
            signalled.add(script)
            say(f"stopping {key} at its next episode end, after a checkpoint there")
        if not any(process_alive(w) for w in workers):
            break
        time.sleep(poll_s)
    if signalled or unstarted:
        say(f"{len(signalled)} running job(s) stopped, {unstarted} queued one(s) not started; "
            "launching the sweep again resumes them")
    elif seen:
        say(f"{len(seen)} running job(s) were stopping already and have stopped; launching "
            "the sweep again resumes them")
    else:
        say("no job was running or queued: nothing to stop")
    return len(signalled)
