"""Checkpoints and resume: SIGKILL at a random moment or while saving, then the same command
again, must write eval.csv returns identical bit for bit to an uninterrupted run."""

import gc
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import pytest

from agents import make_agent
from agents.sac import SACConfig
from experiment import ctrl_c, runner, train
from experiment.config import TrainConfig
from tests.helpers import forkserver
from tests.helpers.runs import FAST_SAC, KILLSAVE, REPO, read_csv, run, script

# One worker runs this module (`--dist=loadgroup`, pytest.ini), so that the runs its module
# fixtures make (uninterrupted, killed_while_saving) are made once.
pytestmark = pytest.mark.xdist_group("test_resume")

# 2 seeds, UTD 2, 125-step episodes (action repeat 8), a checkpoint at every episode end, and
# the intervention at step 450, after any resume point the kills below can produce (250 at
# most: a kill while the third checkpoint is written, or within 1.5 s of the first).
ARGS = [*FAST_SAC, "--num_seeds=2", "--utd=2", "--action_repeat=8", "--batch_size=32",
        "--max_steps=500", "--start_steps=100", "--eval_every=125", "--log_every=125",
        "--checkpoint_every=125", "--intervention_steps=450", "--clip_c=1.2"]
# The same without an intervention (and without --clip_c, which would add a warning line).
NO_INTERVENTION = [*(a for a in ARGS if not a.startswith("--clip_c")), "--intervention=none",
                   "--intervention_steps="]


def run_dir(logdir, intervention):
    return logdir / "sac" / "cartpole-swingup" / f"{intervention}-utd2-seed0"


def returns(path):
    return [(r["env_step"], r["seed"], r["return"]) for r in read_csv(path / "eval.csv")]


def assert_bit_identical(got, expected, resumed: str, message=""):
    """A resumed run's eval returns against the uninterrupted run's: the same rows, equal up to
    the resume point and after it. On a GPU this needs the deterministic GPU ops that
    experiment.xla_flags turns on (without them, two uninterrupted runs differ there).
    `resumed`: the resumed run's stderr."""
    assert [row[:2] for row in got] == [row[:2] for row in expected], message
    point = re.search(r"resumed from the checkpoint at env step (\d+)", resumed)
    before = [row for row in expected if point is None or int(row[0]) <= int(point[1])]
    assert got[:len(before)] == before, message
    assert got == expected, message


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Eval returns of uninterrupted runs, per intervention (computed once, on demand)."""
    cache = {}

    def returns_of(intervention):
        if intervention not in cache:
            logdir = tmp_path_factory.mktemp(f"full-{intervention}")
            run("run_sac.py", *ARGS, f"--intervention={intervention}", f"--logdir={logdir}")
            cache[intervention] = returns(run_dir(logdir, intervention))
        return cache[intervention]

    return returns_of


@pytest.fixture(scope="module")
def killed_while_saving(tmp_path_factory):
    """`into(tmp_path, args)`: the args with --logdir=tmp_path, where a copy of their run
    SIGKILLed while writing its third checkpoint now lies (125 and 250 complete, 375
    half-written). Each setting's run is killed once per module and copied: a resume ignores
    config.json's logdir, so a moved run resumes as it would have where it was."""
    killed = {}

    def into(tmp_path, args) -> list[str]:
        if tuple(args) not in killed:
            logdir = tmp_path_factory.mktemp("killed")
            kill_while_saving([*args, f"--logdir={logdir}"], 3)
            killed[tuple(args)] = logdir
        shutil.copytree(killed[tuple(args)], tmp_path, dirs_exist_ok=True)
        return [*args, f"--logdir={tmp_path}"]

    return into


def kill_while_saving(args, nth: int):
    """Run with `args`, SIGKILLed in the middle of writing its `nth` checkpoint."""
    killed = forkserver.run([sys.executable, KILLSAVE, str(nth),
                             script("run_sac.py"), *args], cwd=REPO, capture_output=True,
                            text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]


