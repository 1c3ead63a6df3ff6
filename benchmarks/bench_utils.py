"""Shared measurement helpers for the benchmark scripts (run as `python benchmarks/<name>.py`).

The benchmarks' startup: importing it sets the framework's XLA:CPU options
(`experiment.xla_flags`) and one OpenBLAS thread (`experiment.startup.one_blas_thread`) before JAX
starts, so the benchmarks measure what training runs with; SINGULARCLIP_STOCK_XLA=1 measures
stock XLA instead.
"""

from experiment.startup import one_blas_thread
from experiment.xla_flags import apply_xla_flags

apply_xla_flags()
one_blas_thread()

# isort: split
import collections
import math
import os
import re
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from agents import make_agent
from experiment.config import TrainConfig
from experiment.train import Trainer, make_trainer
from learners.batch import Batch


class Product(collections.namedtuple("Product", "lhs rhs dims")):
    """A dot's operand shapes and dimension numbers ((contracting), (batch)), hashable."""

    @property
    def flops(self) -> float:
        """2 x batch x lhs-free x contracting x rhs-free sizes."""
        (_, rhs_contracting), (_, rhs_batch) = self.dims
        rhs_free = [d for i, d in enumerate(self.rhs) if i not in rhs_contracting + rhs_batch]
        return 2.0 * math.prod(self.lhs) * math.prod(rhs_free)

    def describe(self) -> str:
        (lc, rc), (lb, rb) = self.dims
        return (f"{list(self.lhs)} x {list(self.rhs)}, contracting {list(lc)}/{list(rc)}"
                + (f", batch {list(lb)}/{list(rb)}" if lb else ""))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(",") if d)


def products(hlo: str) -> tuple[list[tuple[Product, str]], list[str]]:
    """Each dot of a compiled module's HLO text as (Product, op name), and the names of dots
    whose operands are not in row-major layout (timed alone, XLA may lay them out otherwise)."""
    shapes = {m.group(1): (_ints(m.group(2)), _ints(m.group(3))) for m in re.finditer(
        r"%([\w.\-]+) = \w+\[([\d,]*)\]\{([\d,]*)\}", hlo)}
    found, other_layout = [], []
    for m in re.finditer(r"%([\w.\-]+) = \w+\[[\d,]*\]\{[\d,]*\} dot\(%([\w.\-]+), "
                         r"%([\w.\-]+)\)([^\n]*)", hlo):
        name, lhs, rhs, rest = m.groups()

        def attr(key, rest=rest):
            found_attr = re.search(key + r"=\{([\d,]*)\}", rest)
            return _ints(found_attr.group(1)) if found_attr else ()

        dims = ((attr("lhs_contracting_dims"), attr("rhs_contracting_dims")),
                (attr("lhs_batch_dims"), attr("rhs_batch_dims")))
        for operand in (lhs, rhs):
            rank = len(shapes[operand][0])
            if shapes[operand][1] != tuple(range(rank - 1, -1, -1)):
                other_layout.append(name)
        op = re.search(r'op_name="([^"]*)"', rest)
        where = re.sub(r"^.*closed_call/|/cond/branch_\d+_fun|/dot_general$|vmap\([^)]*\)/|net/",
                       "", op.group(1)) if op else "(no op name)"
        found.append((Product(shapes[lhs][0], shapes[rhs][0], dims), where))
    return found, sorted(set(other_layout))


def xla_flags() -> str:
    """The XLA_FLAGS these measurements ran with, for the report."""
    return os.environ.get("XLA_FLAGS", "") or "(none)"


def best_time(fn: Callable[[], object], repeats: int = 5, min_seconds: float = 0.2) -> float:
    """Best seconds per call of `fn` (which must block until its result is ready)."""
    fn()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start >= min_seconds / repeats:
            break
        calls *= 2
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return min(times)


def matmul_rate(n: int) -> float:
    """Best float32 FLOP/s of an `n x n` by `n x n` matmul under jit."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    return 2.0 * n**3 / best_time(lambda: mm(a, b).block_until_ready())


def matmul_peak(sizes=None) -> tuple[float, int]:
    """The best float32 matmul FLOP/s this machine reaches under jit, and the size reaching it.

    Square sizes 512 to 2048 on a CPU; up to 8192 on an accelerator, which smaller products
    do not fill. At JAX's default precision, a GPU with tensor cores multiplies float32 in TF32.
    """
    if sizes is None:
        sizes = (512, 1024, 2048) + (() if jax.default_backend() == "cpu" else (4096, 8192))
    return max((matmul_rate(n), n) for n in sizes)


def flops(compiled) -> float:
    """FLOPs of a compiled XLA computation, from its cost analysis."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):
        cost = cost[0]
    return float(cost["flops"])


