"""An RL run from Python: what launch/run_sac.py and launch/run_bro.py run, without a subprocess.

    from agents.sac import SACConfig
    from experiment.config import TrainConfig
    from experiment.entry import train
    run_dir = train(TrainConfig(agent="sac", env="cheetah-run", utd=8, intervention="clip",
                                max_steps=100_000, num_seeds=4), SACConfig())

`prepare(cfg, agent_config)` checks everything that needs no training (settings, the env, the
agent and its interventions' parts) and `train` then trains, resumes or finds the run finished,
and returns its run directory. Errors are exceptions (ConfigError, CannotResume, RunDirInUse,
Diverged, ...); experiment.runner turns them into the scripts' one-line messages and exit
codes. The settings are taken as given: the scripts' flags add what `cfg` leaves to them
(an event's own period, the agent's reset steps: experiment.cli.config_from_flags).
"""

from typing import Any, NamedTuple

from agents import Agent, make_agent
from envs import check_env_name
from envs.envpool_backend import check_task
from experiment.config import TrainConfig, validate
from experiment.dashboards import check_installed
from experiment.events import intervention_plan, with_hooks
from experiment.protocol import StopRequest
from experiment.rundir.claim import claim
from experiment.rundir.record import config_record
from experiment.rundir.resume import resume_state
from experiment.train import Trainer, make_trainer
from interventions import Plan


class Prepared(NamedTuple):
    agent: Agent  # with the plan's per-step hooks bound: the agent the run trains
    plan: Plan  # the run's interventions, their parts checked against the agent's state
    record: dict  # config.json's


def prepare(cfg: TrainConfig, agent_config: Any = None) -> Prepared:
    """The agent of `cfg` (with `agent_config`, its default when None) and the run's record;
    ConfigError (or UnknownEnvError, EnvBackendError) for what cannot work, before anything
    compiles."""
    validate(cfg)
    check_env_name(cfg.env)
    check_installed(cfg)
    if cfg.env_backend == "envpool":
        check_task(cfg.env, cfg.seed + cfg.num_seeds - 1 + cfg.eval_seed_offset)
    agent = make_agent(cfg.agent, agent_config)
    plan = intervention_plan(agent, cfg)  # its parts: an error here, before anything compiles
    return Prepared(with_hooks(agent, plan), plan, config_record(cfg, agent.config))


def state(cfg: TrainConfig, prepared: Prepared) -> str:
    """What the run directory holds: "fresh", "resume" or "done" (CannotResume, ConfigError
    for a directory this run cannot take); reads only."""
    return resume_state(cfg, prepared.record)


def take(cfg: TrainConfig, prepared: Prepared) -> tuple[Any, str]:
    """(lock, state) of the run directory (experiment.rundir.claim)."""
    return claim(cfg.run_dir, lambda: state(cfg, prepared))


def train(cfg: TrainConfig, agent_config: Any = None, prepared: Prepared | None = None,
          stop: StopRequest | None = None, taken: tuple[Any, str] | None = None) -> str:
    """Train the run of `cfg` to --max_steps (from its newest checkpoint where it has one;
    nothing where it has finished) and return its run directory, locked while it trains
    (RunDirInUse when another process trains it; `taken`: what `take` returned). `stop` (a
    SIGTERM's) stops it at the next episode end, after a checkpoint there (Stopped)."""
    prepared = prepared or prepare(cfg, agent_config)
    lock, held = taken or take(cfg, prepared)
    if held == "done":
        return cfg.run_dir
    try:
        trainer: Trainer = make_trainer(prepared.agent, cfg, prepared.plan)
        trainer.stop = stop or trainer.stop
        trainer.run()
    finally:
        lock.close()
    return cfg.run_dir
