"""Figures of one run directory from its CSV files (launch/plot_run.py draws them): the
learning curve of each seed with the intervention steps marked, and the spectral diagnostics
over time, as PNG files (matplotlib, Agg backend). An RL run's step is the env step, a
continual run's the task."""

import csv
import os
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
    """Nothing to plot; the message is one line for the user."""


def read_rows(path: str) -> list[dict[str, str]]:
    """A CSV file's rows ([] when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def learning_curve(run_dir: str, out: str, kind: Kind = RL) -> str:
    """learning_curve.png: the learning curve of each seed and their mean, a dashed line at each
    intervention step."""
    rows = read_rows(os.path.join(run_dir, kind.curve))
    if not rows:
        raise PlotError(f"{run_dir}/{kind.curve} has no " + (
            "evaluation yet (the first comes at --eval_every env steps)" if kind is RL
            else "finished task yet"))
    by_seed = defaultdict(list)
    for row in rows:
        by_seed[int(row["seed"])].append((int(row[kind.step]), float(row[kind.value])))
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
    for row in read_rows(os.path.join(run_dir, "interventions.csv")):
        events[row["kind"]].add(int(row[kind.step]))
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
    for row in read_rows(os.path.join(run_dir, "diagnostics.csv")):
        metric = row["metric"]
        if metric in PANELS or metric.startswith("dormant_tau"):
            values[row["network"], metric][row["layer"], int(row[kind.step])].append(
                float(row["value"]))
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
