"""Sweep grids: agent x envs x interventions x varied settings x UTDs x seed groups, expanded
into jobs.

One job is one (agent, env, intervention, varied settings, UTD) with a group of consecutive
seeds that the run script trains vmapped in one process. Its run directory is the one the run
script writes, `<logdir>/<agent>/<env>/<intervention>-utd<utd>-seed<first seed>/`. The agent
"continual" runs launch/run_continual.py: its envs are benchmarks (continual/tasks.py), it has
no UTD, and its run directories are `<logdir>/continual/<task>/<intervention>-seed<first
seed>/`. An intervention's methods are put in the registry's order (nap+clip is clip+nap).

Varied settings (--vary=KEY=V1,V2, --clip_cs) are axes of run-script flags: the jobs they
apply to are crossed with their values, each job getting `--KEY=<value>` on its command line
and `-KEY=<value>` in its run name (`-<label><value>`, first, for a setting its method labels:
clip's c is `-c<c>`), e.g.
`clip-c2-clip_sides=upper-seed0`. A method's setting applies to the jobs whose intervention
includes the method, a setting read only with an event (EVENT_SETTINGS) to the jobs whose
intervention has one, any other setting to every job.
"""

import dataclasses
import difflib
import itertools
import json
import math
import os
import shlex
import sys
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agents import AGENTS as _AGENTS
from continual import config as continual_config
from continual.tasks import BENCHMARKS
from envs import check_env_name
from experiment.config import AGENT_DEFAULTS, MAX_SEEDS, SCHEDULE_FLAGS, TrainConfig
from interventions import registry

CONTINUAL = "continual"  # launch/run_continual.py: supervised benchmarks, no UTD
AGENTS = (*_AGENTS, CONTINUAL)
# Each run script's default intervention and UTD (a grid leaving them out gets these).
RUN_DEFAULTS = {**{name: (d.intervention, d.utd) for name, d in AGENT_DEFAULTS.items()},
                CONTINUAL: ("none", 1)}
ALL = "all"  # --interventions=all: none and every registered method
# Integer settings of the run scripts a sweep may set; unset ones keep the agent's defaults.
TRAIN_FLAGS = ("max_steps", "start_steps", "eval_every", "eval_episodes", "batch_size",
               "checkpoint_every")
PRESETS = {
    # The 15 DMC tasks of BRO (Nauman et al. 2024); their "finger-turn" is finger-turn_hard.
    "bro15": ("acrobot-swingup", "cheetah-run", "dog-run", "dog-stand", "dog-trot", "dog-walk",
              "finger-turn_hard", "fish-swim", "hopper-hop", "humanoid-run", "humanoid-stand",
              "humanoid-walk", "pendulum-swingup", "quadruped-run", "walker-run"),
    # The 10 DMC tasks of the SAC reset study (Nikishin et al. 2022).
    "resets10": ("acrobot-swingup", "cheetah-run", "finger-turn_hard", "fish-swim", "hopper-hop",
                 "humanoid-run", "humanoid-stand", "quadruped-run", "swimmer-swimmer15",
                 "walker-run"),
    # The continual benchmarks (--agent=continual): the digits versions, which need no data
    # files, and the paper's MNIST and CIFAR ones.
    "continual_digits": ("permuted_digits", "random_label_digits"),
    "continual_paper": ("permuted_mnist", "random_label_mnist", "random_label_cifar"),
}
GRID_KEYS = ("agent", "envs", "preset", "interventions", "utds", "clip_cs", "vary", "seeds",
             "first_seed", "seeds_per_job", "extra", *TRAIN_FLAGS)
MAX_NAME_BYTES = 255  # of a directory's name (most file systems)
CLIP_C = "clip_c"  # --clip_cs=1.5,2 spells --vary=clip_c=1.5,2; older job records hold clip_c
# The scripts (run_<agent>.py) lie in launch/ beside this package.
DEFAULT_SCRIPT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "launch")


class SweepError(ValueError):
    """A sweep setting that cannot work; the message is one line for the user."""


