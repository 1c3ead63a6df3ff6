"""The command line of the run scripts: the absl flags every one shares, each intervention's
settings as flags, and reading them into a validated `TrainConfig`.

Each run script defines the shared flags with its agent's defaults (`define_flags`) plus its
agent's own, and builds its `TrainConfig` with `config_from_flags`; every flag of a config's field
is defined by `define_dataclass_flags`.
"""

import dataclasses
import sys
import typing
from collections.abc import Mapping, Sequence

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


# Help texts of the hyperparameters SAC and BRO share (their agents' configs name them alike).
SAC_FAMILY_HELP = {
    "discount": "Discount factor.",
    "tau": "Target critic Polyak rate per gradient step.",
    "init_temperature": "Initial temperature.",
    "target_entropy_scale": "Target entropy is -scale * action_dim.",
    "log_std_min": "Lower bound of the actor's log-std.",
    "log_std_max": "Upper bound of the actor's log-std.",
}
FLAX_LAYERS_HELP = ("flax.linen's own Dense and LayerNorm instead of this project's (the same "
                    "parameters and forward pass, plain gradients): forward-mode autodiff "
                    "(jax.jvp, jax.jacfwd) works; the update is slower on a CPU.")


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


_FLAG_TYPES = {float: flags.DEFINE_float, int: flags.DEFINE_integer, bool: flags.DEFINE_boolean,
               str: flags.DEFINE_string}


