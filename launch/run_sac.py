"""Train SAC on a DeepMind Control task.

    python launch/run_sac.py --env=humanoid-stand --utd=8 --intervention=clip

Results go to <logdir>/sac/<env>/<run_name>/ (config.json, eval.csv, train.csv,
diagnostics.csv, interventions.csv, <seed>.txt, checkpoints/, done.json once finished or
diverged.json when training diverged, loss_warnings.json when a loss passed 1e10, and .lock,
held while a process trains the run).
"""

import dataclasses

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags

from agents import sac
from agents.common import check_size
from experiment import cli, runner
from experiment.cli import define_dataclass_flags, define_flags
from experiment.config import SAC_DEFAULTS

_DEFAULT = sac.SACConfig()
_HELP = {  # SACConfig's fields with a flag of their own (hidden_dims: --hidden_dim, --num_layers)
    "layer_norm": "LayerNorm after each hidden Dense.",
    "init_scale": "Orthogonal init scale of every kernel.",
    "num_critics": "Critics in the ensemble (min target).",
    "actor_lr": "Adam learning rate of the actor.",
    "critic_lr": "Adam learning rate of the critics.",
    "temp_lr": "Adam learning rate of the temperature.",
    **cli.SAC_FAMILY_HELP,
    "flax_layers": cli.FLAX_LAYERS_HELP,
}

define_flags(SAC_DEFAULTS)
flags.adopt_module_key_flags(cli)  # the shared flags show in --help
flags.DEFINE_integer("hidden_dim", _DEFAULT.hidden_dims[0], "Width of each hidden layer.")
flags.DEFINE_integer("num_layers", len(_DEFAULT.hidden_dims), "Hidden layers of actor and critic.")
define_dataclass_flags(_DEFAULT, _HELP)


def agent_config() -> sac.SACConfig:
    f = flags.FLAGS
    if f.hidden_dim <= 0 or f.num_layers <= 0:
        raise runner.ConfigError(f"--hidden_dim and --num_layers must be positive, got "
                                 f"{f.hidden_dim} and {f.num_layers}")
    try:
        check_size("hidden_dim", f.hidden_dim)  # before hidden_dims, which names no flag
        return _config(f)
    except ValueError as e:
        raise runner.ConfigError(f"--{e}") from None


def _config(f) -> sac.SACConfig:
    return dataclasses.replace(_DEFAULT, hidden_dims=(f.hidden_dim,) * f.num_layers,
                               batch_size=f.batch_size, **{name: f[name].value for name in _HELP})


def main(argv):
    runner.main(argv, "sac", agent_config)


if __name__ == "__main__":
    app.run(main, flags_parser=runner.parse_flags)
