"""Figures of one run, without a dashboard: the learning curve of each seed with the intervention
steps marked, and the spectral diagnostics over time, as PNG files.

    python launch/plot_run.py runs/sac/cheetah-run/clip-utd1-seed0
    python launch/plot_run.py runs/sac/cheetah-run/clip-utd1-seed0 --out=figures

Writes learning_curve.png (eval.csv, with interventions.csv's steps as vertical lines) and
diagnostics_<network>.png per network (diagnostics.csv: condition number, stable rank, srank
and each dormant ratio, one line per layer, the mean over the run's seeds) to --out (default:
<run_dir>/plots). Exit codes: 0 written, 2 no run directory or nothing to plot (one line).
"""

import csv
import os
import sys
from collections import defaultdict

from launch import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
import matplotlib
from absl import app, flags

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from launch.cli import one_line_flag_parser

flags.DEFINE_string("out", "", "Folder for the PNG files (default: <run_dir>/plots).")
FLAGS = flags.FLAGS

# diagnostics.csv's metrics drawn, in panel order; each dormant_tau<tau> metric gets a panel too.
PANELS = {"cond": "condition number (log scale)", "stable_rank": "stable rank",
          "srank": "srank (features)"}
RUN_DIR = "<logdir>/<agent>/<env>/<run_name>"


class PlotError(ValueError):
    """Nothing to plot; the message is one line for the user."""


def read_rows(path: str) -> list[dict[str, str]]:
    """A CSV file's rows ([] when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def learning_curve(run_dir: str, out: str) -> str:
    """learning_curve.png: the eval return of each seed and their mean against env steps, a
    dashed line at each intervention step."""
    rows = read_rows(os.path.join(run_dir, "eval.csv"))
    if not rows:
        raise PlotError(f"{run_dir}/eval.csv has no evaluation yet (the first comes at "
                        "--eval_every env steps)")
    by_seed = defaultdict(list)
    for row in rows:
        by_seed[int(row["seed"])].append((int(row["env_step"]), float(row["return"])))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for seed, points in sorted(by_seed.items()):
        steps, returns = zip(*points, strict=True)
        ax.plot(steps, returns, lw=1.2, alpha=0.8, label=f"seed {seed}")
    if len(by_seed) > 1:
        means = defaultdict(list)
        for points in by_seed.values():
            for step, value in points:
                means[step].append(value)
        steps = sorted(s for s in means if len(means[s]) == len(by_seed))
        ax.plot(steps, [sum(means[s]) / len(means[s]) for s in steps], color="black", lw=2,
                label="mean")
    mark_interventions(ax, run_dir)
    ax.set_xlabel("env step")
    ax.set_ylabel("eval return")
    ax.set_title(_title(run_dir))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2 if len(by_seed) > 6 else 1)
    return _save(fig, os.path.join(out, "learning_curve.png"))


def mark_interventions(ax, run_dir: str, labels: bool = True) -> None:
    """A dashed vertical line at each intervention step of interventions.csv, a color per kind."""
    events = defaultdict(set)
    for row in read_rows(os.path.join(run_dir, "interventions.csv")):
        events[row["kind"]].add(int(row["env_step"]))
    for i, (kind, steps) in enumerate(sorted(events.items())):
        for j, step in enumerate(sorted(steps)):
            label = f"{kind} ({len(steps)})" if labels and j == 0 else None
            ax.axvline(step, color=f"C{7 + i}", ls="--", lw=1, label=label)


def diagnostics(run_dir: str, out: str) -> list[str]:
    """diagnostics_<network>.png per network: a panel per metric, a line per layer (the mean
    over seeds at each evaluation), the intervention steps marked."""
    values = defaultdict(lambda: defaultdict(list))  # (network, metric) -> layer -> values
    for row in read_rows(os.path.join(run_dir, "diagnostics.csv")):
        metric = row["metric"]
        if metric in PANELS or metric.startswith("dormant_tau"):
            values[row["network"], metric][row["layer"], int(row["env_step"])].append(
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
            mark_interventions(ax, run_dir, labels=False)
            if metric == "cond":
                ax.set_yscale("log")
            label = PANELS.get(metric) or f"dormant ratio, tau {metric.removeprefix('dormant_tau')}"
            ax.set_ylabel(label, fontsize=8)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, ncol=2, loc="best")
        axes[-1, 0].set_xlabel("env step")
        fig.suptitle(f"{_title(run_dir)}: {network}")
        written.append(_save(fig, os.path.join(out, f"diagnostics_{network}.png")))
    return written


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
    if not os.path.exists(os.path.join(run_dir, "eval.csv")):
        raise PlotError(f"{run_dir} holds no eval.csv; give a run directory ({RUN_DIR})")
    out = out or os.path.join(run_dir, "plots")
    os.makedirs(out, exist_ok=True)
    return [learning_curve(run_dir, out), *diagnostics(run_dir, out)]


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        print(f"plot_run: give one run directory ({RUN_DIR}), e.g. python launch/plot_run.py "
              f"runs/sac/cheetah-run/none-utd1-seed0; got {len(argv) - 1} arguments",
              file=sys.stderr)
        sys.exit(2)
    try:
        written = plot_run(argv[1], FLAGS.out)
    except (PlotError, OSError) as e:
        print(f"plot_run: {e}", file=sys.stderr)
        sys.exit(2)
    if len(written) == 1:
        print(f"plot_run: {argv[1]}/diagnostics.csv holds no spectral diagnostics "
              "(--diagnostics=false?): the learning curve only", file=sys.stderr)
    print("\n".join(written))


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser("plot_run: "))