def define_dataclass_flags(defaults, helps: Mapping[str, str],
                           choices: Mapping[str, Sequence[str]] | None = None,
                           module_name: str | None = None,
                           flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """A flag per field of dataclass instance `defaults` named in `helps` (in that order), typed by
    the field, at its value, so each setting is declared once; `choices` make str fields enums."""
    if module_name is None:  # as absl names the caller (a script: its path), not this module
        caller = sys._getframe(1).f_globals["__name__"]
        module_name = sys.argv[0] if caller == "__main__" else caller
    kinds = typing.get_type_hints(type(defaults))
    fields = {field.name for field in dataclasses.fields(defaults)}
    where = {"module_name": module_name, "flag_values": flag_values}
    for name, text in helps.items():
        if name not in fields:
            raise ValueError(f"--{name}: {type(defaults).__name__} has no field {name!r}")
        kind, value = kinds[name], getattr(defaults, name)
        if choices and name in choices:
            flags.DEFINE_enum(name, value, list(choices[name]), text, **where)
        elif typing.get_origin(kind) is tuple:
            flags.DEFINE_list(name, [_list_item(v) for v in value], text, **where)
        elif kind in _FLAG_TYPES:
            _FLAG_TYPES[kind](name, value, text, **where)
        else:
            raise TypeError(f"--{name}: no flag type for a field of type {kind}")


def _list_item(value) -> str:
    """A list flag's default item as text: a float as short as reads back the same (0.025, 0)."""
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def define_flags(defaults: TrainConfig) -> None:
    """Define the flags every run script shares, with this agent's defaults."""
    d = defaults
    choices = {"intervention_unit": SCHEDULE_UNITS, "resume": RESUME_MODES,
               "env_backend": ENV_BACKENDS}
    define_dataclass_flags(d, {
        "env": "dm_control task as domain-task, e.g. humanoid-stand.",
        "seed": "First seed; seeds seed..seed+num_seeds-1 are trained.",
        "num_seeds": "Independent seeds trained in one process (vmapped: one compiled update for "
                     "all).",
        "utd": "Update-to-data ratio: gradient steps per env step.",
        "batch_size": "Minibatch size of each gradient step.",
        "max_steps": "Env steps to train for (per seed).",
        "start_steps": "Initial env steps with uniform random actions and no updates.",
        "action_repeat": "Simulator steps per agent action (step counts in the other flags count "
                         "agent steps).",
        "buffer_capacity": "Replay capacity per seed.",
        "eval_every": "Evaluate (and log diagnostics) every N env steps.",
        "eval_episodes": "Deterministic episodes per evaluation.",
        "eval_seed_offset": "The evaluation env of seed s is seeded s + this offset.",
        "log_every": "Write mean training metrics every N env steps.",
        "diagnostics": "Write spectral and feature diagnostics at every evaluation.",
        "dormant_taus": "Dormant-unit thresholds tau the diagnostics report (a unit is dormant "
                        "when its mean |activation| over the layer's mean is <= tau; 0 counts dead "
                        "units; empty: none).",
        "srank_threshold": "srank of a feature matrix: the smallest k whose top-k singular values "
                           "reach this share of their sum.",
        "diagnostics_batch_size": "Replay transitions the feature diagnostics are computed on (0: "
                                  "--batch_size), drawn with replacement; they start once the "
                                  "buffer holds that many (the weight spectra at every "
                                  "evaluation). A layer's srank cannot exceed it: use at least the "
                                  "widest layer's width to compare sranks across widths.",
        "logdir": "Root of the results tree: <logdir>/<agent>/<env>/<run_name>/.",
        "run_name": "Run directory name; default <intervention>-utd<utd>-seed<seed>.",
        "intervention": "What to do for plasticity: none, one method, or several joined by ',' "
                        "or '+' (at most one acting at scheduled steps): "
                        + ", ".join(registry.names()) + ". Each method's settings are the "
                        "--<method>_* flags below.",
        "intervention_every": "Intervene every N env steps (or gradient steps, see "
                              "--intervention_unit) unless --intervention_steps is given"
                              + ("; BRO, unless given: at BRO's reset steps instead."
                                 if d.agent == "bro" else "."),
        "intervention_unit": "What --intervention_every counts: env steps, or gradient steps (UTD "
                             "per env step from --start_steps on; the SingularClip paper's "
                             "appendix counts its period so).",
        "intervention_steps": "Explicit increasing env steps to intervene at; overrides "
                              "--intervention_every.",
    }, choices)
    define_method_flags(d)
    define_dataclass_flags(d, {
        "checkpoint_every": "Checkpoint every N env steps.",
        "keep_final_buffer": "Keep the replay buffer in a finished run's final checkpoint (per "
                             "seed, 345 MiB for humanoid's 1M transitions, 1,006 MiB for dog's); "
                             "by default that checkpoint holds the trained agents, RNG states and "
                             "counters, not the buffer.",
        "resume": "auto: resume a run found in the run directory; never: refuse to touch one, but "
                  "train one that diverged before its first checkpoint again from the start; "
                  "must: fail if none.",
        "progress": "Show a progress bar.",
    }, choices)
    define_dashboard_flags(d)
    define_dataclass_flags(d, {
        "env_backend": "Simulator of the train and eval envs: dm_control (the reference), or "
                       "EnvPool's C++ ports of the suite's tasks, stepped in a thread pool (the "
                       "tasks that match dm_control's; see docs/performance-gpu.md).",
        "replay_on_device": "Keep the replay buffer in the accelerator's memory and sample it "
                            "inside the compiled update.",
    }, choices)
    flags.DEFINE_boolean("dry_run", False, "Make the checks a run makes before training "
                         "(flags, env name, agent hyperparameters, clip parts, the run "
                         "directory) and exit as it would, 0 when it would train; reads the run "
                         "directory, leaves nothing behind (a sweep checks its jobs this way).")


def define_method_flags(defaults) -> None:
    """One flag per setting of every registered intervention (`--<prefix>_<field>`), at the
    value `defaults` (a config with those fields) gives it, grouped by method in --help."""
    for method in registry.registered().values():
        settings = {flag: field for flag, (field, _) in method.settings().items()}
        define_dataclass_flags(
            defaults, {flag: f"[{method.name}] {field.metadata.get('help', '')}"
                       for flag, field in settings.items()},
            {flag: field.metadata["choices"] for flag, field in settings.items()
             if field.metadata.get("choices")},
            module_name=f"intervention {method.name}")
        for flag in settings:
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
    define_dataclass_flags(d, {
        "log_to": "Dashboards to log to besides the CSV files: tensorboard (event files in "
                  "<run_dir>/tensorboard/seed<k>/), wandb (one Weights & Biases run per seed); "
                  "empty: none.",
        "wandb_project": "wandb project (empty: $WANDB_PROJECT or wandb's default).",
        "wandb_entity": "wandb entity, a user or team (empty: $WANDB_ENTITY or the account logged "
                        "in).",
        "wandb_group": "wandb group of the run's seeds (empty: <agent>/<env>/<run_name>; a sweep "
                       "sets its logdir's name).",
        "wandb_mode": "online: sync as it trains; offline: write <run_dir>/wandb/ only, for "
                      "`wandb sync` later; disabled: no wandb calls.",
    }, {"wandb_mode": WANDB_MODES})


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
