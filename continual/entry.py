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

from typing import Any, NamedTuple

from continual import config as continual_config
from continual.config import ContinualConfig
from continual.loop import ContinualRun
from continual.resume import resume_state
from experiment.protocol import RunKind, StopRequest
from experiment.rundir.claim import claim

# what experiment.protocol's messages say of a continual run
KIND = RunKind(
    boundary="task boundary",
    checkpoints=lambda cfg: f"every {cfg.checkpoint_every} tasks",
    diverged=lambda cfg, e: f"diverged.json in {cfg.run_dir} says where",
    out_of_memory=lambda cfg: "lower --num_seeds or --batch_size",
    host_memory=lambda cfg: ("the data set and the tasks' draws are held for --num_seeds="
                             f"{cfg.num_seeds} seed(s): lower it or free memory"),
)


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


def take(cfg: ContinualConfig, prepared: Prepared) -> tuple[Any, str]:
    """(lock, state) of the run directory (experiment.rundir.claim)."""
    return claim(cfg.run_dir, lambda: resume_state(cfg, prepared.record))


def train(cfg: ContinualConfig, prepared: Prepared | None = None,
          stop: StopRequest | None = None, taken: tuple[Any, str] | None = None) -> str:
    """Train the run of `cfg` to its last task (from its newest checkpoint where it has one;
    nothing where it has finished) and return its run directory, locked while it trains
    (RunDirInUse when another process trains it; `taken`: what `take` returned). `stop` (a
    SIGTERM's) stops it at the next task boundary, after a checkpoint there (Stopped)."""
    continual_config.validate(cfg)
    prepared = prepared or prepare(cfg)
    lock, state = taken or take(cfg, prepared)
    if state == "done":
        return cfg.run_dir
    try:
        prepared.run.stop = stop or prepared.run.stop
        prepared.run.run(prepared.record)
    finally:
        lock.close()
    return cfg.run_dir
