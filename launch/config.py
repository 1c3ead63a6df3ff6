"""The run configuration: one frozen dataclass, its validation, and the absl flags onto it.

Each run script defines the shared flags with its agent's defaults (`define_flags`) plus its
agent's own, and builds a `TrainConfig` with `config_from_flags`. `validate` checks every
setting before anything is compiled and raises `ConfigError` with one line saying what was
wrong and what is accepted; the run scripts turn it into exit code 2.
"""

import dataclasses
import math
import os
import sys
from collections.abc import Iterable, Sequence

from absl import flags

from envs.dmc import EPISODE_STEPS
from envs.vector import ENV_BACKENDS
from replay.buffer import MAX_CAPACITY

MAX_DEVICE_CAPACITY = 2**31 - 1  # replay.device's (which imports jax, as this module does not)

INTERVENTIONS = ("none", "reset", "clip")
CLIP_METHODS = ("svd", "newton_schulz")
CLIP_SIDES = ("both", "upper", "lower")
CLIP_OPT_STATES = ("keep", "reset")
RESUME_MODES = ("auto", "never", "must")
HELP_FLAGS = {"help", "?", "helpshort", "helpfull", "helpxml"}
# Transitions one update call samples and transfers (seeds x utd x batch): 2**31 of them are
# tens of GiB, far past any machine this runs on, and a count numpy's shapes still take.
MAX_UPDATE_BATCH = 2**31


def one_line_flag_parser(prefix: str = "error: "):
    """absl's flag parser for `app.run(..., flags_parser=...)`, but a bad or unknown flag is
    one line on stderr (`prefix` and absl's message) and exit code 2, and --help exits 0."""

    def parse(argv: list[str]) -> list[str]:
        try:
            return flags.FLAGS(argv)
        except flags.Error as e:
            print(f"{prefix}{e}; see --help", file=sys.stderr)
            sys.exit(2)
        except SystemExit as e:  # absl ends --help and its kin with exit code 1: asked for, 0
            asked = {a.lstrip("-").split("=")[0] for a in argv[1:]} & HELP_FLAGS
            sys.exit(0 if asked and e.code == 1 else e.code)

    return parse


class ConfigError(ValueError):
    """A setting that cannot work; the message is one line for the user."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything the training loop needs besides the agent's own hyperparameters."""

    agent: str = "sac"
    env: str = "cheetah-run"
    seed: int = 0
    num_seeds: int = 1
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
    diagnostics: bool = True
    dormant_taus: tuple[float, ...] = (0.0, 0.025)  # interventions.diagnostics.DORMANT_TAUS
    srank_threshold: float = 0.99  # interventions.diagnostics.SRANK_THRESHOLD
    diagnostics_batch_size: int = 0  # 0: batch_size
    logdir: str = "runs"
    run_name: str = ""
    intervention: str = "none"
    intervention_every: int = 200_000
    intervention_steps: tuple[int, ...] = ()
    clip_c: float = 4.0
    clip_method: str = "svd"
    clip_sides: str = "both"
    clip_parts: tuple[str, ...] = ()
    clip_opt_state: str = "keep"
    clip_ns_steps: int = 20  # interventions.DEFAULT_NS_STEPS (this module does not import jax)
    checkpoint_every: int = 50_000
    keep_final_buffer: bool = False
    resume: str = "auto"
    progress: bool = True
    # Throughput (docs/performance-gpu.md): the simulator the envs run in, and where replay lives.
    env_backend: str = "dm_control"
    replay_on_device: bool = False

    @property
    def diagnostics_batch(self) -> int:
        """Transitions in the diagnostics' replay batch (--diagnostics_batch_size=0: batch_size)."""
        return self.diagnostics_batch_size or self.batch_size

    @property
    def seeds(self) -> list[int]:
        return list(range(self.seed, self.seed + self.num_seeds))

    @property
    def name(self) -> str:
        return self.run_name or f"{self.intervention}-utd{self.utd}-seed{self.seed}"

    @property
    def run_dir(self) -> str:
        return os.path.join(self.logdir, self.agent, self.env, self.name)


# Each run script's defaults where they differ from TrainConfig's (SPEC.md); sweeps read them
# too, so that a grid leaving out --utds or --interventions gets what the run script would.
SAC_DEFAULTS = TrainConfig(agent="sac", utd=1, batch_size=256, start_steps=10_000,
                           intervention="none", intervention_every=200_000)
BRO_DEFAULTS = TrainConfig(agent="bro", utd=10, batch_size=128, start_steps=2_500,
                           eval_every=25_000, intervention="reset")
