"""The training loop both agents share.

Host side: N seeded dm_control envs stepped in lockstep, the replay buffer, evaluation,
the intervention schedule, logging. Device side, per env step: one jitted call that runs the
whole UTD update for every seed (`vmap` over seeds of the agent's `lax.scan` update), taking
every seed's minibatches in one host->device transfer, and one that picks the next actions,
whose result is the one device->host transfer. The update is dispatched before the env step
whenever its minibatches do not need that step's transition, and computes while the envs step
(`Trainer.step_and_update`).
"""

import dataclasses
import os
import sys
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from agents import Agent
from envs import make_env, make_vector_env
from experiment import ctrl_c, dashboards, protocol
from experiment import diagnose as diag
from experiment.checkpoint import Checkpointer
from experiment.config import TrainConfig
from experiment.events import Intervention, build_intervention, intervention_plan, with_hooks
from experiment.protocol import StopRequest
from experiment.resources import check_fits
from experiment.rundir.files import LOSS_WARNINGS, RunFiles, read_loss_warnings
from experiment.rundir.record import CannotResume, config_record, with_earlier_versions, write_json
from learners.batch import Batch
from replay import ReplayBuffer


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


class Prefetched(NamedTuple):
    """A step's minibatches, drawn ahead (`Trainer.prefetch`)."""

    changes: int  # the buffer's `changes` when they were drawn: stale once it moves
    rng: np.random.Generator  # the copy of the buffer's generator they were drawn with
    slots: np.ndarray  # (seeds, utd, batch)
    batches: Batch | None  # gathered, or None where a slot is the one the next insert writes


class Diverged(protocol.Diverged):
    """NaN or inf in a loss, the parameters or the actions of `seed` at `env_step`."""

    def __init__(self, what: str, env_step: int, seed: int):
        super().__init__(f"{what} at env step {env_step} for seed {seed}")
        self.what, self.env_step, self.seed = what, env_step, seed
        self.resumed_from: int | None = None  # the checkpoint's env step, if none came since


class UnevenEpisodes(RuntimeError):
    """Some seeds' episodes ended (terminated early) while others went on."""


def seed_init(agent: Agent, seeds, obs_dim: int, act_dim: int):
    """The jitted, seed-vmapped `agent.init` and the seeds' keys it initialises them from:
    `jax.random.key(s)` of each seed s (below 2**32), made in one vectorised call."""
    keys = jax.vmap(jax.random.key)(np.asarray(seeds, dtype=np.uint32))
    return jax.jit(jax.vmap(lambda k: agent.init(k, obs_dim, act_dim))), keys


# A finite loss whose magnitude passes this is warned about and recorded: DMC's rewards are at
# most 1 per control step, so with the discount 0.99 a return is at most 100 x the action
# repeat, and a squared TD error at most (200 x the action repeat)**2, 4e4 at action repeat 1.
# A loss past 1e10 is far past any bound the tasks set: it grows without one.
LOSS_LIMIT = 1e10


def make_trainer(agent: Agent, cfg: TrainConfig) -> "Trainer":
    """The trainer `cfg` asks for: replay in host memory, or on the device
    (`experiment.device_loop.DeviceReplayTrainer`, imported only then)."""
    if cfg.replay_on_device:
        from experiment.device_loop import DeviceReplayTrainer

        return DeviceReplayTrainer(agent, cfg)
    return Trainer(agent, cfg)


class Stopped(protocol.Stopped):
    """The run stopped, as asked (`Trainer.stop`), at `env_step`: an episode end, where it
    wrote a checkpoint to resume from."""

    def __init__(self, env_step: int, returns: np.ndarray | None = None):
        super().__init__(f"stopped at env step {env_step}, after a checkpoint there")
        self.env_step, self.where = env_step, f"at env step {env_step}"
        self.returns = returns  # of the evaluation at that step, if one was due there


def to_batch(sample: dict[str, np.ndarray]) -> Batch:
    return Batch(**{field: sample[field] for field in Batch._fields})


def seeds_update(agent: Agent):
    """`agent.update` vmapped over seeds and jitted: the loop's update and `zero_metrics` call
    this one function, so JAX traces the update once between them."""
    return jax.jit(jax.vmap(agent.update))


