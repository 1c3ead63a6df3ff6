"""The run configuration: one frozen dataclass, the run scripts' defaults, its validation and
its warnings. `validate` checks every setting before anything is compiled and raises
`ConfigError` with one line saying what was wrong and what is accepted; the run scripts turn
it into exit code 2. The absl flags onto it are in `experiment.cli`."""

import dataclasses
import math
import os
from collections.abc import Iterable, Sequence

from agents import AGENTS
from envs.dmc import EPISODE_STEPS
from envs.vector import ENV_BACKENDS
from interventions import registry
from interventions.schedule import SCHEDULE_UNITS, make_schedule
from replay.buffer import MAX_CAPACITY

MAX_DEVICE_CAPACITY = 2**31 - 1  # replay.device's
RESUME_MODES = ("auto", "never", "must")
# Seeds one process trains: it builds and steps their envs (two per seed) one after another on
# one thread, so past a thousand seeds building and stepping them takes hours of a 1M-step run
# (`python benchmarks/env_cost.py` times both). More seeds go to more processes.
MAX_SEEDS = 1000
# Transitions one update call samples and transfers (seeds x utd x batch): 2**31 of them are
# tens of GiB, far past any machine this runs on, and a count numpy's shapes still take.
MAX_UPDATE_BATCH = 2**31


class ConfigError(ValueError):
    """A setting that cannot work; the message is one line for the user."""


def with_method_settings(cls: type) -> type:
    """`cls` (a frozen dataclass) with one field per setting of every registered intervention,
    named as its flag (`clip_c`, `nap_parts`, ...) and at the method's default."""
    fields = [(flag, kind, dataclasses.field(default=field.default))
              for flag, (_, field, kind) in registry.all_settings().items()]
    return dataclasses.make_dataclass(cls.__name__, fields, bases=(cls,), frozen=True,
                                      namespace={"__doc__": cls.__doc__,
                                                 "__module__": cls.__module__})


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """The settings RL and continual runs (TrainConfig, ContinualConfig) share: the seeds, the
    intervention, the diagnostics, and where a run is kept, resumed and watched."""

    seed: int = 0
    num_seeds: int = 1
    intervention: str = "none"  # registered methods joined by "+" (interventions.registry)
    diagnostics: bool = True
    dormant_taus: tuple[float, ...] = (0.0, 0.025)  # interventions.diagnostics.DORMANT_TAUS
    srank_threshold: float = 0.99  # interventions.diagnostics.SRANK_THRESHOLD
    diagnostics_batch_size: int = 0  # 0: batch_size
    logdir: str = "runs"
    run_name: str = ""
    resume: str = "auto"
    progress: bool = True
    # Dashboards (experiment/dashboards.py), on top of the CSV files; settings of how a run is
    # watched, not of what it computes (a resume may change them).
    log_to: tuple[str, ...] = ()
    wandb_project: str = ""
    wandb_entity: str = ""
    wandb_group: str = ""
    wandb_mode: str = "online"

    @property
    def diagnostics_batch(self) -> int:
        """Examples in the diagnostics' batch (--diagnostics_batch_size=0: the run's batch_size)."""
        return self.diagnostics_batch_size or self.batch_size

    @property
    def seeds(self) -> list[int]:
        return list(range(self.seed, self.seed + self.num_seeds))

    @property
    def method_settings(self) -> dict:
        """{flag name: value} of every registered intervention's settings."""
        return {flag: getattr(self, flag) for flag in registry.all_settings()}

    @property
    def event(self) -> "registry.Method | None":
        """The scheduled method of `intervention` (reset, clip, ...), or None."""
        return registry.event_of(self.intervention)


@dataclasses.dataclass(frozen=True)
class _TrainConfig(RunSettings):
    """Everything the training loop needs besides the agent's own hyperparameters; the
    interventions' settings are fields too (`with_method_settings`)."""

    agent: str = "sac"
    env: str = "cheetah-run"
    utd: int = 1
    batch_size: int = 256
    max_steps: int = 1_000_000
    start_steps: int = 10_000
    action_repeat: int = 1
    buffer_capacity: int = 1_000_000
    eval_every: int = 10_000
    eval_episodes: int = 10
    eval_seed_offset: int = 42  # eval env of seed s: seed s + offset
    log_every: int = 1_000
    intervention_every: int = 200_000
    intervention_unit: str = "env_steps"  # of intervention_every: env_steps or grad_steps
    intervention_steps: tuple[int, ...] = ()
    checkpoint_every: int = 50_000
    keep_final_buffer: bool = False
    # Throughput (docs/performance-gpu.md): the simulator the envs run in, and where replay lives.
    env_backend: str = "dm_control"
    replay_on_device: bool = False

    @property
    def name(self) -> str:
        return self.run_name or f"{self.intervention}-utd{self.utd}-seed{self.seed}"

    @property
    def run_dir(self) -> str:
        return os.path.join(self.logdir, self.agent, self.env, self.name)


