"""launch/sweep.py --executor=slurm against a real single-node SLURM on localhost
(tests/helpers/slurm_fixture.py), with the stand-in run script: a sweep finishes, and jobs stopped
the two ways SLURM stops them (the time-limit signal, a requeue) resume and finish."""

import subprocess

import pytest
from test_sweep_local import eval_rows, scripts, sweep_argv, wait_for  # noqa: F401 - fixture

from sweeps.state import SweepPaths, read_json
from tests.helpers.slurm_fixture import SlurmCluster, unavailable_reason

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    slurm = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        slurm.start()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        slurm.stop()
        pytest.skip(f"a local SLURM cluster could not start here: {e}")
    yield slurm
    slurm.stop()


def test_slurm_sweep_finishes_and_stopped_jobs_resume(cluster, tmp_path, scripts):  # noqa: F811
    logdir = tmp_path / "runs"
    argv = sweep_argv(logdir, scripts, "--executor=slurm", "--envs=cheetah-run,walker-run",
                      "--max_steps=300", "--eval_every=10", "--checkpoint_every=20",
                      "--timeout_min=10", "--signal_delay_s=30", "--partition=debug",
                      "--cpus_per_task=1", "--mem_gb=0.5", "--job_name=sweeptest",
                      "--array_parallelism=2", "--", "--step_s=0.02")
    keys = ["sac/cheetah-run/none-utd1-seed0", "sac/walker-run/none-utd1-seed0"]
    paths = SweepPaths(str(logdir))
    with subprocess.Popen(argv, env=cluster.env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        for key in keys:
            wait_for(lambda k=key: (logdir / k / "checkpoints" / "step_40").exists(),
                     timeout=90, what=f"a checkpoint of {key}")
        signalled, requeued = (read_json(paths.record(k)) for k in keys)
        # What SLURM sends before the time limit (--signal=USR2@...): submitit's handler stops
        # the script and requeues the job.
        subprocess.run(["scancel", "--signal=USR2", signalled["scheduler_id"]],
                       env=cluster.env(), check=True, timeout=30)
        # An operator's requeue (or PreemptMode=REQUEUE): SLURM kills the job and queues it.
        subprocess.run(["scontrol", "requeue", requeued["scheduler_id"]], env=cluster.env(),
                       check=True, timeout=30)
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, out + err
    assert out.splitlines()[-1] == "2 done"
    first_id = signalled["scheduler_id"].split("_")[0]
    assert {signalled["scheduler_id"], requeued["scheduler_id"]} == {f"{first_id}_0",
                                                                     f"{first_id}_1"}
    for key, before in zip(keys, (signalled, requeued), strict=True):
        record = read_json(paths.record(key))
        assert record["attempt"] == 2 and record["scheduler_id"] == before["scheduler_id"]
        assert 40 <= int((logdir / key / "resumes.txt").read_text()) < 300
        assert [s for s, _, _ in eval_rows(logdir / key)] == list(range(10, 301, 10))
    assert "requeued after preemption or time-out" in out
    assert f"SLURM job {requeued['scheduler_id']} is PENDING" in out

    (script,) = (logdir / ".sweep" / "submitit").glob("*_submission.sh")
    for line in ("--array=0-1%2", "--partition=debug", "--cpus-per-task=1", "--mem=512MB",
                 "--time=10", "--signal=USR2@30", "--job-name=sweeptest"):
        assert f"#SBATCH {line}\n" in script.read_text()

    status = subprocess.run(sweep_argv(logdir, scripts, "--status"), env=cluster.env(),
                            capture_output=True, text=True, timeout=60)
    assert status.stdout.splitlines()[-1] == "2 done"
