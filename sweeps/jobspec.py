"""One job of a sweep (JobSpec): a run-script invocation, its command line, run directory and
record, and the run-script flags a job's record sets (`job_flags`).

One job is one (agent, env, intervention, varied settings, UTD) with a group of consecutive
seeds that the run script trains vmapped in one process. Its run directory is the one the run
script writes, `<logdir>/<agent>/<env>/<intervention>-utd<utd>-seed<first seed>/`. The agent
"continual" runs launch/run_continual.py: its envs are benchmarks (continual/tasks.py), it has
no UTD, and its run directories are `<logdir>/continual/<task>/<intervention>-seed<first
seed>/`.
"""

import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any

from sweeps.axes import run_name_part
from sweeps.run_flags import CLIP_C, CONTINUAL, extra_settings, listed

# The scripts (run_<agent>.py) lie in launch/ beside this package.
DEFAULT_SCRIPT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "launch")


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
        settings = [run_name_part(key, value) for key, value in self.settings]
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
        if "wandb" in listed(given.get("log_to")) and "wandb_group" not in given:
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


def _recorded_c(value: Any) -> str:
    """The clip_c of a record of before varied settings, as its run name spelled it."""
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


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