def sweep_group(logdir: str) -> str:
    """The wandb group of a sweep's runs: its logdir's name (runs/clip_sweep: clip_sweep)."""
    return os.path.basename(os.path.normpath(os.path.abspath(logdir)))


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """One run-script invocation: an (agent, env, intervention, varied settings, UTD) and its
    seed group. `settings` are the (flag, value text) pairs of the varied settings that apply
    to it, clip_c first, then in the order of their axes (its run name's order)."""

    agent: str
    env: str
    intervention: str
    utd: int
    seed: int
    num_seeds: int
    train_flags: tuple[tuple[str, int], ...] = ()
    extra: tuple[str, ...] = ()
    script_dir: str = DEFAULT_SCRIPT_DIR
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def script(self) -> str:
        return os.path.join(self.script_dir, f"run_{self.agent}.py")

    @property
    def run_name(self) -> str:
        settings = [_name_part(key, value) for key, value in self.settings]
        utd = [] if self.agent == CONTINUAL else [f"utd{self.utd}"]
        return "-".join([self.intervention, *settings, *utd, f"seed{self.seed}"])

    @property
    def key(self) -> str:
        """`<agent>/<env>/<run_name>`: the run directory relative to the logdir."""
        return f"{self.agent}/{self.env}/{self.run_name}"

    def run_dir(self, logdir: str) -> str:
        return os.path.join(logdir, self.agent, self.env, self.run_name)

    def argv(self, logdir: str) -> list[str]:
        """The command line of this job: the run script with --resume=auto, then extra flags;
        with wandb among them, --wandb_group is the sweep's (its logdir's name) unless given."""
        where = ({"task": self.env} if self.agent == CONTINUAL
                 else {"env": self.env, "utd": self.utd})
        flags = {**where, "intervention": self.intervention, **dict(self.settings),
                 "seed": self.seed, "num_seeds": self.num_seeds, **dict(self.train_flags),
                 "logdir": logdir, "run_name": self.run_name, "resume": "auto"}
        given = {name: value for name, value, _ in extra_settings(self.extra)}
        if "wandb" in _items(given.get("log_to")) and "wandb_group" not in given:
            flags["wandb_group"] = sweep_group(logdir)
        return [sys.executable, self.script, *(f"--{k}={v}" for k, v in flags.items()),
                *self.extra]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> "JobSpec":
        """The spec of a record (`to_dict()`), also of one written before varied settings,
        which holds its c value as clip_c (None without one) and no settings."""
        record = dict(record)
        settings = [tuple(p) for p in record.pop("settings", None) or ()]
        clip_c = record.pop(CLIP_C, None)
        if clip_c is not None and CLIP_C not in dict(settings):
            settings.insert(0, (CLIP_C, _recorded_c(clip_c)))
        return cls(**{**record, "train_flags": tuple(tuple(p) for p in record["train_flags"]),
                      "extra": tuple(record["extra"]), "settings": tuple(settings)})


def _name_part(key: str, value: str) -> str:
    """A varied setting in a run name: `<label><value>` where its method gives it a label
    (interventions.setting(label=): clip's c is c2), else `<key>=<value>`."""
    label = registry.run_label(key)
    return f"{label}{value}" if label else f"{key}={value}"


def _recorded_c(value: Any) -> str:
    """The clip_c of a record of before varied settings, as its run name spelled it."""
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


