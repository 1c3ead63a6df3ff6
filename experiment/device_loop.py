"""The training loop with the replay buffer on the device (--replay_on_device).

Per env step the host sends the step's next observations, rewards and terminations (and, at an
episode's start, its first observations) and receives the actions with one flag; the
minibatches are drawn and gathered inside the compiled update (`replay.device`). As in
`Trainer.step_and_update`, the update is dispatched before the env step whenever none of its
slots is the one that step's insert writes, so it computes while the envs step; the flag, drawn
with the previous step's actions, says which.
"""

import jax
import jax.numpy as jnp

from experiment.loop_checkpoint import Loop
from experiment.train import Trainer
from replay import device as device_replay


class DeviceReplayTrainer(Trainer):
    """`Trainer` with a `DeviceReplayBuffer` and an update that samples it on the device."""

    def __init__(self, agent, cfg, plan=None):
        super().__init__(agent, cfg, plan)
        batch, utd = cfg.batch_size, cfg.utd

        def update_step(states, replay, slots, keys, metric_sums):
            batches = device_replay.gather(replay, slots)
            states, metrics = self.update_seeds(states, batches)
            keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
            return states, keys, jax.tree.map(jnp.add, metric_sums, metrics)

        def act_and_draw(states, obs, keys, replay):
            act_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys)
            actions = jax.vmap(agent.act, in_axes=(0, 0, 0, None))(states, obs, act_keys, False)
            slots = device_replay.draw(replay, batch, utd, ahead=True)
            return actions, slots, (slots == replay.pointer).any()

        def draw(replay):
            slots = device_replay.draw(replay, batch, utd, ahead=True)
            return slots, (slots == replay.pointer).any()

        self.device_update = jax.jit(update_step, donate_argnums=(0, 4))
        self.act_and_draw = jax.jit(act_and_draw)
        self.draw = jax.jit(draw)
        self.drawn = None  # (buffer changes, slots, written) for the next update

    def make_buffer(self) -> device_replay.DeviceReplayBuffer:
        return device_replay.DeviceReplayBuffer(self.cfg.num_seeds, self.cfg.buffer_capacity,
                                                self.obs_dim, self.act_dim, self.cfg.seeds)

    def start(self) -> Loop:
        self.drawn = None
        return super().start()

    def step_and_update(self, loop: Loop) -> bool:
        """One env step, then, once past the random phase, the UTD update of every seed on
        minibatches drawn on the device from the buffer that holds the step's transition, and
        the next actions (as `Trainer.step_and_update`)."""
        cfg = self.cfg
        if loop.env_step + 1 < cfg.start_steps:  # the next step's actions are random too
            ended = self.env_step(loop)
            loop.actions = self._random_actions()
            return ended
        if self.drawn is None or self.drawn[0] != self.buffer.changes:
            slots, written = self.draw(self.buffer.replay)
            self.drawn = (self.buffer.changes, slots, bool(written))
        _, slots, written = self.drawn
        self.drawn = None
        early = self.update_during_env_step and not written
        if early:
            self.update_on_device(loop, slots)
        ended = self.env_step(loop)
        if not early:
            self.update_on_device(loop, slots)
        actions, slots, written = self.act_and_draw(
            loop.states, self.buffer.to_device(loop.obs), loop.keys, self.buffer.replay)
        host_actions, written = jax.device_get((actions, written))
        self.drawn = (self.buffer.changes, slots, bool(written))
        self.take_actions(loop, host_actions)
        self.buffer.remember(loop.actions, actions)
        return ended

    def update_on_device(self, loop: Loop, slots: jax.Array) -> None:
        """Dispatch the UTD update of every seed on the minibatches at `slots`."""
        loop.states, loop.keys, loop.metric_sums = self.device_update(
            loop.states, self.buffer.replay, slots, loop.keys, loop.metric_sums)
        loop.metric_count += 1
