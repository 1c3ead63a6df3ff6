"""launch/sweep.py on the local executor, as a user runs it, with a stand-in run script
(tests/helpers/sweep_fake_run.py) that keeps the run-script contract and takes a second or so."""

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiment.rundir.code import CODE, UNKNOWN
from sweeps import progress, submit
from sweeps.jobspec import JobSpec
from sweeps.run_flags import SweepError
from sweeps.state import SweepPaths, read_json
from sweeps.submit import ExecutorOptions, job_env
from tests.helpers import forkserver

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "launch" / "sweep.py"


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    """A script folder whose run_sac.py and run_bro.py are the stand-in."""
    folder = tmp_path_factory.mktemp("scripts")
    for agent in ("sac", "bro"):
        (folder / f"run_{agent}.py").symlink_to(ROOT / "tests" / "helpers" / "sweep_fake_run.py")
    return folder


def test_local_jobs_see_the_sweeps_devices_and_share_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    assert job_env(ExecutorOptions(max_parallel=2)) == {
        "CUDA_VISIBLE_DEVICES": "1,3", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert job_env(ExecutorOptions(compilation_cache="cache")) == {
        "CUDA_VISIBLE_DEVICES": None, "JAX_COMPILATION_CACHE_DIR": os.path.abspath("cache")}
    assert job_env(ExecutorOptions(kind="slurm", max_parallel=4)) == {}
    with pytest.raises(SweepError, match="unknown executor 'pbs'; accepted: local, slurm"):
        ExecutorOptions(kind="pbs")
    with pytest.raises(SweepError, match="--mem_gb must be >= 0, got -1"):
        ExecutorOptions(kind="slurm", mem_gb=-1)


def sweep_argv(logdir, scripts, *args):
    return [sys.executable, str(SWEEP), f"--logdir={logdir}", f"--script_dir={scripts}",
            "--poll_s=0.1", *args]


def sweep(logdir, scripts, *args, timeout=60):
    return forkserver.run(sweep_argv(logdir, scripts, *args), capture_output=True, text=True,
                          timeout=timeout)


def fake_score(intervention, utd, seed, step, max_steps):
    """The stand-in's return, computed independently."""
    return 100.0 * ("none", "reset", "clip").index(intervention) + 10.0 * utd + seed \
        + step / max_steps


def eval_rows(run_dir):
    with open(run_dir / "eval.csv", newline="") as f:
        return [(int(r["env_step"]), int(r["seed"]), float(r["return"]))
                for r in csv.DictReader(f)]


def wait_for(condition, timeout=60.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def max_overlap(records):
    """Most jobs running at the same time, from the records' start and end times."""
    events = sorted([(r["started"], 1) for r in records] + [(r["finished"], -1) for r in records])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


@pytest.mark.slow
def test_small_sweep_runs_each_job_once_and_a_relaunch_skips_them(tmp_path, scripts):
    logdir = tmp_path / "runs"
    args = ["--agent=sac", "--envs=cheetah-run,walker-run", "--interventions=none,clip",
            "--max_parallel=2", "--max_steps=40", "--eval_every=10", "--checkpoint_every=20",
            "--", "--step_s=0.02"]
    proc = sweep(logdir, scripts, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "4 done"
    keys = [f"sac/{env}/{i}-utd1-seed0" for env in ("cheetah-run", "walker-run")
            for i in ("none", "clip")]
    paths = SweepPaths(str(logdir))
    for key in keys:
        run_dir = logdir / key
        intervention = key.split("/")[2].split("-")[0]
        assert eval_rows(run_dir) == [(s, 0, fake_score(intervention, 1, 0, s, 40))
                                      for s in (10, 20, 30, 40)]
        assert (run_dir / "done.json").exists() and not (run_dir / "resumes.txt").exists()
        states = [line.split()[1] for line in proc.stdout.splitlines() if key in line]
        assert states in (["queued", "running", "done"], ["running", "done"])  # queued is brief
    records = [read_json(paths.record(k)) for k in keys]
    assert max_overlap(records) <= 2 and len({r["pid"] for r in records}) == 2
    assert all(r["attempt"] == 1 and r["returncode"] == 0 for r in records)

    # One run as if made by other code (config.json's versions.code): kept, with a warning.
    other = logdir / keys[0] / "config.json"
    other.write_text(json.dumps({**json.loads(other.read_text()),
                                 "versions": {"code": "0123456789ab"}}))
    warning = (f"warning: 1 finished run(s) ran other code than this checkout ({CODE}), e.g. "
               f"{logdir / keys[0]} (0123456789ab); they count as done and are not run again")
    before = {k: (logdir / k / "eval.csv").stat().st_mtime_ns for k in keys}
    again = sweep(logdir, scripts, *args)
    assert again.returncode == 0 and "4 jobs: 4 done; launching 0 on local" in again.stdout
    assert before == {k: (logdir / k / "eval.csv").stat().st_mtime_ns for k in keys}
    assert (warning in again.stderr) == (CODE != UNKNOWN), again.stderr

    status = sweep(logdir, scripts, "--status")
    assert status.returncode == 0
    assert sorted(status.stdout.splitlines()[:-1]) == sorted(f"done        {k}" for k in keys)
    assert (warning in status.stderr) == (CODE != UNKNOWN), status.stderr


@pytest.mark.slow
def test_failed_job_shows_its_last_error_line_and_retry_failed_reruns_it(tmp_path, scripts):
    logdir, flag = tmp_path / "runs", tmp_path / "fail"
    flag.touch()
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([
        {"agent": "bro", "envs": "hopper-hop", "interventions": "none"},
        {"agent": "bro", "envs": "hopper-hop", "interventions": "reset",
         "extra": ["--fail_at=25", f"--fail_while_exists={flag}"]}]))
    args = [f"--grid={grid}", "--max_steps=30", "--checkpoint_every=10"]
    proc = sweep(logdir, scripts, *args)
    assert proc.returncode == 1
    error = "exit 1: RuntimeError: simulated failure at env step 25"
    status = sweep(logdir, scripts, "--status")
    lines = dict(line.split(maxsplit=1)[::-1] for line in status.stdout.splitlines()[:-1])
    assert lines["bro/hopper-hop/none-utd10-seed0"] == "done"
    failed = lines["bro/hopper-hop/reset-utd10-seed0  " + error + "  [log: "
                   + str(logdir / ".sweep/logs/bro/hopper-hop/reset-utd10-seed0.err") + "]"]
    assert failed == "failed"
    assert status.stdout.splitlines()[-1] == "1 done, 1 failed"

    again = sweep(logdir, scripts, *args)
    assert again.returncode == 1 and "launching 0" in again.stdout
    assert "--retry_failed runs them again" in again.stdout

    flag.unlink()
    retry = sweep(logdir, scripts, "--retry_failed")
    assert retry.returncode == 0, retry.stdout + retry.stderr
    run_dir = logdir / "bro/hopper-hop/reset-utd10-seed0"
    assert (run_dir / "resumes.txt").read_text() == "20\n"
    assert [s for s, _, _ in eval_rows(run_dir)] == [10, 20, 30]
    record = read_json(SweepPaths(str(logdir)).record("bro/hopper-hop/reset-utd10-seed0"))
    assert (record["attempt"], record["state"]) == (2, "done")


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_killed_job_resumes_when_the_sweep_is_launched_again(tmp_path, scripts):
    logdir = tmp_path / "runs"
    args = ["--envs=cheetah-run", "--max_steps=300", "--eval_every=10", "--checkpoint_every=20",
            "--", "--step_s=0.01", "--hold_at=40"]  # held there until its job process dies
    key = "sac/cheetah-run/none-utd1-seed0"
    submitted = sweep(logdir, scripts, "--no_wait", *args, timeout=60)
    assert submitted.returncode == 0 and "not waiting" in submitted.stdout
    wait_for(lambda: (logdir / key / "checkpoints" / "step_40").exists(), what="a checkpoint")
    record = read_json(SweepPaths(str(logdir)).record(key))
    assert not (logdir / key / "done.json").exists()
    twice = sweep(logdir, scripts, "--no_wait", *args, timeout=60)
    assert "1 jobs: 1 running; launching 0 on local" in twice.stdout
    os.kill(record["pid"], signal.SIGKILL)
    wait_for(lambda: not pid_alive(record["child_pid"]), what="the run script to die")

    status = sweep(logdir, scripts, "--status")
    assert status.stdout.startswith(f"interrupted {key}  job process {record['pid']}")

    again = sweep(logdir, scripts, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 jobs: 1 interrupted; launching 1 on local" in again.stdout
    # The job's death sends the script a SIGTERM, which it answers at its next checkpoint.
    assert int((logdir / key / "resumes.txt").read_text()) == 60
    assert eval_rows(logdir / key) == [(s, 0, fake_score("none", 1, 0, s, 300))
                                       for s in range(10, 301, 10)]
    assert read_json(SweepPaths(str(logdir)).record(key))["attempt"] == 2


@pytest.mark.slow
def test_requeue_signal_stops_the_run_and_the_worker_resumes_it(tmp_path, scripts):
    logdir = tmp_path / "runs"
    key = "sac/cheetah-run/none-utd1-seed0"
    argv = sweep_argv(logdir, scripts, "--envs=cheetah-run", "--max_steps=300",
                      "--eval_every=10", "--checkpoint_every=20", "--", "--step_s=0.01",
                      "--hold_at=40")  # until the SIGTERM the worker passes on
    with forkserver.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        wait_for(lambda: (logdir / key / "checkpoints" / "step_40").exists(),
                 what="a checkpoint")
        first = read_json(SweepPaths(str(logdir)).record(key))
        os.kill(first["pid"], signal.SIGUSR2)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    states = [line.split()[1] for line in out.splitlines() if key in line]
    assert states[-4:] == ["running", "queued", "running", "done"]
    assert "requeued after preemption or time-out" in out
    assert not pid_alive(first["child_pid"])
    record = read_json(SweepPaths(str(logdir)).record(key))
    assert record["attempt"] == 2 and record["pid"] != first["pid"]
    assert int((logdir / key / "resumes.txt").read_text()) == 60
    assert [s for s, _, _ in eval_rows(logdir / key)] == list(range(10, 301, 10))


@pytest.mark.slow
def test_stop_ends_running_jobs_at_a_checkpoint_and_queued_ones_never_start(tmp_path, scripts):
    logdir = tmp_path / "runs"
    hold = tmp_path / "hold"  # the first job waits at step 40 for the stop
    hold.touch()
    args = ["--envs=cheetah-run,walker-run,hopper-hop", "--max_steps=300", "--eval_every=10",
            "--checkpoint_every=20", "--max_parallel=1", "--", "--step_s=0.01", "--hold_at=40",
            f"--hold_file={hold}"]
    first, *others = [f"sac/{env}/none-utd1-seed0" for env in ("cheetah-run", "walker-run",
                                                               "hopper-hop")]
    assert sweep(logdir, scripts, "--no_wait", *args).returncode == 0
    wait_for(lambda: (logdir / first / "checkpoints" / "step_40").exists(), what="a checkpoint")
    stopped = sweep(logdir, scripts, "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.splitlines() == [
        f"stopping {first} at its next episode end, after a checkpoint there",
        "1 running job(s) stopped, 2 queued one(s) not started; launching the sweep again "
        "resumes them"]
    assert not (logdir / first / "done.json").exists()
    assert not any((logdir / key).exists() for key in others)
    status = sweep(logdir, scripts, "--status").stdout.splitlines()
    assert status[0].startswith(f"interrupted {first}  exit 143: error: stopped by SIGTERM at "
                                "env step ")
    assert status[1:] == [f"interrupted {key}  stopped by sweep.py --stop before it started"
                          for key in sorted(others)] + ["3 interrupted"]
    assert sweep(logdir, scripts, "--stop", "--envs=cheetah-run", "--max_parallel=2").stderr \
        .strip() == "sweep: --stop takes only --logdir (and --poll_s), not --envs, --max_parallel"
    assert sweep(logdir, scripts, "--stop").stdout == (
        "no local worker of this sweep runs on this host: nothing to stop here\n")
    hold.unlink()
    again = sweep(logdir, scripts, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert int((logdir / first / "resumes.txt").read_text()) == 60
    assert eval_rows(logdir / first) == [(s, 0, fake_score("none", 1, 0, s, 300))
                                         for s in range(10, 301, 10)]
    # A later --stop signals the resumed attempt's script, even should it get the old one's pid.
    assert read_json(SweepPaths(str(logdir)).record(first))["stop_sent_to"] is None


@pytest.mark.slow
def test_finished_runs_with_other_settings_and_seeds_trained_twice_are_refused(tmp_path, scripts):
    """A finished run is never started again, so a grid that asks its directory for other
    settings, or gives its seeds to another job, would leave the grid's runs undone or count
    seeds twice: both are errors before anything is launched."""
    logdir = tmp_path / "runs"
    args = ["--envs=cheetah-run", "--max_steps=20", "--eval_every=10"]
    assert sweep(logdir, scripts, *args, "--seeds=2").returncode == 0
    more_seeds = sweep(logdir, scripts, *args, "--seeds=3")
    assert more_seeds.returncode == 2
    assert "sweep: " in more_seeds.stderr and "holds a finished run with other settings " \
        "(num_seeds: 2 there, 3 now)" in more_seeds.stderr, more_seeds.stderr
    longer = sweep(logdir, scripts, "--envs=cheetah-run", "--max_steps=30", "--eval_every=10",
                   "--seeds=2")
    assert longer.returncode == 2 and "max_steps: 20 there, 30 now" in longer.stderr
    # --status with those grid flags shows the run as another grid's, not as this one's done
    status = sweep(logdir, scripts, *args, "--seeds=3", "--status")
    key = "sac/cheetah-run/none-utd1-seed0"
    assert status.returncode == 0 and status.stdout.splitlines() == [
        f"done        {key}  [not this grid's run: a finished run with other settings "
        "(num_seeds: 2 there, 3 now)]",
        "1 done; 1 of them not this grid's runs (a launch with these flags refuses them)"]
    assert sweep(logdir, scripts, *args, "--seeds=2", "--status").stdout.splitlines() == [
        f"done        {key}", "1 done"]
    shifted = sweep(logdir, scripts, *args, "--seeds=2", "--first_seed=1", "--seeds_per_job=1")
    assert shifted.returncode == 2 and "train the same seeds" in shifted.stderr, shifted.stderr
    # Extra flags: compared with config.json where it records them, and with the extra flags
    # the sweep launched the job with (a flag dropped since is noticed).
    other = tmp_path / "other"
    assert sweep(other, scripts, *args, "--seeds=1", "--", "--step_s=0.001").returncode == 0
    dropped = sweep(other, scripts, *args, "--seeds=1")
    assert dropped.returncode == 2, dropped.stderr
    assert "(--step_s=0.001 there, not given now)" in dropped.stderr, dropped.stderr
    same = sweep(other, scripts, *args, "--seeds=1", "--", "--step_s=1e-3", "--noprogress",
                 "--keep_final_buffer")  # changes only what a finished run's last save holds
    assert same.returncode == 0, same.stderr
    assert not (logdir / "sac" / "cheetah-run" / "none-utd1-seed1").exists()


@pytest.mark.slow
def test_a_launch_during_a_stop_waits_for_it_then_resumes_the_stopped_job(tmp_path, scripts):
    """A launch and a --stop of one logdir take turns (the sweep's lock): launched while a
    --stop waits for its job to checkpoint, the sweep waits, then reads the records the stop
    left and resumes the job, rather than following it into its stop and ending
    'interrupted'. The job holds at step 20 until the SIGTERM comes, and its stop at step 100
    until the relaunch is waiting, so the order does not hang on how fast processes start."""
    logdir = tmp_path / "runs"
    key = "sac/cheetah-run/none-utd1-seed0"
    stop_hold = tmp_path / "stop_hold"
    stop_hold.touch()
    args = ["--envs=cheetah-run", "--max_steps=200", "--eval_every=10",
            "--checkpoint_every=100", "--", "--step_s=0.005", "--hold_at=20",
            f"--stop_hold_file={stop_hold}"]
    assert sweep(logdir, scripts, "--no_wait", *args).returncode == 0
    wait_for(lambda: (logdir / key / "eval.csv").exists() and len(eval_rows(logdir / key))
             >= 2, what="the run to start")
    out = tmp_path / "again.out"
    with forkserver.popen(sweep_argv(logdir, scripts, "--stop"), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as stopping:
        wait_for(lambda: read_json(SweepPaths(str(logdir)).record(key)).get("stop_sent_to"),
                 what="the stop's SIGTERM")
        with open(out, "w") as again_out, subprocess.Popen(
                sweep_argv(logdir, scripts, *args), stdout=again_out, stderr=subprocess.PIPE,
                text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}) as again:
            wait_for(lambda: out.read_text(), what="the relaunch's first line")
            stop_hold.unlink()
            _, stop_err = stopping.communicate(timeout=60)
            _, again_err = again.communicate(timeout=60)
    assert stopping.returncode == 0, stop_err
    lines = out.read_text().splitlines()
    assert again.returncode == 0, lines + [again_err]
    assert lines[0].startswith("waiting for a --stop (pid "), lines
    assert lines[-1] == "1 done", lines
    assert int((logdir / key / "resumes.txt").read_text()) == 100
    assert [s for s, _, _ in eval_rows(logdir / key)] == list(range(10, 201, 10))


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_ctrl_c_or_a_closed_terminal_stops_following_and_the_local_jobs_go_on(tmp_path, scripts,
                                                                              sig):
    """Ctrl-C (SIGINT), and closing the terminal or losing the ssh connection (SIGHUP), signal
    the terminal's whole process group: the sweep, its local workers and the run scripts they
    started. Only the sweep stops."""
    logdir = tmp_path / "runs"
    key = "sac/cheetah-run/none-utd1-seed0"
    argv = sweep_argv(logdir, scripts, "--envs=cheetah-run", "--max_steps=150",
                      "--eval_every=10", "--", "--step_s=0.01")
    def as_in_a_terminal():  # whatever this test inherited (nohup ignores SIGHUP, say)
        for default in (signal.SIGINT, signal.SIGHUP):
            signal.signal(default, signal.SIG_DFL)

    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True,  # its own group, as in a terminal
                          preexec_fn=as_in_a_terminal) as proc:
        wait_for(lambda: (logdir / key / "eval.csv").exists() and len(eval_rows(logdir / key))
                 >= 2, what="the run to start")
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "the jobs go on" in err
    else:  # ended by the hangup, as a terminal's programs are
        assert proc.returncode == -signal.SIGHUP, err
    wait_for(lambda: (logdir / key / "done.json").exists(), what="the job to finish")
    assert eval_rows(logdir / key) == [(s, 0, fake_score("none", 1, 0, s, 150))
                                       for s in range(10, 151, 10)]


@pytest.mark.slow
def test_slurm_without_slurm_leaves_no_records(tmp_path, scripts):
    logdir = tmp_path / "runs"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no sbatch or srun
    proc = subprocess.run(sweep_argv(logdir, scripts, "--envs=cheetah-run", "--executor=slurm"),
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2 and "--executor=slurm needs SLURM's commands" in proc.stderr
    status = sweep(logdir, scripts, "--envs=cheetah-run", "--status")
    assert status.stdout.splitlines() == ["pending     sac/cheetah-run/none-utd1-seed0",
                                          "1 pending"], status.stdout


@pytest.mark.slow
@pytest.mark.parametrize("extra, why", [
    ("--step_ss=0.1", "unrecognized arguments: --step_ss=0.1"),
    ("--help", "exit code 0 without checking the settings"),  # exits before any check
])
def test_flags_a_run_script_refuses_stop_the_sweep_before_it_launches(tmp_path, scripts, extra,
                                                                      why):
    """Each kind of job is run once with --dry_run first: a misspelt extra flag is one line,
    exit 2, and no job is launched (each would have failed on it)."""
    logdir = tmp_path / "runs"
    proc = sweep(logdir, scripts, "--envs=cheetah-run,walker-run", "--interventions=none,clip",
                 "--", extra)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("sweep: run_sac.py refuses the flags of job "
                                  "sac/cheetah-run/none-utd1-seed0: ") and \
        f"{why}; nothing was launched" in proc.stderr, proc.stderr
    assert not logdir.exists()


@pytest.mark.slow
def test_ctrl_c_while_the_flags_are_checked_launches_nothing(tmp_path, scripts):
    logdir = tmp_path / "runs"
    argv = sweep_argv(logdir, scripts, "--envs=cheetah-run", "--", "--dry_run_s=60")
    with forkserver.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        def checking():  # a run script started with --dry_run for this logdir
            for path in Path("/proc").glob("[0-9]*/cmdline"):
                with contextlib.suppress(OSError):
                    args = path.read_bytes().split(b"\0")
                    if b"--dry_run" in args and f"--logdir={logdir}".encode() in args:
                        return True
            return False
        wait_for(checking, what="the dry run to start")
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == ("interrupted while checking the jobs' flags; "
                                            "nothing was launched")
    assert not logdir.exists()


@pytest.mark.parametrize("started", [0, 1])
def test_workers_that_fail_to_start(tmp_path, monkeypatch, started):
    """No worker starts: the jobs are recorded as interrupted (a relaunch submits them) and the
    sweep stops with the reason. One starts and the next fails: the sweep goes on with one."""

    class Worker:
        job_id = str(os.getpid())

    class Executor:
        submitted = 0

        def submit(self, job):
            if self.submitted == started:
                raise OSError("Resource temporarily unavailable")
            self.submitted += 1
            return Worker()

    monkeypatch.setattr(submit, "make_executor", lambda options, folder: Executor())
    specs = [JobSpec("sac", "cartpole-swingup", "none", 1, seed, 1) for seed in (0, 1)]
    paths = SweepPaths(str(tmp_path))
    options = ExecutorOptions(max_parallel=2)
    if started == 0:
        with pytest.raises(SweepError, match="submitting the jobs failed: Resource temporarily"):
            submit.launch(specs, paths, options)
        for spec in specs:
            record = read_json(paths.record(spec.key))
            assert record["state"] == "interrupted"
            assert record["detail"] == "submission failed: Resource temporarily unavailable"
        statuses = progress.collect(paths, [spec.key for spec in specs])
        line = progress.status_line(specs[0].key, statuses[specs[0].key], paths)
        assert line.startswith("interrupted") and "[log:" not in line  # it never wrote one
    else:
        launch_id = submit.launch(specs, paths, options)
        launched = read_json(paths.launch(launch_id))
        assert launched["submitted"] and len(launched["workers"]) == 1
        assert {read_json(paths.record(s.key))["state"] for s in specs} == {"queued"}


@pytest.mark.parametrize("code, message", [
    (75, "/runs/x is being trained by pid 7 on node1; wait for it to end or stop it first"),
    (143, "stopped by SIGTERM at env step 2000, after a checkpoint there; the same command "
          "resumes /runs/x from it")])
def test_a_run_in_use_or_stopped_by_sigterm_leaves_the_job_to_a_relaunch(tmp_path, code,
                                                                        message):
    """Exit code 75 (another process trains that run, as after a requeue whose old process is
    still ending) and 143 (a SIGTERM answered with a checkpoint) are recorded as interrupted,
    which a relaunch runs again, not as failed."""
    from sweeps.job import RunJob

    script_text = f"import sys; print({message!r}, file=sys.stderr); sys.exit({code})"
    job = RunJob("sac/cartpole-swingup/none-utd1-seed0", [sys.executable, "-c", script_text],
                 str(tmp_path / "run"), str(tmp_path / "record.json"), str(tmp_path / "out"),
                 str(tmp_path / "err"))
    assert job() == "interrupted"
    record = read_json(str(tmp_path / "record.json"))
    assert (record["state"], record["detail"]) == ("interrupted", f"exit {code}: {message}")


def test_core_shares_split_the_cores_between_the_workers():
    assert submit.core_shares(2, [0, 1]) == [(0,), (1,)]
    assert submit.core_shares(3, [0, 1, 2, 3, 4, 5, 6]) == [(0, 1), (2, 3), (4, 5, 6)]
    assert submit.core_shares(1, [4, 5]) == [(4, 5)]
    assert submit.core_shares(4, [0, 1]) == [(0,), (1,), (0,), (1,)]  # more workers than cores


def job_cores(logdir, key):
    """The cores the stand-in ran on, its PJRT_NPROC, and its log's header, of its last attempt."""
    text = Path(SweepPaths(str(logdir)).log(key, "out")).read_text().splitlines()
    header = [line for line in text if line.startswith("=== ")][-1]
    cores, nproc = [line for line in text if line.startswith("cores ")][-1].split()[1:]
    return tuple(int(c) for c in cores.split(",")), nproc.split("=")[1], header


@pytest.mark.slow
def test_local_jobs_run_on_their_workers_share_of_the_cores(tmp_path, scripts):
    """By default as many jobs run at once as there are cores (this machine's memory holds
    these), each worker's on its own share of them, with PJRT_NPROC sizing XLA's CPU thread
    pools to it; --pin_cores=false leaves them every core and XLA its default."""
    logdir = tmp_path / "runs"
    envs = ("cheetah-run", "walker-run", "hopper-hop", "finger-spin")
    cores = sorted(os.sched_getaffinity(0))
    args = [f"--envs={','.join(envs)}", "--max_steps=40", "--eval_every=10",
            "--checkpoint_every=20", "--", "--step_s=0.02"]
    proc = sweep(logdir, scripts, *args)
    assert proc.returncode == 0, proc.stderr
    parallel = min(len(envs), len(cores))
    assert f"running {parallel} at once ({len(cores)} core(s), " in proc.stdout
    keys = [f"sac/{env}/none-utd1-seed0" for env in envs]
    seen = {job_cores(logdir, key) for key in keys}
    shares = {share for share, _, _ in seen}
    assert len(shares) == parallel and set().union(*shares) == set(cores)
    for share, nproc, header in seen:
        assert nproc == str(len(share)) and f" on cores {','.join(map(str, share))} at " in header
    if len(cores) > 1:  # the shares of workers running at once do not overlap
        assert sum(len(share) for share in shares) == len(cores)

    unpinned = tmp_path / "unpinned"
    proc = sweep(unpinned, scripts, "--pin_cores=false", "--max_parallel=2", *args)
    assert proc.returncode == 0, proc.stderr
    assert "at once" not in proc.stdout  # --max_parallel given
    for key in keys:
        share, nproc, header = job_cores(unpinned, key)
        assert share == tuple(cores) and nproc == os.environ.get("PJRT_NPROC", "")
        assert " on cores " not in header


def test_the_default_parallelism_is_bounded_by_the_memory_a_job_needs(monkeypatch):
    """Each job's replay buffer (the slots its --max_steps fill) and envs, computed here from
    the buffer's dtypes and MuJoCo's buffers, plus the dry runs' measured process."""
    from envs import make_env

    monkeypatch.setattr(submit, "usable_cores", lambda: list(range(8)))
    spec = JobSpec("sac", "cheetah-run", "none", 1, 0, 3, (("max_steps", 1000),))
    physics = make_env("cheetah-run", 0).env.physics
    env_bytes = physics.model.nbuffer + physics.data.nbuffer
    slot = 17 * 4 + 6 * 4 + 4 + 1 + 1 + 4  # obs, action, reward, 2 flags, final ordinal
    need = 500_000_000 + 3 * 1000 * slot + 2 * 3 * env_bytes
    monkeypatch.setattr(submit, "host_memory_bytes", lambda: 3 * need - 1)
    assert submit.machine_parallel([spec] * 5, 500_000_000)[0] == 2
    monkeypatch.setattr(submit, "host_memory_bytes", lambda: 100 * need)
    assert submit.machine_parallel([spec] * 5, 500_000_000)[0] == 5  # the jobs
    assert submit.machine_parallel([spec] * 20, 500_000_000)[0] == 8  # the cores
    monkeypatch.setattr(submit, "host_memory_bytes", lambda: need // 2)
    assert submit.machine_parallel([spec] * 5, 500_000_000)[0] == 1  # at least one
