"""Figures of one run directory from its CSV files (launch/plot_run.py draws them): the
learning curve of each seed with the intervention steps marked, and the spectral diagnostics
over time, as PNG files (matplotlib, Agg backend). An RL run's step is the env step, a
continual run's the task.

The files are read strictly: a row that cannot be read (too few or too many values, a value
that is not a number, a missing column, bytes that are not text) is a PlotError naming the
file and its line. The one exception is a last line without its line end, which a run writes
last of every row: a run still writing the file, or stopped while it did, left it cut short.
It is left out with a PlotWarning, and the figures are drawn from the rows before it."""

import csv
import io
import os
import warnings
from collections import defaultdict
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

# diagnostics.csv's metrics drawn, in panel order; each dormant_tau<tau> metric gets a panel too.
PANELS = {"cond": "condition number (log scale)", "stable_rank": "stable rank",
          "srank": "srank (features)"}
RUN_DIR = "<logdir>/<agent>/<env>/<run_name>"
MAX_MARKED = 30  # more intervention steps than this (a clip at every task) go in the legend only


class Kind(NamedTuple):
    """What a run directory's files hold: RL runs evaluate at env steps, continual runs per task."""

    curve: str  # the learning curve's file
    step: str  # the x column of every file
    value: str  # the learning curve's column
    xlabel: str
    ylabel: str
    event_at: float  # where an intervention row's step is drawn, from its step


RL = Kind("eval.csv", "env_step", "return", "env step", "eval return", 0.0)
# a continual event row's step is the task it follows: drawn between that task and the next
CONTINUAL = Kind("tasks.csv", "task", "online_accuracy", "task", "online accuracy", 0.5)


class PlotError(ValueError):
    """Nothing to plot, or a file that cannot be read; the message is one line for the user."""


class PlotWarning(UserWarning):
    """Rows left out of the figures (a last line cut short); the message is one line."""


KIND_OF = {int: "a whole number", float: "a number"}  # what a column's value must be


def read_rows(path: str, columns: dict[str, type]) -> list[dict]:
    """The rows of a CSV file a run writes, each as {column: value} for `columns` ({name: int,
    float or str}); [] when the file does not exist or is empty. PlotError naming
    the file and its line for a row or header that cannot be read; a PlotWarning, and that row
    left out, for a last line without its line end (cut while it was written)."""
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise PlotError(f"{path}: line {line}: byte {data[e.start]:#04x} is not text (the file "
                        "is damaged)") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        records = [(reader.line_num, record) for record in reader]
    except csv.Error as e:
        raise PlotError(f"{path}: line {reader.line_num}: {e}") from None
    if not text.endswith(("\n", "\r")):  # the run's writer ends every line it writes
        line = records[-1][0]
        warnings.warn(f"{path}: line {line}, its last, has no line end: the run is still "
                      "writing it, or stopped while it did; " + (
                          "it is left out" if len(records) > 1 else "the file is taken as "
                          "empty"), PlotWarning, stacklevel=2)
        records = records[:-1]
        if not records:
            return []
    header_line, header = records[0]
    missing = [c for c in columns if c not in header]
    if missing:
        raise PlotError(f"{path}: line {header_line}: no column {', '.join(missing)} (its "
                        f"header: {','.join(header) or 'empty'})")
    where = {c: header.index(c) for c in columns}
    rows = []
    for line, record in records[1:]:
        if not record:  # a blank line
            continue
        if len(record) != len(header):
            raise PlotError(f"{path}: line {line}: {len(record)} value"
                            f"{'' if len(record) == 1 else 's'} where its header has "
                            f"{len(header)} columns ({','.join(header)})")
        row = {}
        for column, parse in columns.items():
            value = record[where[column]]
            try:
                row[column] = parse(value)
            except ValueError:
                raise PlotError(f"{path}: line {line}: {column} is {value!r}, not "
                                f"{KIND_OF[parse]}") from None
        rows.append(row)
    return rows


def learning_curve(run_dir: str, out: str, kind: Kind = RL) -> str:
    """learning_curve.png: the learning curve of each seed and their mean, a dashed line at each
    intervention step."""
    rows = read_rows(os.path.join(run_dir, kind.curve),
                     {"seed": int, kind.step: int, kind.value: float})
    if not rows:
        raise PlotError(f"{run_dir}/{kind.curve} has no " + (
            "evaluation yet (the first comes at --eval_every env steps)" if kind is RL
            else "finished task yet"))
    by_seed = defaultdict(list)
    for row in rows:
        by_seed[row["seed"]].append((row[kind.step], row[kind.value]))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for seed, points in sorted(by_seed.items()):
        steps, values = zip(*points, strict=True)
        ax.plot(steps, values, lw=1.2, alpha=0.8, label=f"seed {seed}")
    if len(by_seed) > 1:
        means = defaultdict(list)
        for points in by_seed.values():
            for step, value in points:
                means[step].append(value)
        steps = sorted(s for s in means if len(means[s]) == len(by_seed))
        ax.plot(steps, [sum(means[s]) / len(means[s]) for s in steps], color="black", lw=2,
                label="mean")
    mark_interventions(ax, run_dir, kind)
    _x_axis(ax, kind)
    ax.set_ylabel(kind.ylabel)
    ax.set_title(_title(run_dir))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2 if len(by_seed) > 6 else 1)
    return _save(fig, os.path.join(out, "learning_curve.png"))