AGENT_DEFAULTS = {"sac": SAC_DEFAULTS, "bro": BRO_DEFAULTS}


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
                 "intervention_every", "checkpoint_every", "clip_ns_steps"):
        _positive(name, getattr(cfg, name))
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
    _choice("intervention", cfg.intervention, INTERVENTIONS)
    _choice("clip_method", cfg.clip_method, CLIP_METHODS)
    _choice("clip_sides", cfg.clip_sides, CLIP_SIDES)
    _choice("clip_opt_state", cfg.clip_opt_state, CLIP_OPT_STATES)
    _choice("resume", cfg.resume, RESUME_MODES)
    _choice("env_backend", cfg.env_backend, ENV_BACKENDS)
    if cfg.replay_on_device and cfg.buffer_capacity > MAX_DEVICE_CAPACITY:
        raise ConfigError(f"--buffer_capacity must be at most 2**31 - 1 ({MAX_DEVICE_CAPACITY:,}) "
                          f"with --replay_on_device, got {cfg.buffer_capacity:,}")
    if not 1 <= cfg.clip_c < math.inf:
        raise ConfigError(
            f"--clip_c must be a finite number >= 1 (singular values go into [1/c, c]), got "
            f"{cfg.clip_c}"
        )
    steps = cfg.intervention_steps
    if any(s <= 0 for s in steps):
        raise ConfigError(f"--intervention_steps must be positive env steps, got {list(steps)}")
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise ConfigError(f"--intervention_steps must be strictly increasing, got {list(steps)}")
    if cfg.intervention == "none" and steps:
        raise ConfigError(
            f"--intervention_steps={','.join(map(str, steps))} contradicts --intervention=none; "
            "choose --intervention=reset or clip, or drop the steps"
        )
    if cfg.intervention != "clip" and cfg.clip_parts:
        raise ConfigError(
            f"--clip_parts={','.join(cfg.clip_parts)} contradicts --intervention="
            f"{cfg.intervention}; it names what SingularClip acts on (--intervention=clip)"
        )
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


def schedule_warning(cfg: TrainConfig) -> str | None:
    """A line about scheduled interventions that never happen (at or after the last step, where
    no intervention is made), or None."""
    if cfg.intervention != "none" and not cfg.intervention_steps \
            and cfg.intervention_every >= cfg.max_steps:
        return (f"--intervention={cfg.intervention} never happens: --intervention_every="
                f"{cfg.intervention_every} is not below --max_steps={cfg.max_steps}, and a run "
                "intervenes only before its last step")
    late = [s for s in cfg.intervention_steps if s >= cfg.max_steps]
    if not late:
        return None
    return (f"--intervention={cfg.intervention} at env steps {','.join(map(str, late))} never "
            f"happens: they are at or after --max_steps={cfg.max_steps}, and a run intervenes "
            "only before its last step")


def early_warning(cfg: TrainConfig) -> str | None:
    """A line when interventions are scheduled before the first update (at --start_steps),
    where they act on networks no gradient step has trained, or None."""
    if cfg.intervention == "none":
        return None
    if cfg.intervention_steps:
        early = [s for s in cfg.intervention_steps if s < cfg.start_steps]
    else:
        early = range(cfg.intervention_every, cfg.start_steps, cfg.intervention_every)
    if not early:
        return None
    shown = ",".join(map(str, early[:5])) + (",..." if len(early) > 5 else "")
    return (f"--intervention={cfg.intervention} at env steps {shown} comes before "
            f"--start_steps={cfg.start_steps}, the first update: it acts on networks not yet "
            "trained")


def diagnostics_warning(cfg: TrainConfig) -> str | None:
    """A line when the feature diagnostics would never be computed: their batch is larger than
    the replay buffer ever holds in this run (--max_steps transitions), or None."""
    size = cfg.diagnostics_batch
    if not cfg.diagnostics or size <= cfg.max_steps:
        return None
    flag = ("--diagnostics_batch_size" if cfg.diagnostics_batch_size
            else "--batch_size, as --diagnostics_batch_size=0 asks")
    return (f"the feature diagnostics need {size} transitions in the replay buffer ({flag}), "
            f"more than this run collects ({cfg.max_steps}, --max_steps): diagnostics.csv will "
            "hold the weight spectra alone")


# Flags that set SingularClip (only --intervention=clip reads them) and the schedule (which
# --intervention=none never reads, nor a schedule given as --intervention_steps); --clip_parts
# and --intervention_steps with --intervention=none are errors.
CLIP_FLAGS = ("clip_c", "clip_method", "clip_sides", "clip_opt_state", "clip_ns_steps")


