"""experiment.protocol: the one place where RL and continual runs turn what stopped them into a
line and an exit code, and a SIGTERM into a stop at the next boundary."""

import os
import signal
import types

import jax
import pytest

from continual import entry as continual_entry
from experiment import protocol, runner
from experiment.divergence import Diverged as RLDiverged
from experiment.resources import TooLargeForMemory
from experiment.rundir.lock import EXIT_IN_USE, EXIT_STOPPED, RunDirInUse
from experiment.rundir.record import CannotResume
from experiment.train import Stopped as RLStopped
from experiment.train import UnevenEpisodes
from experiment.wandb_runs import DashboardError

KINDS = {"rl": runner.RL, "continual": continual_entry.KIND}


class Exited(Exception):
    def __init__(self, code):
        self.code = code


@pytest.fixture
def exits(monkeypatch):
    """os._exit (interrupted's) raises instead of ending the test process."""
    monkeypatch.setattr(os, "_exit", lambda code: (_ for _ in ()).throw(Exited(code)))


def outcome(kind, cfg, error, capsys):
    """(exit code, the error line) of protocol.train when training raises `error`."""

    def go(stop):
        raise error

    handler = signal.getsignal(signal.SIGTERM)
    try:
        protocol.train(cfg, kind, "banner", go)
    except SystemExit as e:
        code = e.code
    except Exited as e:
        code = e.code
    else:
        raise AssertionError("protocol.train returned after an error")
    finally:
        signal.signal(signal.SIGTERM, handler)
    err = capsys.readouterr().err
    assert err.startswith("banner\n"), err
    return code, err.strip().splitlines()[-1]


def config(tmp_path, **more):
    return types.SimpleNamespace(run_dir=str(tmp_path / "run"), resume="auto", num_seeds=3, utd=2,
                                 batch_size=8, buffer_capacity=1000, checkpoint_every=5, **more)


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("error, code, line", [
    (CannotResume("settings differ"), 1, "error: cannot resume: settings differ"),
    (RunDirInUse("in use"), EXIT_IN_USE, "error: in use"),
    (DashboardError("wandb is gone"), 1, "error: wandb is gone"),
    (MemoryError(), 1, "error: out of memory (MemoryError); "),
    (TooLargeForMemory("4 GiB", "lower --x"), 1,
     "error: out of memory: 4 GiB; lower --x; no checkpoint was written"),
    (OSError(28, "No space left on device"), 1, "error: [Errno 28] No space left on device; "),
    (KeyboardInterrupt(), 130, "error: interrupted before the first checkpoint"),
])
def test_every_kind_of_run_answers_a_failure_alike(tmp_path, capsys, exits, name, error, code,
                                                   line):
    got, last = outcome(KINDS[name], config(tmp_path), error, capsys)
    assert got == code and last.startswith(line), last


def test_what_differs_between_kinds_comes_from_the_kind(tmp_path, capsys, exits):
    cfg = config(tmp_path)
    assert outcome(runner.RL, cfg, MemoryError(), capsys)[1].endswith(
        "the replay buffer holds --buffer_capacity=1,000 transitions for each of --num_seeds=3 "
        "seed(s): lower them or free memory; no checkpoint was written")
    assert "lower it or free memory" in outcome(continual_entry.KIND, cfg, MemoryError(),
                                                capsys)[1]
    assert outcome(runner.RL, cfg, KeyboardInterrupt(), capsys)[1] == (
        f"error: interrupted before the first checkpoint (every 5 env steps, at an episode end) "
        f"of {cfg.run_dir}; the same command starts it over")
    os.makedirs(os.path.join(cfg.run_dir, "checkpoints", "5"))
    assert outcome(continual_entry.KIND, cfg, KeyboardInterrupt(), capsys)[1] == (
        f"error: interrupted; the same command resumes {cfg.run_dir} from its last checkpoint "
        "(every 5 tasks)")
    code, last = outcome(runner.RL, cfg, RLStopped(40), capsys)
    assert code == EXIT_STOPPED and last == (
        f"error: stopped by SIGTERM at env step 40, after a checkpoint there; the same command "
        f"resumes {cfg.run_dir} from it")
    never = config(tmp_path)
    never.resume = "never"
    assert "the same command with --resume=auto resumes" in outcome(
        runner.RL, never, RLStopped(40), capsys)[1]
    assert outcome(runner.RL, cfg, RLDiverged("the loss is nan", 40, 1), capsys)[1] == (
        "error: training diverged: the loss is nan at env step 40 for seed 1; the last good "
        f"checkpoint is kept in {cfg.run_dir}/checkpoints")
    assert outcome(runner.RL, cfg, UnevenEpisodes("seed 2 ended early"), capsys) == (
        1, "error: seed 2 ended early")
    with pytest.raises(UnevenEpisodes):  # not a continual run's: not hidden there
        outcome(continual_entry.KIND, cfg, UnevenEpisodes("x"), capsys)


def test_a_device_out_of_memory_names_the_kinds_settings(tmp_path, capsys, exits):
    error = jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 9 GiB")
    code, last = outcome(continual_entry.KIND, config(tmp_path), error, capsys)
    assert code == 1 and last == (
        f"error: out of memory on the {jax.default_backend().upper()} (RESOURCE_EXHAUSTED: Out "
        "of memory allocating 9 GiB); lower --num_seeds or --batch_size; no checkpoint was "
        "written")
    with pytest.raises(jax.errors.JaxRuntimeError):  # any other runtime error is not hidden
        outcome(runner.RL, config(tmp_path), jax.errors.JaxRuntimeError("INTERNAL: x"), capsys)


def test_a_sigterm_asks_the_run_to_stop_at_its_next_boundary(tmp_path, capfd):
    seen = []

    def go(stop):
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        seen.append(stop.requested)

    handler = signal.getsignal(signal.SIGTERM)
    try:
        protocol.train(config(tmp_path), continual_entry.KIND, "banner", go)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # a second one stops at once
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert seen == [True]
    assert ("SIGTERM: stopping at the next task boundary, after a checkpoint there (a second "
            "SIGTERM stops at once)") in capfd.readouterr().err  # written to fd 2