def make_step_fns(agent: Agent, update_seeds):
    """Jitted, seed-vmapped functions of the loop: the update (the UTD gradient steps of every
    seed through `update_seeds`, `seeds_update(agent)`, summing their metrics), the next actions
    and the evaluation actions.

    The next env step's actions are drawn with a key derived from the loop's keys, which the
    update advances and `next_actions` leaves as they are: drawn again after an intervention,
    they use the same randomness, so an intervention that changes no weight (a clip with
    nothing outside [1/c, c]) changes nothing in the run."""

    def next_actions(states, obs, keys):
        act_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys)
        return jax.vmap(agent.act, in_axes=(0, 0, 0, None))(states, obs, act_keys, False)

    def update_step(states, batches, keys, metric_sums):
        states, metrics = update_seeds(states, batches)
        keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
        metric_sums = jax.tree.map(jnp.add, metric_sums, metrics)
        return states, keys, metric_sums

    def eval_act(states, obs):
        return jax.vmap(agent.act, in_axes=(0, 0, None, None))(states, obs, None, True)

    return (jax.jit(update_step, donate_argnums=(0, 3)), jax.jit(next_actions),
            jax.jit(eval_act))


def evaluate(eval_act, states, env, episodes: int) -> np.ndarray:
    """Mean undiscounted return over `episodes` deterministic episodes, per seed: (seeds,)."""
    totals = np.zeros(env.num_envs)
    for _ in range(episodes):
        obs, done = env.reset(), np.zeros(env.num_envs, bool)
        while not done.all():
            actions = np.asarray(eval_act(states, obs))
            obs, rewards, terminated, truncated = env.step(actions, active=~done)
            totals += np.where(done, 0.0, rewards)
            done |= terminated | truncated
    return totals / episodes


def zero_metrics(update_seeds, states, batch_shape: tuple[int, int, int], obs_dim: int, act_dim):
    """A zero pytree with the structure and shapes of the metrics of `update_seeds` (see
    `seeds_update`)."""
    seeds, utd, batch = batch_shape
    dummy = Batch(
        observations=jax.ShapeDtypeStruct((seeds, utd, batch, obs_dim), jnp.float32),
        actions=jax.ShapeDtypeStruct((seeds, utd, batch, act_dim), jnp.float32),
        rewards=jax.ShapeDtypeStruct((seeds, utd, batch), jnp.float32),
        next_observations=jax.ShapeDtypeStruct((seeds, utd, batch, obs_dim), jnp.float32),
        masks=jax.ShapeDtypeStruct((seeds, utd, batch), jnp.float32),
    )
    shapes = update_seeds.eval_shape(states, dummy)[1]
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


