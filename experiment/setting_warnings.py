"""Settings that work but may not do what was meant: one line each, which a run script prints
as a warning before it trains (experiment.runner, launch/run_continual.py)."""

import sys
from collections.abc import Iterable

from agents import AGENTS
from experiment.config import SCHEDULE_FLAGS, WANDB_FLAGS, TrainConfig, run_schedule
from interventions import registry


def _every(cfg: TrainConfig) -> str:
    unit = " gradient steps" if cfg.intervention_unit == "grad_steps" else ""
    return f"--intervention_every={cfg.intervention_every}{unit}"


def schedule_warning(cfg: TrainConfig, given: Iterable[str] = ()) -> str | None:
    """A line about scheduled interventions that never happen (at or after the last step, where
    no intervention is made), or None. `given`: the flags on the command line; without a
    schedule flag, an event of no period of its own takes the agent's reset steps
    (agents.Registered.reset_steps, experiment.cli.config_from_flags), named when all are late."""
    reset_steps = AGENTS[cfg.agent].reset_steps if cfg.agent in AGENTS else None
    if (reset_steps is not None and cfg.event is not None and cfg.event.every is None
            and not cfg.intervention_steps
            and not set(given) & {"intervention_every", "intervention_unit"}):
        return (f"--intervention={cfg.intervention} never happens: {cfg.agent.upper()}'s reset "
                f"steps (the first at env step {reset_steps(sys.maxsize, cfg.utd)[0]}) are at or "
                f"after --max_steps={cfg.max_steps}, and a run intervenes only before its last "
                "step")
    schedule = run_schedule(cfg)
    if schedule is None:
        return None
    if not cfg.intervention_steps and not schedule.steps_upto(cfg.max_steps - 1):
        return (f"--intervention={cfg.intervention} never happens: {_every(cfg)} comes at or "
                f"after --max_steps={cfg.max_steps}, and a run intervenes only before its last "
                "step")
    late = [s for s in cfg.intervention_steps if s >= cfg.max_steps]
    if not late:
        return None
    return (f"--intervention={cfg.intervention} at env steps {','.join(map(str, late))} never "
            f"happens: they are at or after --max_steps={cfg.max_steps}, and a run intervenes "
            "only before its last step")


def early_warning(cfg: TrainConfig) -> str | None:
    """A line when interventions are scheduled before the first update (at --start_steps),
    where they act on networks no gradient step has trained, or None."""
    schedule = run_schedule(cfg)
    if schedule is None:
        return None
    early = schedule.steps_between(0, cfg.start_steps - 1)
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


def unused_flags_warning(cfg: TrainConfig, given: Iterable[str]) -> str | None:
    """A line naming the flags given (`given`: their names) that this run's training never
    reads, such as --clip_c with --intervention=reset, or None. Not an error: a sweep may cross
    them with every intervention. config.json records them all the same, and a resume compares
    them, as it compares every setting."""
    given = set(given)
    chosen = {m.name for m in registry.parse(cfg.intervention)}
    clauses = []
    for method in registry.registered().values():
        unused = [flag for flag in method.settings() if flag in given]
        if unused and method.name not in chosen:
            clauses.append((unused, f"{method.name}'s settings act only with --intervention="
                                    f"{method.name}, not {cfg.intervention}"))
    if cfg.event is None:
        unused = [name for name in SCHEDULE_FLAGS if name in given]
        if unused:
            clauses.append((unused, f"--intervention={cfg.intervention} has no scheduled event"))
    elif cfg.intervention_steps:
        unused = [name for name in SCHEDULE_FLAGS if name in given]
        if unused:
            clauses.append((unused, "--intervention_steps sets the schedule"))
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


def dashboards_warning(cfg: TrainConfig, given: Iterable[str]) -> str | None:
    """A line naming the --wandb_* flags given without wandb in --log_to, or None."""
    unused = [f"--{name}" for name in WANDB_FLAGS if name in set(given)]
    if "wandb" in cfg.log_to or not unused:
        return None
    return (f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} not read: --log_to does "
            "not include wandb")