def critic_layer_flops(seeds: int, fan_in: int, batch: int = 256, width: int = 256) -> float:
    """FLOP/s of one critic layer's matmuls alone, for `seeds` seeds of a 2-critic ensemble:
    the forward product, the input gradient and the weight gradient of (2 * seeds)
    independent fan_in x width layers on `batch` rows, batched as the seed- and
    ensemble-vmapped update batches them: how fast XLA runs them with nothing else around."""
    members = 2 * seeds
    keys = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(keys[0], (members, batch, fan_in))
    g = jax.random.normal(keys[1], (members, batch, width))
    kernel = jax.random.normal(keys[2], (members, fan_in, width))

    @jax.jit
    def layer(x, g, kernel):
        return (jnp.einsum("mbi,mio->mbo", x, kernel), jnp.einsum("mbo,mio->mbi", g, kernel),
                jnp.einsum("mbi,mbo->mio", x, g))

    seconds = best_time(lambda: jax.block_until_ready(layer(x, g, kernel)))
    return 3 * 2 * members * batch * fan_in * width / seconds


def random_batches(seeds: int, utd: int, batch: int, obs_dim: int, act_dim: int) -> Batch:
    """Host (numpy) minibatches shaped (seeds, utd, batch, ...), as the replay buffer gives."""
    rng = np.random.default_rng(0)
    shape = (seeds, utd, batch)
    return Batch(
        observations=rng.normal(size=(*shape, obs_dim)).astype(np.float32),
        actions=rng.uniform(-1, 1, size=(*shape, act_dim)).astype(np.float32),
        rewards=rng.normal(size=shape).astype(np.float32),
        next_observations=rng.normal(size=(*shape, obs_dim)).astype(np.float32),
        masks=np.ones(shape, np.float32),
    )


class CompiledUpdate(NamedTuple):
    compiled: object  # the compiled UTD update
    call: Callable[[], None]  # one update call, waited on; it trains the states on
    step_flops: float  # one gradient step's FLOPs, from XLA's cost analysis
    compile_seconds: float  # lowering and compiling the UTD update
    step_matmul_flops: float  # those of its matmuls alone (the dots of its HLO)


def compile_update(agent, obs_dim: int, act_dim: int, seeds: int, utd: int, batch: int,
                   sharding=None) -> CompiledUpdate:
    """The seed-vmapped, jitted UTD update on fresh states and random minibatches, compiled.

    The update donates its states and each call trains on the last one's, as in the trainer
    (`experiment.step_fns.make_step_fns`), so XLA updates them in place rather than copying them.
    FLOPs come from XLA's cost analysis of one gradient step (a UTD-1 update): XLA counts a
    scan's body once, whatever its trip count. With `sharding` (of the seed axis) the calls
    run on the states and batches placed that way; the FLOPs are still counted on one device.
    """
    init = jax.jit(jax.vmap(lambda k: agent.init(k, obs_dim, act_dim)))
    states = init(jax.random.split(jax.random.key(0), seeds))
    update = jax.jit(jax.vmap(agent.update), donate_argnums=0)  # as the trainer runs it
    one_step = random_batches(seeds, 1, batch, obs_dim, act_dim)
    step_flops = flops(update.lower(states, one_step).compile())
    batches = random_batches(seeds, utd, batch, obs_dim, act_dim)
    if sharding is not None:
        states, batches = jax.device_put((states, batches), sharding)
    start = time.perf_counter()
    compiled = update.lower(states, batches).compile()
    compile_seconds = time.perf_counter() - start
    carry = [states]

    def call():
        carry[0], _ = compiled(carry[0], batches)  # the donated states are updated in place
        jax.block_until_ready(carry[0])

    # The scan's body appears once in the HLO text: its dots are one gradient step's.
    matmul_flops = sum(p.flops for p, _ in products(compiled.as_text())[0])
    return CompiledUpdate(compiled, call, step_flops, compile_seconds, matmul_flops)


