"""The continual training loop: a sequence of tasks, each one compiled call for every seed.

Per task, the host draws the task (continual/tasks.py) and one jitted call trains every seed on
it (`jax.vmap` over seeds of a `lax.scan` over the task's minibatches, gathered on the device
from the data set, which is sent there once) and measures its online accuracy (each minibatch's
accuracy before the step that trains on it, averaged over the task), its mean loss, and its
final accuracy (on all the task's examples after training). At a task boundary come the
diagnostics, the scheduled event of the run's interventions (its per-step methods act inside the
update) and the checkpoints, from which a run resumes exactly.
"""

import dataclasses
import math
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from continual.config import ContinualConfig
from continual.data import DataError
from continual.learner import Examples, Learner, LearnerConfig, make_learner
from continual.resume import refuse_other_data
from continual.source import data_line, data_record, load_data, load_source, protocol_of
from continual.tasks import (
    DIAGNOSTICS,
    EVENT_DATA,
    Protocol,
    Source,
    Task,
    draw_task,
    output_classes,
    sample_positions,
)
from experiment import dashboards, protocol
from experiment import diagnose as diag
from experiment.checkpoint import Checkpointer, as_restored
from experiment.config import ConfigError
from experiment.events import event_apply
from experiment.memory import sized
from experiment.protocol import StopRequest
from experiment.resources import device_memory_bytes
from experiment.rundir.files import RunFiles
from experiment.rundir.record import with_earlier_versions
from interventions import Plan, check_parts, make_plan

HEADERS = {
    "tasks.csv": ("task", "seed", "online_accuracy", "final_accuracy", "loss"),
    "diagnostics.csv": ("task", "seed", "network", "layer", "metric", "value"),
    "interventions.csv": ("task", "seed", "kind", "network", "layer", "metric", "value"),
}


class Diverged(protocol.Diverged):
    """A NaN or inf loss of `seed` in task `task`."""

    def __init__(self, task: int, seed: int):
        super().__init__(f"the loss is not finite in task {task} for seed {seed}")
        self.task, self.seed = task, seed


class Stopped(protocol.Stopped):
    """Stopped as asked (SIGTERM) at a task boundary, after a checkpoint there."""

    def __init__(self, tasks_done: int):
        super().__init__(f"stopped after task {tasks_done - 1}, after a checkpoint there")
        self.tasks_done, self.where = tasks_done, f"after task {tasks_done - 1}"


def learner_config(cfg: ContinualConfig, source: Source) -> LearnerConfig:
    b = cfg.benchmark
    return LearnerConfig(network=b.network, input_shape=tuple(source.images.shape[1:]),
                         num_classes=output_classes(b, source.num_classes),
                         hidden_dims=(cfg.hidden_dim,), channels=cfg.channels or b.channels,
                         layer_norm=cfg.layer_norm, init=cfg.init, optimizer=cfg.optimizer,
                         learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay)


def continual_plan(learner: Learner, cfg: ContinualConfig) -> Plan:
    """The run's interventions against the learner, their parts checked on its abstract state;
    ConfigError naming the flag of a setting that cannot work."""
    try:
        plan = make_plan(cfg.intervention, cfg.method_settings, learner, cfg.event_opt_state)
        state = jax.eval_shape(learner.init, jax.random.key(0))
        for bound in plan.bound:
            check_parts(state, bound, learner)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return plan


FLOAT_BYTES = 4
# What a gradient step holds per example besides its inputs, in multiples of its activations:
# the forward pass's, kept for the backward pass, and their gradients (a rough upper bound).
STEP_ACTIVATION_COPIES = 3