@pytest.mark.slow
def test_ctrl_c_while_saving_completes_that_checkpoint_then_stops_with_one_line(tmp_path):
    args = [*NO_INTERVENTION, f"--logdir={tmp_path}"]
    proc = forkserver.run([sys.executable, KILLSAVE, "2",
                           script("run_sac.py"), *args], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "KILLSAVE_SIGNAL": "SIGINT"})
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: interrupted; the same "
                                                           "command resumes")
    checkpoints = run_dir(tmp_path, "none") / "checkpoints"
    assert sorted(os.listdir(checkpoints)) == ["125", "250"], "the second one was completed"


def wait_for_checkpoint(directory, proc, timeout=120):
    start = time.time()
    while time.time() - start < timeout:
        if os.path.isdir(directory) and any(n.isdigit() for n in os.listdir(directory)):
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended before its first checkpoint: {proc.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")


@pytest.mark.slow
def test_sigkill_at_random_moment_then_resume_is_bit_identical(uninterrupted, tmp_path):
    intervention = "reset"
    args = [*ARGS, f"--intervention={intervention}", f"--logdir={tmp_path}"]
    proc = forkserver.popen([sys.executable, script("run_sac.py"), *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_checkpoint(run_dir(tmp_path, intervention) / "checkpoints", proc)
    delay = random.Random().uniform(0.0, 1.5)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(read_csv(run_dir(tmp_path, intervention) / "eval.csv"))
    resumed = run("run_sac.py", *args)
    got = returns(run_dir(tmp_path, intervention))
    if killed_at < len(got):
        assert "resumed from the checkpoint" in resumed.stderr
    checkpoints = run_dir(tmp_path, intervention) / "checkpoints"
    assert [n for n in os.listdir(checkpoints) if n.isdigit()] == ["500"], (
        "a finished run keeps its last checkpoint only")
    assert_bit_identical(got, uninterrupted(intervention), resumed.stderr,
                         f"killed {delay:.2f}s after the first checkpoint ({killed_at} rows)")


@pytest.mark.slow
def test_sigterm_checkpoints_at_the_next_episode_end_then_resume_is_bit_identical(
        uninterrupted, tmp_path):
    """What a cluster sends before a preemption or at a time limit: the run goes on to its
    next episode end, writes a checkpoint there (none is due: --checkpoint_every is past the
    run's end), stops with exit 143, and the same command resumes from it exactly."""
    intervention = "reset"
    args = [*ARGS, f"--intervention={intervention}", f"--logdir={tmp_path}",
            "--checkpoint_every=100000"]
    proc = forkserver.popen([sys.executable, script("run_sac.py"), *args, "--progress"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    eval_csv = run_dir(tmp_path, intervention) / "eval.csv"
    start = time.time()
    while not (eval_csv.exists() and len(read_csv(eval_csv)) >= 2):  # evaluated at step 125
        assert proc.poll() is None and time.time() - start < 120, "no evaluation appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert "SIGTERM: stopping at the next episode end" in err, err[-2000:]
    stopped = re.search(r"error: stopped by SIGTERM at env step (\d+), after a checkpoint "
                        r"there; the same command resumes \S+ from it$", err.strip())
    assert stopped, err[-2000:]
    step = int(stopped[1])
    assert 125 <= step < 500 and step % 125 == 0, "an episode end, from the first evaluation on"
    checkpoints = run_dir(tmp_path, intervention) / "checkpoints"
    assert sorted(os.listdir(checkpoints)) == [str(step)]
    last = [float(r["return"]) for r in read_csv(eval_csv) if int(r["env_step"]) == step]
    bar = err.strip().splitlines()[-2]  # its last redraw, at close, above the error line
    assert f" {step}/500 " in bar and f"eval_return={sum(last) / len(last):.1f}]" in bar, bar
    resumed = run("run_sac.py", *args)
    assert f"resumed from the checkpoint at env step {step}" in resumed.stderr
    assert_bit_identical(returns(run_dir(tmp_path, intervention)), uninterrupted(intervention),
                         resumed.stderr)


@pytest.mark.slow
def test_sigkill_while_writing_a_checkpoint_then_resume_is_bit_identical(uninterrupted, tmp_path,
                                                                         killed_while_saving):
    intervention = "clip"
    args = killed_while_saving(tmp_path, [*ARGS, f"--intervention={intervention}"])
    checkpoints = run_dir(tmp_path, intervention) / "checkpoints"
    assert sorted(os.listdir(checkpoints)) == ["125", "250", "375.orbax-checkpoint-tmp"]
    resumed = run("run_sac.py", *args)
    assert "resumed from the checkpoint at env step 250" in resumed.stderr
    assert_bit_identical(returns(run_dir(tmp_path, intervention)), uninterrupted(intervention),
                         resumed.stderr)


@pytest.mark.slow
def test_corrupt_latest_checkpoint_falls_back_to_previous(uninterrupted, tmp_path,
                                                          killed_while_saving):
    intervention = "clip"
    args = killed_while_saving(tmp_path, [*ARGS, f"--intervention={intervention}"])
    latest = run_dir(tmp_path, intervention) / "checkpoints" / "250"
    for root, _, files in os.walk(latest / "device"):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
    resumed = run("run_sac.py", *args)
    assert "checkpoint at env step 250" in resumed.stderr and "cannot be restored" in resumed.stderr
    assert "resumed from the checkpoint at env step 125" in resumed.stderr
    assert_bit_identical(returns(run_dir(tmp_path, intervention)), uninterrupted(intervention),
                         resumed.stderr)


def test_asyncio_errors_of_tasks_nobody_awaited_stay_out_of_a_runs_stderr(monkeypatch):
    """orbax restores a checkpoint's arrays in concurrent tasks: when one fails, asyncio logs
    the others' errors as they are garbage-collected, a traceback each at random moments (seen
    once below the error line of the test after this one). The run scripts leave those out,
    and every other asyncio error in."""
    for name in ("unraisablehook", "excepthook"):  # put back after the test, as is
        monkeypatch.setattr(sys, name, getattr(sys, name))
    logger = logging.getLogger("asyncio")
    monkeypatch.setattr(logger, "filters", list(logger.filters))
    with pytest.raises(SystemExit):  # an unexpected argument: after the filters, exit 2
        runner.main(["run_sac.py", "unexpected"], "sac", lambda: None)

    def shown(message: str) -> bool:
        return bool(logger.filter(logger.makeRecord("asyncio", logging.ERROR, __file__, 1,
                                                    message, None, None)))

    assert not shown("Task exception was never retrieved\nfuture: <Task finished ...>")
    assert shown("Unclosed client session")


@pytest.mark.slow
def test_when_no_checkpoint_restores_the_logs_are_kept_and_a_relaunch_refuses(
        tmp_path, killed_while_saving):
    """Every checkpoint unreadable: the run stops with one line and keeps its logs; a later
    launch must not take the directory for a fresh one (that would overwrite the logs)."""
    args = killed_while_saving(tmp_path, NO_INTERVENTION)
    directory = run_dir(tmp_path, "none")
    for root, _, files in os.walk(directory / "checkpoints" / "125" / "device"):
        for name in files:
            os.truncate(os.path.join(root, name), 0)
    data = directory / "checkpoints" / "250" / "device" / "d"
    for name in os.listdir(data):  # missing array data: tensorstore's callbacks then reach a
        os.remove(data / name)     # closed event loop (a traceback each, hidden by the runner)
    logged = (directory / "eval.csv").read_text()
    first = run("run_sac.py", *args, check=False)
    assert first.returncode == 1, first.stderr
    assert [line.split(" in ")[0] for line in first.stderr.strip().splitlines()[1:]] == [
        "warning: checkpoint at env step 250", "warning: checkpoint at env step 125",
        "error: cannot resume: none of the checkpoints [125, 250]"], first.stderr
    again = run("run_sac.py", *args, check=False)
    assert again.returncode == 2 and "failed to restore earlier" in again.stderr, again.stderr
    assert (directory / "eval.csv").read_text() == logged


@pytest.mark.slow
def test_a_log_shorter_than_its_checkpoint_stops_the_resume(tmp_path, killed_while_saving):
    """After a machine crash a log could hold fewer bytes than the checkpoint counted; resuming
    must not pad it (with zero bytes) into rows that were never written."""
    args = killed_while_saving(tmp_path, NO_INTERVENTION)
    train_csv = run_dir(tmp_path, "none") / "train.csv"
    os.truncate(train_csv, os.path.getsize(train_csv) // 2)
    proc = run("run_sac.py", *args, check=False)
    assert proc.returncode == 1
    assert "error: cannot resume: " in proc.stderr and "train.csv is shorter" in proc.stderr
    assert b"\0" not in train_csv.read_bytes()


@pytest.mark.slow
def test_divergence_stops_with_a_clear_message_and_keeps_the_checkpoint(tmp_path):
    args = [*NO_INTERVENTION, f"--logdir={tmp_path}",
            "--critic_lr=1e30", "--actor_lr=1e30", "--start_steps=300"]
    proc = run("run_sac.py", *args, check=False)
    assert proc.returncode == 1
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("error: training diverged:")
    assert "env step" in message and "seed" in message
    assert "nan" in message.lower() or "inf" in message.lower()
    checkpoints = run_dir(tmp_path, "none") / "checkpoints"
    kept = [n for n in os.listdir(checkpoints) if n.isdigit()]
    assert sorted(kept) == ["125", "250"], "the checkpoints before the divergence are kept"
    record = json.loads((run_dir(tmp_path, "none") / "diverged.json").read_text())
    assert f"at env step {record['env_step']} for seed {record['seed']}" in message
    assert record["what"] in message and record["seeds_stopped"] == [0, 1]
    # A relaunch that cannot resume (a log lost rows) leaves the record of the divergence.
    train_csv = run_dir(tmp_path, "none") / "train.csv"
    os.truncate(train_csv, 10)
    again = run("run_sac.py", *args, check=False)
    assert again.returncode == 1 and "train.csv is shorter" in again.stderr
    assert json.loads((run_dir(tmp_path, "none") / "diverged.json").read_text()) == record


@pytest.mark.slow
@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="its premise, actions that stay finite until step 500, holds for the "
                    "CPU's rounding; on a GPU they can turn NaN earlier, which the per-step "
                    "check catches")
def test_divergence_between_train_logs_is_caught_before_an_evaluation(tmp_path):
    """The losses turn inf before step 500 while the actions stay finite: the evaluation at 500
    stops the run (train logs come every 1,000 steps) instead of logging the diverged agent."""
    proc = run("run_sac.py", *FAST_SAC, f"--logdir={tmp_path}", "--hidden_dim=8",
               "--max_steps=1500", "--start_steps=300", "--eval_every=500", "--critic_lr=1e4",
               "--actor_lr=1e4", "--temp_lr=10", "--progress=true", check=False)
    # With the progress bar on, the error is still the last line (a sweep shows that line).
    assert proc.returncode == 1
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("error: training diverged: ") and "at env step 500" in message
    assert message.endswith("no checkpoint was written before it")
    rows = read_csv(tmp_path / "sac" / "cartpole-swingup" / "none-utd1-seed0" / "eval.csv")
    assert rows == []


INTERRUPTED_COMPILATION = """
import os, signal, threading
import jax, jax.numpy as jnp
from experiment import protocol

jax.config.update("jax_enable_compilation_cache", False)  # a cached program loads at once

def deep(x):
    for i in range(300):
        x = jnp.tanh(x @ x.T + i) * 0.5
    return x.sum()

lowered = jax.jit(jax.grad(deep)).lower(jnp.ones((64, 64)))  # compiles in seconds
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    lowered.compile()
    print("compiled before the Ctrl-C")
except KeyboardInterrupt:
    protocol.interrupted("interrupted")
"""


@pytest.mark.slow
def test_a_ctrl_c_during_a_compilation_exits_130_without_crashing():
    """A run interrupted while XLA compiles (its first update) ends with its error line and
    exit 130; a normal interpreter shutdown under XLA's compiler threads crashed (SIGSEGV)."""
    proc = subprocess.run([sys.executable, "-c", INTERRUPTED_COMPILATION], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert "compiled before" not in proc.stdout, "the Ctrl-C came too late to test anything"
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.rstrip().endswith("error: interrupted"), proc.stderr


CTRL_C_IN_THE_IMPORTS = """
import os, runpy, signal, sys

class CtrlC:  # a Ctrl-C as the script starts importing numpy (jax, dm_control, scipy need it)
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            os.kill(os.getpid(), signal.SIGINT)

sys.meta_path.insert(0, CtrlC())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.parametrize("name, flags, message", [
    ("run_sac.py", ["--env=cartpole-swingup"], "error: interrupted before training started"),
    ("run_bro.py", ["--env=cartpole-swingup"], "error: interrupted before training started"),
    ("sweep.py", ["--envs=cartpole-swingup"], "\ninterrupted; nothing was launched"),
    ("aggregate.py", [], "error: interrupted (Ctrl-C)")],
    ids=["run_sac", "run_bro", "sweep", "aggregate"])
def test_a_ctrl_c_while_a_script_imports_its_libraries_is_held_until_they_are_in(
        tmp_path, name, flags, message):
    """A KeyboardInterrupt raised in the middle of jaxlib's initialisation crashed the
    interpreter (SIGSEGV, SIGABRT); a Ctrl-C is held there and raised once the script's main
    starts, which answers it in one line and exit 130, with nothing written."""
    logdir = tmp_path / "runs"
    where = [f"--runs={logdir}"] if name == "aggregate.py" else [f"--logdir={logdir}"]
    proc = subprocess.run([sys.executable, "-c", CTRL_C_IN_THE_IMPORTS, script(name), *flags,
                           *where], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert (proc.returncode, proc.stdout, proc.stderr.strip()) == (130, "", message.strip())
    assert not logdir.exists()


@pytest.mark.slow
def test_importing_a_script_as_a_module_leaves_ctrl_c_as_it_is():
    """Held and recorded only where the script is the program: a test or a notebook that
    imports one keeps Python's Ctrl-C, tracebacks and "Exception ignored" lines."""
    code = ("import signal, sys, launch.run_bro\n"
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,\n"
            "      sys.excepthook is sys.__excepthook__,\n"
            "      sys.unraisablehook is sys.__unraisablehook__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert proc.stdout.split() == ["True", "True", "True"], proc.stderr


@pytest.mark.slow
def test_a_ctrl_c_that_python_drops_in_a_callback_stops_the_training_loop(tmp_path,
                                                                          monkeypatch):
    """Python drops a KeyboardInterrupt raised in a garbage-collector callback (JAX has one)
    or a ctypes one (dm_control's MuJoCo warnings), printing "Exception ignored": the run
    scripts went on training. The loop raises it at its next env step."""
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    trainer = train.Trainer(agent, TrainConfig(
        env="cartpole-swingup", max_steps=100, start_steps=20, batch_size=8, eval_every=100,
        eval_episodes=1, diagnostics=False, progress=False, logdir=str(tmp_path)))
    for name in ("unraisablehook", "excepthook"):  # put back after the test, as is
        monkeypatch.setattr(sys, name, getattr(sys, name))
    monkeypatch.setattr(ctrl_c, "_pending", False)
    steps = []

    def ctrl_c_in_a_callback(phase, info):
        gc.callbacks.remove(ctrl_c_in_a_callback)
        signal.raise_signal(signal.SIGINT)  # its handler raises here, inside the callback
        steps.append(loop.env_step)

    iteration = trainer.iteration

    def iterate(loop_, started):
        if loop_.env_step == 50:
            gc.callbacks.append(ctrl_c_in_a_callback)
            gc.collect()
        return iteration(loop_, started)

    previous = signal.getsignal(signal.SIGINT)
    try:
        ctrl_c.hold()  # as a run script does
        ctrl_c.deliver()
        trainer.iteration = iterate
        loop = trainer.start()
        trainer.start = lambda: loop
        with pytest.raises(KeyboardInterrupt):
            trainer.run()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert steps == [] and loop.env_step == 51, "dropped in the callback, raised at step 51"


def test_a_ctrl_c_that_library_code_swallows_is_raised_at_the_next_check(monkeypatch):
    """A KeyboardInterrupt caught by an `except BaseException` somewhere in a library is still
    raised by `raise_dropped` (the training loop's check at every env step)."""
    for name in ("unraisablehook", "excepthook"):
        monkeypatch.setattr(sys, name, getattr(sys, name))
    monkeypatch.setattr(ctrl_c, "_pending", False)
    previous = signal.getsignal(signal.SIGINT)
    try:
        ctrl_c.hold()
        ctrl_c.deliver()
        try:
            signal.raise_signal(signal.SIGINT)
        except BaseException:  # what a careless library does
            pass
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.raise_dropped()
        ctrl_c.raise_dropped()  # raised once, not again
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_inside_c_code():
    """What CPython gives when a Ctrl-C's KeyboardInterrupt is raised in Python code that C
    code called and the C code goes on (seen in CI: numpy's dtype lookup of a jax scalar
    type)."""
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as e:
        raise SystemError("<function _ScalarMeta.__numpy_dtype__> returned a result with an "
                          "exception set") from e


@pytest.mark.slow  # processes of its own, seconds each
def test_an_error_c_code_made_of_a_ctrl_c_is_answered_as_the_ctrl_c():
    with pytest.raises(KeyboardInterrupt) as raised:
        with ctrl_c.as_interrupt():
            _ctrl_c_inside_c_code()
    assert isinstance(raised.value.__cause__, SystemError)
    with pytest.raises(SystemError, match="^not from a Ctrl-C$"):
        with ctrl_c.as_interrupt():
            raise SystemError("not from a Ctrl-C")
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c.as_interrupt():
            raise KeyboardInterrupt
    # One that reaches the top is one line and exit 130, as a KeyboardInterrupt is.
    code = ("from experiment import ctrl_c; from tests.test_resume import _ctrl_c_inside_c_code; "
            "ctrl_c.hold(); ctrl_c.deliver(); _ctrl_c_inside_c_code()")
    top = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert (top.returncode, top.stderr) == (130, "error: interrupted (Ctrl-C)\n"), top.stderr
    other = subprocess.run([sys.executable, "-c", code.replace("_ctrl_c_inside_c_code()",
                                                               "1 / 0")],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and "ZeroDivisionError" in other.stderr, other.stderr


@pytest.mark.slow
def test_ctrl_c_stops_a_run_with_one_line_and_the_same_command_resumes(tmp_path):
    args = [*NO_INTERVENTION, f"--logdir={tmp_path}"]
    proc = forkserver.popen([sys.executable, script("run_sac.py"), *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_checkpoint(run_dir(tmp_path, "none") / "checkpoints", proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("error: interrupted; the same command resumes")
    config_path = run_dir(tmp_path, "none") / "config.json"
    config = json.loads(config_path.read_text())
    today = dict(config["versions"])
    config["versions"]["jax"] = "0.0.1"  # as if the run had started with another jax
    del config["versions"]["XLA_FLAGS"]  # and without the framework's XLA options
    config_path.write_text(json.dumps(config))
    resumed = run("run_sac.py", *args, "--progress=true")
    assert "resumed from the checkpoint" in resumed.stderr
    # The progress bar shows the evaluation before the checkpoint from its first line on.
    step = re.search(r"resumed from the checkpoint at env step (\d+)", resumed.stderr)[1]
    returns = [float(r["return"]) for r in read_csv(run_dir(tmp_path, "none") / "eval.csv")
               if r["env_step"] == step]
    first_bar = next(line for line in resumed.stderr.replace("\r", "\n").splitlines()
                     if line.startswith("sac cartpole-swingup"))
    mean = sum(returns) / len(returns)
    assert f"eval_return={mean:.1f}" in first_bar, first_bar
    # The resume warned about the versions, and config.json keeps the earlier ones.
    assert "warning: resuming with other versions than the run's earlier part: XLA_FLAGS " \
           f"(unset) -> {today['XLA_FLAGS']}, jax 0.0.1 -> {today['jax']}; config.json keeps " \
           f"those up to env step {step}" in resumed.stderr
    config = json.loads(config_path.read_text())
    assert config["versions"] == today
    earlier = {k: v for k, v in today.items() if k != "XLA_FLAGS"}
    assert config["earlier_versions"] == [{"until_env_step": int(step),
                                           "versions": {**earlier, "jax": "0.0.1"}}]


@pytest.mark.slow
@pytest.mark.parametrize("resume, again", [("auto", "the same command starts it over"),
                                           ("never", "the same command with --resume=auto")])
def test_ctrl_c_before_the_first_checkpoint_says_the_run_starts_over(tmp_path, resume, again):
    args = [*NO_INTERVENTION, f"--logdir={tmp_path}",
            f"--resume={resume}"]
    proc = forkserver.popen([sys.executable, script("run_sac.py"), *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    banner = proc.stderr.readline()  # printed before anything is compiled
    assert banner.startswith("sac on cartpole-swingup"), banner
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("error: interrupted before the first "
                                                   "checkpoint"), err
    assert again in err
    checkpoints = run_dir(tmp_path, "none") / "checkpoints"
    assert not checkpoints.exists() or not [n for n in os.listdir(checkpoints) if n.isdigit()]



def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def damage(checkpoint, part):
    """Change the checkpoint's bytes in place, sizes kept: a byte of the agents' arrays (in
    orbax's data files), of the replay buffer's observations, or a digit of meta's env step
    (still valid JSON)."""
    if part == "device":
        files = [os.path.join(root, name) for root, _, names in os.walk(checkpoint / "device")
                 for name in names if os.path.basename(root) == "d"]
        biggest = max(files, key=os.path.getsize)
        flip_byte(biggest, os.path.getsize(biggest) // 2)
    elif part == "host":
        index = json.loads((checkpoint / "host" / "index.json").read_text())
        path = checkpoint / "host" / index["buffer/observations"]["file"]
        flip_byte(path, os.path.getsize(path) - 40)
    else:
        path = checkpoint / "meta" / "metadata"
        text = path.read_text()
        assert text.count('"env_step": 250') == 1
        path.write_text(text.replace('"env_step": 250', '"env_step": 251'))


@pytest.mark.slow
@pytest.mark.parametrize("part", ["device", "host", "meta"])
def test_a_checkpoint_whose_bytes_changed_is_set_aside_and_the_run_resumes_before_it(
        uninterrupted, tmp_path, part, killed_while_saving):
    """A byte flipped on disk in the newest checkpoint, file sizes kept: restored, it would
    train on other numbers (or a NaN blamed on training). Its digests name it, it is moved
    aside, and the run resumes from the checkpoint before it, exactly."""
    intervention = "clip"
    args = killed_while_saving(tmp_path, [*ARGS, f"--intervention={intervention}"])
    checkpoints = run_dir(tmp_path, intervention) / "checkpoints"
    damage(checkpoints / "250", part)
    resumed = run("run_sac.py", *args)
    warning = next(line for line in resumed.stderr.splitlines() if line.startswith("warning: "))
    assert warning.startswith("warning: checkpoint at env step 250 in ") and \
        "cannot be restored" in warning and "moved to" in warning, resumed.stderr
    if part == "device":  # the CRC-32s name a flipped byte of an array (test_checkpoint.py);
        # one of orbax's own structures in the same file fails its read first, with its reason
        assert re.search(r"cannot be restored \(\w+", warning), warning
    else:
        assert ("DigestMismatch" if part == "meta" else "checksum mismatch") in warning
    assert "resumed from the checkpoint at env step 125" in resumed.stderr
    assert (checkpoints / "corrupt_250").is_dir()
    assert_bit_identical(returns(run_dir(tmp_path, intervention)), uninterrupted(intervention),
                         resumed.stderr)


@pytest.mark.slow
def test_a_half_written_first_checkpoint_is_said_to_be_discarded(uninterrupted, tmp_path):
    intervention = "clip"
    args = [*ARGS, f"--intervention={intervention}", f"--logdir={tmp_path}"]
    kill_while_saving(args, 1)
    checkpoints = run_dir(tmp_path, intervention) / "checkpoints"
    assert os.listdir(checkpoints) == ["125.orbax-checkpoint-tmp"]
    again = run("run_sac.py", *args)
    assert "the checkpoint at env step 125 of " in again.stderr
    assert "was half-written when the run stopped and is discarded; with no complete " \
           "checkpoint, the run starts over from env step 0" in again.stderr
    assert returns(run_dir(tmp_path, intervention)) == uninterrupted(intervention)


@pytest.mark.slow
def test_a_divergence_right_after_a_resume_names_the_checkpoint(tmp_path):
    """Rerun, a run that diverged resumes from its last checkpoint and diverges again; the
    message and diverged.json say which checkpoint it had resumed from."""
    args = [*NO_INTERVENTION, f"--logdir={tmp_path}", "--critic_lr=1e30", "--actor_lr=1e30",
            "--start_steps=300"]
    first = run("run_sac.py", *args, check=False)
    assert first.returncode == 1 and "resuming" not in first.stderr
    again = run("run_sac.py", *args, check=False)
    assert again.returncode == 1
    record = json.loads((run_dir(tmp_path, "none") / "diverged.json").read_text())
    assert record["resumed_from"] == 250
    message = again.stderr.strip().splitlines()[-1]
    assert message.startswith("error: training diverged: ")
    assert message.endswith(f"{record['env_step'] - 250} env step(s) after resuming from the "
                            "checkpoint at env step 250 "
                            f"({run_dir(tmp_path, 'none')}/checkpoints/250), which is kept")


@pytest.mark.slow
@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="diverges before its first checkpoint on the CPU's rounding (as the "
                    "test of a divergence between train logs)")
def test_a_run_that_diverged_before_any_checkpoint_is_trained_again_only_when_asked(tmp_path):
    args = [*FAST_SAC, f"--logdir={tmp_path}", "--hidden_dim=8", "--max_steps=1500",
            "--start_steps=300", "--eval_every=500", "--critic_lr=1e4", "--actor_lr=1e4",
            "--temp_lr=10"]
    first = run("run_sac.py", *args, check=False)
    assert first.returncode == 1 and "no checkpoint was written before it" in first.stderr
    directory = tmp_path / "sac" / "cartpole-swingup" / "none-utd1-seed0"
    record = (directory / "diverged.json").read_text()
    what = json.loads(record)
    again = run("run_sac.py", *args, check=False)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"error: {directory} diverged before its first checkpoint ({what['what']} at env step "
        f"{what['env_step']} for seed {what['seed']}); training it again starts it over from "
        "env step 0, overwriting its logs: run the same command with --resume=never to do "
        "that"], again.stderr
    assert (directory / "diverged.json").read_text() == record  # nothing was touched
    over = run("run_sac.py", *args, "--resume=never", check=False)
    assert "(the run stopped before its first one), so the run starts over" in over.stderr
    assert over.returncode == 1 and "training diverged" in over.stderr  # it trained again
    assert (directory / "diverged.json").read_text() == record


@pytest.mark.slow
def test_a_finished_run_whose_done_json_is_unreadable_is_checked_not_trusted(tmp_path):
    from experiment.rundir.files import is_finished

    args = [*NO_INTERVENTION, f"--logdir={tmp_path}", "--max_steps=375"]
    run("run_sac.py", *args)
    directory = run_dir(tmp_path, "none")
    done = json.loads((directory / "done.json").read_text())
    logged = (directory / "eval.csv").read_text()
    (directory / "done.json").write_text('{"env_step": 3')  # cut short
    assert not is_finished(str(directory))  # a sweep relaunches its job
    dry = run("run_sac.py", *args, "--dry_run")
    assert "would resume from its last checkpoint" in dry.stdout
    again = run("run_sac.py", *args)
    assert f"warning: {directory}/done.json cannot be read (JSONDecodeError: " in again.stderr
    assert "its final checkpoint (env step 375) and eval.csv's rows at that step say it " \
           "finished" in again.stderr
    assert json.loads((directory / "done.json").read_text())["env_step"] == done["env_step"]
    assert (directory / "eval.csv").read_text() == logged
    again = run("run_sac.py", *args)
    assert "has already finished; nothing to do" in again.stderr

    (directory / "done.json").write_text("[]")
    (directory / "eval.csv").write_text(logged[:logged.index("\n375,") + 1])  # last rows lost
    refused = run("run_sac.py", *args, check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: {directory}/done.json cannot be read (it holds no JSON object), so the run is "
        "not taken as finished, and its eval.csv has no row at env step 375 (its final "
        "checkpoint's) for seeds [0, 1]: restore done.json and eval.csv, or move the run "
        "directory away to train it again")
