"""The reader of this project's run directories (`<logdir>/<agent>/<env>/<run_name>/`, holding
config.json + eval.csv of all seeds): one Run per seed, with what diverged.json and the loss
warnings say about the run."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import warnings
from pathlib import Path

from analysis.errors import AggregationError, AggregationWarning
from analysis.run_curves import Run, make_run, parse_env_step, parse_seed, reading
from experiment.rundir.files import LOSS_WARNINGS
from experiment.rundir.record import with_added_settings

EVAL_COLUMNS = ("env_step", "seed", "return")


def is_project_run_dir(path: Path) -> bool:
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
                entry = (parse_env_step(row["env_step"]), float(row["return"]))
                seed = parse_seed(row["seed"])
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
        run = make_run(config["env"], f"{name or run_dir.name}/seed{seed}", steps, returns,
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
        record["env_step"] = parse_env_step(str(record["env_step"]))
        if "seed" in record:
            record["seed"] = int(parse_seed(str(record["seed"])))
        if isinstance(record.get("seeds_stopped"), list):
            record["seeds_stopped"] = [int(parse_seed(str(s))) for s in record["seeds_stopped"]]
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
