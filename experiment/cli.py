"""The command line of the run scripts: the absl flags every one shares, each intervention's
settings as flags, and reading them into a validated `TrainConfig`.

Each run script defines the shared flags with its agent's defaults (`define_flags`) plus its
agent's own, and builds its `TrainConfig` with `config_from_flags`.
"""

import dataclasses
import sys
import typing
from collections.abc import Sequence

from absl import flags

from agents import AGENTS
from envs.vector import ENV_BACKENDS
from experiment.config import (
    RESUME_MODES,
    WANDB_MODES,
    ConfigError,
    TrainConfig,
    check_read_when,
    validate,
)
from interventions import registry
from interventions.schedule import SCHEDULE_UNITS

HELP_FLAGS = {"help", "?", "helpshort", "helpfull", "helpxml"}


# Read by experiment.startup.begin() from the command line before the flags are defined (the
# methods it registers get flags of their own); defined here so absl accepts and lists it.
flags.DEFINE_list("methods_from", [], "Modules of methods from outside this package to register "
                  "before anything else (e.g. my_pkg.my_method): each defines METHOD (an "
                  "interventions.Method) or METHODS; then --intervention takes them.")


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
    flags.DEFINE_string("intervention", d.intervention, "What to do for plasticity: none, one "
                        "method, or several joined by ',' or '+' (at most one acting at "
                        "scheduled steps): " + ", ".join(registry.names()) + ". Each method's "
                        "settings are the --<method>_* flags below.")
    flags.DEFINE_integer("intervention_every", d.intervention_every,
                         "Intervene every N env steps (or gradient steps, see "
                         "--intervention_unit) unless --intervention_steps is given"
                         + ("; BRO, unless given: at BRO's reset steps instead."
                            if d.agent == "bro" else "."))
    flags.DEFINE_enum("intervention_unit", d.intervention_unit, list(SCHEDULE_UNITS),
                      "What --intervention_every counts: env steps, or gradient steps (UTD per "
                      "env step from --start_steps on; the SingularClip paper's appendix counts "
                      "its period so).")
    flags.DEFINE_list("intervention_steps", [str(s) for s in d.intervention_steps],
                      "Explicit increasing env steps to intervene at; overrides "
                      "--intervention_every.")
    define_method_flags(d)
    flags.DEFINE_integer("checkpoint_every", d.checkpoint_every, "Checkpoint every N env steps.")
    flags.DEFINE_boolean("keep_final_buffer", d.keep_final_buffer, "Keep the replay buffer in "
                         "a finished run's final checkpoint (per seed, 345 MiB for humanoid's "
                         "1M transitions, 1,006 MiB for dog's); by default that checkpoint "
                         "holds the trained agents, RNG states and counters, not the buffer.")
    flags.DEFINE_enum("resume", d.resume, list(RESUME_MODES), "auto: resume a run found in "
                      "the run directory; never: refuse to touch one, but train one that "
                      "diverged before its first checkpoint again from the start; must: fail "
                      "if none.")
    flags.DEFINE_boolean("progress", d.progress, "Show a progress bar.")
    define_dashboard_flags(d)
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


_FLAG_TYPES = {float: flags.DEFINE_float, int: flags.DEFINE_integer, bool: flags.DEFINE_boolean,
               str: flags.DEFINE_string}


def define_method_flags(defaults) -> None:
    """One flag per setting of every registered intervention (`--<prefix>_<field>`), at the
    value `defaults` (a config with those fields) gives it, grouped by method in --help."""
    for flag, (method, field, kind) in registry.all_settings().items():
        default = getattr(defaults, flag)
        text = f"[{method.name}] {field.metadata.get('help', '')}"
        where = {"module_name": f"intervention {method.name}"}
        choices = field.metadata.get("choices")
        if choices:
            flags.DEFINE_enum(flag, default, list(choices), text, **where)
        elif typing.get_origin(kind) is tuple:
            flags.DEFINE_list(flag, [str(v) for v in default], text, **where)
        else:
            _FLAG_TYPES[kind](flag, default, text, **where)
        flags.declare_key_flag(flag)


def method_values(values: dict) -> dict:
    """The method settings of {flag name: flag value}, list flags as typed tuples."""
    out = {}
    for flag, (_, _, kind) in registry.all_settings().items():
        value = values[flag]
        if typing.get_origin(kind) is tuple:
            item = typing.get_args(kind)[0]
            value = tuple(value) if item is str else _number_list(flag, value, item)
        out[flag] = value
    return out


def define_dashboard_flags(d: TrainConfig) -> None:
    """The flags of the optional dashboards (`experiment/dashboards.py`)."""
    flags.DEFINE_list("log_to", list(d.log_to), "Dashboards to log to besides the CSV files: "
                      "tensorboard (event files in <run_dir>/tensorboard/seed<k>/), wandb (one "
                      "Weights & Biases run per seed); empty: none.")
    flags.DEFINE_string("wandb_project", d.wandb_project, "wandb project (empty: $WANDB_PROJECT "
                        "or wandb's default).")
    flags.DEFINE_string("wandb_entity", d.wandb_entity, "wandb entity, a user or team (empty: "
                        "$WANDB_ENTITY or the account logged in).")
    flags.DEFINE_string("wandb_group", d.wandb_group, "wandb group of the run's seeds (empty: "
                        "<agent>/<env>/<run_name>; a sweep sets its logdir's name).")
    flags.DEFINE_enum("wandb_mode", d.wandb_mode, list(WANDB_MODES), "online: sync as it "
                      "trains; offline: write <run_dir>/wandb/ only, for `wandb sync` later; "
                      "disabled: no wandb calls.")


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
    values["dormant_taus"] = _number_list("dormant_taus", values["dormant_taus"], float)
    values.update(method_values(values))
    try:
        values["intervention"] = registry.canonical(values["intervention"])
    except ValueError as e:
        raise ConfigError(f"--intervention={values['intervention']}: {e}") from None
    given = {name for name in fields if f[name].present}
    event = registry.event_of(values["intervention"])
    if event is not None and event.every is not None and not given & {
            "intervention_every", "intervention_unit", "intervention_steps"}:
        values["intervention_every"], values["intervention_unit"] = event.every
    reset_steps = AGENTS[agent].reset_steps
    if (event is not None and event.every is None and reset_steps is not None
            and not values["intervention_steps"]
            and not given & {"intervention_every", "intervention_unit"}
            and values["max_steps"] > 0 and values["utd"] > 0):  # else validate says which
        values["intervention_steps"] = reset_steps(values["max_steps"], values["utd"])
    values["log_to"] = tuple(name.strip() for name in values["log_to"] if name.strip())
    cfg = TrainConfig(agent=agent, **values)
    validate(cfg)
    check_read_when(cfg, given)
    return cfg
