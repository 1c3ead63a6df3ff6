"""Figures of one run, without a dashboard: the learning curve of each seed with the intervention
steps marked, and the spectral diagnostics over time, as PNG files.

    python launch/plot_run.py runs/sac/cheetah-run/clip-utd1-seed0
    python launch/plot_run.py runs/sac/cheetah-run/clip-utd1-seed0 --out=figures
    python launch/plot_run.py runs/continual/random_label_digits/clip-seed0

Writes learning_curve.png (an RL run's eval.csv against env steps, or a continual run's online
accuracy from tasks.csv against tasks; interventions.csv's steps as vertical lines, where an
event kind has no more than 30) and diagnostics_<network>.png per network (diagnostics.csv:
condition number, stable rank, srank and each dormant ratio, one line per layer, the mean over
the run's seeds) to --out (default: <run_dir>/plots). Exit codes: 0 written, 2 no run directory
or nothing to plot (one line).
"""

import sys
import warnings

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags

from analysis.run_figures import RUN_DIR, PlotError, PlotWarning, plot_run
from experiment.cli import one_line_flag_parser

flags.DEFINE_string("out", "", "Folder for the PNG files (default: <run_dir>/plots).")
FLAGS = flags.FLAGS


def one_line_warnings() -> list[str]:
    """Show each PlotWarning once, as one `warning:` line on stderr (mark_interventions reads
    interventions.csv for every panel); other warnings as Python shows them."""
    shown = []
    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, PlotWarning):
            default(message, category, filename, lineno, file, line)
        elif str(message) not in shown:
            shown.append(str(message))
            print(f"warning: {message}", file=sys.stderr)

    warnings.showwarning = show
    warnings.simplefilter("always", PlotWarning)
    return shown


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        print(f"error: give one run directory ({RUN_DIR}), e.g. python launch/plot_run.py "
              f"runs/sac/cheetah-run/none-utd1-seed0; got {len(argv) - 1} arguments",
              file=sys.stderr)
        sys.exit(2)
    one_line_warnings()
    try:
        written = plot_run(argv[1], FLAGS.out)
    except (PlotError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if len(written) == 1:
        print(f"plot_run: {argv[1]}/diagnostics.csv holds no spectral diagnostics "
              "(--diagnostics=false?): the learning curve only", file=sys.stderr)
    print("\n".join(written))


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser())