TrainConfig = with_method_settings(_TrainConfig)


# Each run script's defaults (agents.AGENTS: where they differ from TrainConfig's, algorithms.md);
# sweeps read them too, so that a grid leaving out --utds or --interventions gets what the run
# script would.
AGENT_DEFAULTS = {name: TrainConfig(agent=name, **entry.train_defaults)
                  for name, entry in AGENTS.items()}
SAC_DEFAULTS, BRO_DEFAULTS = AGENT_DEFAULTS["sac"], AGENT_DEFAULTS["bro"]


def _choice(name: str, value: str, accepted: Sequence[str]) -> None:
    if value not in accepted:
        raise ConfigError(f"--{name}={value!r} is not accepted; use one of: {', '.join(accepted)}")


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(f"--{name} must be positive, got {value}")


def validate(cfg: TrainConfig) -> None:
    """Raise ConfigError for the first setting that cannot work."""
    for name in ("num_seeds", "utd", "batch_size", "max_steps", "action_repeat",
                 "buffer_capacity", "eval_every", "eval_episodes", "log_every",
                 "intervention_every", "checkpoint_every"):
        _positive(name, getattr(cfg, name))
    if cfg.num_seeds > MAX_SEEDS:
        raise ConfigError(f"--num_seeds={cfg.num_seeds:,} is more than one process trains: at "
                          f"most {MAX_SEEDS:,} (it builds and steps two dm_control envs per seed, "
                          "one after another); split the seeds over runs with --seed, as a "
                          "sweep's --seeds_per_job does")
    if cfg.action_repeat > EPISODE_STEPS:
        raise ConfigError(f"--action_repeat must be from 1 to {EPISODE_STEPS} (an episode's "
                          f"control steps), got {cfg.action_repeat}")
    per_call = cfg.num_seeds * cfg.utd * cfg.batch_size
    if per_call > MAX_UPDATE_BATCH:
        raise ConfigError(f"--num_seeds x --utd x --batch_size = {per_call:,} transitions in one "
                          f"update call; at most 2**31 ({MAX_UPDATE_BATCH:,}) are accepted")
    if cfg.buffer_capacity > MAX_CAPACITY:
        raise ConfigError(f"--buffer_capacity must be at most 2**31 ({MAX_CAPACITY:,}) "
                          f"transitions per seed, got {cfg.buffer_capacity:,}")
    if cfg.seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {cfg.seed}")
    if cfg.eval_seed_offset < 0:
        raise ConfigError(f"--eval_seed_offset must be >= 0, got {cfg.eval_seed_offset}")
    last = cfg.seed + cfg.num_seeds - 1 + cfg.eval_seed_offset
    if last >= 2**32:
        raise ConfigError(f"--seed={cfg.seed}, --num_seeds={cfg.num_seeds} and --eval_seed_offset="
                          f"{cfg.eval_seed_offset} give env seeds up to {last}; dm_control takes "
                          "seeds below 2**32")
    if cfg.start_steps < 0:
        raise ConfigError(f"--start_steps must be >= 0, got {cfg.start_steps}")
    if cfg.start_steps >= cfg.max_steps:
        raise ConfigError(
            f"--start_steps={cfg.start_steps} leaves no training before "
            f"--max_steps={cfg.max_steps}; make start_steps smaller than max_steps"
        )
    if not cfg.logdir.strip():
        raise ConfigError("--logdir is empty; give the directory the results tree goes under "
                          "(default: runs)")
    if cfg.run_name and not cfg.run_name.strip():
        raise ConfigError(f"--run_name is blank ({cfg.run_name!r}); give a directory name, or "
                          "leave it out for <intervention>-utd<utd>-seed<seed>")
    if "/" in cfg.run_name or os.sep in cfg.run_name or cfg.run_name in (".", ".."):
        raise ConfigError(f"--run_name must be one directory name (no '/', not '.' or '..'), "
                          f"got {cfg.run_name!r}: runs live in <logdir>/<agent>/<env>/<run_name>")
    _choice("resume", cfg.resume, RESUME_MODES)
    _choice("intervention_unit", cfg.intervention_unit, SCHEDULE_UNITS)
    chosen = check_interventions(cfg)
    if cfg.intervention != registry.canonical(cfg.intervention):
        raise ConfigError(f"--intervention={cfg.intervention} must be spelled "
                          f"{registry.canonical(cfg.intervention)!r} in a config (methods "
                          "joined by '+')")
    validate_dashboards(cfg)
    _choice("env_backend", cfg.env_backend, ENV_BACKENDS)
    if cfg.replay_on_device and cfg.buffer_capacity > MAX_DEVICE_CAPACITY:
        raise ConfigError(f"--buffer_capacity must be at most 2**31 - 1 ({MAX_DEVICE_CAPACITY:,}) "
                          f"with --replay_on_device, got {cfg.buffer_capacity:,}")
    steps = cfg.intervention_steps
    if any(s <= 0 for s in steps):
        raise ConfigError(f"--intervention_steps must be positive env steps, got {list(steps)}")
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise ConfigError(f"--intervention_steps must be strictly increasing, got {list(steps)}")
    if cfg.event is None and steps:
        raise ConfigError(
            f"--intervention_steps={','.join(map(str, steps))} contradicts --intervention="
            f"{cfg.intervention}, which has no event at scheduled steps; choose one of "
            f"{', '.join(events())}, or drop the steps")
    for method in registry.registered().values():
        parts = getattr(cfg, method.flag("parts"))
        if parts and method not in chosen:
            raise ConfigError(
                f"--{method.flag('parts')}={','.join(parts)} contradicts --intervention="
                f"{cfg.intervention}; it names what {method.name} acts on (--intervention="
                f"{method.name})")
    if not all(0 <= tau < math.inf for tau in cfg.dormant_taus):
        raise ConfigError(f"--dormant_taus must be finite thresholds >= 0, got "
                          f"{list(cfg.dormant_taus)}")
    names = [f"{tau:g}" for tau in cfg.dormant_taus]  # as diagnostics.csv names them
    if len(set(names)) != len(names):
        raise ConfigError(f"--dormant_taus repeats a threshold ({','.join(names)} as "
                          "diagnostics.csv writes them); give each once")
    if not 0 < cfg.srank_threshold <= 1:
        raise ConfigError(f"--srank_threshold must be in (0, 1], got {cfg.srank_threshold}")
    if not 0 <= cfg.diagnostics_batch_size <= cfg.buffer_capacity:
        raise ConfigError(f"--diagnostics_batch_size must be from 1 to --buffer_capacity="
                          f"{cfg.buffer_capacity}, or 0 for --batch_size, got "
                          f"{cfg.diagnostics_batch_size}")
    if cfg.batch_size > cfg.buffer_capacity:
        raise ConfigError(
            f"--batch_size={cfg.batch_size} is larger than --buffer_capacity={cfg.buffer_capacity}"
        )