@dataclasses.dataclass(frozen=True)
class Grid:
    """A validated grid; `jobs()` expands it in (env, intervention, varied settings, UTD,
    seed) order. `vary` holds the axes (flag, values) in the order given."""

    agent: str
    envs: tuple[str, ...]
    interventions: tuple[str, ...]
    utds: tuple[int, ...]
    seeds: int
    first_seed: int = 0
    seeds_per_job: int = 0
    train_flags: tuple[tuple[str, int], ...] = ()
    extra: tuple[str, ...] = ()
    script_dir: str = DEFAULT_SCRIPT_DIR
    vary: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def _settings(self, intervention: str) -> list[tuple[tuple[str, str], ...]]:
        """The varied settings of an intervention's jobs: the product of the axes that apply
        to it, in their order, each as a job's `settings` (those with a run-name label first)."""
        axes = [[(key, value) for value in values] for key, values in self.vary
                if applies(self.agent, key, intervention)]
        return [tuple(sorted(combo, key=lambda kv: registry.run_label(kv[0]) is None))
                for combo in itertools.product(*axes)]

    def _seed_starts(self) -> range:
        """The first seed of each job's group of seeds_per_job (all seeds when 0)."""
        return range(self.first_seed, self.first_seed + self.seeds,
                     self.seeds_per_job or self.seeds)

    def _combinations(self) -> int:
        """The (intervention, varied settings) pairs of the grid."""
        return sum(math.prod(len(values) for key, values in self.vary
                             if applies(self.agent, key, intervention))
                   for intervention in self.interventions)

    def job_count(self) -> int:
        """len(self.jobs()), without expanding them."""
        return len(self.envs) * self._combinations() * len(self.utds) * len(self._seed_starts())

    def seed_run_count(self) -> int:
        """The seeds its jobs train together: one per seed of each (env, intervention, varied
        settings, UTD)."""
        return len(self.envs) * self._combinations() * len(self.utds) * self.seeds

    def jobs(self) -> list[JobSpec]:
        starts, end = self._seed_starts(), self.first_seed + self.seeds
        return [JobSpec(self.agent, env, intervention, utd, start, min(starts.step, end - start),
                        self.train_flags, self.extra, self.script_dir, settings)
                for env in self.envs for intervention in self.interventions
                for settings in self._settings(intervention) for utd in self.utds
                for start in starts]


def event_settings(agent: str) -> tuple[str, ...]:
    """The run-script settings of `agent` read only with an event: a --vary axis of them
    applies to the jobs whose intervention has one."""
    if agent == CONTINUAL:
        return tuple(getattr(continual_config, "EVENT_SETTINGS", ("intervention_every",)))
    return (*SCHEDULE_FLAGS, "intervention_steps")  # --intervention_steps needs an event


def applies(agent: str, key: str, intervention: str) -> bool:
    """Whether a varied setting `key` applies to the jobs of `intervention`: a method's
    setting where the intervention includes the method, an event's setting where it has an
    event, any other setting always."""
    method = registry.owner(key)
    if method is not None:
        return method.name in registry.split(intervention)
    if key in event_settings(agent):
        return registry.event_of(intervention) is not None
    return True


def _items(value: str | Iterable[Any] | None) -> list[str]:
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


