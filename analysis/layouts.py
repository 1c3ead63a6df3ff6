"""Readers for the run layouts researchers have, and per-path layout detection.

Every reader returns `Run`s: one evaluation curve of one seed on one task. Three layouts:

- project: `<logdir>/<agent>/<env>/<run_name>/` holding config.json + eval.csv (all seeds)
- jaxrl:   `<config>/<task>/<seed>.txt` with "<env_step> <return>" rows
- npy:     `<task>.npy` arrays of shape (evaluations, seeds) on a fixed evaluation grid
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from analysis.errors import AggregationError, AggregationWarning
from experiment.rundir.files import LOSS_WARNINGS
from experiment.rundir.record import with_added_settings

TASK_ALIASES = {"finger-turn": "finger-turn_hard"}
LAYOUTS = ("project", "jaxrl", "npy")
EVAL_COLUMNS = ("env_step", "seed", "return")


@dataclasses.dataclass(frozen=True)
class Run:
    """One seed's evaluation curve on one task: steps (T,) increasing ints, returns (T,)."""

    task: str
    run_id: str
    steps: np.ndarray
    returns: np.ndarray
    source: str
    config: dict = dataclasses.field(default_factory=dict, compare=False)
    config_source: str = ""  # the file `config` was read from, if any
    stopped: str = ""  # why training stopped early (this project's diverged.json), if known
    stopped_at: int | None = None  # the env step it stopped at


def canonical_task(name: str) -> str:
    """dm_control 'domain-task' name for a task name (maps known aliases such as BRO's)."""
    return TASK_ALIASES.get(name, name)


def _make_run(task: str, run_id: str, steps, returns, source: str, config=None,
              config_source=None) -> Run | None:
    try:
        steps = np.asarray(steps, dtype=np.int64)
        returns = np.asarray(returns, dtype=np.float64)
    except (TypeError, ValueError) as error:  # a .npy of strings, say
        raise AggregationError(f"{source}: env steps and returns must be numbers ({error})") \
            from None
    if np.any(steps < 0):
        raise AggregationError(f"{source}: env step {int(steps.min())} is negative; env steps "
                               "count from 0")
    keep = np.isfinite(returns)
    if not keep.all():
        warnings.warn(f"{source}: {int((~keep).sum())} non-finite returns ignored",
                      AggregationWarning, stacklevel=3)
    steps, returns = steps[keep], returns[keep]
    if steps.size == 0:
        warnings.warn(f"{source}: no evaluations; run skipped", AggregationWarning, stacklevel=3)
        return None
    order = np.argsort(steps, kind="stable")
    steps, returns = steps[order], returns[order]
    if np.any(np.diff(steps) == 0):
        raise AggregationError(f"{source}: env_step values repeat; expected one evaluation "
                               "per step per seed")
    return Run(canonical_task(task), run_id, steps, returns, source, config or {},
               str(config_source or ""))


@contextlib.contextmanager
def reading(path: Path):
    """Turns a file that cannot be read or decoded (missing, unreadable, half-written, not
    text, not what its extension says) into an AggregationError naming it."""
    try:
        yield
    except AggregationError:
        raise
    except (OSError, ValueError, EOFError) as error:  # json and Unicode errors are ValueErrors
        raise AggregationError(f"{path}: cannot read it ({type(error).__name__}: {error})") \
            from None


def _env_step(text: str) -> int:
    """An env step as files write it ("5000", "5000.0", "5e3"); ValueError unless whole."""
    value = float(text)
    if not value.is_integer():
        raise ValueError(f"env step {text} is not a whole number")
    return int(value)


def _seed(text: str) -> str:
    """A seed as eval.csv spells it ("0", " 0", "0.0"), in one spelling: "0". ValueError
    unless a whole number >= 0, so that one seed never counts as several runs."""
    value = _env_step(text)
    if value < 0:
        raise ValueError(f"seed {text} is negative")
    return str(value)


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
            steps.append(_env_step(parts[0]))
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
            run = _make_run(task, f.stem, *read_txt_curve(f), str(f))
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
            run = _make_run(f.stem, str(seed), steps, table[:, seed], f"{f}[:, {seed}]")
            if run is not None:
                runs.append(run)
    return runs


