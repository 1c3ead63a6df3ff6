"""Running the launch scripts as a user types them, for the end-to-end tests."""

import csv
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import forkserver

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPERS = os.path.join(REPO, "tests", "helpers")
KILLSAVE = os.path.join(HELPERS, "killsave.py")  # a run script SIGKILLed mid-checkpoint
# The published curves (reference/README.md), part of the repository.
REFERENCE = Path(REPO) / "reference"

# A small, fast SAC run: cartpole, tiny networks, one evaluation episode (1,000 steps: action
# repeat 1).
FAST_SAC = [
    "--env=cartpole-swingup",
    "--hidden_dim=32",
    "--eval_episodes=1",
    "--progress=false",
]


def script(name: str) -> str:
    return os.path.join(REPO, "launch", name)


# Scripts whose runs start processes of their own (the sweeps' jobs, pickled by submitit from
# the script's own module) run in a process of their own too.
OWN_PROCESS = {"sweep.py", "compare_continual.py"}
# TESTS_IN_PROCESS=0 runs every script as a separate process, as a user starts it.
IN_PROCESS = os.environ.get("TESTS_IN_PROCESS", "1") != "0"


def run(name: str, *args: str, check: bool = True, timeout: float = 300, env=None,
        separate: bool | None = None, cwd=REPO):
    """Run `python launch/<name> args...` in `cwd`; returns the CompletedProcess. The script
    runs in this process (tests.helpers.inprocess) unless it needs a process of its own: `env`
    to start it with (read once a process, as XLA_FLAGS is), --methods_from (its methods stay
    registered in the process that loads them), or a script of OWN_PROCESS; `separate` says so
    explicitly (False: a sweep's checks, --status or --dry_run, which start no job)."""
    if separate is None:
        separate = bool(env) or name in OWN_PROCESS or any(
            a.startswith("--methods_from") for a in args)
    if IN_PROCESS and not separate:
        from tests.helpers.inprocess import run_script

        proc = run_script(script(name), list(args), cwd=str(cwd))
    else:
        # MUJOCO_GL and JAX_PLATFORMS from conftest; without `env`, forked by the fork server
        full_env = {**os.environ, **env} if env else None
        proc = forkserver.run([sys.executable, script(name), *args], capture_output=True,
                              text=True, timeout=timeout, env=full_env, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def run_patched(name: str, *args: str, cwd=REPO) -> subprocess.CompletedProcess:
    """`run(name, *args, check=False)` always in this process (TESTS_IN_PROCESS aside), for a
    test that patches the project's functions the script calls (with pytest's monkeypatch)."""
    from tests.helpers.inprocess import run_script

    return run_script(script(name), list(args), cwd=str(cwd))


def read_csv(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
