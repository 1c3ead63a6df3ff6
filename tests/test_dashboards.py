"""--log_to=tensorboard,wandb as a user runs it: the dashboards hold what the CSV files hold,
each step once after a kill and a resume, and a missing package is one line."""

import json
import os
import signal
import struct
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from analysis import run_figures
from experiment.config import TrainConfig
from experiment.dashboards import REQUIREMENTS, for_config
from experiment.wandb_runs import wandb_steps
from sweeps.jobspec import JobSpec
from tests.helpers import forkserver
from tests.helpers.dashboard_files import (
    by_step,
    tensorboard_hparams,
    tensorboard_scalars,
    wandb_history,
    wandb_run,
    wandb_segments,
)
from tests.helpers.fixtures import shared_fixture
from tests.helpers.runs import FAST_SAC, HELPERS, KILLSAVE, REPO, read_csv, run, script

# 2 seeds, 125-step episodes, a checkpoint and an evaluation at every episode end, a clip at 700.
ARGS = [*FAST_SAC, "--num_seeds=2", "--utd=2", "--action_repeat=8", "--batch_size=32",
        "--max_steps=1000", "--start_steps=100", "--eval_every=125", "--log_every=125",
        "--checkpoint_every=125", "--intervention=clip", "--intervention_steps=700", "--clip_c=1.2"]
DASHBOARDS = ["--log_to=tensorboard,wandb", "--wandb_mode=offline"]


def run_dir_of(logdir):
    return logdir / "sac" / "cartpole-swingup" / "clip-utd2-seed0"


def expected_values(run_dir) -> dict[int, dict[int, dict[str, float]]]:
    """{seed: {step: {name: value}}} from the CSV files, named as the dashboards name them; the
    step is the env step of an RL run, the task of a continual run."""
    out = defaultdict(lambda: defaultdict(dict))
    continual = (run_dir / "tasks.csv").exists()
    step_of = (lambda row: int(row["task"])) if continual else (lambda row: int(row["env_step"]))
    for row in [] if continual else read_csv(run_dir / "eval.csv"):
        out[int(row["seed"])][step_of(row)]["eval/return"] = float(row["return"])
    for row in [] if continual else read_csv(run_dir / "train.csv"):
        out[int(row["seed"])][step_of(row)][f"train/{row['metric']}"] = float(row["value"])
    for row in read_csv(run_dir / "tasks.csv") if continual else []:
        for metric in ("online_accuracy", "final_accuracy", "loss"):
            out[int(row["seed"])][step_of(row)][f"task/{metric}"] = float(row[metric])
    for row in read_csv(run_dir / "diagnostics.csv"):
        name = f"diagnostics/{row['network']}/{row['layer']}/{row['metric']}"
        out[int(row["seed"])][step_of(row)][name] = float(row["value"])
    for row in read_csv(run_dir / "interventions.csv"):
        values = out[int(row["seed"])][step_of(row)]
        values[f"intervention/{row['network']}/{row['layer']}/{row['metric']}"] = \
            float(row["value"])
        values[f"intervention/{row['kind']}"] = 1.0
    for each, mean in (("eval/return", "eval/return_mean"),
                       ("task/online_accuracy", "task/online_accuracy_mean")):
        for step in {step for steps in out.values() for step in steps}:
            logged = [out[seed][step][each] for seed in out if each in out[seed][step]]
            if logged:
                for seed in out:
                    out[seed][step][mean] = sum(logged) / len(logged)
    return out


def assert_tensorboard_holds(run_dir, expected):
    """Every CSV value in each seed's event files at its step, each (tag, step) once, and
    steps/s at the training steps."""
    for seed, steps in expected.items():
        scalars = tensorboard_scalars(run_dir / "tensorboard" / f"seed{seed}")
        names = {name for values in steps.values() for name in values}
        rates = {"train/steps_per_s"} if any(n.startswith("train/") for n in names) else set()
        assert names | rates == set(scalars), seed
        for name, series in scalars.items():
            held = by_step(series)
            assert all(len(v) == 1 for v in held.values()), f"{name}: a step twice"
            if name == "train/steps_per_s":
                train_steps = {s for s, values in steps.items() if "train/q" in values}
                assert set(held) <= train_steps and all(v[0] > 0 for v in held.values())
                continue
            want = {step: values[name] for step, values in steps.items() if name in values}
            assert set(held) == set(want), name
            # Event files hold float32 values: the CSV's 6 significant digits survive.
            assert all(held[s][0] == np.float32(v) for s, v in want.items()), name