def _int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool):  # JSON true would be 1
        raise SweepError(f"{name} must be an integer, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise SweepError(f"{name} must be an integer, got {value!r}") from None
    if number < minimum or isinstance(value, float) and value != number:
        raise SweepError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return number


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


def _choices(name: str, values: list[str], accepted: Sequence[str]) -> tuple[str, ...]:
    for value in values:
        if value not in accepted:
            raise SweepError(f"unknown {name} {value!r}; accepted: {', '.join(accepted)}")
    return tuple(dict.fromkeys(values))


def _intervention(value: str) -> str:
    """A grid's intervention as a run records it (methods joined by '+'), its methods in the
    registry's order (nap+clip and clip+nap are one job, clip+nap), or SweepError."""
    try:
        return in_registry_order(value)
    except ValueError as e:
        raise SweepError(f"intervention {value!r}: {e}") from None


def in_registry_order(intervention: str) -> str:
    """An --intervention value as registry.canonical spells it, its methods in the order of
    registry.names(); ValueError (one line) for one the registry refuses."""
    order = registry.names()
    return "+".join(sorted(registry.canonical(intervention).split("+"), key=order.index))


def _config_types(agent: str) -> dict[str, Any]:
    """{flag: type} of the settings of run_<agent>.py: its config's fields."""
    config = continual_config.ContinualConfig if agent == CONTINUAL else TrainConfig
    return typing.get_type_hints(config)


def vary_keys(agent: str) -> tuple[str, ...]:
    """The flags of run_<agent>.py a --vary axis may set: its config's fields, less those the
    sweep sets itself (SET_BY_SWEEP, and for the RL agents TRAIN_FLAGS, its grid settings)."""
    refused = {*SET_BY_SWEEP, "agent", *(() if agent == CONTINUAL else TRAIN_FLAGS)}
    return tuple(name for name in _config_types(agent) if name not in refused)


_TRUE, _FALSE = ("true", "t", "1"), ("false", "f", "0")  # as absl reads a boolean


def _value_text(label: str, value: Any, kind: Any) -> str:
    """A varied setting's value as its jobs' flag and run name spell it: booleans as true or
    false, integers and numbers normalised (1e-3 and 0.001 are one value, 0.001), the rest as
    given; SweepError for one a run name cannot hold or a flag of `kind` cannot take."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float | str):
        text = str(value).strip()
    else:
        raise SweepError(f"{label}: values must be strings or numbers, got {value!r}")
    if not text:
        return ""
    if "/" in text or any(c.isspace() for c in text):
        raise SweepError(f"{label}: the value {text!r} holds '/' or whitespace, which a run "
                         "directory's name cannot")
    if "," in text:
        raise SweepError(f"{label}: the value {text!r} holds ',', which separates values; give "
                         "each value on its own")
    if typing.get_origin(kind) is tuple:  # a list flag, given one item
        kind = typing.get_args(kind)[0]
    if kind is bool:
        if text.lower() not in (*_TRUE, *_FALSE):
            raise SweepError(f"{label} takes true or false, got {text!r}")
        return "true" if text.lower() in _TRUE else "false"
    if kind not in (int, float):
        return text
    if kind is int:
        try:
            return str(int(text))
        except ValueError:
            pass
    try:
        number = float(text)
    except ValueError:
        raise SweepError(f"{label} takes {'integers' if kind is int else 'numbers'}, got "
                         f"{text!r}") from None
    if kind is int:
        if not number.is_integer():
            raise SweepError(f"{label} takes integers, got {text!r}")
        return str(int(number))
    if not math.isfinite(number):
        return str(number)
    short = f"{number:g}"  # as --clip_cs named its runs: c2, c1.5, c1e+06
    return short if float(short) == number else repr(number)


def _typed(text: str, kind: Any) -> Any:
    """A value text of `_value_text` as the flag's type reads it (a list flag: one item)."""
    if typing.get_origin(kind) is tuple:
        return (_typed(text, typing.get_args(kind)[0]),)
    if kind is bool:
        return text == "true"
    return kind(text) if kind in (int, float) else text


def _vary_entries(vary: Any) -> list[tuple[str, Any]]:
    """(key, values) of each axis: from KEY=V1,V2 strings (--vary) or an object {key: values}
    (a grid file's "vary")."""
    if vary is None:
        return []
    if isinstance(vary, Mapping):
        return [(str(key), values) for key, values in vary.items()]
    entries = [vary] if isinstance(vary, str) else vary
    if not isinstance(entries, Iterable) or any(not isinstance(e, str) for e in entries):
        raise SweepError("vary must be KEY=V1,V2,... strings or an object {key: [values]}, got "
                         f"{vary!r}")
    out = []
    for entry in entries:
        key, eq, values = entry.partition("=")
        if not eq or not key.strip():
            raise SweepError(f"--vary takes KEY=V1,V2,... (a flag of the run script and its "
                             f"values), got {entry!r}")
        out.append((key.strip(), values))
    return out


def _axis_values(label: str, values: Any, kind: Any) -> tuple[str, ...]:
    if isinstance(values, str):
        items: Iterable[Any] = values.split(",")
    elif isinstance(values, bool | int | float):
        items = [values]
    elif isinstance(values, list | tuple):
        items = values
    else:
        raise SweepError(f"{label}: give its values as \"V1,V2\" or a list, got {values!r}")
    texts = [_value_text(label, value, kind) for value in items]
    return tuple(dict.fromkeys(text for text in texts if text))


def _vary(agent: str, vary: Any, clip_cs: Any, extra: Sequence[str],
          chosen: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The grid's varied-setting axes (key, values), validated; clip_cs is the axis clip_c."""
    entries = [(key, values, f"--vary={key}") for key, values in _vary_entries(vary)]
    if _items(clip_cs):
        if any(key == CLIP_C for key, _, _ in entries):
            raise SweepError("--clip_cs and --vary=clip_c both give clip c values; give them "
                             "once (--clip_cs=1.5,2 is --vary=clip_c=1.5,2)")
        entries.insert(0, (CLIP_C, clip_cs, "--clip_cs"))
    types = _config_types(agent)
    accepted = vary_keys(agent)
    in_extra = {name for name, _, _ in extra_settings(extra)}
    axes: dict[str, tuple[str, ...]] = {}
    for key, values, label in entries:
        if key in axes:
            raise SweepError(f"--vary={key} given twice; give each key once, its values "
                             "comma-separated")
        if key in types and key not in accepted:
            raise SweepError(f"{label}: --{key} is set by the sweep for each job; use the "
                             f"sweep's own settings ({', '.join(GRID_KEYS)})")
        if key not in accepted:
            near = difflib.get_close_matches(key, accepted, n=1)
            raise SweepError(f"{label}: {key!r} is not a flag of run_{agent}.py"
                             + (f" (did you mean {near[0]!r}?)" if near else "")
                             + f"; accepted: {', '.join(sorted(accepted))}")
        if key in in_extra:
            raise SweepError(f"{label} and the extra flag --{key} both set --{key} (the extra "
                             "flag, last on each command line, would override the axis); give "
                             "it once")
        texts = _axis_values(label, values, types[key])
        if not texts:
            raise SweepError(f"{label} gives no values; give {key}=V1,V2,...")
        for text in texts:  # a method's own checks of its setting's value
            try:
                registry.check_value(key, _typed(text, types[key]))
            except registry.SettingError as e:
                raise SweepError(f"{label}: --{e}") from None
        if not any(applies(agent, key, intervention) for intervention in chosen):
            method = registry.owner(key)
            what = (f"a setting of {method.name}, crossed with the interventions that include "
                    "it" if method is not None else "read only with an event, crossed with the "
                    "interventions that have one")
            raise SweepError(f"{label}: --{key} is {what}; none of {', '.join(chosen)} does")
        axes[key] = texts
    return tuple(axes.items())


def resolve_envs(envs: str | Iterable[str] | None, presets: str | Iterable[str] | None = None,
                 agent: str = "sac") -> tuple[str, ...]:
    """Preset task lists then explicit env names (benchmarks for the continual agent),
    validated, duplicates dropped."""
    names: list[str] = []
    for preset in _items(presets):
        if preset not in PRESETS:
            raise SweepError(f"unknown preset {preset!r}; accepted: {', '.join(PRESETS)}")
        names.extend(PRESETS[preset])
    names.extend(_items(envs))
    if not names:
        raise SweepError("no envs given; pass --envs=domain-task,... and/or --preset="
                         f"{'|'.join(PRESETS)}")
    for name in names:
        if agent != CONTINUAL:
            check_env_name(name)
        elif name not in BENCHMARKS:
            raise SweepError(f"unknown continual benchmark {name!r}; accepted: "
                             f"{', '.join(BENCHMARKS)}")
    return tuple(dict.fromkeys(names))


def make_grid(agent: str, envs: str | Iterable[str] | None = None,
              preset: str | Iterable[str] | None = None,
              interventions: str | Iterable[str] | None = None,
              utds: str | Iterable[Any] | None = None,
              clip_cs: str | Iterable[Any] | None = None,
              vary: Any = None,
              seeds: int = 1, first_seed: int = 0, seeds_per_job: int = 0,
              extra: str | Iterable[str] = (), script_dir: str = DEFAULT_SCRIPT_DIR,
              **train_flags: int | None) -> Grid:
    """Validate the grid's settings (raising SweepError, one line) and build it.

    `interventions` and `utds` left None are the agent's run script defaults (SAC: none at UTD
    1; BRO: its resets at UTD 10); "all" among the interventions is none and every registered
    method; `vary` are axes of run-script settings, as KEY=V1,V2 strings or {key: values}
    (`_vary`); `clip_cs` is the axis clip_c; `script_dir` holds run_<agent>.py (the repo's
    launch/ by default).
    """
    unknown = sorted(set(train_flags) - set(TRAIN_FLAGS))
    if unknown:
        raise SweepError(f"unknown grid setting(s) {', '.join(unknown)}; accepted: "
                         f"{', '.join(GRID_KEYS)}")
    agent = _choices("agent", [str(agent)], AGENTS)[0]
    default_intervention, default_utd = RUN_DEFAULTS[agent]
    if interventions is None:
        interventions = default_intervention
    if utds is None:
        utds = str(default_utd)
    if agent == CONTINUAL:
        if _items(utds) != ["1"]:
            raise SweepError("the continual agent has no UTD; leave --utds out")
        given = sorted(name for name, value in train_flags.items() if value is not None)
        if given:
            raise SweepError(f"{', '.join(given)} are not settings of run_continual.py; give "
                             "its protocol flags (--num_tasks, --epochs, ...) after `--`")
    values = [v for value in _items(interventions)
              for v in (registry.names() if value == ALL else [value])]
    chosen = tuple(dict.fromkeys(_intervention(value) for value in values))
    if not chosen:
        raise SweepError(f"no interventions given; accepted: {', '.join(registry.names())}, "
                         "or methods joined by '+' (nap+clip)")
    utd_values = tuple(dict.fromkeys(_int("utd", u, 1) for u in _items(utds)))
    if not utd_values:
        raise SweepError("no UTDs given; pass --utds=1,4,8 (integers >= 1)")
    flags = tuple((name, _int(name, value, 0 if name == "start_steps" else 1))
                  for name, value in train_flags.items() if value is not None)
    extra = split_extra(extra)
    _check_extra(extra, flags)
    seeds, seeds_per_job = _int("seeds", seeds, 1), _int("seeds_per_job", seeds_per_job, 0)
    if (seeds_per_job or seeds) > MAX_SEEDS:
        given = (f"--seeds_per_job={seeds_per_job:,}" if seeds_per_job
                 else f"--seeds={seeds:,} with --seeds_per_job=0 (all of them)")
        raise SweepError(f"{given} puts {seeds_per_job or seeds:,} seeds in one job, and a run "
                         f"script trains at most {MAX_SEEDS:,} per process: set --seeds_per_job "
                         f"to {MAX_SEEDS:,} or fewer")
    script = os.path.join(os.path.abspath(script_dir), f"run_{agent}.py")
    if not os.path.isfile(script):
        raise SweepError(f"run script {script} not found; --script_dir must hold run_{agent}.py")
    axes = _vary(agent, vary, clip_cs, extra, chosen)
    return Grid(agent=agent, envs=resolve_envs(envs, preset, agent), interventions=chosen,
                utds=utd_values, seeds=seeds, first_seed=_int("first_seed", first_seed, 0),
                seeds_per_job=seeds_per_job, train_flags=flags,
                extra=extra, script_dir=os.path.abspath(script_dir), vary=axes)


def load_grid_file(path: str, defaults: Mapping[str, Any]) -> list[Grid]:
    """Grids from a JSON file: one object, a list of objects, or {"grids": [...]}.

    Each object takes GRID_KEYS; keys it leaves out come from `defaults` (the flags).
    """
    def without_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]  # json.load would keep a repeated key's last value
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise SweepError(f"{path}: key(s) {', '.join(repeated)} given twice in one object; "
                             "give each once")
        return dict(pairs)

    try:
        with open(path) as f:
            content = json.load(f, object_pairs_hook=without_repeated_keys)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SweepError(f"cannot read grid file {path}: {e}") from None
    if isinstance(content, dict) and "grids" in content:
        content = content["grids"]
        if not isinstance(content, list):
            raise SweepError(f"{path}: \"grids\" must be a list of JSON objects with keys "
                             f"from {', '.join(GRID_KEYS)}, got {type(content).__name__}")
    entries = content if isinstance(content, list) else [content]
    if not entries:
        raise SweepError(f"{path}: no grid in it; give a JSON object with keys from "
                         f"{', '.join(GRID_KEYS)}, or a list of them")
    grids = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise SweepError(f"{path}: grid {i} must be a JSON object with keys from "
                             f"{', '.join(GRID_KEYS)}, got {type(entry).__name__}")
        unknown = sorted(set(entry) - set(GRID_KEYS))
        if unknown:
            raise SweepError(f"{path}: grid {i} has unknown key(s) {', '.join(unknown)}; "
                             f"accepted: {', '.join(GRID_KEYS)}")
        settings = {**defaults, **entry}
        if "envs" in entry or "preset" in entry:
            settings["envs"], settings["preset"] = entry.get("envs"), entry.get("preset")
        try:
            grids.append(make_grid(**settings))
        except SweepError as e:
            raise SweepError(f"{path}: grid {i}: {e}") from None
    return grids


def _same_methods(intervention: str) -> str:
    """`in_registry_order`, or the text as recorded where the registry refuses it (a recorded
    job of a method since removed)."""
    try:
        return in_registry_order(intervention)
    except ValueError:
        return intervention


def check_seed_overlap(jobs: Iterable[JobSpec], where: str = "the grid") -> None:
    """SweepError when two jobs of one (agent, env, intervention, varied settings, UTD) train a
    seed twice in different run directories (aggregation would count that seed twice); the
    methods of an intervention in any order are one intervention (a recorded nap+clip job and
    a clip+nap one)."""
    by_run: dict[tuple, list[JobSpec]] = {}
    for job in jobs:
        by_run.setdefault((job.agent, job.env, _same_methods(job.intervention), job.utd,
                           tuple(sorted(job.settings))), []).append(job)
    for group in by_run.values():
        group.sort(key=lambda j: j.seed)
        for a, b in zip(group, group[1:], strict=False):
            if a.key != b.key and b.seed < a.seed + a.num_seeds:
                raise SweepError(f"{a.key} (seeds {a.seed}-{a.seed + a.num_seeds - 1}) and "
                                 f"{b.key} (seeds {b.seed}-{b.seed + b.num_seeds - 1}) in "
                                 f"{where} train the same seeds; give each seed to one job")


# The fields of a JobSpec's record that `job_flags` reads.
FLAG_FIELDS = ("train_flags", "extra", "settings")


def job_flags(spec: Mapping[str, Any]) -> dict[str, str]:
    """{name: value text} of the run-script flags a job's spec (`JobSpec.to_dict()`, or as
    recorded) sets beyond its own: its grid flags and its extra flags, whatever their order or
    place (`-- --max_steps=200` is the grid's `--max_steps=200`) and spelling (`--flag value`
    or `--flag=value`), and its varied settings (a record of before them: its clip_c)."""
    settings = spec.get("settings")
    if settings is None and spec.get(CLIP_C) is not None:
        settings = [(CLIP_C, _recorded_c(spec[CLIP_C]))]
    flags = {name: str(value) for name, value in settings or ()}
    flags.update((name, str(value)) for name, value in spec.get("train_flags") or ())
    flags.update((name, value) for name, value, _ in extra_settings(spec.get("extra") or ()))
    return flags


def _differences(a: JobSpec, b: JobSpec) -> list[str]:
    """How two jobs differ, but for the order, place and spelling of their flags."""
    x, y = a.to_dict(), b.to_dict()
    out = [f"{k}: {x[k]} and {y[k]}" for k in x if k not in FLAG_FIELDS and x[k] != y[k]]
    fa, fb = job_flags(x), job_flags(y)
    return out + [f"--{n}: {fa.get(n, 'not given')} and {fb.get(n, 'not given')}"
                  for n in sorted(set(fa) | set(fb)) if fa.get(n) != fb.get(n)]


def expand(grids: Iterable[Grid]) -> list[JobSpec]:
    """All jobs of the grids in order; a run directory claimed by two different jobs, or a seed
    trained by two jobs, is an error."""
    jobs: dict[str, JobSpec] = {}
    for grid in grids:
        for job in grid.jobs():
            if len(job.run_name.encode()) > MAX_NAME_BYTES:
                raise SweepError(f"the run name {job.run_name} is longer than a directory's "
                                 f"name may be ({MAX_NAME_BYTES} bytes); vary fewer settings "
                                 "in one grid, or split it over logdirs")
            differ = _differences(jobs.setdefault(job.key, job), job)
            if differ:
                raise SweepError(f"two grid entries write the same run directory {job.key} with "
                                 f"different settings ({'; '.join(differ[:3])}); split them "
                                 "into separate logdirs")
    check_seed_overlap(jobs.values())
    return list(jobs.values())
