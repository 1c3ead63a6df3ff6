"""Running the launch scripts as a user types them, for the end-to-end tests."""

import csv
import os
import subprocess
import sys
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPERS = os.path.join(REPO, "tests", "helpers")
KILLSAVE = os.path.join(HELPERS, "killsave.py")  # a run script SIGKILLed mid-checkpoint
# The published curves (reference/README.md), part of the repository.
REFERENCE = Path(REPO) / "reference"

# A small, fast SAC run: cartpole, tiny networks, 250-step episodes (action repeat 4).
FAST_SAC = [
    "--env=cartpole-swingup",
    "--hidden_dim=32",
    "--eval_episodes=1",
    "--progress=false",
]


def script(name: str) -> str:
    return os.path.join(REPO, "launch", name)


def run(name: str, *args: str, check: bool = True, timeout: float = 300, env=None):
    """Run `python launch/<name> args...`; returns the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}  # MUJOCO_GL and JAX_PLATFORMS as conftest set them
    proc = subprocess.run([sys.executable, script(name), *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def read_csv(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
