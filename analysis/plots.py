"""PNG figures of a Summary: interval estimates, sample-efficiency curves, performance
profiles and probability of improvement (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from analysis.report import FIGURES  # noqa: E402
from analysis.summary import METRICS, Summary  # noqa: E402


def _colors(labels: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _steps(value: float, _position: int) -> str:
    """Env-step tick label: 0, 250k, 1M, 1.5M."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value / 1e3:g}k" if value else "0"


def _score_label(summary: Summary) -> str:
    s = summary.settings
    return f"Normalised score (return / {s.max_return:g})" if s.normalize else "Return"


def plot_intervals(summary: Summary, path: Path) -> None:
    """One panel per metric; per algorithm the point estimate and its interval."""
    labels = list(summary.scores)
    colors = _colors(labels)
    fig, axes = plt.subplots(1, len(METRICS), figsize=(3.6 * len(METRICS),
                                                        1.2 + 0.5 * len(labels)), sharey=True)
    for ax, metric in zip(axes, METRICS, strict=True):
        rows = {r["algorithm"]: r for r in summary.aggregates if r["metric"] == metric}
        for y, label in enumerate(labels):
            r = rows[label]
            ax.plot([r["lower"], r["upper"]], [y, y], color=colors[label], lw=8, alpha=0.6,
                    solid_capstyle="butt")
            ax.plot([r["estimate"]], [y], "|", color="black", ms=14, mew=2)
        ax.set_title(metric + (" (lower is better)" if metric == "Optimality gap" else ""))
        ax.set_xlabel(_score_label(summary))
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(labels)), labels)
    axes[0].set_ylim(-0.7, len(labels) - 0.3)
    s = summary.settings
    fig.suptitle(f"Env step {s.step:,}: {len(summary.tasks)} tasks, {100 * s.confidence:g}% "
                 "stratified-bootstrap intervals")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _line_with_band(ax, rows: list[dict], x: str, y: str, color, label: str) -> None:
    """Rows' `y` against `x` as a line, their [lower, upper] interval as a band around it."""
    if not rows:
        return
    xs = [r[x] for r in rows]
    ax.plot(xs, [r[y] for r in rows], color=color, label=label, lw=2)
    ax.fill_between(xs, [r["lower"] for r in rows], [r["upper"] for r in rows], color=color,
                    alpha=0.2)


def plot_curves(summary: Summary, path: Path) -> None:
    """IQM against env step with the interval as a band, one line per algorithm."""
    labels = list(summary.scores)
    colors = _colors(labels)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in labels:
        rows = [r for r in summary.curves if r["algorithm"] == label]
        _line_with_band(ax, rows, "env_step", "iqm", colors[label], label)
    ax.xaxis.set_major_formatter(FuncFormatter(_steps))
    ax.set_xlabel("Environment steps")
    ax.set_ylabel(f"IQM {_score_label(summary).lower()}")
    ax.set_title(f"Sample efficiency: IQM over {len(summary.tasks)} tasks, "
                 f"{100 * summary.settings.confidence:g}% intervals")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_profiles(summary: Summary, path: Path) -> None:
    """Fraction of runs scoring above tau, with its interval band, one line per algorithm."""
    labels = list(summary.scores)
    colors = _colors(labels)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in labels:
        rows = [r for r in summary.profiles if r["algorithm"] == label]
        _line_with_band(ax, rows, "tau", "fraction", colors[label], label)
    ax.set_xlabel(f"{_score_label(summary)} threshold τ")
    ax.set_ylabel("Fraction of runs with score > τ")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Performance profiles at env step {summary.settings.step:,}")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_improvement(summary: Summary, path: Path) -> None:
    """P(X > Y) with its interval for every pair of algorithms."""
    rows = summary.improvement
    colors = _colors(list(summary.scores))
    fig, ax = plt.subplots(figsize=(7, 1.4 + 0.5 * len(rows)))
    for y, r in enumerate(rows):
        ax.plot([r["lower"], r["upper"]], [y, y], color=colors[r["x"]], lw=8, alpha=0.6,
                solid_capstyle="butt")
        ax.plot([r["probability"]], [y], "|", color="black", ms=14, mew=2)
    ax.axvline(0.5, color="grey", ls="--", lw=1)
    ax.set_yticks(range(len(rows)), [f"{r['x']}  >  {r['y']}" for r in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("P(X > Y): probability that a run of X beats a run of Y on a task")
    ax.set_title(f"Probability of improvement at env step {summary.settings.step:,}")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_plots(summary: Summary, out: Path) -> list[Path]:
    """All figures as PNGs under `out` -> the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    figures = {"interval_estimates.png": plot_intervals,
               "performance_profiles.png": plot_profiles}
    if summary.curves:
        figures["sample_efficiency.png"] = plot_curves
    if summary.improvement:
        figures["probability_of_improvement.png"] = plot_improvement
    assert set(figures) <= set(FIGURES), "analysis.report.FIGURES lists every figure"
    for name, plot in figures.items():
        plot(summary, out / name)
    return [out / name for name in figures]