def unused_flags_warning(cfg: TrainConfig, given: Iterable[str]) -> str | None:
    """A line naming the flags given (`given`: their names) that this run's training never
    reads, such as --clip_c with --intervention=reset, or None. Not an error: a sweep may cross
    them with every intervention. config.json records them all the same, and a resume compares
    them, as it compares every setting."""
    given = set(given)
    clauses = []
    if cfg.intervention == "none":
        unused = [name for name in (*CLIP_FLAGS, "intervention_every") if name in given]
        if unused:
            clauses.append((unused, "--intervention=none makes no intervention"))
    else:
        if cfg.intervention != "clip":
            unused = [name for name in CLIP_FLAGS if name in given]
            if unused:
                clauses.append((unused, f"SingularClip's flags act only with --intervention=clip, "
                                        f"not {cfg.intervention}"))
        if cfg.intervention_steps and "intervention_every" in given:
            clauses.append((["intervention_every"], "--intervention_steps sets the schedule"))
    if not clauses:
        return None
    flags_given = [name for names, _ in clauses for name in names]
    return ("; ".join(f"{', '.join('--' + name for name in names)} "
                      f"{'is' if len(names) == 1 else 'are'} not read ({why})"
                      for names, why in clauses)
            + f"; config.json records {'it' if len(flags_given) == 1 else 'them'} all the same, "
            "and a resume compares every setting")


def seed_warning(cfg: TrainConfig) -> str | None:
    """A line when some train env is seeded like an eval env (seed s + offset is also a train
    seed of this process), or None."""
    if cfg.eval_seed_offset >= cfg.num_seeds:
        return None
    first = cfg.seed + cfg.eval_seed_offset
    return (f"the eval env of seed {cfg.seed} has dm_control seed {first}, which the train env of "
            f"seed {first} has too (--num_seeds={cfg.num_seeds} is above --eval_seed_offset="
            f"{cfg.eval_seed_offset}), so their episodes start alike; --eval_seed_offset="
            f"{cfg.num_seeds} or more keeps them apart")


