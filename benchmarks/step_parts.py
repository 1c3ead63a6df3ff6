"""What one env step of training costs, part by part, for an agent, a seed count and a UTD.

    python benchmarks/step_parts.py                          # SAC 4 seeds UTD 8, SAC 1 seed
                                                             # UTD 1, BRO 1 seed UTD 10
    python benchmarks/step_parts.py --cases=sac:16:8 --calls=50

Written for a GPU, where the loop waits for each training step's calls (its actions), so what a
call costs depends on how it is made. Per call, in milliseconds, for each case
(agent:seeds:utd, humanoid dimensions and physics):
- the training step's calls (the UTD update for every seed, then the next actions), waited on
  for the actions as the loop waits, given host (numpy) minibatches as the loop gives them;
- the same with the minibatches already on the device (so the difference is their transfer);
- the same calls not waited on (dispatched back to back, waited on once at the end): what the
  device's computation alone takes, with the per-call latency hidden;
- `jax.device_put` of the minibatches alone, waited on;
- the replay sample (host), from a buffer holding a few hundred transitions (capacity 20,000);
- one env step of every seed with uniform random actions, with the replay insert (host).
With --replay_on_device, also for a loop with the buffer on the device (`experiment.device_loop`):
- its training step's calls (the update, which draws and gathers its minibatches on the device,
  then the next actions with the next step's draw), waited on for the actions, and back to back;
- the insert of one transition per seed (next observations, rewards, terminations sent);
- the bytes each loop sends to the device per training step, counted over --steps real steps
  (`Trainer.step_and_update`) of each loop: the numpy arrays handed to its jitted calls (sent
  as they are called) and those it puts on the device itself, and the bytes it takes back.
--env_backend picks the simulator of the env-step row (and of the counted steps).
Two rounds of the three call rows, then one of the rest. Where a step's update is dispatched
before its env step (`Trainer.step_and_update`: nearly always, once the buffer is large), and
the next step's sample is drawn while it computes, the loop's own step is about the longer of
the waited host-batch call and the env step plus the sample (plus evaluation, which this
leaves out); `benchmarks/loop_breakdown.py` times the loop itself, part by part.
"""

import dataclasses
import functools
import re
import sys
import tempfile
import time

import jax
import numpy as np
from absl import app, flags, logging
from bench_utils import random_batches, xla_flags
from recording import record

from agents import make_agent
from experiment.config import AGENT_DEFAULTS, ConfigError, validate
from experiment.device_loop import DeviceReplayTrainer
from experiment.train import Trainer

flags.DEFINE_list("cases", ["sac:4:8", "sac:1:1", "bro:1:10"],
                  "agent:seeds:utd cases, at each agent's default batch size (SAC 256, BRO 128).")
flags.DEFINE_integer("calls", 30, "Calls timed per row and round.", lower_bound=1)
flags.DEFINE_boolean("replay_on_device", False, "Also time the loop with the replay buffer on "
                     "the device, and count both loops' bytes sent per step.")
flags.DEFINE_enum("env_backend", "dm_control", ["dm_control", "envpool"],
                  "Simulator of the env-step row and the counted steps.")
flags.DEFINE_integer("steps", 100, "Training steps whose transfers are counted.", lower_bound=1)
FLAGS = flags.FLAGS

ENVS = {"sac": "humanoid-stand", "bro": "humanoid-run"}  # the same dimensions (67, 21)


