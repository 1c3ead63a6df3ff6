"""Shrink & Perturb, NaP, spectral regularization, L2 Init and Parseval regularization end to
end, in one run each of run_sac.py and run_bro.py (one event and any number of per-step methods
combine): the events in interventions.csv, the loss terms in train.csv, and a run killed while
writing a checkpoint resumes bit-identically (the per-step methods' state is checkpointed)."""

import json

import pytest

from tests.helpers.fixtures import shared_fixture
from tests.helpers.runs import FAST_SAC, read_csv, run
from tests.test_bro import TINY as TINY_BRO
from tests.test_resume import assert_bit_identical, kill_while_saving, returns

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out

ALL = "shrink_perturb+nap+spectral_reg+l2_init+parseval"
SAC_ARGS = [*FAST_SAC, "--num_seeds=2", "--utd=2", "--action_repeat=8", "--batch_size=32",
            "--max_steps=500", "--start_steps=100", "--eval_every=125", "--log_every=125",
            "--checkpoint_every=125", "--intervention_steps=200,450", f"--intervention={ALL}"]


def run_dir(logdir, agent, env):
    return logdir / agent / env / f"{ALL}-utd2-seed0"


@shared_fixture
def sac_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("sac")
    run("run_sac.py", *SAC_ARGS, f"--logdir={logdir}")
    return run_dir(logdir, "sac", "cartpole-swingup")


def events(path) -> list[tuple]:
    return sorted({(int(r["env_step"]), int(r["seed"]), r["kind"])
                   for r in read_csv(path / "interventions.csv")})


def test_sac_logs_the_events_and_the_loss_terms(sac_run):
    assert events(sac_run) == [(s, seed, "shrink_perturb") for s in (200, 450) for seed in (0, 1)]
    metrics = {r["metric"] for r in read_csv(sac_run / "train.csv")}
    assert {"actor_penalty", "critic_penalty"} <= metrics
    config = json.loads((sac_run / "config.json").read_text())
    assert config["intervention"] == ALL
    assert (config["sp_shrink"], config["sp_perturb"], config["sp_noise"]) == (0.2, 0.8, "fresh")
    assert config["nap_layers"] == "normalized" and config["parseval_coef"] == 1e-4


def test_sac_killed_while_saving_resumes_bit_identically(sac_run, tmp_path):
    """Killed while writing its third checkpoint (env step 375), after the event at 200: the
    resumed run starts from step 250 with the event's weights, the initial norms, power-iteration
    vectors and anchors as they were, and writes the same returns."""
    args = [*SAC_ARGS, f"--logdir={tmp_path}"]
    kill_while_saving(args, 3)
    resumed = run("run_sac.py", *args)
    assert "resumed from the checkpoint at env step 250" in resumed.stderr
    assert_bit_identical(returns(run_dir(tmp_path, "sac", "cartpole-swingup")), returns(sac_run),
                         resumed.stderr)


def test_bro_runs_every_method(tmp_path):
    run("run_bro.py", *TINY_BRO, "--intervention_steps=30,50", f"--intervention={ALL}",
        f"--logdir={tmp_path}")
    path = run_dir(tmp_path, "bro", "cartpole-balance")
    assert events(path) == [(s, seed, "shrink_perturb") for s in (30, 50) for seed in (0, 1)]
    assert {r["network"] for r in read_csv(path / "interventions.csv")} == {
        "actor", "optimistic_actor", "critic", "target_critic"}
    metrics = {r["metric"] for r in read_csv(path / "train.csv")}
    assert {"actor_penalty", "optimistic_actor_penalty", "critic_penalty"} <= metrics
    assert json.loads((path / "done.json").read_text())["env_step"] == 60
