"""Train on a continual supervised benchmark (algorithms.md, "Continual supervised benchmarks").

    python launch/run_continual.py --task=random_label_mnist --intervention=clip --num_seeds=10

Tasks: permuted_mnist, random_label_mnist, random_label_cifar, random_label_imagenet,
continual_imagenet (data from --data_dir, docs/continual.md), and permuted_digits,
random_label_digits (scikit-learn's bundled digits, no download). Results go to
<logdir>/continual/<task>/<run_name>/ (config.json, tasks.csv, diagnostics.csv,
interventions.csv, checkpoints/, done.json once finished, .lock while a process trains it), and
to TensorBoard or wandb with --log_to (docs/logging.md).
Exit codes as run_sac.py's (experiment.protocol): 0 finished, 2 bad input (one line), 1 training
failed, 75 the run directory is in use, 130 Ctrl-C, 143 stopped by SIGTERM after a checkpoint at
a task boundary.
"""

import sys

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags

from continual import config as continual_config
from continual import entry
from continual.data import DataError
from experiment import cli as launch_cli
from experiment import protocol
from experiment.cli import one_line_flag_parser
from experiment.dashboards import check_installed
from experiment.rundir.lock import check_not_in_use
from experiment.setting_warnings import dashboards_warning

continual_config.define_flags()
flags.adopt_module_key_flags(continual_config)  # its flags and the methods' show in --help
flags.adopt_module_key_flags(launch_cli)

def main() -> None:
    f = flags.FLAGS
    with protocol.checks((DataError,)):
        cfg = continual_config.config_from_flags()
        check_installed(cfg)
        prepared = entry.prepare(cfg)
        if f.dry_run:
            check_not_in_use(cfg.run_dir)
            if prepared.run.data_line:
                print(prepared.run.data_line, file=sys.stderr)
            print(protocol.dry_run_line(cfg.run_dir, prepared.state))
            return
        taken = entry.take(cfg, prepared)
    if taken[1] == "done":
        print(protocol.finished_line(cfg.run_dir), file=sys.stderr)
        return
    given = {name for name in f if f[name].present}
    for warning in (continual_config.unused_flags_warning(cfg, given),
                    dashboards_warning(cfg, given)):
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    run = prepared.run
    if run.data_line:
        print(run.data_line, file=sys.stderr)
    banner = (f"continual {cfg.task}: seeds {cfg.seeds}, {cfg.num_tasks} tasks of "
              f"{run.protocol.steps} steps, intervention {cfg.intervention} -> {cfg.run_dir}")
    protocol.train(cfg, entry.KIND, banner, lambda stop: entry.train(cfg, prepared, stop, taken))


if __name__ == "__main__":
    app.run(protocol.script_main(main), flags_parser=one_line_flag_parser())
