"""What `--resume` does with what a run directory holds: train it fresh, resume it from its
newest checkpoint, report it finished, or refuse (a run with other settings, checkpoints that
all failed, a run that diverged before its first checkpoint). Compiles nothing."""

import csv
import json
import os
import sys
from collections.abc import Callable
from typing import NamedTuple

from experiment.config import ConfigError, TrainConfig
from experiment.rundir.files import DIVERGED, done_problem
from experiment.rundir.record import (
    WATCH_SETTINGS,
    flat_settings,
    read_config,
    with_added_settings,
    with_resolved_settings,
)

# Settings that may differ when a run resumes: how it resumes and shows progress, whether its
# final checkpoint keeps the buffer, the library versions, how its logdir is spelled (the
# run directory itself is the one resumed), and the dashboards it logs to.
IGNORED_ON_RESUME = ("resume", "progress", "keep_final_buffer", "versions", "earlier_versions",
                     "logdir", *WATCH_SETTINGS)


def checkpoint_dirs(run_dir: str) -> tuple[list[str], list[str]]:
    """The run's checkpoint directories by name: (env steps, those moved aside as corrupt)."""
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    names = sorted(os.listdir(ckpt_dir)) if os.path.isdir(ckpt_dir) else []
    return [n for n in names if n.isdigit()], [n for n in names if n.startswith("corrupt_")]


def _results_without_config(run_dir: str, has_checkpoint: bool, results: str) -> str:
    """What of a run a directory without config.json still holds ("" if nothing): checkpoints,
    rows of its results file (eval.csv, tasks.csv). A run writes config.json before its first
    results and checkpoint."""
    held = ["checkpoints"] if has_checkpoint else []
    try:
        with open(os.path.join(run_dir, results)) as f:
            rows = sum(1 for _ in f) - 1
    except OSError:
        rows = 0
    if rows > 0:
        held.append(f"{rows} {results} row(s)")
    return " and ".join(held)


def refuse_other_settings(run_dir: str, there: dict, now: dict, ignored: tuple[str, ...]):
    """ConfigError naming (up to three of) the flat settings in which the run's config.json
    (`there`) and this command (`now`) differ, those under an `ignored` top-level key aside."""
    differ = sorted(k for k in set(there) | set(now)
                    if k.split(".")[0] not in ignored and there.get(k) != now.get(k))
    if differ:
        shown = ", ".join(f"{k}: {there.get(k)!r} there, {now.get(k)!r} now" for k in differ[:3])
        raise ConfigError(f"{run_dir} holds a run with different settings ({shown}); "
                          "use another --run_name or --logdir")


def resume_state(cfg: TrainConfig, record: dict) -> str:
    """"fresh", "resume" or "done" for this RL run directory, as `--resume` asks
    (`decide_resume`)."""
    existing = read_config(cfg.run_dir)
    there = (None if existing is None else
             flat_settings(with_resolved_settings(with_added_settings(existing))))
    now = flat_settings(with_resolved_settings(json.loads(json.dumps(record))))
    return decide_resume(cfg.run_dir, cfg.resume, there, now, IGNORED_ON_RESUME,
                         RL_PROGRESS, lambda steps: _finished_state(cfg, steps))


class Progress(NamedTuple):
    """How a kind of run counts its progress: the unit of its checkpoints ("env step",
    "task"), the key diverged.json gives it under, and the file of its results."""

    unit: str
    key: str
    results: str


RL_PROGRESS = Progress("env step", "env_step", "eval.csv")
CONTINUAL_PROGRESS = Progress("task", "task", "tasks.csv")