def mark_interventions(ax, run_dir: str, kind: Kind = RL, labels: bool = True) -> None:
    """A dashed vertical line at each intervention step of interventions.csv, a color per kind
    of event; a kind with more than MAX_MARKED steps gets a legend entry only."""
    events = defaultdict(set)
    for row in read_rows(os.path.join(run_dir, "interventions.csv"),
                         {kind.step: int, "kind": str}):
        events[row["kind"]].add(row[kind.step])
    for i, (name, steps) in enumerate(sorted(events.items())):
        label = f"{name} ({len(steps)})" if labels else None
        if len(steps) > MAX_MARKED:
            if labels:
                ax.plot([], [], color=f"C{7 + i}", ls="--", lw=1,
                        label=f"{name} ({len(steps)} events, not drawn)")
            continue
        for j, step in enumerate(sorted(steps)):
            ax.axvline(step + kind.event_at, color=f"C{7 + i}", ls="--", lw=1,
                       label=label if j == 0 else None)


def diagnostics(run_dir: str, out: str, kind: Kind = RL) -> list[str]:
    """diagnostics_<network>.png per network: a panel per metric, a line per layer (the mean
    over seeds at each evaluation), the intervention steps marked."""
    values = defaultdict(lambda: defaultdict(list))  # (network, metric) -> layer -> values
    columns = {kind.step: int, "network": str, "layer": str, "metric": str,
               "value": float}
    for row in read_rows(os.path.join(run_dir, "diagnostics.csv"), columns):
        metric = row["metric"]
        if metric in PANELS or metric.startswith("dormant_tau"):
            values[row["network"], metric][row["layer"], row[kind.step]].append(row["value"])
    written = []
    for network in sorted({network for network, _ in values}):
        metrics = [m for m in PANELS if (network, m) in values]
        metrics += sorted(m for n, m in values if n == network and m.startswith("dormant_tau"))
        fig, axes = plt.subplots(len(metrics), 1, figsize=(7.5, 2.6 * len(metrics)),
                                 sharex=True, squeeze=False)
        for ax, metric in zip(axes[:, 0], metrics, strict=True):
            lines = defaultdict(list)
            for (layer, step), seeds in sorted(values[network, metric].items()):
                lines[layer].append((step, sum(seeds) / len(seeds)))
            for layer, points in sorted(lines.items()):
                steps, means = zip(*points, strict=True)
                ax.plot(steps, means, marker=".", lw=1, label=layer)
            mark_interventions(ax, run_dir, kind, labels=False)
            if metric == "cond":
                ax.set_yscale("log")
            label = PANELS.get(metric) or f"dormant ratio, tau {metric.removeprefix('dormant_tau')}"
            ax.set_ylabel(label, fontsize=8)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, ncol=2, loc="best")
        _x_axis(axes[-1, 0], kind)
        fig.suptitle(f"{_title(run_dir)}: {network}")
        written.append(_save(fig, os.path.join(out, f"diagnostics_{network}.png")))
    return written


def _x_axis(ax, kind: Kind) -> None:
    ax.set_xlabel(kind.xlabel)
    if kind is CONTINUAL:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _title(run_dir: str) -> str:
    """<agent>/<env>/<run_name> of the run directory."""
    return "/".join(os.path.abspath(run_dir).split(os.sep)[-3:])


def _save(fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_run(run_dir: str, out: str = "") -> list[str]:
    """Write the run's figures; the PNG paths. PlotError when there is nothing to plot."""
    if not os.path.isdir(run_dir):
        raise PlotError(f"{run_dir} is not a directory; give a run directory ({RUN_DIR})")
    kinds = [k for k in (RL, CONTINUAL) if os.path.exists(os.path.join(run_dir, k.curve))]
    if not kinds:
        raise PlotError(f"{run_dir} holds neither eval.csv (an RL run) nor tasks.csv (a "
                        f"continual run); give a run directory ({RUN_DIR})")
    out = out or os.path.join(run_dir, "plots")
    os.makedirs(out, exist_ok=True)
    return [learning_curve(run_dir, out, kinds[0]), *diagnostics(run_dir, out, kinds[0])]
