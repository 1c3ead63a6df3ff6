"""Readers for the run layouts researchers have, and per-path layout detection.

Every reader returns `Run`s (analysis/run_curves.py): one evaluation curve of one seed on one
task. Three layouts:

- project: `<logdir>/<agent>/<env>/<run_name>/` holding config.json + eval.csv (all seeds), read
  by analysis/project_runs.py
- jaxrl:   `<config>/<task>/<seed>.txt` with "<env_step> <return>" rows
- npy:     `<task>.npy` arrays of shape (evaluations, seeds) on a fixed evaluation grid
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from analysis.errors import AggregationError, AggregationWarning
from analysis.project_runs import is_project_run_dir, read_project_run_dir
from analysis.run_curves import Run, canonical_task, make_run, parse_env_step, reading

LAYOUTS = ("project", "jaxrl", "npy")


def read_txt_curve(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Rows "<env_step> <return>" -> steps (T,), returns (T,)."""
    steps, returns = [], []
    with reading(path):
        text = path.read_text()
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            steps.append(parse_env_step(parts[0]))
            returns.append(float(parts[1]))
        except ValueError:
            raise AggregationError(f"{path}:{lineno}: expected '<env_step> <return>', "
                                   f"got {line.strip()!r}") from None
    return np.asarray(steps, dtype=np.int64), np.asarray(returns, dtype=np.float64)


def _warn_missing_seeds(seeds_by_task: dict[str, Sequence[str]], where: str) -> None:
    expected = max(len(s) for s in seeds_by_task.values())
    short = {t: len(s) for t, s in seeds_by_task.items() if len(s) < expected}
    if short:
        detail = ", ".join(f"{t} ({n}/{expected})" for t, n in sorted(short.items()))
        warnings.warn(f"{where}: missing seeds on {detail}", AggregationWarning, stacklevel=3)


def read_jaxrl_tree(root: Path) -> list[Run]:
    """`root/<task>/<seed>.txt` -> one Run per seed file."""
    runs, seeds_by_task = [], {}
    for task_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(task_dir.glob("*.txt"), key=lambda p: (len(p.stem), p.stem))
        task = canonical_task(task_dir.name)
        seeds_by_task[task] = [f.stem for f in files]
        for f in files:
            run = make_run(task, f.stem, *read_txt_curve(f), str(f))
            if run is not None:
                runs.append(run)
    if seeds_by_task:
        _warn_missing_seeds(seeds_by_task, str(root))
    return runs


MAX_NPY_STEP = 2**53  # float64 counts integers exactly up to here


def read_npy_dir(root: Path, eval_every: int, first_step: int | None = None) -> list[Run]:
    """`root/<task>.npy` (evaluations, seeds) -> one Run per seed (column).

    Evaluation i is at env step first_step + i * eval_every (first_step defaults to eval_every).
    NaN entries count as evaluations the seed did not reach.
    """
    if eval_every <= 0:
        raise AggregationError(f"--npy_eval_every must be a positive number of env steps, "
                               f"got {eval_every}")
    first = eval_every if first_step is None else first_step
    if first < 0:
        raise AggregationError(f"--npy_first_step must be >= 0, got {first}")
    runs = []
    for f in sorted(root.glob("*.npy")):
        with reading(f):
            table = np.load(f, allow_pickle=False)
        if table.ndim == 1:
            table = table[:, None]
        if table.ndim != 2:
            raise AggregationError(f"{f}: expected an array (evaluations, seeds), "
                                   f"got shape {table.shape}")
        last = first + eval_every * (table.shape[0] - 1)  # a Python int: no overflow
        if last > MAX_NPY_STEP:
            raise AggregationError(
                f"{f}: its {table.shape[0]} evaluations would end at env step {last:,} "
                f"(--npy_first_step={first}{' by default' if first_step is None else ''}, "
                f"--npy_eval_every={eval_every}), past 2^53, above "
                "which float64 no longer tells env steps apart; give the first step and the "
                "interval the table was evaluated at")
        steps = first + eval_every * np.arange(table.shape[0], dtype=np.int64)
        for seed in range(table.shape[1]):
            run = make_run(f.stem, str(seed), steps, table[:, seed], f"{f}[:, {seed}]")
            if run is not None:
                runs.append(run)
    return runs


