"""The RL training loop's state (Loop, what a checkpoint must hold) and Trainer's checkpoints
of it: `save` at an episode end or the run's last step, `restore` of the newest good one."""

import dataclasses
import sys
from typing import Any

import jax
import numpy as np

from experiment.rundir.files import read_loss_warnings
from experiment.rundir.record import CannotResume


@dataclasses.dataclass
class Loop:
    """Everything that changes while training (what a checkpoint must hold)."""

    env_step: int
    states: Any  # agent state pytree with a leading seed axis
    keys: jax.Array  # (seeds,) action-sampling keys
    obs: np.ndarray  # (seeds, obs_dim) current observations
    actions: np.ndarray  # (seeds, act_dim) actions for the next env step
    metric_sums: Any  # device pytree: metrics summed since the last train.csv row
    metric_count: int
    wall_time: float
    env_rng: dict  # train env RNG states before the last reset (so resume replays the reset)


class LoopCheckpoints:
    """`Trainer`'s checkpoints, through its `checkpointer`, of its loop, replay buffer, envs,
    log files and random-action generator."""

    def save(self, loop: Loop) -> None:
        """Checkpoint at an episode boundary (the envs were just reset from `loop.env_rng`), or
        at the run's last step, which no env step follows (its envs are not restored). That
        last one, the finished run's final checkpoint, leaves the replay buffer out unless
        `keep_final_buffer`: nothing trains on it, and it is most of the checkpoint."""
        self.check_divergence(loop)
        device = {"states": loop.states, "keys": loop.keys, "metric_sums": loop.metric_sums}
        buffer = self.buffer.state_dict()
        keep_buffer = loop.env_step < self.cfg.max_steps or self.cfg.keep_final_buffer
        host = {f"buffer/{k}": np.asarray(v) for k, v in buffer.items()
                if np.ndim(v) > 0 and keep_buffer}
        host.update({f"env_rng/{k}": np.asarray(v) for k, v in loop.env_rng.items()})
        host.update({f"eval_env_rng/{k}": np.asarray(v)
                     for k, v in self.eval_env.get_rng_state().items()})
        host.update(obs=loop.obs, actions=loop.actions)
        buffer_scalars = {k: int(v) for k, v in buffer.items() if np.ndim(v) == 0}
        meta = {
            "env_step": loop.env_step,
            "metric_count": loop.metric_count,
            "wall_time": loop.wall_time,
            "offsets": self.files.offsets(),
            "buffer_scalars": buffer_scalars,
            "random_actions": self.random_actions.bit_generator.state,
        }
        self.checkpointer.save(loop.env_step, device, host, meta)
        self.last_checkpoint = loop.env_step
        self.resumed_from = None

    def restore(self, template: Loop) -> Loop | None:
        """The loop of the newest good checkpoint, with buffer, envs and log files rewound."""
        device_template = {"states": template.states, "keys": template.keys,
                           "metric_sums": template.metric_sums}
        restored = self.checkpointer.restore_latest(device_template)
        if restored is None:
            return None
        device, host, meta = restored
        # The host arrays are read-only maps of the checkpoint's files: the buffer copies its
        # own into its arrays; the loop keeps copies of the rest, so no map outlives this.
        host = {k: v if k.startswith("buffer/") else np.array(v) for k, v in host.items()}

        def group(prefix):
            return {k[len(prefix):]: v for k, v in host.items() if k.startswith(prefix)}

        if group("buffer/"):  # a finished run's final checkpoint may hold none: see save
            try:
                self.buffer.load_state_dict({**group("buffer/"), **meta["buffer_scalars"]})
            except ValueError as e:
                raise CannotResume(f"the checkpoint's replay buffer does not fit this run: {e}") \
                    from None
        elif meta["env_step"] < self.cfg.max_steps:
            raise CannotResume(f"the checkpoint at env step {meta['env_step']} is a finished "
                               "run's final one, saved without its replay buffer "
                               "(--keep_final_buffer=false), so the run cannot train on from "
                               f"it to --max_steps={self.cfg.max_steps}")
        elif self.cfg.keep_final_buffer:
            print(f"warning: the final checkpoint at env step {meta['env_step']} was written "
                  "without its replay buffer, which --keep_final_buffer cannot bring back",
                  file=sys.stderr)
        self.env.set_rng_state(group("env_rng/"))
        obs = host["obs"]
        if meta["env_step"] < self.cfg.max_steps:  # the last one may be mid-episode: see save
            obs = self.env.reset()
            if not np.array_equal(obs, host["obs"]):
                raise CannotResume("the restored env does not reproduce the checkpoint's "
                                   "observation; the checkpoint does not belong to this env")
        self.eval_env.set_rng_state(group("eval_env_rng/"))
        self.random_actions.bit_generator.state = meta["random_actions"]
        self.files.truncate_to(meta["offsets"])
        self.last_checkpoint = meta["env_step"]
        self.loss_warnings = {name: first for name, first in read_loss_warnings(self.cfg.run_dir)
                              .items() if first.get("env_step", 0) <= meta["env_step"]}
        return Loop(
            env_step=meta["env_step"],
            states=device["states"],
            keys=device["keys"],
            obs=obs,
            actions=host["actions"],
            metric_sums=device["metric_sums"],
            metric_count=meta["metric_count"],
            wall_time=meta["wall_time"],
            env_rng=group("env_rng/"),
        )
