"""Train BRO on a DeepMind Control task.

    python launch/run_bro.py --env=dog-run                       # BRO with its resets
    python launch/run_bro.py --env=dog-run --intervention=clip   # SingularClip at those steps
    python launch/run_bro.py --env=dog-run --utd=2               # BRO Fast: one reset, at 15001

Unless --intervention_steps or --intervention_every is given, interventions fire at BRO's reset
steps for this --max_steps and --utd. Prints each network's parameter count at start; results go
to <logdir>/bro/<env>/<run_name>/ as for run_sac.py.
"""

import sys

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags

from agents import bro, bro_state
from envs import make_env
from experiment import cli, runner
from experiment.cli import define_dataclass_flags, define_flags
from experiment.config import BRO_DEFAULTS

_DEFAULT = bro_state.BROConfig()
_HELP = {
    "critic_width": "Width of each critic BroNet.",
    "critic_depth": "Residual blocks of each critic BroNet.",
    "num_quantiles": "Quantiles each critic predicts.",
    "kappa": "Threshold of the quantile Huber loss.",
    "actor_width": "Width of the conservative actor's BroNet.",
    "actor_depth": "Residual blocks of the conservative actor.",
    "optimistic_width": "Width of the optimistic actor's BroNet.",
    "optimistic_depth": "Residual blocks of the optimistic actor.",
    "std_multiplier": "Optimistic std = std_multiplier * conservative std.",
    "shift_init_scale": "Orthogonal init scale of the optimistic actor's shift head.",
    "init_scale": "Orthogonal init scale of every other kernel but the actor's log-std head "
                  "(scale 1, as in BRO's reference).",
    "actor_lr": "AdamW learning rate of the conservative actor.",
    "optimistic_lr": "AdamW learning rate of the optimistic actor.",
    "critic_lr": "AdamW learning rate of the critics.",
    "weight_decay": "AdamW weight decay of actors and critics.",
    "temp_lr": "Adam learning rate of the temperature.",
    "temp_b1": "Adam b1 of the temperature.",
    "scalar_lr": "Adam learning rate of the optimism and KL-weight scalars.",
    "scalar_b1": "Adam b1 of the optimism and KL-weight scalars.",
    "init_optimism": "Initial optimism beta_opt.",
    "init_kl_weight": "Initial KL weight lambda_KL.",
    "target_kl": "Target KL(optimistic || conservative) per action dimension.",
    "pessimism": "beta_pess of the critic target and the conservative actor (0: mean of critics).",
    **cli.SAC_FAMILY_HELP,
    "scalar_log_min": "beta_opt and lambda_KL stay above e^scalar_log_min.",
    "scalar_log_max": "beta_opt and lambda_KL stay below e^scalar_log_max.",
    "flax_layers": cli.FLAX_LAYERS_HELP,
}

define_flags(BRO_DEFAULTS)
flags.adopt_module_key_flags(cli)  # the shared flags show in --help
define_dataclass_flags(_DEFAULT, _HELP)


def agent_config() -> bro_state.BROConfig:
    """The BROConfig of the flags; prints each network's parameter count for this env."""
    f = flags.FLAGS
    try:
        config = bro_state.BROConfig(**{name: f[name].value for name in _HELP},
                                     batch_size=f.batch_size)
    except ValueError as e:
        raise runner.ConfigError(f"--{e}") from None
    env = make_env(f.env, f.seed, f.action_repeat)
    counts = bro.param_counts(env.obs_dim, env.act_dim, config)
    print(f"parameters (obs {env.obs_dim}, act {env.act_dim}): "
          + ", ".join(f"{name} {n:,}" for name, n in counts.items()), file=sys.stderr)
    return config


def main(argv):
    runner.main(argv, "bro", agent_config)


if __name__ == "__main__":
    app.run(main, flags_parser=runner.parse_flags)