def _config_files(root: Path) -> list[Path]:
    """Every config.json at or below root, sorted, through symlinked directories too (runs
    gathered for a paper by linking them), each real directory once."""
    found, seen = [], set()
    for folder, subdirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        subdirs.sort()  # the first of two links to one directory, on every filesystem
        if real in seen:  # a link back up, or a second link to one directory
            subdirs.clear()
            continue
        seen.add(real)
        if "config.json" in files:
            found.append(Path(folder) / "config.json")
    return sorted(found)


def find_project_run_dirs(root: Path) -> list[Path]:
    """Every dir at or below root that holds config.json and eval.csv: root first, then sorted."""
    dirs = [p.parent for p in _config_files(root) if is_project_run_dir(p.parent)]
    return sorted(dirs, key=lambda d: (d != root, d))


def detect_layout(root: Path) -> str:
    """Which of LAYOUTS `root` holds; AggregationError if none or it does not exist."""
    if not root.exists():
        raise AggregationError(f"runs path does not exist: {root}")
    if not root.is_dir():
        raise AggregationError(f"runs path is not a directory: {root}")
    if find_project_run_dirs(root):
        return "project"
    if any(root.glob("*.npy")):
        return "npy"
    if _is_jaxrl_tree(root):
        return "jaxrl"
    holding = [p.name for p in sorted(root.iterdir()) if p.is_dir() and
               (any(p.glob("*.npy")) or _is_jaxrl_tree(p))]
    hint = (f"; its subfolders {', '.join(holding[:4])}{', ...' if len(holding) > 4 else ''} "
            "hold runs: pass each as a --runs entry (one algorithm each)" if holding else "")
    if any((p.parent / "tasks.csv").is_file() for p in _config_files(root)):
        hint += ("; it holds continual runs (config.json + tasks.csv): aggregate them with "
                 "launch/aggregate_continual.py")
    raise AggregationError(
        f"no runs found under {root}; accepted: run dirs with config.json + eval.csv, "
        f"<task>/<seed>.txt trees, or <task>.npy files{hint}")


def _is_jaxrl_tree(root: Path) -> bool:
    return any(p.is_dir() and any(p.glob("*.txt")) for p in root.iterdir())


def load_runs(root: Path, npy_eval_every: int = 25_000,
              npy_first_step: int | None = None) -> tuple[str, list[Run]]:
    """Detect the layout of `root` and read every run below it -> (layout, runs)."""
    root = Path(root)
    layout = detect_layout(root)
    if layout == "project":
        runs = [r for d in find_project_run_dirs(root)
                for r in read_project_run_dir(d, None if d == root else str(d.relative_to(root)))]
        for config in _config_files(root):
            if not (config.parent / "eval.csv").is_file():
                warnings.warn(f"{config.parent}: config.json but no eval.csv; skipped",
                              AggregationWarning, stacklevel=2)
    elif layout == "npy":
        runs = read_npy_dir(root, npy_eval_every, npy_first_step)
    else:
        runs = read_jaxrl_tree(root)
    if not runs:
        raise AggregationError(f"no runs with evaluations under {root} ({layout} layout)")
    _warn_other_layouts(root, layout)
    return layout, runs


def _warn_other_layouts(root: Path, layout: str) -> None:
    """Warn when `root` also holds runs of a layout other than the one read (<task>.npy files,
    or <task>/<seed>.txt folders that are not run dirs of this project), which are left out."""
    others = []
    if layout != "npy" and any(root.glob("*.npy")):
        others.append("<task>.npy files")
    if layout != "jaxrl":
        folders = [p.name for p in sorted(root.iterdir()) if p.is_dir() and any(p.glob("*.txt"))
                   and not (p / "config.json").is_file()]
        if folders:
            others.append(f"<task>/<seed>.txt folders ({', '.join(folders[:4])}"
                          f"{', ...' if len(folders) > 4 else ''})")
    if others:
        warnings.warn(f"{root}: read as the {layout} layout; it also holds {' and '.join(others)},"
                      " left out: pass them as a --runs entry of their own",
                      AggregationWarning, stacklevel=3)
