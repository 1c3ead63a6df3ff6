"""End-to-end checks for a scheduled intervention, as a user runs it: run_sac.py and run_bro.py
log its events to interventions.csv with the per-layer report, and a SAC run killed while
writing a checkpoint resumes bit-identically."""

import signal
import sys

from tests.helpers import forkserver
from tests.helpers.runs import FAST_SAC, KILLSAVE, REPO, read_csv, run, script
from tests.test_resume import assert_bit_identical, returns

# 2 seeds, UTD 2, 125-step episodes, a checkpoint at every episode end; events at 200 (before
# the checkpoint at 250 that a kill during the third save resumes from) and at 400 (after it).
SAC_STEPS = (200, 400)
SAC = [*FAST_SAC, "--num_seeds=2", "--utd=2", "--action_repeat=8", "--batch_size=32",
       "--max_steps=500", "--start_steps=100", "--eval_every=125", "--log_every=125",
       "--checkpoint_every=125", f"--intervention_steps={','.join(map(str, SAC_STEPS))}"]
BRO_STEPS = (30, 50)
BRO = ["--env=cartpole-balance", "--critic_width=16", "--critic_depth=1", "--actor_width=8",
       "--actor_depth=0", "--optimistic_width=8", "--optimistic_depth=0", "--num_quantiles=5",
       "--eval_episodes=1", "--progress=false", "--num_seeds=2", "--utd=2", "--batch_size=16",
       "--max_steps=60", "--start_steps=20", "--eval_every=30", "--log_every=20",
       "--checkpoint_every=1000", f"--intervention_steps={','.join(map(str, BRO_STEPS))}"]
METRICS = {"fro_change", "cond_before", "cond_after"}


def run_dir(logdir, agent: str, env: str, intervention: str):
    return logdir / agent / env / f"{intervention}-utd2-seed0"


def event_report(path, intervention: str, steps) -> dict:
    """{(network, layer): largest fro_change} of interventions.csv, after checking that each
    seed has an event of `intervention` at exactly `steps`, each layer with the three metrics."""
    rows = read_csv(path / "interventions.csv")
    events = sorted({(int(r["env_step"]), int(r["seed"]), r["kind"]) for r in rows})
    assert events == [(s, seed, intervention) for s in steps for seed in (0, 1)]
    layers = {}
    for r in rows:
        layers.setdefault((r["network"], r["layer"]), set()).add(r["metric"])
    assert all(metrics == METRICS for metrics in layers.values()), layers
    change = {}
    for r in rows:
        if r["metric"] == "fro_change":
            key = (r["network"], r["layer"])
            change[key] = max(change.get(key, 0.0), float(r["value"]))
    return change


def sac_resumes_bit_identically(tmp_path, intervention: str, *extra: str) -> dict:
    """Run run_sac.py with the intervention uninterrupted, and again SIGKILLed while writing
    its third checkpoint and resumed; their eval returns must agree bit for bit. Returns the
    uninterrupted run's event report."""
    name = intervention
    full = tmp_path / "full"
    run("run_sac.py", *SAC, f"--intervention={intervention}", *extra, f"--logdir={full}")
    args = [*SAC, f"--intervention={intervention}", *extra, f"--logdir={tmp_path / 'killed'}"]
    killed = forkserver.run([sys.executable, KILLSAVE, "3",
                             script("run_sac.py"), *args], cwd=REPO, capture_output=True,
                            text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = run("run_sac.py", *args)
    assert "resumed from the checkpoint at env step 250" in resumed.stderr
    expected = returns(run_dir(full, "sac", "cartpole-swingup", name))
    got = returns(run_dir(tmp_path / "killed", "sac", "cartpole-swingup", name))
    assert_bit_identical(got, expected, resumed.stderr)
    return event_report(run_dir(full, "sac", "cartpole-swingup", name), intervention, SAC_STEPS)


def bro_events(tmp_path, intervention: str, *extra: str) -> dict:
    """Run run_bro.py with the intervention; its event report."""
    run("run_bro.py", *BRO, f"--intervention={intervention}", *extra, f"--logdir={tmp_path}")
    return event_report(run_dir(tmp_path, "bro", "cartpole-balance", intervention), intervention,
                        BRO_STEPS)
