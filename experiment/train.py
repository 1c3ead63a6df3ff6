"""The training loop both agents share.

Host side: N seeded dm_control envs stepped in lockstep, the replay buffer, evaluation,
the intervention schedule, logging. Device side, per env step: one jitted call that runs the
whole UTD update for every seed (`vmap` over seeds of the agent's `lax.scan` update), taking
every seed's minibatches in one host->device transfer, and one that picks the next actions,
whose result is the one device->host transfer. The update is dispatched before the env step
whenever its minibatches do not need that step's transition, and computes while the envs step
(`Trainer.step_and_update`).
"""

import os
import sys
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from agents import Agent
from envs import make_env, make_vector_env
from experiment import ctrl_c, dashboards, protocol
from experiment import diagnose as diag
from experiment.checkpoint import Checkpointer, as_restored
from experiment.config import TrainConfig
from experiment.divergence import Diverged, DivergenceChecks
from experiment.events import Intervention, build_intervention, intervention_plan, with_hooks
from experiment.loop_checkpoint import Loop, LoopCheckpoints
from experiment.protocol import StopRequest
from experiment.resources import check_fits
from experiment.rundir.files import RunFiles
from experiment.rundir.record import config_record, with_earlier_versions
from experiment.step_fns import (
    evaluate,
    fold_seeds,
    make_step_fns,
    seed_init,
    seeds_update,
    to_batch,
    zero_metrics,
)
from interventions import Plan
from learners.batch import Batch
from replay import ReplayBuffer


class Prefetched(NamedTuple):
    """A step's minibatches, drawn ahead (`Trainer.prefetch`)."""

    changes: int  # the buffer's `changes` when they were drawn: stale once it moves
    rng: np.random.Generator  # the copy of the buffer's generator they were drawn with
    slots: np.ndarray  # (seeds, utd, batch)
    batches: Batch | None  # gathered, or None where a slot is the one the next insert writes


class UnevenEpisodes(RuntimeError):
    """Some seeds' episodes ended (terminated early) while others went on."""


def make_trainer(agent: Agent, cfg: TrainConfig, plan: Plan | None = None) -> "Trainer":
    """The trainer `cfg` asks for: replay in host memory, or on the device
    (`experiment.device_loop.DeviceReplayTrainer`, imported only then). `plan`: the run's
    interventions as already built and checked, with `agent` already bound to its hooks
    (experiment.entry.prepare); None: the plan is built here and `agent` bound to it."""
    if cfg.replay_on_device:
        from experiment.device_loop import DeviceReplayTrainer

        return DeviceReplayTrainer(agent, cfg, plan)
    return Trainer(agent, cfg, plan)


class Stopped(protocol.Stopped):
    """The run stopped, as asked (`Trainer.stop`), at `env_step`: an episode end, where it
    wrote a checkpoint to resume from."""

    def __init__(self, env_step: int, returns: np.ndarray | None = None):
        super().__init__(f"stopped at env step {env_step}, after a checkpoint there")
        self.env_step, self.where = env_step, f"at env step {env_step}"
        self.returns = returns  # of the evaluation at that step, if one was due there


class Trainer(LoopCheckpoints, DivergenceChecks):
    """Runs one `TrainConfig` for one agent; `run()` trains to `max_steps`. Its checkpoints
    (`save`, `restore`: experiment/loop_checkpoint.py) and divergence checks
    (experiment/divergence.py) come from its bases."""

    def __init__(self, agent: Agent, cfg: TrainConfig, plan: Plan | None = None):
        if plan is None:
            plan = intervention_plan(agent, cfg)
            agent = with_hooks(agent, plan)
        self.plan = plan
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
        shape = (self.cfg.num_seeds, self.cfg.utd, self.cfg.batch_size)
        states = self.init_fn(self.init_keys)
        keys = fold_seeds(self.init_keys, 1)
        metric_sums = zero_metrics(self.update_seeds, states, shape, self.obs_dim, self.act_dim)
        states, keys, metric_sums = as_restored((states, keys, metric_sums))
        env_rng = self.env.get_rng_state()
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
            metric_sums=metric_sums,
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