class Trainer:
    """Runs one `TrainConfig` for one agent; `run()` trains to `max_steps`."""

    def __init__(self, agent: Agent, cfg: TrainConfig):
        self.plan = intervention_plan(agent, cfg)
        agent = with_hooks(agent, self.plan)
        self.agent, self.cfg = agent, cfg
        seeds = cfg.seeds
        # Checked with one env of the task before the run's envs (two per seed) are built.
        probe = make_env(cfg.env, cfg.seed, cfg.action_repeat)
        self.init_fn, self.init_keys = seed_init(agent, seeds, probe.obs_dim, probe.act_dim)
        check_fits(self.init_fn, self.init_keys, cfg, probe)
        self.env = make_vector_env(cfg.env, seeds, cfg.action_repeat, cfg.env_backend)
        self.eval_env = make_vector_env(cfg.env, [s + cfg.eval_seed_offset for s in seeds],
                                        cfg.action_repeat, cfg.env_backend)
        self.obs_dim, self.act_dim = self.env.obs_dim, self.env.act_dim
        self.random_actions = np.random.default_rng([cfg.seed, 1])
        self.buffer = self.make_buffer()
        self.update_seeds = seeds_update(agent)
        self.update_step, self.next_actions, self.eval_act = make_step_fns(agent,
                                                                           self.update_seeds)
        self.update_during_env_step = True  # False: always after it (tests compare the two)
        self.prefetched: Prefetched | None = None
        self.intervention: Intervention = build_intervention(
            agent, cfg, self.plan, self.init_fn, self.init_keys, self.event_data
        )
        self.diagnose = diag.make_diagnostics(
            agent, cfg.dormant_taus, cfg.srank_threshold) if cfg.diagnostics else None
        self.record = config_record(cfg, agent.config)
        self.checkpointer = Checkpointer(os.path.join(cfg.run_dir, "checkpoints"))
        self.last_checkpoint = 0
        self.resumed_from: int | None = None  # the checkpoint resumed from, until the next one
        self.loss_warnings: dict = {}  # LOSS_WARNINGS's losses: {name: first crossing}
        self.stop = StopRequest()  # set (by a SIGTERM) to stop at the next episode end
        self.files = None
        self.check_finite = jax.jit(lambda tree: jax.tree.map(
            lambda x: jnp.isfinite(x).reshape(x.shape[0], -1).all(axis=1), tree))

    def event_data(self, env_step: int, batches: int, batch_size: int) -> Batch:
        """Replay minibatches (seeds, batches, batch_size, ...) for an intervention event, drawn
        with a generator of their own (from the seed and env step), so that the training
        minibatches are the same with and without the event's draw."""
        rng = np.random.default_rng([self.cfg.seed, 3, env_step])
        return to_batch(self.buffer.sample(batch_size, batches, rng=rng))

    def make_buffer(self) -> ReplayBuffer:
        return ReplayBuffer(self.cfg.num_seeds, self.cfg.buffer_capacity, self.obs_dim,
                            self.act_dim, seed=self.cfg.seed)

    def fresh_loop(self) -> Loop:
        states = self.init_fn(self.init_keys)
        env_rng = self.env.get_rng_state()
        keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(self.init_keys)
        shape = (self.cfg.num_seeds, self.cfg.utd, self.cfg.batch_size)
        obs = self.env.reset()
        if self.cfg.start_steps > 0:
            actions = self._random_actions()
        else:  # no random phase: the first action is the agent's too
            actions = self.next_actions(states, obs, keys)
        return Loop(
            env_step=0,
            states=states,
            keys=keys,
            obs=obs,
            actions=np.asarray(actions),
            metric_sums=zero_metrics(self.update_seeds, states, shape, self.obs_dim,
                                     self.act_dim),
            metric_count=0,
            wall_time=0.0,
            env_rng=env_rng,
        )

    def _random_actions(self) -> np.ndarray:
        shape = (self.cfg.num_seeds, self.act_dim)
        return self.random_actions.uniform(-1.0, 1.0, shape).astype(np.float32)

    def env_step(self, loop: Loop) -> bool:
        """Step the envs with `loop.actions`, store the transitions, reset ended episodes.

        Returns whether the episodes ended (a checkpoint may be written only there).
        """
        next_obs, rewards, terminated, truncated = self.env.step(loop.actions)
        self.buffer.insert(loop.obs, loop.actions, rewards, next_obs, terminated, truncated)
        ended = terminated | truncated
        if ended.any() and not ended.all():
            early = [s for s, e in zip(self.cfg.seeds, ended, strict=True) if e]
            raise UnevenEpisodes(f"the episodes of seeds {early} ended at env step "
                                 f"{loop.env_step + 1} before those of the others (an lqr task "
                                 "reaching its goal); the seeds of one process step in lockstep, "
                                 "so train such a task with --num_seeds=1")
        if ended.all():
            loop.env_rng = self.env.get_rng_state()
            loop.obs = self.env.reset()
        else:
            loop.obs = next_obs
        loop.env_step += 1
        return bool(ended.all())

    def step_and_update(self, loop: Loop) -> bool:
        """One env step (as `env_step`), then, once past the random phase, the UTD update of
        every seed on minibatches drawn from the buffer that holds the step's transition, and
        the next actions from the updated agent.

        The minibatches' slots are drawn before the env step, for the buffer as the step's
        insert leaves it (`ReplayBuffer.draw`). Where none of them is the slot that insert
        writes (all but a few steps, once the buffer holds many more transitions than a
        step's minibatches draw), the rows are the same gathered before the insert as after
        it, so the update is dispatched first and computes while the envs step. The next
        step's minibatches are then drawn and gathered while it computes (`prefetch`). The
        update is the same either way: this only moves the env step's and the sample's time
        into the update's (wholly on a GPU; on a CPU, whose cores the update keeps busy, in
        part)."""
        cfg = self.cfg
        if loop.env_step + 1 < cfg.start_steps:  # the next step's actions are random too
            ended = self.env_step(loop)
            loop.actions = self._random_actions()
            return ended
        slots, batches = self.next_minibatches()
        early = self.update_during_env_step and batches is not None
        if early:
            self.update(loop, batches)
        ended = self.env_step(loop)
        if not early:
            self.update(loop, to_batch(self.buffer.gather(slots)))
        self.prefetch()
        self.take_actions(loop, self.next_actions(loop.states, loop.obs, loop.keys))
        return ended

    def prefetch(self) -> None:
        """Draw the next step's minibatch slots and gather them (where none is the slot its
        insert writes), with a copy of the buffer's generator. The buffer's own takes that
        copy's state only when the next step uses them (`next_minibatches`): a checkpoint in
        between holds the generator as it was before the draw, so a run resumed from it draws
        the same slots."""
        rng = self.buffer.generator_copy()
        slots = self.buffer.draw(self.cfg.batch_size, self.cfg.utd, rng=rng, ahead=True)
        written = (slots == self.buffer.next_slot).any()
        batches = None if written else to_batch(self.buffer.gather(slots))
        self.prefetched = Prefetched(self.buffer.changes, rng, slots, batches)

    def next_minibatches(self) -> tuple[np.ndarray, Batch | None]:
        """This step's minibatch slots, drawn for the buffer as its insert leaves it, and the
        minibatches gathered before that insert (None where a slot is the one it writes): the
        prefetched ones, unless the buffer has changed since (or nothing was prefetched)."""
        if self.prefetched is None or self.prefetched.changes != self.buffer.changes:
            self.prefetch()
        prefetched, self.prefetched = self.prefetched, None
        self.buffer.adopt_generator(prefetched.rng)
        return prefetched.slots, prefetched.batches

    def update(self, loop: Loop, batches: Batch) -> None:
        """Dispatch the UTD update of every seed on `batches`."""
        loop.states, loop.keys, loop.metric_sums = self.update_step(
            loop.states, batches, loop.keys, loop.metric_sums)
        loop.metric_count += 1

    def take_actions(self, loop: Loop, actions: jax.Array) -> None:
        """The agent's actions for the next env step, copied to the host; NaN or inf ones
        (from diverged parameters) stop the run as a divergence."""
        loop.actions = np.asarray(actions)
        if not np.isfinite(loop.actions).all():
            self.check_divergence(loop)

    def log_train(self, loop: Loop) -> None:
        if loop.metric_count == 0:
            return
        means = self.metric_means(loop)
        self.files.write_train(loop.env_step, means)
        self.check_losses(loop.env_step, means)
        self.check_divergence(loop)
        loop.metric_sums = jax.tree.map(jnp.zeros_like, loop.metric_sums)
        loop.metric_count = 0

    def metric_means(self, loop: Loop) -> dict[str, np.ndarray]:
        sums = jax.device_get(loop.metric_sums)
        return {name: np.asarray(v) / max(loop.metric_count, 1) for name, v in sums.items()}

    def check_losses(self, env_step: int, means: dict[str, np.ndarray]) -> None:
        """Warn once per loss whose finite mean passes LOSS_LIMIT in magnitude (a loss that
        grows without bound: the run is most likely broken, though not yet NaN), and record
        its first crossing (env step, seed, value) in the run directory's LOSS_WARNINGS."""
        for name, values in sorted(means.items()):
            if not name.endswith("loss") or name in self.loss_warnings:
                continue
            past = np.flatnonzero(np.isfinite(values) & (np.abs(values) > LOSS_LIMIT))
            if not past.size:
                continue
            seed, value = self.cfg.seeds[past[0]], float(values[past[0]])
            self.loss_warnings[name] = {"env_step": env_step, "seed": seed, "value": value}
            self.write_loss_warnings()
            tqdm.write(f"warning: {name} of seed {seed} is {value:.3g} at env step {env_step}, "
                       f"past {LOSS_LIMIT:.0e}: a loss that grows without bound usually means "
                       "a broken run; recorded in "
                       f"{os.path.join(self.cfg.run_dir, LOSS_WARNINGS)}", file=sys.stderr)

    def write_loss_warnings(self) -> None:
        """LOSS_WARNINGS as `loss_warnings` has it (removed where it is empty)."""
        path = os.path.join(self.cfg.run_dir, LOSS_WARNINGS)
        if self.loss_warnings:
            write_json(path, {"limit": LOSS_LIMIT, "losses": self.loss_warnings}, indent=2)
        elif os.path.exists(path):
            os.remove(path)

    def check_divergence(self, loop: Loop) -> None:
        """Raise Diverged naming the first loss or parameter with a NaN or inf, and its seed."""
        for name, values in sorted(self.metric_means(loop).items()):
            bad = np.flatnonzero(~np.isfinite(values))
            if bad.size:
                raise Diverged(f"{name} is {values[bad[0]]}", loop.env_step,
                               self.cfg.seeds[bad[0]])
        finite = jax.device_get(self.check_finite(self.agent.weights(loop.states)))
        for path, ok in jax.tree_util.tree_flatten_with_path(finite)[0]:
            if not ok.all():
                seed = self.cfg.seeds[int(np.flatnonzero(~ok)[0])]
                name = jax.tree_util.keystr(path, simple=True, separator="/")
                raise Diverged(f"parameter {name} has NaN or inf", loop.env_step, seed)
        bad = np.flatnonzero(~np.isfinite(loop.actions).all(axis=1))
        if bad.size:
            raise Diverged("actions are not finite", loop.env_step, self.cfg.seeds[bad[0]])

    def log_eval(self, loop: Loop) -> np.ndarray:
        self.check_divergence(loop)  # no evaluation row for an agent that has diverged
        returns = evaluate(self.eval_act, loop.states, self.eval_env, self.cfg.eval_episodes)
        self.files.write_eval(loop.env_step, returns, loop.wall_time)
        if self.diagnose is not None:
            self.log_diagnostics(loop)
        return returns

    def log_diagnostics(self, loop: Loop) -> None:
        """Spectra of every weight matrix and, once the buffer holds as many transitions as
        the diagnostics batch, feature metrics on one replay batch, drawn with a generator of
        its own (from the seed and env step), so that logging settings (--diagnostics,
        --eval_every, --diagnostics_batch_size) leave the training minibatches as they are."""
        batch = None
        if len(self.buffer) >= self.cfg.diagnostics_batch:
            rng = np.random.default_rng([self.cfg.seed, 2, loop.env_step])
            batch = to_batch(self.buffer.sample(self.cfg.diagnostics_batch, 1, rng=rng))
            batch = jax.tree.map(lambda x: x[:, 0], batch)
        values = jax.device_get(self.diagnose(loop.states, batch))
        self.files.write_diagnostics(diag.rows(loop.env_step, self.cfg.seeds, values))

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

    def start(self) -> Loop:
        """A fresh loop, or the one resumed from the newest good checkpoint."""
        has_checkpoint = bool(self.checkpointer.steps())
        started_before = os.path.exists(os.path.join(self.cfg.run_dir, "config.json"))
        self.prefetched = None
        self.files = RunFiles(self.cfg.run_dir, self.cfg.seeds, fresh=not has_checkpoint,
                              dashboards=dashboards.for_config(self.cfg))
        loop = self.fresh_loop()
        record = self.record
        if has_checkpoint:
            loop = self.restore(loop)
            print(f"resumed from the checkpoint at env step {loop.env_step}", file=sys.stderr)
            self.resumed_from = loop.env_step
            record = with_earlier_versions(self.cfg.run_dir, record, loop.env_step)
        elif self.checkpointer.discarded:  # its logs were emptied above
            steps = ", ".join(map(str, self.checkpointer.discarded))
            print(f"the checkpoint at env step {steps} of {self.cfg.run_dir} was half-written "
                  "when the run stopped and is discarded; with no complete checkpoint, the run "
                  "starts over from env step 0", file=sys.stderr)
        elif started_before:
            print(f"{self.cfg.run_dir} holds no checkpoint (the run stopped before its first "
                  "one), so the run starts over from env step 0", file=sys.stderr)
        self.files.forget_end()  # once restored: a failed resume leaves the files as they were
        self.write_loss_warnings()  # as restored (none for a fresh start)
        self.files.write_config(record)
        self.files.open_dashboards(record, loop.env_step)
        return loop

    def intervene_if_due(self, loop: Loop) -> None:
        """The intervention scheduled at this env step. It comes after the step's update, logs
        and evaluation, as Nikishin et al.'s SAC orders its resets (every 200,000 steps, which
        are evaluation steps): what a scheduled step evaluates and logs is the trained network,
        not one just reset or clipped. The next env step's actions then come from the agent
        after the intervention, as there, drawn with the randomness they had before it. BRO's
        reference resets at the start of its listed steps' updates (15001, ...), one update
        (UTD gradient steps) earlier than here. The last step of a run has none: nothing
        trains after it, and the final checkpoint keeps the trained agent."""
        if self.intervention.schedule.due(loop.env_step):
            loop.states, rows = self.intervention.apply(loop.states, loop.env_step)
            self.files.write_interventions(rows)
            if loop.env_step >= self.cfg.start_steps:  # else the next actions are random
                self.take_actions(loop, self.next_actions(loop.states, loop.obs, loop.keys))

    def iteration(self, loop: Loop, started: float) -> np.ndarray | None:
        """One env step and everything due after it; the eval returns when it evaluated."""
        cfg = self.cfg
        ended = self.step_and_update(loop)
        loop.wall_time = time.time() - started
        returns = None
        if loop.env_step % cfg.log_every == 0 or loop.env_step == cfg.max_steps:
            self.log_train(loop)  # the last, shorter window too
        if loop.env_step % cfg.eval_every == 0 or loop.env_step == cfg.max_steps:
            returns = self.log_eval(loop)
        if loop.env_step < cfg.max_steps:
            self.intervene_if_due(loop)
        self.files.end_step()
        if ended and (loop.env_step - self.last_checkpoint >= cfg.checkpoint_every
                      or self.stop.requested):
            self.save(loop)
            if self.stop.requested and loop.env_step < cfg.max_steps:
                raise Stopped(loop.env_step, returns)
        return returns

    def run(self) -> Loop:
        """Train from a fresh start or the newest checkpoint to max_steps, then write done.json."""
        cfg = self.cfg
        loop = self.start()
        # Redrawn up to 10 times a second on a terminal; every 30 s into a file (a sweep job's
        # log), where tqdm's own redraw every maxinterval would come sooner.
        every = {} if sys.stderr.isatty() else {"mininterval": 30.0, "maxinterval": 30.0}
        last_return = self.files.last_eval_return()  # a resumed run's, until it evaluates
        shown = {} if last_return is None else {"eval_return": f"{last_return:.1f}"}
        bar = tqdm(total=cfg.max_steps, initial=loop.env_step, unit="step", dynamic_ncols=True,
                   disable=not cfg.progress, desc=f"{cfg.agent} {cfg.env}", postfix=shown,
                   **every)
        started = time.time() - loop.wall_time

        def advance(returns: np.ndarray | None) -> None:
            nonlocal last_return
            if returns is not None:
                last_return = float(np.mean(returns))
            bar.update(1)
            if (loop.env_step % 100 == 0 or returns is not None) and last_return is not None:
                bar.set_postfix(eval_return=f"{last_return:.1f}", refresh=False)

        try:
            while loop.env_step < cfg.max_steps:
                ctrl_c.raise_dropped()  # a Ctrl-C that Python dropped in a callback
                try:
                    returns = self.iteration(loop, started)
                except Stopped as stopped:  # the bar's last redraw shows where it stopped
                    advance(stopped.returns)
                    raise
                advance(returns)
            if self.last_checkpoint != loop.env_step:
                self.save(loop)
        except Diverged as e:  # recorded in the run directory, where aggregation looks
            e.resumed_from = self.resumed_from
            resumed = {} if e.resumed_from is None else {"resumed_from": e.resumed_from}
            if self.files is not None:
                self.files.write_diverged({"env_step": e.env_step, "seed": e.seed,
                                           "what": e.what, "seeds_stopped": cfg.seeds,
                                           **resumed})
            raise
        finally:  # the bar's last redraw comes before any error message, not after it
            bar.close()
            error = sys.exc_info()[1]  # a SIGTERM's stop is no failure: the run resumes
            self.files.close_dashboards(failed=error is not None and not isinstance(error, Stopped))
        self.checkpointer.keep_latest_only()  # the final agent stays; half the disk goes
        self.files.write_done({"env_step": loop.env_step, "wall_time": loop.wall_time})
        self.files.close()
        self.checkpointer.close()
        return loop
