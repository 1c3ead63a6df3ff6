"""tests/helpers/forkserver.py: a script forked from the server answers as the process that
`python script.py` starts: the same exit code, output, working directory, environment, sys.path,
signal handling and end by a signal."""

import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import forkserver

pytestmark = pytest.mark.slow  # the server's start imports JAX: seconds

PROBE = """\
import os, signal, sys, time
print("argv", sys.argv[1:])
print("cwd", os.getcwd())
print("path", sys.path)
print("env", os.environ.get("FORKSERVER_PROBE"))
print("handlers", signal.getsignal(signal.SIGINT) is signal.default_int_handler,
      signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
print("own session", os.getsid(0) == os.getpid())
print("to stderr", file=sys.stderr)
mode = sys.argv[1]
if mode == "exit":
    sys.exit(3)
if mode == "message":
    sys.exit("error: a message")
if mode == "raise":
    raise ValueError("boom")
if mode == "wait":
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def probe(tmp_path, monkeypatch):
    (tmp_path / "probe.py").write_text(PROBE)
    monkeypatch.setattr(forkserver, "ENABLED", True)  # under TESTS_FORKSERVER=0 too
    monkeypatch.setenv("FORKSERVER_PROBE", "set after the server started")
    monkeypatch.chdir(tmp_path)
    return "probe.py"


@pytest.mark.parametrize("mode", ["ok", "exit", "message", "raise"])
def test_a_forked_script_answers_as_its_own_process(probe, mode):
    forkserver._get_server()  # noqa: SLF001 - started before the environment variable is read
    args = [sys.executable, probe, mode, "--flag=1"]
    forked = forkserver.run(args, capture_output=True, text=True, timeout=60)
    started = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        started.returncode, started.stdout, started.stderr)
    assert "env set after the server started" in forked.stdout
    assert forked.returncode == {"ok": 0, "exit": 3, "message": 1, "raise": 1}[mode]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_it_as_it_ends_its_own_process(probe, sig):
    ends = []
    for popen in (forkserver.popen, subprocess.Popen):
        proc = popen([sys.executable, probe, "wait"], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
        assert isinstance(proc, forkserver.Popen) == (popen is forkserver.popen)
        while proc.stdout.readline() != "ready\n":
            assert proc.poll() is None
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        lines = err.splitlines()  # the traceback's line is where the signal came: not compared
        ends.append((proc.returncode, lines[:2], lines[-1]))
    assert ends[0] == ends[1]
    assert ends[0][0] == -sig
    if sig == signal.SIGINT:
        assert ends[0][1:] == (["to stderr", "Traceback (most recent call last):"],
                               "KeyboardInterrupt")


def test_a_new_session_and_a_timeout(probe):
    proc = forkserver.popen([sys.executable, probe, "ok"], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert "own session True" in proc.communicate(timeout=30)[0]
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run([sys.executable, probe, "wait"], capture_output=True, timeout=2)


def test_an_environment_of_its_own_is_what_the_script_reads(probe):
    """`env` with variables read only as the script runs: forked, with that environment (the
    added variable, and none of the removed ones), as subprocess starts it."""
    forkserver._get_server()  # noqa: SLF001
    env = {k: v for k, v in os.environ.items() if k != "FORKSERVER_PROBE"}
    for extra in ({}, {"FORKSERVER_PROBE": "given in env"}):
        args, kwargs = [sys.executable, probe, "ok"], {"env": {**env, **extra}}
        with forkserver.popen(args, stdout=subprocess.DEVNULL, **kwargs) as proc:
            assert type(proc) is forkserver.Popen
        forked = forkserver.run(args, capture_output=True, text=True, timeout=60, **kwargs)
        started = subprocess.run(args, capture_output=True, text=True, timeout=60, **kwargs)
        assert forked.stdout == started.stdout
        assert f"env {extra.get('FORKSERVER_PROBE')}" in forked.stdout


def test_what_it_cannot_fork_is_started_by_subprocess(probe, monkeypatch):
    """Another value of a variable read as the interpreter starts or the libraries import
    (given in `env`, or set in this process after the server started), code given with -c, or
    a Popen argument the server does not take."""
    forkserver._get_server()  # noqa: SLF001
    flags = {**os.environ, "XLA_FLAGS": "--xla_dump_to=/nowhere"}
    for args, kwargs in [([sys.executable, probe, "ok"], {"env": flags}),
                         ([sys.executable, probe, "ok"], {"env": {"A": "1"}}),
                         ([sys.executable, "-c", "pass"], {}),
                         ([sys.executable, probe, "ok"], {"preexec_fn": lambda: None})]:
        with forkserver.popen(args, stdout=subprocess.DEVNULL, **kwargs) as proc:
            assert type(proc) is subprocess.Popen
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    with forkserver.popen([sys.executable, probe, "ok"], stdout=subprocess.DEVNULL) as proc:
        assert type(proc) is subprocess.Popen
