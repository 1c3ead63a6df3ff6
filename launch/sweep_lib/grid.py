"""Sweep grids: agent x envs x interventions x UTDs (x clip c values) x seed groups, expanded
into jobs.

One job is one (agent, env, intervention, UTD) with a group of consecutive seeds that the run
script trains vmapped in one process. Its run directory is the one the run script writes,
`<logdir>/<agent>/<env>/<intervention>-utd<utd>-seed<first seed>/`. The agent "continual" runs
launch/run_continual.py: its envs are benchmarks (continual/tasks.py), it has no UTD, and its
run directories are `<logdir>/continual/<task>/<intervention>-seed<first seed>/`. Given clip
c values, each job whose intervention includes clip is crossed with them (`-c<c>` in its run
name, --clip_c on its command line).
"""

import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agents import AGENTS as _AGENTS
from continual.tasks import BENCHMARKS
from envs import check_env_name
from interventions import registry
from launch.config import AGENT_DEFAULTS, MAX_SEEDS

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
GRID_KEYS = ("agent", "envs", "preset", "interventions", "utds", "clip_cs", "seeds",
             "first_seed", "seeds_per_job", "extra", *TRAIN_FLAGS)
DEFAULT_SCRIPT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SweepError(ValueError):
    """A sweep setting that cannot work; the message is one line for the user."""


def sweep_group(logdir: str) -> str:
    """The wandb group of a sweep's runs: its logdir's name (runs/clip_sweep: clip_sweep)."""
    return os.path.basename(os.path.normpath(os.path.abspath(logdir)))


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """One run-script invocation: an (agent, env, intervention, UTD) and its seed group."""

    agent: str
    env: str
    intervention: str
    utd: int
    seed: int
    num_seeds: int
    train_flags: tuple[tuple[str, int], ...] = ()
    extra: tuple[str, ...] = ()
    script_dir: str = DEFAULT_SCRIPT_DIR
    clip_c: float | None = None  # --clip_c of this job (None: the run script's default)

    @property
    def script(self) -> str:
        return os.path.join(self.script_dir, f"run_{self.agent}.py")

    @property
    def run_name(self) -> str:
        c = "" if self.clip_c is None else f"-c{self.clip_c:g}"
        utd = "" if self.agent == CONTINUAL else f"-utd{self.utd}"
        return f"{self.intervention}{c}{utd}-seed{self.seed}"

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
        c = {} if self.clip_c is None else {"clip_c": f"{self.clip_c:g}"}
        flags = {**where, "intervention": self.intervention, **c, "seed": self.seed,
                 "num_seeds": self.num_seeds, **dict(self.train_flags), "logdir": logdir,
                 "run_name": self.run_name, "resume": "auto"}
        given = {name: value for name, value, _ in extra_settings(self.extra)}
        if "wandb" in _items(given.get("log_to")) and "wandb_group" not in given:
            flags["wandb_group"] = sweep_group(logdir)
        return [sys.executable, self.script, *(f"--{k}={v}" for k, v in flags.items()),
                *self.extra]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> "JobSpec":
        return cls(**{**record, "train_flags": tuple(tuple(p) for p in record["train_flags"]),
                      "extra": tuple(record["extra"])})