def example_floats(config: LearnerConfig) -> int:
    """float32 values of one example's input and activations through the network."""
    inputs = math.prod(config.input_shape)
    conv = 0
    if config.network == "conv":
        height, width = config.input_shape[:2]
        for i, channels in enumerate(config.channels):
            conv += channels * (height // 2**i) * (width // 2**i)
    return inputs + conv + sum(config.hidden_dims) + config.num_classes


def memory_parts(cfg: ContinualConfig, learner: Learner, plan: Plan,
                 protocol: Protocol) -> dict[str, int]:
    """{the flags that set it: bytes} of what a run holds at once on its device, estimated
    before anything is allocated: the seeds' states, a training step's minibatch, the
    diagnostics' batch, and an event's data."""
    config, seeds = learner.config, cfg.num_seeds
    one = example_floats(config) * FLOAT_BYTES * seeds
    state = jax.eval_shape(learner.init, jax.random.key(0))
    parts = {"--num_seeds (the seeds' parameters and optimizer states)":
             seeds * sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)),
             "--batch_size": STEP_ACTIVATION_COPIES * protocol.batch_size * one}
    if cfg.diagnostics:
        size = cfg.diagnostics_batch
        parts["--diagnostics_batch_size" if cfg.diagnostics_batch_size else "--batch_size (the "
              "diagnostics' batch)"] = size * one
    if plan.event is not None and plan.event.method.data_shape is not None:
        method, config_ = plan.event.method, plan.event.config
        batches, batch_size = method.data_shape(config_)
        flags_ = [f"--{method.flag(name)}" for name in ("batches", "batch_size")
                  if name in method.field_names]
        parts[" and ".join(flags_) or f"--intervention={method.name}"] = (
            batches * batch_size * one + STEP_ACTIVATION_COPIES * batch_size * one)
    return parts


def check_memory(cfg: ContinualConfig, learner: Learner, plan: Plan, protocol: Protocol) -> None:
    """ConfigError, naming the flag of the largest part, where the run's estimated memory
    (`memory_parts`) exceeds its device's: before anything is allocated or trained."""
    parts = memory_parts(cfg, learner, plan, protocol)
    device = jax.devices()[0]
    have = device_memory_bytes(device)
    need = sum(parts.values())
    if have is None or need <= have:
        return
    flag, largest = max(parts.items(), key=lambda item: item[1])
    raise ConfigError(f"the run needs about {sized(need)} of memory, more than the "
                      f"{device.platform.upper()}'s {sized(have)}; {flag} sets {sized(largest)} "
                      "of it: lower it")


def make_inputs(protocol: Protocol, scale: float):
    """`(images, index, perm, positions) -> inputs`: one seed's float32 inputs of its task's
    examples at `positions` (any shape), gathered on the device from the data set's images,
    the same values as numpy's gather (tests/helpers/continual_reference.py)."""
    permuted = protocol.benchmark.kind == "permuted"

    def inputs(images, index, perm, positions):
        x = images[index[positions]]
        if permuted:
            x = x.reshape(*positions.shape, -1)[..., perm].reshape(x.shape)
        return x.astype(jnp.float32) * scale

    return inputs


def make_train_task(learner: Learner, protocol: Protocol, scale: float):
    """`(states, images, index, perm, labels, order) -> (states, per-seed metrics)`, jitted:
    every seed's task (leaves (seeds, ...), images shared) as one scan over its minibatches,
    then its final accuracy on all the task's examples in evaluation mode."""
    n, chunk = protocol.task_examples, protocol.batch_size
    chunks = math.ceil(n / chunk)
    inputs = make_inputs(protocol, scale)

    def one(state, images, index, perm, labels, order):
        def step(state, positions):
            batch = Examples(inputs(images, index, perm, positions), labels[positions])
            return learner.update(state, batch)

        state, metrics = jax.lax.scan(step, state, order)

        def correct(positions):
            valid = positions < n
            positions = jnp.where(valid, positions, 0)
            logits = learner.predict(state, inputs(images, index, perm, positions))
            return jnp.sum((jnp.argmax(logits, -1) == labels[positions]) & valid)

        hits = jax.lax.map(correct, jnp.arange(chunks * chunk).reshape(chunks, chunk))
        out = {"online_accuracy": metrics["accuracy"].mean(), "loss": metrics["loss"].mean(),
               "final_accuracy": hits.sum() / n}
        return state, out

    return jax.jit(jax.vmap(one, in_axes=(0, None, 0, 0, 0, 0)), donate_argnums=0)


@dataclasses.dataclass
class Progress:
    """What changes between tasks (what a checkpoint holds)."""

    tasks_done: int
    states: Any  # the learner state, leading seed axis
    wall_time: float