def assert_wandb_holds(run_dir, expected):
    """Every CSV value in each seed's wandb history (over its launches), each step once."""
    ids = json.loads((run_dir / "dashboards.json").read_text())["wandb_ids"]
    for seed, steps in expected.items():
        rows = wandb_history(run_dir, ids[str(seed)])
        logged = [row["_step"] for row in rows]
        assert logged == sorted(set(logged)), "each step once, in order"
        assert logged == sorted(steps)
        for row in rows:
            want = steps[row["_step"]]
            got = {k: v for k, v in row.items() if not k.startswith("_")}
            assert set(got) - set(want) <= {"train/steps_per_s"}
            assert {k: got[k] for k in want} == want, row["_step"]


@shared_fixture
def logged_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logged")
    proc = run("run_sac.py", *ARGS, *DASHBOARDS, f"--logdir={logdir}")
    return run_dir_of(logdir), proc


@pytest.mark.slow
def test_the_dashboards_hold_the_csv_files_values(logged_run):
    run_dir, proc = logged_run
    expected = expected_values(run_dir)
    assert sorted(expected) == [0, 1]
    steps = {s for steps in expected.values() for s in steps}
    assert steps == {*range(125, 1001, 125), 700}  # evaluations and logs, the clip
    assert_tensorboard_holds(run_dir, expected)
    assert_wandb_holds(run_dir, expected)
    assert "Traceback" not in proc.stderr and "Weave" not in proc.stderr, proc.stderr
    assert f"tensorboard: event files in {run_dir / 'tensorboard'}" in proc.stderr


@pytest.mark.slow
def test_each_seed_is_a_run_with_the_runs_settings(logged_run):
    run_dir, _ = logged_run
    config = json.loads((run_dir / "config.json").read_text())
    ids = json.loads((run_dir / "dashboards.json").read_text())["wandb_ids"]
    assert len(set(ids.values())) == 2
    for seed in (0, 1):
        hparams = tensorboard_hparams(run_dir / "tensorboard" / f"seed{seed}")
        assert hparams["seed"] == seed and hparams["utd"] == 2
        assert hparams["agent_config.hidden_dims"] == "[32, 32]"
        assert hparams["intervention"] == "clip" and hparams["clip_c"] == pytest.approx(1.2)
        record, wandb_config = wandb_run(run_dir, ids[str(seed)])
        assert record.run_id == ids[str(seed)]
        assert record.run_group == "sac/cartpole-swingup/clip-utd2-seed0"
        assert record.display_name == f"sac/cartpole-swingup/clip-utd2-seed0/seed{seed}"
        assert wandb_config["seed"] == seed
        assert wandb_config["agent_config"] == config["agent_config"]
        assert wandb_config["log_to"] == ["tensorboard", "wandb"]


@pytest.mark.slow
def test_plot_run_draws_the_curves_and_the_diagnostics(logged_run, tmp_path):
    run_dir, _ = logged_run
    proc = run("plot_run.py", str(run_dir), f"--out={tmp_path}")
    written = proc.stdout.split()
    names = {"learning_curve.png", "diagnostics_actor.png", "diagnostics_critic.png",
             "diagnostics_target_critic.png"}
    assert {os.path.basename(p) for p in written} == names == set(os.listdir(tmp_path))
    for path in written:
        with open(path, "rb") as f:
            head = f.read(24)
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", head[16:24])
        assert width > 500 and height > 300


def continual_run(folder: Path, events_after: range) -> Path:
    """A continual run directory: tasks.csv of 2 seeds x 6 tasks, diagnostics.csv, and a reset
    after each task of `events_after` in interventions.csv."""
    folder.mkdir(parents=True)
    rows = ["task,seed,online_accuracy,final_accuracy,loss"]
    rows += [f"{t},{s},{0.5 + 0.01 * t * (s + 1)},0.9,0.7" for t in range(6) for s in (0, 1)]
    (folder / "tasks.csv").write_text("\n".join(rows) + "\n")
    rows = ["task,seed,network,layer,metric,value"]
    rows += [f"{t},{s},net,Dense_0,cond,{1 + t}" for t in range(6) for s in (0, 1)]
    (folder / "diagnostics.csv").write_text("\n".join(rows) + "\n")
    rows = ["task,seed,kind,network,layer,metric,value"]
    rows += [f"{t},{s},reset,net,Dense_0,fro_change,1.0" for t in events_after for s in (0, 1)]
    (folder / "interventions.csv").write_text("\n".join(rows) + "\n")
    return folder


