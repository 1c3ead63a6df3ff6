"""What a run writes as it trains: CSV logs, per-seed `<seed>.txt`, done.json or diverged.json.

Files are opened in append mode and flushed after each write, so a run that stops leaves
every row it logged on disk; `offsets()` / `truncate_to()` let a resumed run cut the files
back to the moment of its checkpoint, so rows are neither duplicated nor lost.
"""

import csv
import json
import os
from collections.abc import Iterable, Sequence

from experiment.rundir.record import CannotResume, write_json

CSV_HEADERS = {
    "eval.csv": ("env_step", "seed", "return", "wall_time"),
    "train.csv": ("env_step", "seed", "metric", "value"),
    "diagnostics.csv": ("env_step", "seed", "network", "layer", "metric", "value"),
    "interventions.csv": ("env_step", "seed", "kind", "network", "layer", "metric", "value"),
}

DIVERGED = "diverged.json"

# Losses past experiment.divergence.LOSS_LIMIT, first crossings.
LOSS_WARNINGS = "loss_warnings.json"


def done_problem(path: str) -> str | None:
    """Why a done.json cannot be read as the JSON object a finished run writes, or None."""
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:  # JSON and Unicode errors are ValueErrors
        return f"{type(e).__name__}: {e}"
    return None if isinstance(record, dict) else "it holds no JSON object"


def is_finished(run_dir: str) -> bool:
    """Whether the run directory holds a done.json that reads as a finished run's."""
    path = os.path.join(run_dir, "done.json")
    return os.path.exists(path) and done_problem(path) is None


def read_loss_warnings(run_dir: str) -> dict:
    """The losses LOSS_WARNINGS records ({} where there is none or it cannot be read)."""
    try:
        with open(os.path.join(run_dir, LOSS_WARNINGS)) as f:
            losses = json.load(f).get("losses", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: v for k, v in losses.items() if isinstance(v, dict)} \
        if isinstance(losses, dict) else {}