def decide_resume(run_dir: str, resume: str, there: dict | None, now: dict,
                  ignored: tuple[str, ...], progress: Progress,
                  finished: Callable[[list[str]], str]) -> str:
    """"fresh", "resume" or "done" for a run directory, as `resume` (--resume) asks, for RL and
    continual runs alike. `there` and `now` are the flat settings of its config.json (None
    where it has none) and of this command, `finished(checkpoint steps)` the state of a run
    with a done.json.

    Raises ConfigError when the directory holds a run with other settings, results without a
    config.json, checkpoints that all failed to restore earlier, or a run that diverged before
    its first checkpoint (which --resume=never trains again), or when the mode forbids what is
    there. Compiles nothing.
    """
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    steps, corrupt = checkpoint_dirs(run_dir)
    has_checkpoint = bool(steps)
    if there is None:
        orphans = _results_without_config(run_dir, has_checkpoint, progress.results)
        if orphans:
            raise ConfigError(f"{run_dir} holds {orphans} but no config.json, so its "
                              "settings cannot be checked against these: restore its config.json, "
                              "or use another --run_name or --logdir")
    else:
        refuse_other_settings(run_dir, there, now, ignored)
    diverged = (_diverged_record(run_dir, progress)
                if there is not None and not has_checkpoint and not corrupt else None)
    if resume == "never" and there is not None:
        if diverged is not None:  # nothing to resume: it trains again from the start
            return "fresh"
        raise ConfigError(f"--resume=never but {run_dir} already holds a run; "
                          "use another --run_name or --logdir")
    if corrupt and not has_checkpoint:
        raise ConfigError(f"every checkpoint of {run_dir} failed to restore earlier and was "
                          f"moved aside ({', '.join(corrupt)}); starting over would overwrite its "
                          "logs, so move the run directory away to start it again")
    if diverged is not None:
        raise ConfigError(f"{run_dir} diverged before its first checkpoint ({diverged}); "
                          f"training it again starts it over from {progress.unit} 0, overwriting "
                          "its logs: run the same command with --resume=never to do that")
    if resume == "must" and not has_checkpoint:
        raise ConfigError(f"--resume=must but there is no checkpoint in {ckpt_dir}")
    if there is not None and os.path.exists(os.path.join(run_dir, "done.json")):
        return finished(steps)
    return "resume" if has_checkpoint else "fresh"


def _diverged_record(run_dir: str, progress: Progress) -> str | None:
    """What diverged.json says (its cause, step and seed), or None where there is none."""
    path = os.path.join(run_dir, DIVERGED)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            record = json.load(f)
        return (f"{record['what']} at {progress.unit} {record[progress.key]} for seed "
                f"{record['seed']}")
    except (OSError, ValueError, KeyError, TypeError):  # written by hand, cut short
        return f"{path} records it"


def _finished_state(cfg: TrainConfig, steps: list[str]) -> str:
    """"done" for a finished run whose done.json reads as a JSON object. One that does not is
    not taken as finished: said on stderr, its newest checkpoint and eval.csv are checked
    instead. "resume" where they show where it stands: before --max_steps it trains on; at
    --max_steps, with eval.csv's rows there for every seed, the restore checks that checkpoint
    and the logs and writes done.json again. ConfigError where neither can tell."""
    path = os.path.join(cfg.run_dir, "done.json")
    problem = done_problem(path)
    if problem is None:
        return "done"
    newest = max((int(step) for step in steps), default=None)
    said = f"{path} cannot be read ({problem}), so the run is not taken as finished"
    if newest is None:
        raise ConfigError(f"{said}, and it holds no checkpoint to tell where it stands: restore "
                          "done.json, or move the run directory away to train it again")
    if newest < cfg.max_steps:
        print(f"warning: {said}: its newest checkpoint is at env step {newest}, before "
              f"--max_steps={cfg.max_steps}, so it trains on from there", file=sys.stderr)
        return "resume"
    missing = _seeds_not_evaluated(cfg, newest)
    if missing:
        raise ConfigError(f"{said}, and its eval.csv has no row at env step {newest} (its final "
                          f"checkpoint's) for seeds {missing}: restore done.json and eval.csv, or "
                          "move the run directory away to train it again")
    print(f"warning: {said}: its final checkpoint (env step {newest}) and eval.csv's rows at "
          "that step say it finished; restoring that checkpoint checks it and the logs, then "
          "done.json is written again", file=sys.stderr)
    return "resume"


def _seeds_not_evaluated(cfg: TrainConfig, env_step: int) -> list[int]:
    """The run's seeds that eval.csv has no row for at `env_step` (all where it is unreadable)."""
    try:
        with open(os.path.join(cfg.run_dir, "eval.csv"), newline="") as f:
            seen = {row.get("seed") for row in csv.DictReader(f)
                    if row.get("env_step") == str(env_step)}
    except (OSError, UnicodeDecodeError, csv.Error):
        seen = set()
    return [seed for seed in cfg.seeds if str(seed) not in seen]