def test_plot_run_draws_a_continual_run_against_tasks(tmp_path, monkeypatch):
    """A continual run's online accuracy per task and its diagnostics; an event after task k is
    drawn at k + 0.5, and more events than run_figures.MAX_MARKED go in the legend only."""
    figures = {}
    monkeypatch.setattr(run_figures, "_save", lambda fig, path: figures.setdefault(
        os.path.basename(path), fig) and path)
    run_dir = continual_run(tmp_path / "continual" / "permuted_digits" / "reset-seed0",
                            range(4))
    written = run_figures.plot_run(str(run_dir), str(tmp_path / "out"))
    assert [os.path.basename(p) for p in written] == ["learning_curve.png", "diagnostics_net.png"]
    ax = figures["learning_curve.png"].axes[0]
    assert ax.get_xlabel() == "task" and ax.get_ylabel() == "online accuracy"
    seed1 = next(line for line in ax.lines if line.get_label() == "seed 1")
    np.testing.assert_allclose(seed1.get_ydata(), [0.5 + 0.02 * t for t in range(6)])
    drawn = sorted(line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "--")
    assert drawn == [0.5, 1.5, 2.5, 3.5]
    assert figures["diagnostics_net.png"].axes[-1].get_xlabel() == "task"

    many = continual_run(tmp_path / "many", range(run_figures.MAX_MARKED + 1))
    fig, ax = run_figures.plt.subplots()
    run_figures.mark_interventions(ax, str(many), run_figures.CONTINUAL)
    assert not [line for line in ax.lines if len(line.get_xdata())]
    assert [line.get_label() for line in ax.lines] == [
        f"reset ({run_figures.MAX_MARKED + 1} events, not drawn)"]


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    ([], "give one run directory"),
    (["/nonexistent/run"], "/nonexistent/run is not a directory"),
    (["{empty}"], "holds neither eval.csv (an RL run) nor tasks.csv (a continual run)"),
    (["{header_only}"], "eval.csv has no evaluation yet"),
])
def test_plot_run_refuses_what_is_no_run_with_one_line(args, message, tmp_path):
    (tmp_path / "header_only").mkdir()
    (tmp_path / "header_only" / "eval.csv").write_text("env_step,seed,return,wall_time\n")
    (tmp_path / "empty").mkdir()
    dirs = {"empty": tmp_path / "empty", "header_only": tmp_path / "header_only"}
    proc = run("plot_run.py", *(a.format(**dirs) for a in args), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and message in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_run_killed_while_saving_and_resumed_holds_each_step_once(logged_run, tmp_path):
    """SIGKILL while the third checkpoint (env step 375) is written: the event files past the
    second are cut back, wandb's first part keeps what its service wrote (flushed often here,
    so it may hold steps past the resume point), and the resumed run fills in the rest."""
    args = [*ARGS, *DASHBOARDS, f"--logdir={tmp_path}"]
    env = {**os.environ, "WANDB__TRANSACTION_LOG_FLUSH_INTERVAL": "0.01"}
    killed = forkserver.run([sys.executable, KILLSAVE, "3",
                             script("run_sac.py"), *args], cwd=REPO, capture_output=True,
                            text=True, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = run("run_sac.py", *args, env=env)
    assert "resumed from the checkpoint at env step 250" in resumed.stderr
    run_dir = run_dir_of(tmp_path)
    expected = expected_values(run_dir)
    assert expected == expected_values(logged_run[0]), "the resume is bit-identical"
    assert_tensorboard_holds(run_dir, expected)
    assert_wandb_holds(run_dir, expected)
    ids = json.loads((run_dir / "dashboards.json").read_text())["wandb_ids"]
    assert all(len(wandb_segments(run_dir, run_id)) == 2 for run_id in ids.values())


@pytest.mark.slow
def test_a_continual_run_killed_while_saving_and_resumed_holds_each_task_once(tmp_path):
    """A continual run's tasks.csv, diagnostics and events, the task as the step, in both
    dashboards; SIGKILL while the checkpoint after task 2 is written, then the same command."""
    args = ["--task=random_label_digits", "--intervention=reset", "--num_tasks=4",
            "--num_seeds=2", "--hidden_dim=8", "--epochs=1", "--checkpoint_every=1",
            "--progress=false", *DASHBOARDS, f"--logdir={tmp_path}"]
    killed = forkserver.run([sys.executable, KILLSAVE, "3", script("run_continual.py"), *args],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = run("run_continual.py", *args)
    assert "resumed after task 1" in resumed.stderr
    run_dir = tmp_path / "continual" / "random_label_digits" / "reset-seed0"
    expected = expected_values(run_dir)
    assert sorted(expected) == [0, 1] and sorted(expected[0]) == [0, 1, 2, 3]
    assert expected[1][2]["intervention/reset"] == 1.0 and "task/loss" in expected[1][3]
    assert_tensorboard_holds(run_dir, expected)
    assert_wandb_holds(run_dir, expected)
    for seed in (0, 1):
        hparams = tensorboard_hparams(run_dir / "tensorboard" / f"seed{seed}")
        assert hparams["task"] == "random_label_digits" and hparams["seed"] == seed
    ids = json.loads((run_dir / "dashboards.json").read_text())["wandb_ids"]
    assert all(len(wandb_segments(run_dir, run_id)) == 2 for run_id in ids.values())
    record, _ = wandb_run(run_dir, ids["1"])
    assert record.run_group == "continual/random_label_digits/reset-seed0"
    assert record.display_name == "continual/random_label_digits/reset-seed0/seed1"


@pytest.mark.slow
def test_wandb_without_an_account_stops_with_one_line_and_offline_then_trains(tmp_path):
    """Online wandb with no API key anywhere: exit 1 with one line before the first task; the
    same run directory then trains with --wandb_mode=offline (dashboard flags may change)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(NETRC=str(tmp_path / "no_netrc"), WANDB_CONFIG_DIR=str(tmp_path / "wandb_config"))
    args = [script("run_continual.py"), "--num_tasks=2", "--hidden_dim=8", "--epochs=1",
            "--progress=false", "--log_to=wandb", f"--logdir={tmp_path}"]
    proc = forkserver.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and proc.stderr.splitlines()[-1] == errors[0], proc.stderr
    assert errors[0].startswith("error: wandb could not start the run of seed 0 (")
    assert errors[0].endswith("--wandb_mode=offline logs without an account or network")
    run_dir = tmp_path / "continual" / "random_label_digits" / "none-seed0"
    assert read_csv(run_dir / "tasks.csv") == []
    proc = forkserver.run([sys.executable, *args, "--wandb_mode=offline"], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(read_csv(run_dir / "tasks.csv")) == 2 and (run_dir / "done.json").exists()


@pytest.mark.slow
def test_dashboards_turned_on_at_a_resume_catch_up_from_the_csv_files(tmp_path):
    """A run started without dashboards, killed, and resumed with them: they get the rows up
    to the checkpoint from the CSV files, then the new ones."""
    args = [*ARGS, f"--logdir={tmp_path}"]
    killed = forkserver.run([sys.executable, KILLSAVE, "2",
                             script("run_sac.py"), *args], cwd=REPO, capture_output=True,
                            text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    run_dir = run_dir_of(tmp_path)
    assert not (run_dir / "tensorboard").exists()
    resumed = run("run_sac.py", *args, *DASHBOARDS)
    assert "resumed from the checkpoint at env step 125" in resumed.stderr
    expected = expected_values(run_dir)
    assert_tensorboard_holds(run_dir, expected)
    assert_wandb_holds(run_dir, expected)


@pytest.mark.slow
def test_run_bro_logs_to_both_dashboards(tmp_path):
    """A tiny BRO run (2 seeds, a reset at env step 30) holds its CSV values in both."""
    tiny = ["--env=cartpole-balance", "--critic_width=16", "--critic_depth=1",
            "--actor_width=8", "--actor_depth=0", "--optimistic_width=8", "--optimistic_depth=0",
            "--num_quantiles=5", "--eval_episodes=1", "--progress=false", "--num_seeds=2",
            "--utd=2", "--batch_size=16", "--max_steps=60", "--start_steps=20",
            "--eval_every=30", "--log_every=20", "--intervention_steps=30"]
    run("run_bro.py", *tiny, *DASHBOARDS, f"--logdir={tmp_path}")
    run_dir = tmp_path / "bro" / "cartpole-balance" / "reset-utd2-seed0"
    expected = expected_values(run_dir)
    assert any("intervention/reset" in values for values in expected[0].values())
    assert_tensorboard_holds(run_dir, expected)
    assert_wandb_holds(run_dir, expected)


def without(package: str, *args: str, timeout: float = 120):
    """The run script with `package` made unimportable."""
    return forkserver.run([sys.executable, os.path.join(HELPERS, "without_package.py"),
                           package, script("run_sac.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("dashboard,package,pin", [
    ("tensorboard", "tensorboardX", "tensorboardX==2.6.5"),
    ("wandb", "wandb", "wandb==0.31.0"),
])
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_missing_package_is_one_line_naming_the_pip_command(dashboard, package, pin, dry_run,
                                                              tmp_path):
    proc = without(package, *FAST_SAC, f"--log_to={dashboard}", f"--logdir={tmp_path}",
                   *(["--dry_run"] if dry_run else []))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"--log_to={dashboard}" in lines[0] and f"pip install {pin}" in lines[0]
    assert os.listdir(tmp_path) == [], "refused before anything is written"


def test_the_pip_commands_match_the_pins_of_setup_and_requirements():
    for name in ("setup.py", "requirements.txt"):
        with open(os.path.join(REPO, name)) as f:
            text = f.read()
        assert all(pin in text for pin in REQUIREMENTS.values()), name


@pytest.mark.slow
def test_wandb_mode_disabled_needs_no_wandb(tmp_path):
    proc = without("wandb", *FAST_SAC, "--log_to=wandb", "--wandb_mode=disabled", "--dry_run",
                   f"--logdir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("flag,accepted", [
    ("--log_to=tensorbord", "tensorboard, wandb"),
    ("--log_to=wandb,wandb", "tensorboard, wandb"),
    ("--wandb_mode=sometimes", "online, offline, disabled"),
])
def test_bad_dashboard_flags_are_refused_with_one_line(flag, accepted, tmp_path):
    proc = run("run_sac.py", *FAST_SAC, flag, f"--logdir={tmp_path}", check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and flag.split("=")[0] in lines[0], proc.stderr
    assert all(name in lines[0] for name in accepted.split(", ")), proc.stderr


@pytest.mark.slow
def test_wandb_flags_without_wandb_warn(tmp_path):
    proc = run("run_sac.py", *FAST_SAC, "--wandb_project=p", "--dry_run", f"--logdir={tmp_path}")
    assert "warning: --wandb_project is not read: --log_to does not include wandb" in proc.stderr


def test_a_sweep_groups_its_wandb_runs_under_its_logdirs_name():
    job = JobSpec("sac", "cheetah-run", "none", 1, 0, 1, extra=("--log_to=wandb,tensorboard",))
    assert "--wandb_group=clip_sweep" in job.argv("/data/runs/clip_sweep")
    given = JobSpec("sac", "cheetah-run", "none", 1, 0, 1,
                    extra=("--log_to", "wandb", "--wandb_group=mine"))
    argv = given.argv("/data/runs/clip_sweep")
    assert [a for a in argv if "wandb_group" in a] == ["--wandb_group=mine"]
    plain = JobSpec("sac", "cheetah-run", "none", 1, 0, 1, extra=("--log_to=tensorboard",))
    assert not [a for a in plain.argv("/data/runs/clip_sweep") if "wandb" in a]


@pytest.mark.slow
def test_a_resumed_wandb_run_skips_the_steps_its_files_hold(tmp_path):
    """In one process: a first part logs steps 1-5 (its .wandb files hold them, in more than one
    32 KiB block), the run rewinds to step 3 and goes on to 7: each step once, the values of
    the part that logged it first."""
    cfg = TrainConfig(logdir=str(tmp_path), num_seeds=2, log_to=("wandb",),
                      wandb_mode="offline", progress=False)
    rows = {step: [(step, seed, f"m{i}", f"{step + seed + i / 1000:g}") for seed in (0, 1)
                   for i in range(400)] for step in range(1, 8)}

    first = for_config(cfg)
    first.open({"utd": 1}, 0, lambda name: [])
    for step in range(1, 6):
        first.rows("train.csv", rows[step])
        first.end_step()
    first.close()
    time.sleep(1.1)  # wandb names a launch's folder by the second it started in

    resumed = for_config(cfg)
    csv = {"train.csv": [list(map(str, r)) for step in range(1, 4) for r in rows[step]]}
    resumed.open({"utd": 1}, 3, lambda name: csv.get(name, []))
    for step in range(4, 8):
        resumed.rows("train.csv", [(s, seed, m, str(float(v) + 0.5)) for s, seed, m, v
                                   in rows[step]])  # what a later step's rows would be
        resumed.end_step()
    resumed.close()

    run_dir = Path(cfg.run_dir)
    ids = json.loads((run_dir / "dashboards.json").read_text())["wandb_ids"]
    for seed in (0, 1):
        segments = wandb_segments(run_dir, ids[str(seed)])
        assert [list(wandb_steps(p)) for p in segments] == [[1, 2, 3, 4, 5], [6, 7]]
        assert os.path.getsize(segments[0]) > 2 * 32768
        history = wandb_history(run_dir, ids[str(seed)])
        assert [row["_step"] for row in history] == list(range(1, 8))
        for row in history:
            shift = 0.5 if row["_step"] > 5 else 0.0
            assert row["train/m7"] == pytest.approx(row["_step"] + seed + 0.007 + shift)