class RunFiles:
    """The files of one run directory; every `write_*` appends and flushes."""

    def __init__(self, run_dir: str, seeds: Sequence[int], fresh: bool, dashboards=None,
                 headers: dict[str, Sequence[str]] = CSV_HEADERS, seed_files: bool = True):
        """Open the logs (`headers`: CSV file name -> header; `seed_files`: a <seed>.txt per
        seed too); `fresh` empties them (a run starting over), else they are appended.
        `dashboards` (experiment.dashboards.Dashboards, or None) get every CSV row too."""
        self.run_dir = run_dir
        self.seeds = list(seeds)
        self.dashboards = dashboards
        if dashboards is not None and fresh:
            dashboards.rewind({})
        os.makedirs(run_dir, exist_ok=True)
        self._files = {}
        names = [*headers, *(f"{seed}.txt" for seed in self.seeds if seed_files)]
        for name in names:
            path = os.path.join(run_dir, name)
            handle = open(path, "w" if fresh else "a", newline="")  # noqa: SIM115 - see close()
            if fresh and name in headers:
                csv.writer(handle, lineterminator="\n").writerow(headers[name])
                handle.flush()
            self._files[name] = handle

    def forget_end(self) -> None:
        """Remove done.json and diverged.json: about the run as it was, which goes on now
        (called once a resume has restored its checkpoint, or for a fresh start)."""
        for name in ("done.json", DIVERGED):
            path = os.path.join(self.run_dir, name)
            if os.path.exists(path):
                os.remove(path)

    def write_config(self, record: dict) -> None:
        write_json(os.path.join(self.run_dir, "config.json"), record, indent=2, sort_keys=True)

    def write_rows(self, name: str, rows: Iterable[Sequence]) -> None:
        """Append rows to the CSV file `name` (one of the headers')."""
        self._rows(name, rows)

    def _rows(self, name: str, rows: Iterable[Sequence]) -> None:
        if self.dashboards is not None:
            rows = list(rows)
            self.dashboards.rows(name, rows)
        handle = self._files[name]
        csv.writer(handle, lineterminator="\n").writerows(rows)
        handle.flush()

    def write_eval(self, env_step: int, returns: Sequence[float], wall_time: float) -> None:
        self._rows("eval.csv", [(env_step, s, f"{r:.6g}", f"{wall_time:.1f}")
                                for s, r in zip(self.seeds, returns, strict=True)])
        for seed, ret in zip(self.seeds, returns, strict=True):
            handle = self._files[f"{seed}.txt"]
            handle.write(f"{env_step} {ret:.6g}\n")
            handle.flush()

    def last_eval_return(self) -> float | None:
        """The mean over seeds of the newest eval.csv row's returns (a resumed run's last
        evaluation), or None before the first evaluation."""
        self._files["eval.csv"].flush()
        with open(os.path.join(self.run_dir, "eval.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            return None
        newest = [float(r["return"]) for r in rows if r["env_step"] == rows[-1]["env_step"]]
        return sum(newest) / len(newest)

    def write_train(self, env_step: int, metrics: dict[str, Sequence[float]]) -> None:
        self._rows("train.csv", [(env_step, seed, name, f"{values[i]:.6g}")
                                 for name, values in sorted(metrics.items())
                                 for i, seed in enumerate(self.seeds)])

    def write_diagnostics(self, rows: Iterable[Sequence]) -> None:
        self._rows("diagnostics.csv", rows)

    def write_interventions(self, rows: Iterable[Sequence]) -> None:
        self._rows("interventions.csv", rows)

    def write_done(self, record: dict) -> None:
        write_json(os.path.join(self.run_dir, "done.json"), record, indent=2)

    def write_diverged(self, record: dict) -> None:
        """diverged.json: where and for which seed training stopped on a NaN or inf."""
        write_json(os.path.join(self.run_dir, DIVERGED), record, indent=2)

    def offsets(self) -> dict[str, int]:
        """Byte length of every log file now, for a checkpoint. The files are synced to disk
        first, as the checkpoint is: after a machine crash they hold at least these bytes."""
        for handle in self._files.values():
            handle.flush()
            os.fsync(handle.fileno())
        lengths = {name: handle.tell() for name, handle in self._files.items()}
        if self.dashboards is not None:  # their event files, by path below the run directory
            lengths.update(self.dashboards.offsets())
        return lengths

    def truncate_to(self, offsets: dict[str, int]) -> None:
        """Cut every log file back to `offsets` (rows written after a checkpoint). A file
        shorter than its offset lost rows the checkpoint counts: an error, never padding.
        The dashboards' entries go to them (a dashboard left off now is left alone)."""
        for name, size in offsets.items():
            if name not in self._files:
                continue
            handle = self._files[name]
            handle.flush()
            if os.fstat(handle.fileno()).st_size < size:
                raise CannotResume(f"{os.path.join(self.run_dir, name)} is shorter than when the "
                                   f"checkpoint was written ({size} bytes); it lost rows, so the "
                                   "run cannot continue it")
            handle.truncate(size)
            handle.seek(size)
        if self.dashboards is not None:
            self.dashboards.rewind({k: v for k, v in offsets.items() if k not in self._files})

    def read_rows(self, name: str) -> list[list[str]]:
        """The rows a CSV file holds now, without its header (what the dashboards catch up on);
        none of a file this run does not write."""
        if name not in self._files:
            return []
        self._files[name].flush()
        with open(os.path.join(self.run_dir, name), newline="") as f:
            return list(csv.reader(f))[1:]

    def open_dashboards(self, record: dict, env_step: int) -> None:
        """Start the dashboards at `env_step`, once the logs are rewound to it."""
        if self.dashboards is not None:
            self.dashboards.open(record, env_step, self.read_rows)

    def end_step(self) -> None:
        """The env step's rows are all written: the dashboards send them."""
        if self.dashboards is not None:
            self.dashboards.end_step()

    def close_dashboards(self, failed: bool = False) -> None:
        if self.dashboards is not None:
            self.dashboards.close(failed)
            self.dashboards = None

    def close(self) -> None:
        self.close_dashboards()
        for handle in self._files.values():
            handle.close()