def _is_project_run_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "eval.csv").is_file()


def _eval_rows(path: Path) -> csv.DictReader:
    """eval.csv's rows, less a last row without its line end (being written as it is read),
    which is left out with a warning."""
    with reading(path):
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark, as spreadsheets save
    cut = text.rfind("\n") + 1
    if 0 < cut < len(text):  # after a whole header line
        warnings.warn(f"{path}: its last row ({text[cut:]!r}) has no line end, as when read "
                      "while it is being written; left out", AggregationWarning, stacklevel=3)
        text = text[:cut]
    reader = csv.DictReader(io.StringIO(text, newline=""))
    with _csv_errors(path):
        if reader.fieldnames:  # "env_step, seed, return" names the same columns
            reader.fieldnames = [name.strip() for name in reader.fieldnames]
    return reader


@contextlib.contextmanager
def _csv_errors(path: Path):
    """csv's own errors (a field past its size limit, say) as an AggregationError naming it."""
    try:
        yield
    except csv.Error as error:
        raise AggregationError(f"{path}: not a readable CSV ({error})") from None


def read_project_run_dir(run_dir: Path, name: str | None = None) -> list[Run]:
    """One run dir (config.json + eval.csv) -> one Run per seed found in eval.csv, with run ids
    `<name>/seed<seed>` (name: the run dir's name unless given). Seeds of num_seeds missing
    from eval.csv are warned about: as diverged before any evaluation (from diverged.json)
    when that is why, so that the run is named and not just missing."""
    with reading(run_dir / "config.json"):
        config = json.loads((run_dir / "config.json").read_text())
    if not isinstance(config, dict) or not isinstance(config.get("env"), str):
        raise AggregationError(f"{run_dir / 'config.json'}: expected a JSON object with an "
                               "'env' key naming the task (a string)")
    config = with_added_settings(config)  # a run recorded before a setting existed has its value
    reader = _eval_rows(run_dir / "eval.csv")
    missing = [c for c in EVAL_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise AggregationError(f"{run_dir / 'eval.csv'}: missing columns {missing}; "
                               f"expected a header with {', '.join(EVAL_COLUMNS)}")
    rows: dict[str, list[tuple[int, float]]] = {}
    with _csv_errors(run_dir / "eval.csv"):
        for row in reader:
            try:
                if None in row.values() or None in row:  # fewer or more fields than the header
                    raise ValueError
                entry = (_env_step(row["env_step"]), float(row["return"]))
                seed = _seed(row["seed"])
            except (TypeError, ValueError):
                raise AggregationError(f"{run_dir / 'eval.csv'}:{reader.line_num}: expected "
                                       f"{', '.join(reader.fieldnames)}, with whole numbers "
                                       f"for env_step and seed and a number for return, got "
                                       f"{row}") from None
            rows.setdefault(seed, []).append(entry)
    expected = config.get("num_seeds")
    counted = (f"eval.csv has {len(rows)} of num_seeds={expected} seeds"
               if isinstance(expected, int) and len(rows) < expected else "")
    diverged = _read_diverged(run_dir)
    unevaluated = _diverged_before_evaluating(diverged, config, rows)
    if unevaluated:
        step, bad = diverged.get("env_step"), diverged.get("seed")
        stopping = ("" if unevaluated == [str(bad)] else
                    f", stopping seeds {', '.join(unevaluated)} of its process")
        whose = "its run is" if len(unevaluated) == 1 else "their runs are"
        warnings.warn(f"{run_dir}: seed {bad} diverged at env step {step} "
                      f"({diverged.get('what', 'no reason recorded')}) before any evaluation"
                      f"{stopping}; {whose} left out" + (f" ({counted})" if counted else ""),
                      AggregationWarning, stacklevel=2)
    elif counted:
        warnings.warn(f"{run_dir}: {counted}", AggregationWarning, stacklevel=2)
    for name, first in _loss_warnings(run_dir).items():
        warnings.warn(f"{run_dir}: {name} of seed {first.get('seed')} reached "
                      f"{first.get('value'):.3g} at env step {first.get('env_step')} "
                      f"({LOSS_WARNINGS}): a loss that grows without bound usually means a "
                      "broken run; its runs are kept", AggregationWarning, stacklevel=2)
    runs = []
    for seed in sorted(rows, key=lambda s: (len(s), s)):
        steps, returns = zip(*rows[seed], strict=True)
        run = _make_run(config["env"], f"{name or run_dir.name}/seed{seed}", steps, returns,
                        f"{run_dir / 'eval.csv'} seed {seed}", config, run_dir / "config.json")
        if run is not None and diverged is not None:
            step, bad = diverged.get("env_step"), diverged.get("seed")
            why = (f"diverged at env step {step}: {diverged.get('what')}" if str(bad) == seed
                   else f"stopped at env step {step} when seed {bad} of its process diverged")
            run = dataclasses.replace(run, stopped=why,
                                      stopped_at=int(step) if isinstance(step, int) else None)
        if run is not None:
            runs.append(run)
    return runs


def _diverged_before_evaluating(diverged: dict | None, config: dict,
                                rows: dict[str, list]) -> list[str]:
    """The seeds (as eval.csv spells them) of a run that diverged before the diverged seed's
    first evaluation and that have no eval.csv row: the diverged seed and the others of its
    process (diverged.json's seeds_stopped, else config.json's seed and num_seeds); [] when
    the run did not diverge so, or its diverged.json names no seed."""
    if diverged is None or "seed" not in diverged or str(diverged["seed"]) in rows:
        return []
    process = diverged.get("seeds_stopped")
    if not isinstance(process, list):
        first, count = config.get("seed"), config.get("num_seeds")
        process = (list(range(first, first + count))
                   if isinstance(first, int) and isinstance(count, int) else [])
    seeds = [str(s) for s in process if str(s) not in rows]
    if str(diverged["seed"]) not in seeds:
        seeds.append(str(diverged["seed"]))
    return sorted(seeds, key=lambda s: (len(s), s))


def _read_diverged(run_dir: Path) -> dict | None:
    """The run's diverged.json (written when training stopped on a NaN or inf), or None."""
    path = run_dir / "diverged.json"
    if not path.is_file():
        return None
    with reading(path):
        record = json.loads(path.read_text())
    if not isinstance(record, dict):
        raise AggregationError(f"{path}: expected a JSON object with env_step and seed")
    try:  # as the trainer writes them: whole numbers (a seed as eval.csv's are compared)
        record["env_step"] = _env_step(str(record["env_step"]))
        if "seed" in record:
            record["seed"] = int(_seed(str(record["seed"])))
        if isinstance(record.get("seeds_stopped"), list):
            record["seeds_stopped"] = [int(_seed(str(s))) for s in record["seeds_stopped"]]
    except (KeyError, ValueError):
        raise AggregationError(f"{path}: expected a JSON object with env_step and seed as "
                               f"whole numbers >= 0 (and seeds_stopped a list of them), got "
                               f"{record}") from None
    return record


def _loss_warnings(run_dir: Path) -> dict:
    """The losses the run's LOSS_WARNINGS records past the trainer's limit ({} if none), each
    {"env_step", "seed", "value"} of its first crossing."""
    path = run_dir / LOSS_WARNINGS
    if not path.is_file():
        return {}
    with reading(path):
        record = json.loads(path.read_text())
    losses = record.get("losses") if isinstance(record, dict) else None
    if not isinstance(losses, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("value"), int | float)
            for v in losses.values()):
        raise AggregationError(f"{path}: expected a JSON object whose \"losses\" maps each "
                               "loss to its env_step, seed and value")
    return losses


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
    dirs = [p.parent for p in _config_files(root) if _is_project_run_dir(p.parent)]
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