class UpdateSpeed(NamedTuple):
    rate: float  # seed-updates/s
    flops_per_s: float  # achieved, from XLA's cost analysis
    compile_seconds: float  # lowering and compiling the timed UTD update


def update_throughput(agent, obs_dim: int, act_dim: int, seeds: int, utd: int, batch: int,
                      sharding=None) -> UpdateSpeed:
    """Speed of the update of `compile_update`, and how long it took to compile."""
    update = compile_update(agent, obs_dim, act_dim, seeds, utd, batch, sharding)
    seconds = best_time(update.call, repeats=5, min_seconds=2.0)
    return UpdateSpeed(seeds * utd / seconds, update.step_flops * utd / seconds,
                       update.compile_seconds)


class UpdateAgainstPeak(NamedTuple):
    rates: list[float]  # seed-updates/s, one per round
    fractions: list[float]  # achieved FLOP/s over the matmul peak timed just before, per round
    peaks: list[float]  # that peak, FLOP/s, per round
    compile_seconds: float
    matmul_share: float  # the matmuls' part of the FLOPs counted (the rest: elementwise work)


def update_against_peak(agent, obs_dim: int, act_dim: int, seeds: int, utd: int, batch: int,
                        peak_size: int, rounds: int = 3) -> UpdateAgainstPeak:
    """The update of `compile_update`, timed in `rounds` rounds, each right after the matmul
    peak (at `peak_size`, the size `matmul_peak` found best). This machine's speed drifts by
    several percent over seconds and by more over minutes, so a fraction of a peak timed at
    another moment moves with it; each round's fraction compares two timings taken together."""
    update = compile_update(agent, obs_dim, act_dim, seeds, utd, batch)
    rates, fractions, peaks = [], [], []
    for _ in range(rounds):
        peaks.append(matmul_rate(peak_size))
        seconds = best_time(update.call, repeats=5, min_seconds=2.0)
        rates.append(seeds * utd / seconds)
        fractions.append(update.step_flops * utd / seconds / peaks[-1])
    return UpdateAgainstPeak(rates, fractions, peaks, update.compile_seconds,
                             update.step_matmul_flops / update.step_flops)


def env_seconds(env, steps: int, rng: np.random.Generator, between=None) -> float:
    """Seconds of `steps` random-action steps of a vector env (and the resets they need), with
    `between()`, when given, run untimed before each step."""
    actions = rng.uniform(-1, 1, (steps, env.num_envs, env.act_dim)).astype(np.float32)
    total = 0.0
    for a in actions:
        if between is not None:
            between()
        start = time.perf_counter()
        _, _, terminated, truncated = env.step(a)
        if (terminated | truncated).all():
            env.reset()
        total += time.perf_counter() - start
    return total


def sac_trainer(logdir: str, env: str, utd: int, **settings) -> Trainer:
    """A SAC trainer (1 seed unless `settings` say otherwise) for timing the loop: 300 random
    steps, a 100,000-transition buffer, no progress bar; `settings` are further TrainConfig
    fields (--replay_on_device's among them)."""
    settings = {"start_steps": 300, "buffer_capacity": 100_000, "progress": False, **settings}
    logging.set_verbosity(logging.WARNING)  # orbax's INFO lines, as the run scripts keep off
    return make_trainer(make_agent("sac"), TrainConfig(agent="sac", env=env, utd=utd,
                                                       logdir=logdir, **settings))


def update_seconds(trainer: Trainer, loop, batch: Batch, calls: int) -> float:
    """Seconds of `calls` training steps' jitted calls on one fixed batch (with the buffer on
    the device, one fixed draw of slots), as the loop makes them: the update, then the next
    actions, waited on (the calls train `loop.states` on)."""
    if hasattr(trainer, "device_update"):  # the buffer on the device: draws and gathers there
        obs = trainer.buffer.to_device(loop.obs)
        slots, _ = trainer.draw(trainer.buffer.replay)
        start = time.perf_counter()
        for _ in range(calls):
            trainer.update_on_device(loop, slots)
            jax.device_get(trainer.act_and_draw(loop.states, obs, loop.keys,
                                                trainer.buffer.replay)[::2])
        return time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(calls):
        loop.states, loop.keys, loop.metric_sums = trainer.update_step(
            loop.states, batch, loop.keys, loop.metric_sums)
        np.asarray(trainer.next_actions(loop.states, loop.obs, loop.keys))
    return time.perf_counter() - start
