"""The condition number of each layer over the tasks of continual runs (the paper's Random Label
CIFAR analysis), from their diagnostics.csv.

    python launch/condition_numbers.py --runs=runs/continual/random_label_cifar \\
        --out=aggregate/condition_numbers

One panel per weight matrix (Conv_0, ..., MLP_0/Dense_0, Dense_0), one line per method (runs
grouped as launch/aggregate_continual.py groups them): the mean over seeds of sigma_max /
sigma_min at the end of each task, with the range over seeds shaded, on a log scale
(condition_numbers.png); the values in condition_numbers.csv. --metric picks another of
diagnostics.csv's weight metrics (stable_rank, sigma_max, sigma_min, fro).
"""

import csv
import json
import os
import sys
from pathlib import Path

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
import numpy as np
from absl import app, flags

from analysis.continual import find_runs, label_of, line_style
from analysis.errors import AggregationError
from experiment.cli import one_line_flag_parser

FLAGS = flags.FLAGS
flags.DEFINE_list("runs", [], "Continual run directories, or folders holding them.")
flags.DEFINE_string("metric", "cond", "The diagnostics.csv weight metric to plot.")
flags.DEFINE_string("network", "net", "The network whose layers are plotted.")
flags.DEFINE_string("out", "condition_numbers", "Output directory.")


def read(folder: str, metric: str, network: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{layer: (tasks, values (seeds, tasks))} of one run's diagnostics.csv rows of `metric`."""
    values: dict[str, dict[tuple[int, int], float]] = {}
    with open(os.path.join(folder, "diagnostics.csv"), newline="") as f:
        for r in csv.DictReader(f):
            if r["metric"] == metric and r["network"] == network:
                values.setdefault(r["layer"], {})[int(r["seed"]), int(r["task"])] = \
                    float(r["value"])
    out = {}
    for layer, cells in values.items():
        seeds = sorted({s for s, _ in cells})
        tasks = sorted({t for _, t in cells})
        out[layer] = (np.array(tasks),
                      np.array([[cells.get((s, t), np.nan) for t in tasks] for s in seeds]))
    return out


def run() -> None:
    if not FLAGS.runs:
        raise AggregationError("--runs is empty; give continual run directories or folders "
                               "holding them")
    series: dict[str, dict[str, list]] = {}
    for folder in find_runs(FLAGS.runs):
        if not os.path.exists(os.path.join(folder, "diagnostics.csv")):
            continue
        with open(os.path.join(folder, "config.json")) as f:
            label = label_of(json.load(f), ())
        for layer, values in read(folder, FLAGS.metric, FLAGS.network).items():
            series.setdefault(label, {}).setdefault(layer, []).append(values)
    layers = sorted({layer for by_layer in series.values() for layer in by_layer})
    if not layers:
        raise AggregationError(f"no diagnostics.csv rows of metric {FLAGS.metric!r} for network "
                               f"{FLAGS.network!r} under {', '.join(FLAGS.runs)}")
    out = Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(layers), figsize=(4 * len(layers), 3.4), squeeze=False)
    rows = []
    for i, (label, by_layer) in enumerate(sorted(series.items())):
        for ax, layer in zip(axes[0], layers, strict=True):
            if layer not in by_layer:
                continue
            tasks = by_layer[layer][0][0]
            done = min(v.shape[1] for _, v in by_layer[layer])
            values = np.concatenate([v[:, :done] for _, v in by_layer[layer]])
            mean = np.nanmean(values, axis=0)
            x = tasks[:done] + 1
            ax.plot(x, mean, **line_style(i), label=label)
            ax.fill_between(x, np.nanmin(values, axis=0), np.nanmax(values, axis=0),
                            color=line_style(i)["color"], alpha=0.2, lw=0)
            rows += [(label, layer, int(t), f"{m:.6g}", f"{lo:.6g}", f"{hi:.6g}")
                     for t, m, lo, hi in zip(tasks[:done], mean, np.nanmin(values, axis=0),
                                             np.nanmax(values, axis=0), strict=True)]
    for ax, layer in zip(axes[0], layers, strict=True):
        ax.set_title(layer)
        ax.set_xlabel("task")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(FLAGS.metric)
    axes[0][-1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    name = "condition_numbers" if FLAGS.metric == "cond" else FLAGS.metric
    fig.savefig(out / f"{name}.png", dpi=120)
    plt.close(fig)
    with open(out / f"{name}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "layer", "task", "mean", "min", "max"])
        writer.writerows(rows)
    print(f"{len(layers)} layers of {len(series)} method(s) written to {out}/{name}.png and "
          f"{name}.csv", file=sys.stderr)


def main(argv: list[str]) -> None:
    try:
        if len(argv) > 1:
            raise AggregationError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
        run()
    except AggregationError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser())