def events() -> list[str]:
    """The registered methods that act at scheduled steps."""
    return [name for name, m in registry.registered().items() if m.kind == "event"]


def check_interventions(cfg: TrainConfig) -> tuple:
    """The run's methods, each with a config that can work; ConfigError naming the flag."""
    try:
        chosen = registry.parse(cfg.intervention)
    except ValueError as e:
        raise ConfigError(f"--intervention={cfg.intervention}: {e}") from None
    for method in registry.registered().values():
        try:
            method.make_config(cfg.method_settings)
        except registry.SettingError as e:
            raise ConfigError(f"--{e}") from None
    return chosen


def run_schedule(cfg: TrainConfig):
    """The schedule of the run's event (interventions.schedule), or None without an event."""
    if cfg.event is None:
        return None
    if cfg.intervention_steps:
        return make_schedule(steps=cfg.intervention_steps)
    return make_schedule(cfg.intervention_every, unit=cfg.intervention_unit, utd=cfg.utd,
                         start_steps=cfg.start_steps)


SCHEDULE_FLAGS = ("intervention_every", "intervention_unit")


def check_read_when(cfg: TrainConfig, given: Iterable[str]) -> None:
    """ConfigError for a method setting given on the command line that its method reads only
    with another setting's value (--clip_ns_steps needs --clip_method=newton_schulz)."""
    chosen = registry.parse(cfg.intervention)
    for flag, (method, field, _) in registry.all_settings().items():
        condition = field.metadata.get("read_when")
        if flag not in given or method not in chosen or condition is None:
            continue
        other, value = method.flag(condition[0]), condition[1]
        if getattr(cfg, other) != value:
            raise ConfigError(f"--{flag}={getattr(cfg, flag)} needs --{other}={value}, got "
                              f"--{other}={getattr(cfg, other)}")


# Dashboards (experiment/dashboards.py): what --log_to accepts, wandb's modes.
DASHBOARDS = ("tensorboard", "wandb")
WANDB_MODES = ("online", "offline", "disabled")
WANDB_FLAGS = ("wandb_project", "wandb_entity", "wandb_group", "wandb_mode")


def validate_dashboards(cfg: TrainConfig) -> None:
    """ConfigError for a --log_to or --wandb_mode that is not accepted."""
    for name in cfg.log_to:
        _choice("log_to", name, DASHBOARDS)
    if len(set(cfg.log_to)) != len(cfg.log_to):
        raise ConfigError(f"--log_to={','.join(cfg.log_to)} names a dashboard twice; give each "
                          f"once, from: {', '.join(DASHBOARDS)}")
    _choice("wandb_mode", cfg.wandb_mode, WANDB_MODES)