@dataclasses.dataclass(frozen=True)
class Grid:
    """A validated grid; `jobs()` expands it in (env, intervention, UTD, seed) order."""

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
    clip_cs: tuple[float, ...] = ()

    def _cs(self, intervention: str) -> tuple[float | None, ...]:
        """The clip c values of an intervention's jobs: clip_cs where it includes clip."""
        uses_clip = "clip" in registry.split(intervention)
        return self.clip_cs if self.clip_cs and uses_clip else (None,)

    def _seed_starts(self) -> range:
        """The first seed of each job's group of seeds_per_job (all seeds when 0)."""
        return range(self.first_seed, self.first_seed + self.seeds,
                     self.seeds_per_job or self.seeds)

    def job_count(self) -> int:
        """len(self.jobs()), without expanding them."""
        methods = sum(len(self._cs(i)) for i in self.interventions)
        return len(self.envs) * methods * len(self.utds) * len(self._seed_starts())

    def seed_run_count(self) -> int:
        """The seeds its jobs train together: one per seed of each (env, intervention, UTD)."""
        return len(self.envs) * len(self.interventions) * len(self.utds) * self.seeds

    def jobs(self) -> list[JobSpec]:
        starts, end = self._seed_starts(), self.first_seed + self.seeds
        return [JobSpec(self.agent, env, intervention, utd, start, min(starts.step, end - start),
                        self.train_flags, self.extra, self.script_dir, c)
                for env in self.envs for intervention in self.interventions
                for c in self._cs(intervention) for utd in self.utds for start in starts]


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
    """A grid's intervention as a run records it (methods joined by '+'), or SweepError."""
    try:
        return registry.canonical(value)
    except ValueError as e:
        raise SweepError(f"intervention {value!r}: {e}") from None


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
              seeds: int = 1, first_seed: int = 0, seeds_per_job: int = 0,
              extra: str | Iterable[str] = (), script_dir: str = DEFAULT_SCRIPT_DIR,
              **train_flags: int | None) -> Grid:
    """Validate the grid's settings (raising SweepError, one line) and build it.

    `interventions` and `utds` left None are the agent's run script defaults (SAC: none at UTD
    1; BRO: its resets at UTD 10); "all" among the interventions is none and every registered
    method; `clip_cs` are c values crossed with the interventions that include clip;
    `script_dir` holds run_<agent>.py (the repo's launch/ by default).
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
    cs = []
    for value in _items(clip_cs):
        try:
            c = float(value)
        except ValueError:
            raise SweepError(f"clip_cs must be numbers >= 1, got {value!r}") from None
        if not 1 <= c < float("inf"):
            raise SweepError(f"clip_cs must be numbers >= 1 (SingularClip's c), got {value!r}")
        cs.append(c)
    if cs and not any("clip" in registry.split(i) for i in chosen):
        raise SweepError("clip_cs are crossed with the interventions that include clip; none "
                         f"of {', '.join(chosen)} does")
    return Grid(agent=agent, envs=resolve_envs(envs, preset, agent), interventions=chosen,
                utds=utd_values, seeds=seeds, first_seed=_int("first_seed", first_seed, 0),
                seeds_per_job=seeds_per_job, train_flags=flags,
                extra=extra, script_dir=os.path.abspath(script_dir),
                clip_cs=tuple(dict.fromkeys(cs)))


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


def check_seed_overlap(jobs: Iterable[JobSpec], where: str = "the grid") -> None:
    """SweepError when two jobs of one (agent, env, intervention, UTD) train a seed twice in
    different run directories (aggregation would count that seed twice)."""
    by_run: dict[tuple, list[JobSpec]] = {}
    for job in jobs:
        by_run.setdefault((job.agent, job.env, job.intervention, job.utd, job.clip_c),
                          []).append(job)
    for group in by_run.values():
        group.sort(key=lambda j: j.seed)
        for a, b in zip(group, group[1:], strict=False):
            if a.key != b.key and b.seed < a.seed + a.num_seeds:
                raise SweepError(f"{a.key} (seeds {a.seed}-{a.seed + a.num_seeds - 1}) and "
                                 f"{b.key} (seeds {b.seed}-{b.seed + b.num_seeds - 1}) in "
                                 f"{where} train the same seeds; give each seed to one job")


def job_flags(spec: Mapping[str, Any]) -> dict[str, str]:
    """{name: value text} of the run-script flags a job's spec (`JobSpec.to_dict()`, or as
    recorded) sets beyond its own: its grid flags and its extra flags, whatever their order or
    place (`-- --max_steps=200` is the grid's `--max_steps=200`) and spelling (`--flag value`
    or `--flag=value`)."""
    flags = {name: str(value) for name, value in spec.get("train_flags") or ()}
    flags.update((name, value) for name, value, _ in extra_settings(spec.get("extra") or ()))
    return flags


def _differences(a: JobSpec, b: JobSpec) -> list[str]:
    """How two jobs differ, but for the order, place and spelling of their flags."""
    x, y = a.to_dict(), b.to_dict()
    out = [f"{k}: {x[k]} and {y[k]}" for k in x if k not in ("train_flags", "extra")
           and x[k] != y[k]]
    fa, fb = job_flags(x), job_flags(y)
    return out + [f"--{n}: {fa.get(n, 'not given')} and {fb.get(n, 'not given')}"
                  for n in sorted(set(fa) | set(fb)) if fa.get(n) != fb.get(n)]


def expand(grids: Iterable[Grid]) -> list[JobSpec]:
    """All jobs of the grids in order; a run directory claimed by two different jobs, or a seed
    trained by two jobs, is an error."""
    jobs: dict[str, JobSpec] = {}
    for grid in grids:
        for job in grid.jobs():
            differ = _differences(jobs.setdefault(job.key, job), job)
            if differ:
                raise SweepError(f"two grid entries write the same run directory {job.key} with "
                                 f"different settings ({'; '.join(differ[:3])}); split them "
                                 "into separate logdirs")
    check_seed_overlap(jobs.values())
    return list(jobs.values())
