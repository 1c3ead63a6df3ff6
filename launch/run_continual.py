"""Train on a continual supervised benchmark (algorithms.md, "Continual supervised benchmarks").

    python launch/run_continual.py --task=random_label_mnist --intervention=clip --num_seeds=10

Tasks: permuted_mnist, random_label_mnist, random_label_cifar, random_label_imagenet,
continual_imagenet (data from --data_dir, docs/continual.md), and permuted_digits,
random_label_digits (scikit-learn's bundled digits, no download). Results go to
<logdir>/continual/<task>/<run_name>/ (config.json, tasks.csv, diagnostics.csv,
interventions.csv, checkpoints/, done.json once finished, .lock while a process trains it), and
to TensorBoard or wandb with --log_to (docs/logging.md).
Exit codes as run_sac.py's: 0 finished, 2 bad input (one line), 1 training failed, 75 the run
directory is in use, 130 Ctrl-C, 143 stopped by SIGTERM after a checkpoint at a task boundary.
"""

import os
import signal
import sys

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
import jax
from absl import app, flags, logging

from continual import config as continual_config
from continual.data import DataError
from continual.entry import prepare, train
from continual.loop import Diverged, Stopped
from experiment import cli as launch_cli
from experiment import ctrl_c
from experiment.cli import one_line_flag_parser
from experiment.config import ConfigError, dashboards_warning
from experiment.dashboards import DashboardError, check_installed
from experiment.rundir.lock import (
    EXIT_IN_USE,
    EXIT_STOPPED,
    RunDirInUse,
    check_not_in_use,
)
from experiment.rundir.record import CannotResume
from experiment.runner import check_writable

continual_config.define_flags()
flags.adopt_module_key_flags(continual_config)  # its flags and the methods' show in --help
flags.adopt_module_key_flags(launch_cli)


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def _interrupted(message: str, code: int) -> None:
    """Exit at once with one line (Python's shutdown under XLA's compiler threads can crash)."""
    print(f"error: {message}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> None:
    logging.set_verbosity(logging.WARNING)
    try:
        ctrl_c.deliver()
        with ctrl_c.as_interrupt():
            _main(argv)
    except KeyboardInterrupt:
        _interrupted("interrupted before training started", 130)


def _main(argv: list[str]) -> None:
    if len(argv) > 1:
        _fail(f"unexpected arguments {argv[1:]}; every setting is a --flag (see --help)", 2)
    f = flags.FLAGS
    try:
        cfg = continual_config.config_from_flags()
        check_installed(cfg)
        prepared = prepare(cfg)
        run, state = prepared.run, prepared.state
        if f.dry_run:
            check_not_in_use(cfg.run_dir)
            if run.data_line:
                print(run.data_line, file=sys.stderr)
            print(f"settings checked; {cfg.run_dir} "
                  + {"fresh": "would be trained", "resume": "would resume from its last "
                     "checkpoint", "done": "has finished: nothing to do"}[state]
                  + " (--dry_run: nothing done)")
            return
        if state == "done":
            print(f"{cfg.run_dir} has already finished; nothing to do", file=sys.stderr)
            return
        check_writable(cfg.run_dir)
        check_not_in_use(cfg.run_dir)
    except (ConfigError, DataError) as e:
        _fail(str(e), 2)
    except RunDirInUse as e:
        _fail(str(e), EXIT_IN_USE)
    given = {name for name in f if f[name].present}
    for warning in (continual_config.unused_flags_warning(cfg, given),
                    dashboards_warning(cfg, given)):
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    if run.data_line:
        print(run.data_line, file=sys.stderr)
    print(f"continual {cfg.task}: seeds {cfg.seeds}, {cfg.num_tasks} tasks of "
          f"{run.protocol.steps} steps, intervention {cfg.intervention} -> {cfg.run_dir}",
          file=sys.stderr, flush=True)

    def stop_at_boundary(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        run.stop_requested = True
        os.write(2, b"\nSIGTERM: stopping at the next task boundary, after a checkpoint there\n")

    signal.signal(signal.SIGTERM, stop_at_boundary)
    try:
        with ctrl_c.as_interrupt():
            train(cfg, prepared)
    except RunDirInUse as e:  # a second launch that started between the check and the lock
        _fail(str(e), EXIT_IN_USE)
    except Diverged as e:
        _fail(f"training diverged: {e}; diverged.json in {cfg.run_dir} says where", 1)
    except CannotResume as e:
        _fail(f"cannot resume: {e}", 1)
    except DashboardError as e:
        _fail(str(e), 1)
    except Stopped as e:
        _interrupted(f"stopped by SIGTERM after task {e.tasks_done - 1}, after a checkpoint "
                     f"there; the same command resumes {cfg.run_dir} from it", EXIT_STOPPED)
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e) and "Out of memory" not in str(e):
            raise
        _fail(f"out of memory ({str(e).splitlines()[0]}); lower --num_seeds or --batch_size", 1)
    except KeyboardInterrupt:
        _interrupted(f"interrupted; the same command resumes {cfg.run_dir} from its last "
                     f"checkpoint (every {cfg.checkpoint_every} tasks)", 130)


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser())