def per_call_ms(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def run_case(name: str, seeds: int, utd: int, calls: int, logdir: str) -> list[tuple]:
    """Time one case's parts, print them, and return them as result rows (means of the
    rounds)."""
    start = time.perf_counter()
    agent = make_agent(name)
    cfg = dataclasses.replace(AGENT_DEFAULTS[name], env=ENVS[name], utd=utd, num_seeds=seeds,
                              start_steps=300, buffer_capacity=20_000, progress=False,
                              logdir=logdir, env_backend=FLAGS.env_backend)
    validate(cfg)
    trainer = Trainer(agent, cfg)
    loop = trainer.fresh_loop()
    host = random_batches(seeds, utd, cfg.batch_size, trainer.obs_dim, trainer.act_dim)
    device = jax.device_put(host)

    def call(batch):
        loop.states, loop.keys, loop.metric_sums = trainer.update_step(
            loop.states, batch, loop.keys, loop.metric_sums)
        return trainer.next_actions(loop.states, loop.obs, loop.keys)

    def pipelined():
        actions = None
        for _ in range(calls):
            actions = call(device)
        np.asarray(actions)

    np.asarray(call(host))
    np.asarray(call(device))
    print(f"{name}, {seeds} seed(s), UTD {utd}, batch {cfg.batch_size}: compiled and warm in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    rows: dict[str, list[float]] = {}
    for _ in range(2):
        rows.setdefault("call waited on, host minibatches", []).append(
            per_call_ms(lambda: np.asarray(call(host)), calls))
        rows.setdefault("call waited on, minibatches on the device", []).append(
            per_call_ms(lambda: np.asarray(call(device)), calls))
        rows.setdefault("calls back to back, minibatches on the device", []).append(
            per_call_ms(pipelined, 1) / calls)
    rows["device_put of the minibatches"] = [
        per_call_ms(lambda: jax.block_until_ready(jax.device_put(host)), calls)]
    def env_step():
        loop.actions = trainer._random_actions()
        trainer.env_step(loop)

    for _ in range(400):  # a buffer to sample, episodes under way
        env_step()
    rows["replay sample"] = [per_call_ms(lambda: trainer.buffer.sample(cfg.batch_size, utd),
                                         calls)]
    rows[f"env step of {seeds} seed(s) ({cfg.env_backend}), random actions, + replay insert"] = [
        per_call_ms(env_step, calls)]
    if FLAGS.replay_on_device:
        rows.update(device_rows(agent, dataclasses.replace(cfg, replay_on_device=True),
                                calls))
    for label, values in rows.items():
        print(f"  {label}: {' / '.join(f'{v:.2f}' for v in values)} ms", flush=True)
    transfers: dict[str, float] = {}
    if FLAGS.replay_on_device:
        host = Trainer(agent, dataclasses.replace(cfg, logdir=f"{logdir}/host"))
        device = DeviceReplayTrainer(agent, dataclasses.replace(cfg, replay_on_device=True,
                                                                logdir=f"{logdir}/device"))
        for kind, counted in (("host replay", host), ("device replay", device)):
            sent, taken = transfers_per_step(counted, FLAGS.steps)
            print(f"  {kind}: {sent:,.0f} bytes sent to the device and {taken:,.0f} taken back "
                  f"per training step (mean of {FLAGS.steps} steps)", flush=True)
            transfers[f"{kind}: bytes sent per training step"] = sent
            transfers[f"{kind}: bytes taken back per training step"] = taken
    what = f"{name}, {seeds} seed(s), UTD {utd}"
    return ([(f"{what}, {label}", sum(values) / len(values), "ms per call")
             for label, values in rows.items()]
            + [(f"{what}, {label}", value, "bytes") for label, value in transfers.items()])


def device_rows(agent, cfg, calls: int) -> dict[str, list[float]]:
    """The device-replay loop's calls per training step, in ms (see the module notes)."""
    trainer = DeviceReplayTrainer(agent, cfg)
    loop = trainer.start()
    while loop.env_step < cfg.start_steps + 100:  # a buffer to draw from, compiled calls
        trainer.step_and_update(loop)
    obs = trainer.buffer.to_device(loop.obs)

    def call():
        slots, _ = trainer.draw(trainer.buffer.replay)
        trainer.update_on_device(loop, slots)
        return trainer.act_and_draw(loop.states, obs, loop.keys, trainer.buffer.replay)[0]

    def pipelined():
        actions = None
        for _ in range(calls):
            actions = call()
        np.asarray(actions)

    rows: dict[str, list[float]] = {}
    for _ in range(2):
        rows.setdefault("device replay: call waited on (draw and gather inside)", []).append(
            per_call_ms(lambda: np.asarray(call()), calls))
        rows.setdefault("device replay: calls back to back", []).append(
            per_call_ms(pipelined, 1) / calls)
    actions = jax.device_put(loop.actions)

    def insert():  # the observation and actions already on the device, as in the loop
        trainer.buffer.remember(loop.obs, obs)
        trainer.buffer.remember(loop.actions, actions)
        n = cfg.num_seeds
        trainer.buffer.insert(loop.obs, loop.actions, np.zeros(n, np.float32), loop.obs.copy(),
                              np.zeros(n, bool), np.zeros(n, bool))
        jax.block_until_ready(trainer.buffer.replay)

    rows["device replay: insert of one transition per seed, waited on"] = [
        per_call_ms(insert, calls)]
    return rows


def transfers_per_step(trainer, steps: int) -> tuple[float, float]:
    """Mean bytes sent to and taken back from the device per training step, over `steps`
    `step_and_update` calls past the random phase (see the module notes)."""
    loop = trainer.start()
    while loop.env_step < trainer.cfg.start_steps + 10:
        trainer.step_and_update(loop)
    counts = {"sent": 0, "taken": 0}

    def leaves_bytes(tree) -> int:
        return sum(leaf.nbytes for leaf in jax.tree.leaves(tree)
                   if isinstance(leaf, np.ndarray | np.generic))

    def counted(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            counts["sent"] += leaves_bytes((args, kwargs))
            return fn(*args, **kwargs)
        return call

    for name in ("update_step", "next_actions", "device_update", "act_and_draw", "draw"):
        if hasattr(trainer, name):
            setattr(trainer, name, counted(getattr(trainer, name)))
    take_actions = trainer.take_actions

    def take(loop, actions):  # the host loop copies a device array of actions here
        counts["taken"] += actions.nbytes if isinstance(actions, jax.Array) else 0
        take_actions(loop, actions)

    trainer.take_actions = take
    put, get = jax.device_put, jax.device_get
    jax.device_put = lambda x, *a, **k: (counts.__setitem__("sent", counts["sent"] +
                                                            leaves_bytes(x)), put(x, *a, **k))[1]

    def taken(x):
        out = get(x)
        counts["taken"] += leaves_bytes(out)
        return out

    jax.device_get = taken
    try:
        for _ in range(steps):
            trainer.step_and_update(loop)
    finally:
        jax.device_put, jax.device_get = put, get
    return counts["sent"] / steps, counts["taken"] / steps


def main(_):
    logging.set_verbosity(logging.WARNING)
    print(f"devices: {jax.devices()}; XLA_FLAGS: {xla_flags()}", flush=True)
    cases = []
    for case in FLAGS.cases:
        parts = case.split(":")
        if len(parts) != 3 or parts[0] not in ENVS or not all(
                re.fullmatch(r"[1-9][0-9]*", n) for n in parts[1:]):
            sys.exit(f"error: --cases takes agent:seeds:utd entries, agent sac or bro and seeds "
                     f"and utd positive integers (sac:4:8); got {case!r}")
        cases.append((parts[0], int(parts[1]), int(parts[2])))
    if not cases:
        sys.exit("error: --cases is empty; give agent:seeds:utd entries such as sac:4:8")
    results = []
    for name, seeds, utd in cases:
        with tempfile.TemporaryDirectory() as logdir:
            try:
                results += run_case(name, seeds, utd, FLAGS.calls, logdir)
            except ConfigError as e:
                sys.exit(f"error: {name}:{seeds}:{utd}: {e}")
    record("step_parts", results)


if __name__ == "__main__":
    app.run(main)
