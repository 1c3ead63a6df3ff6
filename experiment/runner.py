"""What run_sac.py and run_bro.py do after defining their flags: read them, check, build,
train (experiment.entry), with the exit codes and one-line errors of experiment.protocol."""

import sys
from collections.abc import Callable

from absl import flags

from envs import UnknownEnvError, check_env_name, make_env
from envs.envpool_backend import EnvBackendError
from experiment import entry, protocol
from experiment.cli import config_from_flags, one_line_flag_parser
from experiment.config import ConfigError, TrainConfig
from experiment.resources import TooLargeForMemory, check_fits
from experiment.rundir.claim import check_writable
from experiment.rundir.lock import check_not_in_use
from experiment.rundir.resume import checkpoint_dirs
from experiment.setting_warnings import (
    dashboards_warning,
    diagnostics_warning,
    early_warning,
    schedule_warning,
    seed_warning,
    unused_flags_warning,
)
from experiment.step_fns import seed_init
from experiment.train import UnevenEpisodes

__all__ = ["ConfigError", "main"]


parse_flags = one_line_flag_parser()


def _diverged(cfg: TrainConfig, e) -> str:
    """What a divergence leaves to resume from; one soon after a resume is named with its
    checkpoint (a damaged checkpoint would do that too)."""
    if e.resumed_from is not None:
        return (f"{e.env_step - e.resumed_from} env step(s) after resuming from the checkpoint "
                f"at env step {e.resumed_from} ({cfg.run_dir}/checkpoints/{e.resumed_from}), "
                "which is kept")
    if checkpoint_dirs(cfg.run_dir)[0]:
        return f"the last good checkpoint is kept in {cfg.run_dir}/checkpoints"
    return "no checkpoint was written before it"


RL = protocol.RunKind(
    boundary="episode end",
    checkpoints=lambda cfg: f"every {cfg.checkpoint_every:,} env steps, at an episode end",
    diverged=_diverged,
    out_of_memory=lambda cfg: (f"the networks' sizes and --num_seeds x --utd x --batch_size "
                               f"({cfg.num_seeds} x {cfg.utd} x {cfg.batch_size}) set what an "
                               "update holds: lower them"),
    host_memory=lambda cfg: (f"the replay buffer holds --buffer_capacity={cfg.buffer_capacity:,} "
                             f"transitions for each of --num_seeds={cfg.num_seeds} seed(s): "
                             "lower them or free memory"),
    failures=(UnevenEpisodes,),
)


def main(argv: list[str], agent_name: str, agent_config: Callable) -> None:
    """Read the flags, check, build the agent (`agent_config()`: its config from the flags)
    and train."""
    protocol.script_main(lambda: _main(agent_name, agent_config))(argv)


def _main(agent_name: str, agent_config: Callable) -> None:
    with protocol.checks((UnknownEnvError, EnvBackendError)):
        cfg = config_from_flags(agent_name)
        check_env_name(cfg.env)  # before an agent config that builds the env (BRO's)
        prepared = entry.prepare(cfg, agent_config())
        if flags.FLAGS.dry_run:
            _dry_run(cfg, prepared)
            return
        # Held until the process ends: a second launch of this run is refused, before it reads
        # or writes anything there, rather than racing this one over checkpoints and logs.
        taken = entry.take(cfg, prepared)
    if taken[1] == "done":
        kept = (" (--keep_final_buffer changes nothing here: a run keeps its replay buffer "
                "or not when it finishes)" if cfg.keep_final_buffer else "")
        print(protocol.finished_line(cfg.run_dir) + kept, file=sys.stderr)
        return
    _warn(cfg)
    banner = (f"{agent_name} on {cfg.env}: seeds {cfg.seeds}, utd {cfg.utd}, intervention "
              f"{cfg.intervention} -> {cfg.run_dir}")
    protocol.train(cfg, RL, banner, lambda stop: entry.train(cfg, prepared=prepared, stop=stop,
                                                             taken=taken))


def _dry_run(cfg: TrainConfig, prepared: entry.Prepared) -> None:
    """--dry_run: the checks a run makes before it trains, its run directory's included (in
    use by another process, holding a run of other settings, a --resume mode that forbids
    what is there, not writable), whether the agents' states fit this process's device and
    the whole run the host's memory (`check_fits`), and its warnings; it reads that directory
    and leaves nothing behind. Each failure exits as the run would."""
    check_not_in_use(cfg.run_dir)
    state = entry.state(cfg, prepared)
    if state != "done":  # a finished run is read only (it may be archived read-only)
        check_writable(cfg.run_dir, create=False)
    try:
        probe = make_env(cfg.env, cfg.seed, cfg.action_repeat)
        check_fits(*seed_init(prepared.agent, cfg.seeds, probe.obs_dim, probe.act_dim), cfg,
                   probe)
    except TooLargeForMemory as e:
        protocol.fail(protocol.too_large(e, cfg), 1)
    _warn(cfg)
    print(protocol.dry_run_line(cfg.run_dir, state))


def _warn(cfg: TrainConfig) -> None:
    """Settings that work but may not do what was meant: a line each on stderr."""
    given = [name for name in flags.FLAGS if flags.FLAGS[name].present]
    for warning in (schedule_warning(cfg, given), early_warning(cfg), seed_warning(cfg),
                    diagnostics_warning(cfg), unused_flags_warning(cfg, given),
                    dashboards_warning(cfg, given)):
        if warning is not None:
            print(f"warning: {warning}", file=sys.stderr)