def define_flags(defaults: TrainConfig) -> None:
    """Define the flags every run script shares, with this agent's defaults."""
    d = defaults
    flags.DEFINE_string("env", d.env, "dm_control task as domain-task, e.g. humanoid-stand.")
    flags.DEFINE_integer("seed", d.seed, "First seed; seeds seed..seed+num_seeds-1 are trained.")
    flags.DEFINE_integer("num_seeds", d.num_seeds, "Independent seeds trained in one process "
                         "(vmapped: one compiled update for all).")
    flags.DEFINE_integer("utd", d.utd, "Update-to-data ratio: gradient steps per env step.")
    flags.DEFINE_integer("batch_size", d.batch_size, "Minibatch size of each gradient step.")
    flags.DEFINE_integer("max_steps", d.max_steps, "Env steps to train for (per seed).")
    flags.DEFINE_integer("start_steps", d.start_steps, "Initial env steps with uniform random "
                         "actions and no updates.")
    flags.DEFINE_integer("action_repeat", d.action_repeat, "Simulator steps per agent action "
                         "(step counts in the other flags count agent steps).")
    flags.DEFINE_integer("buffer_capacity", d.buffer_capacity, "Replay capacity per seed.")
    flags.DEFINE_integer("eval_every", d.eval_every,
                         "Evaluate (and log diagnostics) every N env steps.")
    flags.DEFINE_integer("eval_episodes", d.eval_episodes, "Deterministic episodes per evaluation.")
    flags.DEFINE_integer("eval_seed_offset", d.eval_seed_offset, "The evaluation env of seed s "
                         "is seeded s + this offset.")
    flags.DEFINE_integer("log_every", d.log_every, "Write mean training metrics every N env steps.")
    flags.DEFINE_boolean("diagnostics", d.diagnostics, "Write spectral and feature diagnostics "
                         "at every evaluation.")
    flags.DEFINE_list("dormant_taus", [f"{t:g}" for t in d.dormant_taus], "Dormant-unit "
                      "thresholds tau the diagnostics report (a unit is dormant when its mean "
                      "|activation| over the layer's mean is <= tau; 0 counts dead units; empty: "
                      "none).")
    flags.DEFINE_float("srank_threshold", d.srank_threshold, "srank of a feature matrix: the "
                       "smallest k whose top-k singular values reach this share of their sum.")
    flags.DEFINE_integer("diagnostics_batch_size", d.diagnostics_batch_size, "Replay transitions "
                         "the feature diagnostics are computed on (0: --batch_size), drawn with "
                         "replacement; they start once the buffer holds that many (the weight "
                         "spectra at every evaluation). A layer's srank cannot exceed it: use at "
                         "least the widest layer's width to compare sranks across widths.")
    flags.DEFINE_string("logdir", d.logdir, "Root of the results tree: "
                        "<logdir>/<agent>/<env>/<run_name>/.")
    flags.DEFINE_string("run_name", d.run_name, "Run directory name; default "
                        "<intervention>-utd<utd>-seed<seed>.")
    flags.DEFINE_enum("intervention", d.intervention, list(INTERVENTIONS),
                      "What to do at the scheduled steps: nothing, a reset, or SingularClip.")
    flags.DEFINE_integer("intervention_every", d.intervention_every,
                         "Intervene every N env steps (unless --intervention_steps is given)"
                         + ("; BRO, unless given: at BRO's reset steps instead."
                            if d.agent == "bro" else "."))
    flags.DEFINE_list("intervention_steps", [str(s) for s in d.intervention_steps],
                      "Explicit increasing env steps to intervene at; overrides "
                      "--intervention_every.")
    flags.DEFINE_float("clip_c", d.clip_c, "SingularClip bound c >= 1: singular values go "
                       "into [1/c, c].")
    flags.DEFINE_enum("clip_method", d.clip_method, list(CLIP_METHODS),
                      "How SingularClip is computed: exact SVD or Newton-Schulz (Polar Express).")
    flags.DEFINE_enum("clip_sides", d.clip_sides, list(CLIP_SIDES),
                      "Clip both ends ([1/c, c]), only the top ([0, c]) or only the bottom "
                      "([1/c, inf)).")
    flags.DEFINE_list("clip_parts", list(d.clip_parts), "State paths SingularClip acts on, "
                      "parameters only (e.g. actor.params; no optimizer state); empty = the "
                      "agent's default (online actor(s), online critic, target critic; BRO "
                      "also clips its optimistic actor).")
    flags.DEFINE_enum("clip_opt_state", d.clip_opt_state, list(CLIP_OPT_STATES),
                      "What a clip does with the optimizer state (Adam's moments and step "
                      "count) of each network it clips: keep it (SPEC.md), or reset it to its "
                      "initial value, as a reset does; the target critic has none.")
    flags.DEFINE_integer("clip_ns_steps", d.clip_ns_steps, "Polar Express iterations per matrix "
                         "sign with --clip_method=newton_schulz (SPEC's coefficients are for 8; "
                         "steps past 8 repeat the last; the default meets the paper's error on "
                         "random matrices, see benchmarks/clip.py).")
    flags.DEFINE_integer("checkpoint_every", d.checkpoint_every, "Checkpoint every N env steps.")
    flags.DEFINE_boolean("keep_final_buffer", d.keep_final_buffer, "Keep the replay buffer in "
                         "a finished run's final checkpoint (per seed, 345 MiB for humanoid's "
                         "1M transitions, 1,006 MiB for dog's); by default that checkpoint "
                         "holds the trained agents, RNG states and counters, not the buffer.")
    flags.DEFINE_enum("resume", d.resume, list(RESUME_MODES), "auto: resume a run found in "
                      "the run directory; never: refuse to touch one; must: fail if none.")
    flags.DEFINE_boolean("progress", d.progress, "Show a progress bar.")
    flags.DEFINE_enum("env_backend", d.env_backend, list(ENV_BACKENDS), "Simulator of the "
                      "train and eval envs: dm_control (the reference), or EnvPool's C++ ports "
                      "of the suite's tasks, stepped in a thread pool (the tasks that match "
                      "dm_control's; see docs/performance-gpu.md).")
    flags.DEFINE_boolean("replay_on_device", d.replay_on_device, "Keep the replay buffer in the "
                         "accelerator's memory and sample it inside the compiled update.")
    flags.DEFINE_boolean("dry_run", False, "Make the checks a run makes before training "
                         "(flags, env name, agent hyperparameters, clip parts, the run "
                         "directory) and exit as it would, 0 when it would train; reads the run "
                         "directory, leaves nothing behind (a sweep checks its jobs this way).")


def _number_list(name: str, values: Sequence[str], kind: type = int) -> tuple:
    """A list flag's items as `kind` (int or float), or ConfigError naming the flag."""
    try:
        return tuple(kind(v) for v in values)
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise ConfigError(f"--{name} must be a comma-separated list of {what}, got "
                          f"{','.join(values)!r}") from None


def config_from_flags(agent: str) -> TrainConfig:
    """Read the shared flags into a TrainConfig (validated)."""
    f = flags.FLAGS
    fields = {field.name for field in dataclasses.fields(TrainConfig)} - {"agent"}
    values = {name: f[name].value for name in fields}
    values["intervention_steps"] = _number_list("intervention_steps",
                                                values["intervention_steps"])
    values["clip_parts"] = tuple(values["clip_parts"])
    values["dormant_taus"] = _number_list("dormant_taus", values["dormant_taus"], float)
    cfg = TrainConfig(agent=agent, **values)
    validate(cfg)
    if f["clip_ns_steps"].present and cfg.intervention == "clip" \
            and cfg.clip_method != "newton_schulz":
        raise ConfigError(f"--clip_ns_steps={cfg.clip_ns_steps} needs --clip_method=newton_schulz "
                          f"(the SVD clip has no iterations), got --clip_method={cfg.clip_method}")
    return cfg
