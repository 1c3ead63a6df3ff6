"""The sweep's records: what a record means now (liveness of its process, worker or SLURM
job), atomic locked updates, and the last line of a job's stderr."""

import dataclasses
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from experiment import ctrl_c
from experiment.rundir.record import write_json
from sweeps import preflight, progress
from sweeps.job import last_line
from sweeps.jobspec import JobSpec
from sweeps.preflight import (
    _MISSING,
    check_run_dirs,
    check_unfinished_launches,
    recorded_setting,
    same_setting,
)
from sweeps.progress import collect, recorded_jobs
from sweeps.run_flags import SweepError
from sweeps.state import (
    STALE_AFTER_S,
    Status,
    SweepPaths,
    describe,
    process_start,
    read_json,
    set_once,
    this_process,
    update_record,
)
from sweeps.stop import stop


@pytest.fixture(scope="module")
def dead_process():
    """Host, pid and start time of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    record = {"host": socket.gethostname(), "pid": proc.pid, "pid_start": process_start(proc.pid)}
    proc.wait()
    return record


def running(**fields):
    return {"state": "running", "detail": "attempt 1", "heartbeat": time.time(), **fields}


def test_a_finished_run_is_done_once_its_job_has_recorded_its_end(dead_process):
    for record in ({}, running(**dead_process), {"state": "failed", "detail": "exit 1: x"}):
        assert describe(record, True, {}, None).state == "done"
    assert describe(running(**this_process()), True, {}, None).state == "running"
    gone = describe({"state": "done", "detail": "exit 0"}, False, {}, None)  # its dir deleted
    assert (gone.state, gone.detail) == ("interrupted", "recorded done, but its run directory "
                                         "holds no readable done.json (moved, deleted or "
                                         "damaged?)")


def test_running_follows_the_process_on_this_host(dead_process):
    assert describe(running(**this_process()), False, {}, None).state == "running"
    status = describe(running(**dead_process), False, {}, None)
    assert status.state == "interrupted" and f"job process {dead_process['pid']}" in status.detail
    reused = {**this_process(), "pid_start": "0"}  # same pid, another process's start time
    assert describe(running(**reused), False, {}, None).state == "interrupted"


def test_running_on_another_host_follows_the_heartbeat_and_the_slurm_queue():
    elsewhere = {"host": "not-" + socket.gethostname(), "pid": 1, "pid_start": "1"}
    assert describe(running(**elsewhere), False, {}, None).state == "running"
    stale = running(**elsewhere, heartbeat=time.time() - STALE_AFTER_S - 1)
    assert describe(stale, False, {}, None).state == "interrupted"
    on_node = running(**elsewhere, executor="slurm", scheduler_id="9_1")
    assert describe(on_node, False, {}, {"9_1": "RUNNING"}).state == "running"
    assert describe(on_node, False, {}, None).state == "running"  # squeue cannot tell
    ended = describe(on_node, False, {}, {"9_0": "RUNNING"})
    assert ended.state == "interrupted" and "is gone" in ended.detail


def test_queued_on_local_workers_until_every_worker_is_gone(dead_process):
    queued = {"state": "queued", "key": "sac/cheetah-run/none-utd1-seed0"}
    alive = {"executor": "local", "submitted": True, "workers": [dead_process, this_process()]}
    assert describe(queued, False, alive, None).state == "queued"
    gone = {**alive, "workers": [dead_process]}
    status = describe(queued, False, gone, None)
    assert status.state == "interrupted" and "local worker" in status.detail
    never = {"executor": "local", "submitted": False, "submitter": dead_process}
    assert describe(queued, False, never, None).state == "interrupted"
    submitting = {**never, "submitter": this_process()}
    assert describe(queued, False, submitting, None).state == "queued"


def test_queued_on_slurm_until_the_job_leaves_the_queue():
    queued = {"state": "queued", "key": "bro/dog-run/clip-utd1-seed0"}
    launch = {"executor": "slurm", "submitted": True,
              "scheduler_ids": {"bro/dog-run/clip-utd1-seed0": "17_3"}}
    in_queue = {"17_2": "RUNNING", "17_3": "PENDING"}
    assert describe(queued, False, launch, in_queue).state == "queued"
    assert describe(queued, False, launch, None).state == "queued"  # squeue cannot tell
    status = describe(queued, False, launch, {"17_2": "RUNNING"})
    assert status.state == "interrupted" and "SLURM job 17_3 left the queue" in status.detail


def test_a_killed_slurm_job_still_in_the_queue_was_requeued(dead_process):
    killed = running(**dead_process, executor="slurm", scheduler_id="17_3")
    status = describe(killed, False, {}, {"17_3": "PENDING"})
    assert status.state == "queued" and status.detail.startswith("SLURM job 17_3 is PENDING")
    assert describe(killed, False, {}, {"17_2": "RUNNING"}).state == "interrupted"
    recorded = {"state": "interrupted", "executor": "slurm", "scheduler_id": "17_3"}
    assert describe(recorded, False, {}, {"17_3": "COMPLETING"}).state == "queued"
    assert describe({**recorded, "executor": "local"}, False, {}, {"17_3": "PENDING"}).state == (
        "interrupted")


def _bump(path: str, name: str, n: int) -> None:
    for i in range(n):
        update_record(path, **{f"{name}{i}": i})


def test_concurrent_updates_lose_nothing(tmp_path):
    path = str(tmp_path / "jobs" / "a" / "b.json")
    procs = [multiprocessing.get_context("fork").Process(target=_bump, args=(path, name, 40))
             for name in ("x", "y", "z")]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    record = read_json(path)
    assert {k for k in record if k != "updated"} == {f"{n}{i}" for n in "xyz" for i in range(40)}
    assert not [f for f in os.listdir(tmp_path / "jobs" / "a") if f.startswith(".tmp")]


def test_recorded_keys_are_agent_env_run(tmp_path):
    paths = SweepPaths(str(tmp_path))
    for key in ("sac/cheetah-run/none-utd1-seed0", "bro/dog-run/clip-utd4-seed5"):
        update_record(paths.record(key), key=key)
    assert paths.recorded_keys() == ["bro/dog-run/clip-utd4-seed5",
                                     "sac/cheetah-run/none-utd1-seed0"]


def test_last_line_skips_progress_bars_and_earlier_attempts(tmp_path):
    path = tmp_path / "job.err"
    path.write_bytes(b"old attempt failed\n=== attempt 2\n")
    offset = path.stat().st_size
    assert last_line(str(path), offset) == ""
    with open(path, "ab") as f:
        f.write(b" 10%|#  | 1/10\r 20%|## | 2/10\rValueError: bad \xff thing\n\n")
    assert last_line(str(path), offset) == "ValueError: bad \ufffd thing"
    assert last_line(str(path)) == "ValueError: bad \ufffd thing"
    with open(path, "ab") as f:  # a long attempt's progress output: only the tail is read
        f.write(b" 30%|###| 3/10\r" * 200_000 + b"KeyError: 'x'\n")
    assert last_line(str(path), offset) == "KeyError: 'x'"


def test_a_recorded_setting_matches_the_flag_text_that_set_it():
    assert same_setting(500, "500") and same_setting(0.01, "1e-2") and same_setting(4.0, "4")
    assert same_setting([15001, 50001], "15001,50001") and same_setting([], "")
    assert same_setting(False, "false") and same_setting("cheetah-run", "cheetah-run")
    assert not same_setting(20, "30") and not same_setting([15001], "15001,50001")
    assert same_setting([0.0, 0.05], "0,0.05") and same_setting([0.0, 0.05], "0,5e-2")
    assert not same_setting([0.0, 0.05], "0,0,0.05")
    assert same_setting("0,0.05", "0.0,5e-2")  # a list flag's text, as launched before
    assert same_setting(True, "t") and same_setting(False, "F") and not same_setting(True, "f")
    assert same_setting(["actor.params", "critic.params"], "actor.params, critic.params")


def test_recorded_settings_include_the_agents_hyperparameters():
    config = {"utd": 8, "agent_config": {"hidden_dims": [64, 64], "critic_lr": 0.0003}}
    assert recorded_setting(config, "utd") == 8
    assert recorded_setting(config, "critic_lr") == 0.0003
    assert recorded_setting(config, "hidden_dim") == 64
    assert recorded_setting(config, "num_layers") == 2
    assert recorded_setting(config, "tau") is _MISSING
    assert not same_setting(recorded_setting(config, "hidden_dim"), "32")


@pytest.mark.parametrize("launched, now, config, differs", [
    # "--flag value" pairs: their values are compared, as "--flag=value" ones are.
    (["--clip_c", "2"], ["--clip_c", "3"], {}, "--clip_c=2 there, --clip_c=3 now"),
    (["--clip_c", "2"], ["--clip_c=2.0"], {"clip_c": 2.0}, None),
    ([], ["--tau", "0.01"], {"agent_config": {"tau": 0.005}}, "tau: 0.005 there, '0.01' now"),
    # A boolean's --noflag and --flag=false are one setting.
    (["--nodiagnostics"], ["--diagnostics=false"], {"diagnostics": False}, None),
    (["--nodiagnostics"], ["--diagnostics"], {"diagnostics": False},
     "diagnostics: False there, 'true' now"),
    (["--noprogress"], ["--progress"], {}, None),  # changes nothing a run computed
    (["--diagnostics=f"], ["--diagnostics=false"], {"diagnostics": False}, None),
    # An empty value asks for the default, which config.json records filled in (BRO's steps).
    (["--intervention_steps="], ["--intervention_steps="],
     {"intervention_steps": [15001, 50001]}, None),
    (["--intervention_steps="], [], {"intervention_steps": [15001, 50001]}, None),
    (["--intervention_steps=15001"], [], {"intervention_steps": [15001]},
     "--intervention_steps=15001 there, not given now"),
    ([], ["--clip_parts="], {"clip_parts": ["actor.params"]}, "clip_parts: ['actor.params'] there"),
    # A run recorded before a setting existed ran with its default, as the run script assumes.
    ([], ["--srank_threshold=0.99"], {}, None),
    ([], ["--srank_threshold=0.5"], {}, "srank_threshold: 0.99 there, '0.5' now"),
    # --diagnostics_batch_size=0 is the --batch_size, recorded or given, as run scripts read it.
    ([], ["--diagnostics_batch_size=256"], {"batch_size": 256}, None),
    ([], ["--diagnostics_batch_size=256"], {"batch_size": 256, "diagnostics_batch_size": 0}, None),
    ([], ["--diagnostics_batch_size=0"], {"batch_size": 256, "diagnostics_batch_size": 256}, None),
    ([], ["--diagnostics_batch_size=512"], {"batch_size": 256},
     "diagnostics_batch_size: 256 there, '512' now"),
])
def test_a_finished_run_is_compared_with_the_extra_flags_however_they_are_spelled(
        tmp_path, launched, now, config, differs):
    spec = JobSpec("sac", "cheetah-run", "clip", 1, 0, 1, extra=tuple(now))
    run_dir = tmp_path / spec.key
    run_dir.mkdir(parents=True)
    recorded = {"env": "cheetah-run", "utd": 1, "intervention": "clip", "seed": 0,
                "num_seeds": 1, **config}
    (run_dir / "config.json").write_text(json.dumps(recorded))
    status = Status("done", "", {"spec": {"extra": launched}})
    if differs is None:
        check_run_dirs([spec], {spec.key: status}, str(tmp_path), launching=())
    else:
        with pytest.raises(SweepError, match=re.escape(differs)):
            check_run_dirs([spec], {spec.key: status}, str(tmp_path), launching=())


def test_a_started_run_with_other_settings_is_refused_before_its_job_is_launched(tmp_path):
    spec = JobSpec("sac", "cheetah-run", "clip", 1, 0, 1, extra=("--clip_c=3",))
    status = Status("interrupted", "", {"spec": {"extra": ["--clip_c=3", "--noprogress"]}})
    statuses = {spec.key: status}
    check_run_dirs([spec], statuses, str(tmp_path), [spec.key])  # never started: no config.json
    (tmp_path / spec.key).mkdir(parents=True)
    config = tmp_path / spec.key / "config.json"
    config.write_text(json.dumps({"env": "cheetah-run", "utd": 1, "intervention": "clip",
                                  "seed": 0, "num_seeds": 1, "clip_c": 2.0}))
    with pytest.raises(SweepError, match=re.escape(
            "holds a started run with other settings (clip_c: 2.0 there, '3' now)")):
        check_run_dirs([spec], statuses, str(tmp_path), [spec.key])
    check_run_dirs([spec], statuses, str(tmp_path), [])  # a job left alone is not checked
    config.write_text(json.dumps({**json.loads(config.read_text()), "clip_c": 3.0}))
    relaunch = dataclasses.replace(spec, extra=("--clip_c=3.0", "--noprogress"))
    check_run_dirs([relaunch], statuses, str(tmp_path), [spec.key])
    # A flag dropped since: its run script would refuse this job, but the grid's jobs that had
    # not started would train at the default (a group of seeds with mixed settings).
    dropped = dataclasses.replace(spec, extra=("--noprogress",))
    with pytest.raises(SweepError, match=re.escape("(--clip_c=3 there, not given now)")):
        check_run_dirs([dropped], statuses, str(tmp_path), [spec.key])
    launched_short = Status("interrupted", "", {"spec": {"extra": ["--clip_c=3"],
                                                         "train_flags": [["max_steps", 400]]}})
    with pytest.raises(SweepError, match=re.escape("(--max_steps=400 there, not given now)")):
        check_run_dirs([spec], {spec.key: launched_short}, str(tmp_path), [spec.key])
    check_run_dirs([dataclasses.replace(spec, train_flags=(("max_steps", 400),))],
                   {spec.key: launched_short}, str(tmp_path), [spec.key])
    check_run_dirs([dataclasses.replace(spec, extra=("--max_steps=400", "--clip_c=3"))],
                   {spec.key: launched_short}, str(tmp_path), [spec.key])  # as an extra flag
    config.write_text("{")
    with pytest.raises(SweepError, match=r"config.json cannot be read \(.*\); repair it"):
        check_run_dirs([spec], statuses, str(tmp_path), [spec.key])


def test_a_job_still_queued_or_running_with_other_flags_is_refused():
    """It trains as launched then: a relaunch with other flags would count it for its grid."""
    spec = JobSpec("sac", "cheetah-run", "clip", 1, 0, 1, train_flags=(("max_steps", 400),),
                   extra=("--hidden_dim=32",))
    for state in ("queued", "running", "done", "failed"):
        check_unfinished_launches([spec], {spec.key: Status(state, "", {"spec": spec.to_dict()})})
    other = dataclasses.replace(spec, extra=("--hidden_dim=16",))
    check_unfinished_launches([other], {spec.key: Status("done", "", {"spec": spec.to_dict()})})
    for state in ("queued", "running"):
        with pytest.raises(SweepError, match=re.escape(
                f"sac/cheetah-run/clip-utd1-seed0 is {state}, launched with other flags "
                "(--hidden_dim=32 then, --hidden_dim=16 now); wait for it to end")):
            check_unfinished_launches([other], {spec.key: Status(state, "",
                                                                 {"spec": spec.to_dict()})})
    # The same flags in another order or place are the same job: as grid flags or extra ones,
    # "--flag value" or "--flag=value", harmless ones (--noprogress) aside.
    launched = dataclasses.replace(spec, extra=("--hidden_dim=32", "--clip_c", "2"))
    running = {spec.key: Status("running", "", {"spec": launched.to_dict()})}
    for same in (dataclasses.replace(launched, extra=("--clip_c=2", "--hidden_dim=32")),
                 dataclasses.replace(launched, train_flags=(), extra=(
                     "--max_steps=400", "--clip_c=2.0", "--noprogress", "--hidden_dim", "32"))):
        check_unfinished_launches([same], running)
    with pytest.raises(SweepError, match=re.escape("(--max_steps=400 then, not given now)")):
        check_unfinished_launches([dataclasses.replace(launched, train_flags=())], running)


def test_each_kind_of_job_is_dry_run_once_with_its_highest_seeds(monkeypatch):
    started = []

    class Finished:  # a run script that checked its settings and warned
        returncode = 0

        def __init__(self, argv, **kwargs):
            started.append(argv)

        def communicate(self, timeout):
            return "settings checked; x would be trained\n", "warning: never happens\n"

        def poll(self):
            return 0

    monkeypatch.setattr(preflight.subprocess, "Popen", Finished)
    specs = [JobSpec("sac", env, intervention, 1, seed, 1, extra=("--clip_c=2",))
             for env in ("cheetah-run", "walker-run") for intervention in ("none", "clip")
             for seed in range(3)]
    shown = []
    preflight.check_flags(specs, "/logs", emit=shown.append)
    assert len(started) == 2  # none and clip; envs and seeds share a check
    for argv, intervention in zip(started, ("none", "clip"), strict=True):
        assert argv[2] == "--dry_run" and argv[-1] == "--clip_c=2"  # before the extra flags
        assert f"--intervention={intervention}" in argv and "--seed=2" in argv
    assert shown[1:] == ["sac/cheetah-run/none-utd1-seed2: warning: never happens"]


def test_a_dry_run_refused_only_because_its_run_is_in_use_passes(monkeypatch):
    class InUse:  # exit 75: the flags were checked; another process trains that run now
        returncode = 75

        def __init__(self, argv, **kwargs):
            pass

        def communicate(self, timeout):
            return "", "error: /logs/x is being trained by pid 7 on n1; wait for it to end\n"

        def poll(self):
            return 75

    monkeypatch.setattr(preflight.subprocess, "Popen", InUse)
    shown = []
    preflight.check_flags([JobSpec("sac", "cheetah-run", "none", 1, 0, 1)], "/logs",
                          emit=shown.append)
    assert shown[1].startswith("sac/cheetah-run/none-utd1-seed0: error: /logs/x is being trained "
                               "by pid 7") and "the next launch of the sweep reruns it" in shown[1]


def test_following_the_jobs_raises_a_ctrl_c_that_python_dropped(monkeypatch):
    """As the training loop does (experiment/ctrl_c.py): the sweep then stops following."""
    key = "sac/cheetah-run/none-utd1-seed0"
    polls = iter([Status("running", "", {}), Status("done", "", {})])
    monkeypatch.setattr(progress, "collect", lambda paths, keys: {key: next(polls)})
    monkeypatch.setattr(ctrl_c, "_pending", True)
    with pytest.raises(KeyboardInterrupt):
        progress.watch(None, [key], poll_s=0.0, emit=lambda line: None)
    assert ctrl_c._pending is False


def test_stop_names_the_scancel_of_slurm_launches_and_other_hosts_workers(tmp_path):
    paths = SweepPaths(str(tmp_path))
    os.makedirs(os.path.join(paths.root, "launches"))
    write_json(paths.launch("a"), {"executor": "slurm", "keys": ["k0", "k1"], "submitted": True,
                                   "scheduler_ids": {"k0": "17_0", "k1": "17_1"}})
    write_json(paths.launch("b"), {"executor": "local", "keys": ["k2"], "submitted": True,
                                   "workers": [{"host": "elsewhere", "pid": 1,
                                                "pid_start": "1"}]})
    said = []
    assert stop(paths, 0.1, said.append) == 0
    assert said == [
        "launches b have workers on other hosts: run --stop there",
        "launch a is on SLURM: `scancel 17` stops its jobs (each run checkpoints at its next "
        "episode end if SLURM's KillWait allows)",
        "no local worker of this sweep runs on this host: nothing to stop here"]


def test_set_once_sets_a_value_for_one_caller_only(tmp_path):
    path = str(tmp_path / "job.json")
    update_record(path, state="running")
    assert set_once(path, "stop_sent_to", 42) and not set_once(path, "stop_sent_to", 42)
    assert set_once(path, "stop_sent_to", 43)
    assert read_json(path)["stop_sent_to"] == 43 and read_json(path)["state"] == "running"


def test_stop_signals_a_running_script_once_across_stop_runs(tmp_path):
    """A run script's second SIGTERM stops it at once, without its checkpoint: a --stop after
    an earlier one (or racing it) must not send it. This test process stands for the job
    process, `sleep`s for its run script and its launch's worker."""
    paths = SweepPaths(str(tmp_path))
    os.makedirs(os.path.join(paths.root, "launches"))
    key = "sac/x/run"
    with subprocess.Popen(["sleep", "30"]) as script:
        for sent_before, expected, sent, last in (
                (script.pid, f"{key} is stopping already (an earlier --stop)", 0,
                 "1 running job(s) were stopping already and have stopped; launching the "
                 "sweep again resumes them"),
                (None, f"stopping {key} at its next episode end, after a checkpoint there", 1,
                 "1 running job(s) stopped, 0 queued one(s) not started; launching the sweep "
                 "again resumes them")):
            with subprocess.Popen(["sleep", "0.5"]) as worker:
                write_json(paths.launch("L"), {
                    "executor": "local", "keys": [key], "submitted": True,
                    "workers": [{"host": socket.gethostname(), "pid": worker.pid,
                                 "pid_start": process_start(worker.pid)}]})
                update_record(paths.record(key), key=key, state="running", launch="L",
                              child_pid=script.pid, stop_sent_to=sent_before, **this_process())
                said = []
                assert stop(paths, 0.1, said.append) == sent
                assert said[0] == expected and said[-1] == last
            if sent_before is not None:
                assert script.poll() is None, "signalled a second time"
        assert script.wait(timeout=5) == -signal.SIGTERM


def test_records_edited_into_other_types_are_one_line_naming_the_file(tmp_path):
    """A record that is no JSON object, or whose fields hold other types (a pid of letters, a
    spec of null), is a SweepError naming it, not a traceback."""
    paths = SweepPaths(str(tmp_path))
    key = "sac/x/run"
    os.makedirs(os.path.dirname(paths.record(key)))
    for record, where in (([1, 2], "holds a JSON list, not the object it was written with"),
                          ({"state": "running", "pid": "abc", "host": socket.gethostname()},
                           "holds a damaged record (ValueError")):
        write_json(paths.record(key), record)
        with pytest.raises(SweepError, match=re.escape(f"{paths.record(key)} {where}")):
            collect(paths, [key])
    write_json(paths.record(key), {"spec": None})
    with pytest.raises(SweepError, match="holds a damaged record \\(TypeError"):
        recorded_jobs(paths)


def test_a_job_process_loads_no_jax():
    """A sweep's job process (sweeps.job, unpickled by submitit) runs its script as a process
    of its own and reads only whether its run finished: it never loads JAX (seconds and a few
    hundred MB per job)."""
    code = "import sys, sweeps.job; print('jax' in sys.modules, 'flax' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split() == ["False", "False"], proc.stderr
