"""Run, one seed's evaluation curve on one task, which every layout's reader returns
(analysis/layouts.py), and what the readers share: a run made from its env steps and returns,
env steps and seeds as files write them, and a file that cannot be read as an AggregationError
naming it."""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from pathlib import Path

import numpy as np

from analysis.errors import AggregationError, AggregationWarning

TASK_ALIASES = {"finger-turn": "finger-turn_hard"}


@dataclasses.dataclass(frozen=True)
class Run:
    """One seed's evaluation curve on one task: steps (T,) increasing ints, returns (T,)."""

    task: str
    run_id: str
    steps: np.ndarray
    returns: np.ndarray
    source: str
    config: dict = dataclasses.field(default_factory=dict, compare=False)
    config_source: str = ""  # the file `config` was read from, if any
    stopped: str = ""  # why training stopped early (this project's diverged.json), if known
    stopped_at: int | None = None  # the env step it stopped at


def canonical_task(name: str) -> str:
    """dm_control 'domain-task' name for a task name (maps known aliases such as BRO's)."""
    return TASK_ALIASES.get(name, name)


def make_run(task: str, run_id: str, steps, returns, source: str, config=None,
              config_source=None) -> Run | None:
    try:
        steps = np.asarray(steps, dtype=np.int64)
        returns = np.asarray(returns, dtype=np.float64)
    except (TypeError, ValueError) as error:  # a .npy of strings, say
        raise AggregationError(f"{source}: env steps and returns must be numbers ({error})") \
            from None
    if np.any(steps < 0):
        raise AggregationError(f"{source}: env step {int(steps.min())} is negative; env steps "
                               "count from 0")
    keep = np.isfinite(returns)
    if not keep.all():
        warnings.warn(f"{source}: {int((~keep).sum())} non-finite returns ignored",
                      AggregationWarning, stacklevel=3)
    steps, returns = steps[keep], returns[keep]
    if steps.size == 0:
        warnings.warn(f"{source}: no evaluations; run skipped", AggregationWarning, stacklevel=3)
        return None
    order = np.argsort(steps, kind="stable")
    steps, returns = steps[order], returns[order]
    if np.any(np.diff(steps) == 0):
        raise AggregationError(f"{source}: env_step values repeat; expected one evaluation "
                               "per step per seed")
    return Run(canonical_task(task), run_id, steps, returns, source, config or {},
               str(config_source or ""))


@contextlib.contextmanager
def reading(path: Path):
    """Turns a file that cannot be read or decoded (missing, unreadable, half-written, not
    text, not what its extension says) into an AggregationError naming it."""
    try:
        yield
    except AggregationError:
        raise
    except (OSError, ValueError, EOFError) as error:  # json and Unicode errors are ValueErrors
        raise AggregationError(f"{path}: cannot read it ({type(error).__name__}: {error})") \
            from None


def parse_env_step(text: str) -> int:
    """An env step as files write it ("5000", "5000.0", "5e3"); ValueError unless whole."""
    value = float(text)
    if not value.is_integer():
        raise ValueError(f"env step {text} is not a whole number")
    return int(value)


def parse_seed(text: str) -> str:
    """A seed as eval.csv spells it ("0", " 0", "0.0"), in one spelling: "0". ValueError
    unless a whole number >= 0, so that one seed never counts as several runs."""
    value = parse_env_step(text)
    if value < 0:
        raise ValueError(f"seed {text} is negative")
    return str(value)