class ContinualRun:
    """One run of a ContinualConfig: `run()` trains to the last task."""

    def __init__(self, cfg: ContinualConfig, source: Source | None = None):
        self.cfg = cfg
        self.protocol = protocol_of(cfg)
        data = load_data(cfg) if source is None else None
        self.source = source if source is not None else load_source(cfg, data)
        # config.json's `data` (run() adds it): where the images came from (None: given)
        self.source_info = None if data is None else data_record(cfg, data)
        self.learner_config = learner_config(cfg, self.source)
        self.plan = continual_plan(make_learner(self.learner_config), cfg)
        self.learner = make_learner(self.learner_config, self.plan.hooks)
        check_memory(cfg, self.learner, self.plan, self.protocol)
        self.init_keys = jnp.stack([jax.random.key(s) for s in cfg.seeds])
        self.init_fn = jax.jit(jax.vmap(self.learner.init))
        self.images = jnp.asarray(self.source.images)
        self.train_task = make_train_task(self.learner, self.protocol, self.source.scale)
        self.gather = jax.jit(jax.vmap(make_inputs(self.protocol, self.source.scale),
                                       in_axes=(None, 0, 0, 0)))
        self.event = (None if self.plan.event is None else
                      event_apply(self.learner, self.plan, cfg.seeds, self.init_fn,
                                  self.init_keys, self.event_data))
        self.diagnose = (diag.make_diagnostics(self.learner, cfg.dormant_taus, cfg.srank_threshold)
                         if cfg.diagnostics else None)
        self.tasks: dict[int, Task] = {}
        self.stop = StopRequest()  # set (by a SIGTERM) to stop at the next task boundary
        self.files: RunFiles | None = None
        self.checkpointer: Checkpointer | None = None
        if data is not None:
            refuse_other_data(cfg, self.source_info)
        # what the run script says before it trains (after every check has passed)
        self.data_line = None if data is None else data_line(cfg, data)

    def task(self, number: int) -> Task:
        """Task `number` of every seed, drawn once (the event's data come from the next task)."""
        if number not in self.tasks:
            self.tasks = {k: v for k, v in self.tasks.items() if k >= number - 1}
            self.tasks[number] = draw_task(self.protocol, self.source, self.cfg.seeds, number)
        return self.tasks[number]

    def examples(self, number: int, stream: int, count: int) -> Examples:
        """`count` examples of task `number` per seed: leaves (seeds, count, ...)."""
        task = self.task(number)
        positions = np.stack([sample_positions(seed, number, stream, count,
                                               self.protocol.task_examples)
                              for seed in self.cfg.seeds])
        return Examples(self.gather(self.images, task.index, task.perm, positions),
                        jnp.asarray(np.take_along_axis(task.labels, positions, axis=1)))

    def event_data(self, boundary: int, batches: int, batch_size: int) -> Examples:
        """What an event that needs data reads at the boundary after task `boundary`: minibatches
        (seeds, batches, batch_size, ...) of the next task's examples, the data it will learn."""
        data = self.examples(boundary + 1, EVENT_DATA, batches * batch_size)
        return jax.tree.map(lambda a: a.reshape(a.shape[0], batches, batch_size, *a.shape[2:]),
                            data)

    def start(self) -> Progress:
        cfg = self.cfg
        self.checkpointer = Checkpointer(f"{cfg.run_dir}/checkpoints", unit="task")
        resume = bool(self.checkpointer.steps())
        self.files = RunFiles(cfg.run_dir, cfg.seeds, fresh=not resume, headers=HEADERS,
                              seed_files=False, dashboards=dashboards.for_continual(cfg))
        progress = Progress(0, as_restored(self.init_fn(self.init_keys)), 0.0)
        if resume:
            restored = self.checkpointer.restore_latest({"states": progress.states})
            if restored is not None:
                device, _, meta = restored
                self.files.truncate_to(meta["offsets"])
                progress = Progress(meta["tasks_done"], device["states"], meta["wall_time"])
                print(f"resumed after task {progress.tasks_done - 1} from its checkpoint",
                      file=sys.stderr)
        self.files.forget_end()
        return progress

    def save(self, progress: Progress) -> None:
        meta = {"tasks_done": progress.tasks_done, "wall_time": progress.wall_time,
                "offsets": self.files.offsets()}
        self.checkpointer.save(progress.tasks_done, {"states": progress.states}, {}, meta)

    def train_one(self, progress: Progress, number: int) -> dict[str, np.ndarray]:
        """Task `number` on every seed; its tasks.csv rows; Diverged on a NaN or inf loss."""
        task = self.task(number)
        progress.states, metrics = self.train_task(progress.states, self.images, task.index,
                                                   task.perm, task.labels, task.order)
        metrics = jax.device_get(metrics)
        bad = np.flatnonzero(~np.isfinite(metrics["loss"]))
        if bad.size:
            raise Diverged(number, self.cfg.seeds[bad[0]])
        self.files.write_rows("tasks.csv", [
            (number, seed, f"{metrics['online_accuracy'][i]:.6g}",
             f"{metrics['final_accuracy'][i]:.6g}", f"{metrics['loss'][i]:.6g}")
            for i, seed in enumerate(self.cfg.seeds)])
        return metrics

    def log_diagnostics(self, progress: Progress, number: int) -> dict:
        """The diagnostics after task `number`, written to diagnostics.csv and returned."""
        size = self.cfg.diagnostics_batch
        batch = self.examples(number, DIAGNOSTICS, size)
        values = jax.device_get(self.diagnose(progress.states, batch))
        self.files.write_rows("diagnostics.csv", diag.rows(number, self.cfg.seeds, values))
        return values

    def boundary(self, progress: Progress, number: int) -> None:
        """What comes after task `number`: diagnostics, the event, a checkpoint, as due."""
        cfg = self.cfg
        last = number == cfg.num_tasks - 1
        done = number + 1
        spectra = None  # the weight spectra the event's report reads, where just computed
        if self.diagnose is not None and (done % cfg.diagnostics_every == 0 or last):
            spectra = self.log_diagnostics(progress, number)
        if self.event is not None and not last and done % cfg.intervention_every == 0:
            progress.states, rows = self.event(progress.states, number, spectra)
            self.files.write_rows("interventions.csv", rows)
        progress.tasks_done = done
        self.files.end_step()  # the dashboards get the task's rows
        if done % cfg.checkpoint_every == 0 or last or self.stop.requested:
            self.save(progress)
            if self.stop.requested and not last:
                raise Stopped(done)

    def run(self, record: dict) -> Progress:
        """Train from a fresh start or the newest checkpoint to the last task; `record` is
        config.json's."""
        cfg = self.cfg
        if self.source_info is not None and "data" not in record:
            record = {**record, "data": self.source_info}
        progress = self.start()
        if progress.tasks_done:
            record = with_earlier_versions(cfg.run_dir, record, progress.tasks_done, "task")
        self.files.write_config(record)
        self.files.open_dashboards(record, progress.tasks_done - 1)  # the last task logged
        started = time.time() - progress.wall_time
        bar = tqdm(total=cfg.num_tasks, initial=progress.tasks_done, unit="task",
                   disable=not cfg.progress, desc=f"{cfg.task} {cfg.intervention}",
                   dynamic_ncols=True)
        try:
            for number in range(progress.tasks_done, cfg.num_tasks):
                metrics = self.train_one(progress, number)
                progress.wall_time = time.time() - started
                self.boundary(progress, number)
                bar.update(1)
                bar.set_postfix(online=f"{np.mean(metrics['online_accuracy']):.3f}",
                                refresh=False)
        except Diverged as e:
            self.files.write_diverged({"task": e.task, "seed": e.seed, "what": str(e),
                                       "seeds_stopped": cfg.seeds})
            raise
        finally:
            bar.close()
            error = sys.exc_info()[1]  # a SIGTERM's stop is no failure: the run resumes
            self.files.close_dashboards(failed=error is not None and not isinstance(error, Stopped))
        self.checkpointer.keep_latest_only()
        self.files.write_done({"tasks": cfg.num_tasks, "wall_time": progress.wall_time})
        self.files.close()
        self.checkpointer.close()
        return progress


__all__ = ["ContinualRun", "DataError", "Diverged", "Stopped"]
