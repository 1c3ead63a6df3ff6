"""Sweep grids: agent x envs x interventions x varied settings x UTDs x seed groups, validated
and expanded into jobs (sweeps/jobspec.py), their varied settings' axes read by sweeps/axes.py.

An intervention's methods are put in the registry's order (nap+clip is clip+nap).
"""

import dataclasses
import itertools
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agents import AGENTS as _AGENTS
from continual.tasks import BENCHMARKS
from envs import check_env_name
from experiment.config import AGENT_DEFAULTS, MAX_SEEDS
from interventions import registry
from sweeps.axes import applies, vary_axes
from sweeps.jobspec import DEFAULT_SCRIPT_DIR, FLAG_FIELDS, JobSpec, job_flags
from sweeps.run_flags import (
    CONTINUAL,
    GRID_KEYS,
    TRAIN_FLAGS,
    SweepError,
    _check_extra,
    listed,
    split_extra,
)

AGENTS = (*_AGENTS, CONTINUAL)
# Each run script's default intervention and UTD (a grid leaving them out gets these).
RUN_DEFAULTS = {**{name: (d.intervention, d.utd) for name, d in AGENT_DEFAULTS.items()},
                CONTINUAL: ("none", 1)}
ALL = "all"  # --interventions=all: none and every registered method
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
MAX_NAME_BYTES = 255  # of a directory's name (most file systems)


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


def resolve_envs(envs: str | Iterable[str] | None, presets: str | Iterable[str] | None = None,
                 agent: str = "sac") -> tuple[str, ...]:
    """Preset task lists then explicit env names (benchmarks for the continual agent),
    validated, duplicates dropped."""
    names: list[str] = []
    for preset in listed(presets):
        if preset not in PRESETS:
            raise SweepError(f"unknown preset {preset!r}; accepted: {', '.join(PRESETS)}")
        names.extend(PRESETS[preset])
    names.extend(listed(envs))
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
    (`vary_axes`); `clip_cs` is the axis clip_c; `script_dir` holds run_<agent>.py (the repo's
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
        if listed(utds) != ["1"]:
            raise SweepError("the continual agent has no UTD; leave --utds out")
        given = sorted(name for name, value in train_flags.items() if value is not None)
        if given:
            raise SweepError(f"{', '.join(given)} are not settings of run_continual.py; give "
                             "its protocol flags (--num_tasks, --epochs, ...) after `--`")
    values = [v for value in listed(interventions)
              for v in (registry.names() if value == ALL else [value])]
    chosen = tuple(dict.fromkeys(_intervention(value) for value in values))
    if not chosen:
        raise SweepError(f"no interventions given; accepted: {', '.join(registry.names())}, "
                         "or methods joined by '+' (nap+clip)")
    utd_values = tuple(dict.fromkeys(_int("utd", u, 1) for u in listed(utds)))
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
    axes = vary_axes(agent, vary, clip_cs, extra, chosen)
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

