"""A small sweep of the real run_sac.py on the local executor (2 envs x 2 interventions x 1
seed, a few hundred steps), end to end through launch/aggregate.py, as a user types it."""

import csv
import json
import os
import sys
from pathlib import Path

import pytest
import scipy.stats

from tests.helpers import forkserver
from tests.helpers.runs import run

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("cartpole-swingup", "cartpole-balance")
INTERVENTIONS = ("none", "clip")


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_sac_sweep_runs_every_job_and_aggregates_by_intervention_and_utd(tmp_path):
    logdir = tmp_path / "runs"
    sweep = forkserver.run(
        [sys.executable, str(ROOT / "launch" / "sweep.py"), f"--logdir={logdir}", "--agent=sac",
         f"--envs={','.join(ENVS)}", f"--interventions={','.join(INTERVENTIONS)}", "--seeds=1",
         "--max_parallel=2", "--max_steps=400", "--start_steps=200", "--eval_every=200",
         "--checkpoint_every=200", "--eval_episodes=1",
         # the tests' cache (tests/conftest.py): its programs compiled once, not in every sweep
         f"--compilation_cache={os.environ['JAX_COMPILATION_CACHE_DIR']}",
         "--poll_s=0.5", "--", "--hidden_dim=32", "--progress=false", "--log_every=200",
         "--intervention_every=200", "--clip_c=1.2"],
        capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr[-3000:]
    assert sweep.stdout.splitlines()[-1] == "4 done"

    final = {}
    for env in ENVS:
        for intervention in INTERVENTIONS:
            run_dir = logdir / "sac" / env / f"{intervention}-utd1-seed0"
            config = json.loads((run_dir / "config.json").read_text())
            assert (config["env"], config["intervention"], config["utd"]) == (env, intervention, 1)
            assert json.loads((run_dir / "done.json").read_text())["env_step"] == 400
            rows = read_csv(run_dir / "eval.csv")
            assert [(r["env_step"], r["seed"]) for r in rows] == [("200", "0"), ("400", "0")]
            final.setdefault(intervention, []).append(float(rows[-1]["return"]))

    out = tmp_path / "aggregate"
    agg = run("aggregate.py", f"--runs={logdir}", "--group_by=intervention,utd", "--step=400",
              "--reps=500", "--curve_reps=100", f"--out={out}", "--progress=false", cwd=tmp_path)
    for intervention in INTERVENTIONS:
        assert f"| intervention={intervention},utd=1 |" in agg.stdout
    iqm = {r["algorithm"]: float(r["estimate"]) for r in read_csv(out / "aggregates.csv")
           if r["metric"] == "IQM"}
    assert iqm == {f"intervention={i},utd=1": pytest.approx(
        scipy.stats.trim_mean(final[i], 0.25), abs=1e-3) for i in INTERVENTIONS}
    for plot in ("interval_estimates.png", "sample_efficiency.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
