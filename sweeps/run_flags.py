"""The flags of a sweep and of its jobs' run scripts: the grid's own settings, the run-script
flags the sweep sets on every job's command line, and the extra flags given for all of them.

Extra flags (--extra, or after `--`) are read as absl reads them (`extra_settings`) and checked
against the flags the sweep sets (`_check_extra`). SweepError, the one-line error of a sweep
setting that cannot work, is the sweeps' error throughout.
"""

import shlex
from collections.abc import Iterable, Sequence
from typing import Any

CONTINUAL = "continual"  # launch/run_continual.py: supervised benchmarks, no UTD
# Integer settings of the run scripts a sweep may set; unset ones keep the agent's defaults.
TRAIN_FLAGS = ("max_steps", "start_steps", "eval_every", "eval_episodes", "batch_size",
               "checkpoint_every")
GRID_KEYS = ("agent", "envs", "preset", "interventions", "utds", "clip_cs", "vary", "seeds",
             "first_seed", "seeds_per_job", "extra", *TRAIN_FLAGS)
CLIP_C = "clip_c"  # --clip_cs=1.5,2 spells --vary=clip_c=1.5,2; older job records hold clip_c


class SweepError(ValueError):
    """A sweep setting that cannot work; the message is one line for the user."""


def listed(value: str | Iterable[Any] | None) -> list[str]:
    """A comma-separated string or a sequence, as a list of stripped non-empty strings."""
    if value is None:
        return []
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, int | float):  # a single number in a grid file: "utds": 4
        parts = [value]
    else:
        parts = value
    return [str(p).strip() for p in parts if str(p).strip()]


# Run-script flags each job's command line sets from the grid (JobSpec.argv).
SET_BY_SWEEP = ("env", "task", "utd", "intervention", "seed", "num_seeds", "logdir", "run_name",
                "resume")


def split_extra(extra: str | Iterable[str]) -> tuple[str, ...]:
    """Extra run-script flags, from a shell-quoted string or a sequence of arguments."""
    if isinstance(extra, str):
        try:
            return tuple(shlex.split(extra))
        except ValueError as e:
            raise SweepError(f"cannot split the extra flags {extra!r}: {e}") from None
    if not isinstance(extra, Iterable) or any(not isinstance(a, str) for a in extra):
        raise SweepError(f"extra must be a string or a list of strings, got {extra!r}")
    return tuple(extra)


def _is_value(arg: str) -> bool:
    """Whether an argument after a `--flag` is its value: not a flag, or a negative number."""
    if not arg.startswith("-"):
        return True
    try:
        float(arg)
    except ValueError:
        return False
    return True


def extra_settings(extra: Sequence[str]) -> list[tuple[str, str, str]]:
    """(flag name, value text, as given) for each flag among extra run-script flags, read as
    absl reads them: `--flag=value` and `--flag value`; a flag without a value is a boolean,
    `--flag` being "true" and `--noflag` the flag `flag` with "false"."""
    settings = []
    i = 0
    while i < len(extra):
        arg = extra[i]
        i += 1
        if arg == "--":  # absl's end of flags: what follows is positional
            break
        if not arg.startswith("-"):  # a stray argument: the run script refuses it
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if eq:
            settings.append((name, value, arg))
        elif i < len(extra) and _is_value(extra[i]):
            settings.append((name, extra[i], f"{arg} {extra[i]}"))
            i += 1
        elif name.startswith("no") and len(name) > 2:
            settings.append((name[2:], "false", arg))
        else:
            settings.append((name, "true", arg))
    return settings


def _check_extra(extra: Sequence[str], train_flags: Sequence[tuple[str, int]]) -> None:
    """Extra flags come last on a job's command line, so one naming a setting the sweep sets
    would override it (a UTD-1 job writing UTD-8 results, or two jobs sharing a run dir), and
    a flag given twice would be set by its last copy alone."""
    set_here = {name for name, _ in train_flags}
    seen = set()
    for name, _, arg in extra_settings(extra):
        if name in seen:
            raise SweepError(f"--{name} given more than once for the run scripts (--extra and "
                             "the flags after `--` together); give each once")
        seen.add(name)
        if name == "dry_run":
            raise SweepError("--dry_run among the run scripts' flags would train nothing (the "
                             "sweep checks every job's flags with it before launching)")
        if name in SET_BY_SWEEP:
            raise SweepError(f"the extra flag {arg!r} sets --{name}, which the sweep sets for "
                             f"each job; use the sweep's own settings ({', '.join(GRID_KEYS)})")
        if name in set_here:
            raise SweepError(f"the extra flag {arg!r} and the sweep setting {name} both set "
                             f"--{name}; give it once")
