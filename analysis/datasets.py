"""The CLI's inputs as algorithms: one per --runs entry, or one per config group."""

from __future__ import annotations

import collections
import dataclasses
import warnings
from collections.abc import Sequence
from pathlib import Path

from analysis.errors import AggregationError, AggregationWarning
from analysis.grouping import (
    code_of,
    group_runs,
    result_settings,
    shared_length,
    warn_if_pooled,
)
from analysis.layouts import load_runs
from analysis.run_curves import Run, canonical_task


@dataclasses.dataclass(frozen=True)
class Source:
    """Where an algorithm's runs came from and how they were read."""

    algorithm: str
    path: str
    layout: str
    runs: int
    tasks: int


def _warn_repeated_seeds(label: str, runs: Sequence[Run]) -> None:
    """Warn when one seed of one task appears in several run dirs of an algorithm (its seeds
    split into groups differently twice): each copy counts as a run."""
    dirs: dict[tuple, list[str]] = {}
    until = shared_length([run.config for run in runs if run.config])
    for run in runs:  # the same seed under one configuration (runs merely pooled differ here)
        run_dir, _, seed = run.run_id.rpartition("/seed")
        setting = tuple(sorted(result_settings(run.config, until).items()))
        dirs.setdefault((run.task, seed, setting), []).append(run_dir)
    repeated = {key: where for key, where in dirs.items() if len(where) > 1}
    if repeated:
        (task, seed, _), where = next(iter(sorted(repeated.items())))
        warnings.warn(f"{label}: {len(repeated)} seed(s) appear in more than one run dir and "
                      f"count once per copy (e.g. seed {seed} on {task} in {', '.join(where)})",
                      AggregationWarning, stacklevel=3)


def _warn_code_versions(label: str, runs: Sequence[Run], group_by: Sequence[str]) -> None:
    """Warn when an algorithm's run dirs were made by more than one version of the code
    (config.json's versions.code): they are pooled, as runs of other library versions are."""
    made_by = {run.run_id.rpartition("/seed")[0]: code_of(run.config)
               for run in runs if run.config}
    counts = collections.Counter(made_by.values())
    if len(counts) > 1:
        versions = ", ".join(f"{code}: {n} run dir(s)" for code, n in counts.most_common())
        warnings.warn(f"{label}: its runs were made by {len(counts)} versions of the code "
                      f"({versions}); use --group_by={','.join([*group_by, 'versions.code'])} "
                      "to separate them", AggregationWarning, stacklevel=3)


def _warn_missing_runs(path: str, groups: dict[str, list[Run]], tasks: Sequence[str]) -> None:
    """Warn when a task of one --runs entry's algorithms has fewer runs than another (a seed or
    a run dir of a sweep missing): on the tasks of an algorithm, and across the algorithms
    --group_by splits the entry into; only `tasks` count, when given."""
    counts: dict[tuple[str, str], int] = {}
    for label, runs in groups.items():
        for run in runs:
            if not tasks or run.task in tasks:
                counts[label, run.task] = counts.get((label, run.task), 0) + 1
    most = max(counts.values(), default=0)
    short = [f"{label} on {task} ({n}/{most})" for (label, task), n in sorted(counts.items())
             if n < most]
    if short:
        warnings.warn(f"{path}: missing runs (fewer than the {most} of the most complete task): "
                      f"{', '.join(short)}", AggregationWarning, stacklevel=3)


def _warn_other_action_repeats(datasets: dict[str, list[Run]], group_by: Sequence[str]) -> None:
    """Warn when algorithms ran with different action repeats (read from the config.json of
    those that have one): steps count agent steps, each `action_repeat` simulator steps, so one
    --step compares different amounts of experience. Not when --group_by splits by it."""
    if "action_repeat" in group_by:
        return
    repeats = {label: sorted({r.config.get("action_repeat", 1) for r in runs if r.config})
               for label, runs in datasets.items()}
    repeats = {label: values for label, values in repeats.items() if values}
    if len({tuple(values) for values in repeats.values()}) > 1:
        shown = ", ".join(f"'{label}' {'/'.join(map(str, values))}"
                          for label, values in repeats.items())
        warnings.warn(f"the algorithms ran with different action repeats ({shown}): their env "
                      "steps are agent steps, each action_repeat simulator steps, so --step and "
                      "the curves compare them after different amounts of simulation",
                      AggregationWarning, stacklevel=3)


def load_datasets(
    paths: Sequence[str],
    labels: Sequence[str] = (),
    group_by: Sequence[str] = (),
    npy_eval_every: int = 25_000,
    npy_first_step: int | None = None,
    tasks: Sequence[str] = (),
) -> tuple[dict[str, list[Run]], list[Source]]:
    """Read every --runs entry -> ({algorithm label: runs}, [Source per algorithm]).

    Without group_by an entry is one algorithm named by its label (default: the directory
    name). With group_by, project-layout entries split into one algorithm per distinct config
    value(s), named 'key=value,...' and prefixed by the entry label when there are several
    entries or labels were given. `tasks` (the --tasks aggregated over, default all) limits
    the missing-runs warning to those.
    """
    if not paths:
        raise AggregationError("no --runs given; pass one or more run directories")
    twice = [key for i, key in enumerate(group_by) if key in group_by[:i]]
    if twice:
        raise AggregationError(f"--group_by names {twice[0]} twice; give each key once")
    for flag, entries in (("--runs", paths), ("--labels", labels)):
        empty = [i for i, entry in enumerate(entries, 1) if not str(entry).strip()]
        if empty:
            raise AggregationError(f"{flag} entry {empty[0]} of {len(entries)} is empty (a stray "
                                   "comma?); give non-empty entries separated by commas")
    if labels and len(labels) != len(paths):
        raise AggregationError(f"got {len(labels)} labels for {len(paths)} --runs entries; "
                               "give exactly one label per entry")
    names = list(labels) or [Path(p).resolve().name for p in paths]
    prefix = len(paths) > 1 or bool(labels)
    datasets: dict[str, list[Run]] = {}
    sources: list[Source] = []
    for path, name in zip(paths, names, strict=True):
        layout, runs = load_runs(Path(path), npy_eval_every, npy_first_step)
        if group_by and layout == "project":
            groups = {f"{name}: {g}" if prefix else g: r
                      for g, r in group_runs(runs, group_by).items()}
        else:
            if group_by:
                warnings.warn(f"{path}: --group_by applies to run dirs with config.json only; "
                              f"the {layout} layout there is one algorithm '{name}'",
                              AggregationWarning, stacklevel=2)
            groups = {name: runs}
        if layout == "project":  # the other layouts' readers count their seed files
            for label, group in groups.items():  # within each group, in the other settings
                warn_if_pooled(group, label, group_by)
            _warn_missing_runs(path, groups, [canonical_task(t) for t in tasks])
        for label, group in groups.items():
            if label in datasets:
                raise AggregationError(f"algorithm label '{label}' occurs twice; give distinct "
                                       "--labels")
            datasets[label] = group
            if layout == "project":
                _warn_repeated_seeds(label, group)
                _warn_code_versions(label, group, group_by)
            sources.append(Source(label, str(path), layout, len(group),
                                  len({r.task for r in group})))
    _warn_other_action_repeats(datasets, group_by)
    return datasets, sources
