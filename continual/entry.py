"""A continual run from Python: what launch/run_continual.py runs, without a subprocess.

    from continual.config import ContinualConfig
    from continual.entry import train
    run_dir = train(ContinualConfig(task="random_label_digits", intervention="clip",
                                    num_tasks=100, examples=256, epochs=10, batch_size=32,
                                    hidden_dim=256, num_seeds=10))

`prepare(cfg)` checks everything that needs no training (settings, data, memory, what the run
directory holds) and `train(cfg)` then trains, resumes or finds the run finished, and returns its
run directory. Errors are exceptions (ConfigError, DataError, RunDirInUse, Diverged, ...); the
run script turns them into its one-line messages and exit codes.
"""

from typing import NamedTuple

from continual import config as continual_config
from continual.config import ContinualConfig
from continual.loop import ContinualRun, resume_state
from experiment.rundir.lock import lock_run_dir
from experiment.runner import check_writable


class Prepared(NamedTuple):
    run: ContinualRun
    record: dict  # config.json's
    state: str  # "fresh", "resume" or "done" (experiment.rundir.resume.decide_resume)


def prepare(cfg: ContinualConfig) -> Prepared:
    """The run of a validated `cfg` (continual.config.validate), its record and what its run
    directory holds; ConfigError or DataError for what cannot work, before anything trains."""
    run = ContinualRun(cfg)
    record = continual_config.record(cfg, run.learner_config)
    return Prepared(run, record, resume_state(cfg, record))


def train(cfg: ContinualConfig, prepared: Prepared | None = None) -> str:
    """Train the run of `cfg` to its last task (from its newest checkpoint where it has one;
    nothing where it has finished) and return its run directory. The directory is locked
    while it trains (RunDirInUse when another process trains it)."""
    continual_config.validate(cfg)
    prepared = prepared or prepare(cfg)
    if prepared.state == "done":
        return cfg.run_dir
    check_writable(cfg.run_dir)
    lock = lock_run_dir(cfg.run_dir)
    try:
        prepared.run.run(prepared.record)
    finally:
        lock.close()
    return cfg.run_dir
