"""Shared measurement helpers for the benchmark scripts (run as `python benchmarks/<name>.py`).

Importing it sets the framework's XLA:CPU options (`launch.xla_flags`), so the benchmarks
measure what training runs with; SINGULARCLIP_STOCK_XLA=1 measures stock XLA instead.
"""

import os
import time
from collections.abc import Callable

from launch.xla_flags import apply_xla_flags

apply_xla_flags()  # before the first computation starts JAX's backend

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

from agents.common import Batch  # noqa: E402


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


def matmul_peak(sizes=(512, 1024, 2048)) -> tuple[float, int]:
    """The best float32 matmul FLOP/s this machine reaches under jit, and the size reaching it."""
    best = (0.0, 0)
    for n in sizes:
        a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
        b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
        mm = jax.jit(jnp.matmul)
        seconds = best_time(lambda a=a, b=b, mm=mm: mm(a, b).block_until_ready())
        best = max(best, (2.0 * n**3 / seconds, n))
    return best


def flops(compiled) -> float:
    """FLOPs of a compiled XLA computation, from its cost analysis."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):
        cost = cost[0]
    return float(cost["flops"])


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


def update_throughput(agent, obs_dim: int, act_dim: int, seeds: int, utd: int, batch: int):
    """(seed-updates/s, achieved FLOP/s) of the seed-vmapped, jitted UTD update.

    FLOPs come from XLA's cost analysis of one gradient step (a UTD-1 update), times utd:
    XLA counts a scan's body once, whatever its trip count.
    """
    init = jax.jit(jax.vmap(lambda k: agent.init(k, obs_dim, act_dim)))
    states = init(jax.random.split(jax.random.key(0), seeds))
    update = jax.jit(jax.vmap(agent.update))
    one_step = random_batches(seeds, 1, batch, obs_dim, act_dim)
    step_flops = flops(update.lower(states, one_step).compile())
    batches = random_batches(seeds, utd, batch, obs_dim, act_dim)
    seconds = best_time(lambda: jax.block_until_ready(update(states, batches)), repeats=3)
    return seeds * utd / seconds, step_flops * utd / seconds


def dot_generals(jaxpr) -> list[tuple[list[tuple[int, ...]], object]]:
    """(operand shapes, dimension numbers) of every dot_general in `jaxpr`, sub-jaxprs included."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(([tuple(v.aval.shape) for v in eqn.invars],
                          eqn.params["dimension_numbers"]))
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found.extend(dot_generals(inner))
    return found


def matmul_only_seconds(fn: Callable, *args, repeats_in_scan: int = 32) -> float:
    """Seconds the matmuls of `fn(*args)` take if each runs alone at its shape and nothing else
    costs time: a bound on how fast `fn` can be on this machine without changing its shapes.

    Each distinct dot_general is timed as `repeats_in_scan` copies on fresh operands inside one
    compiled `lax.scan` (so dispatch is amortised), then summed over every occurrence.
    """
    total, timed = 0.0, {}
    for shapes, dims in dot_generals(jax.make_jaxpr(fn)(*args).jaxpr):
        key = (tuple(shapes), str(dims))
        if key not in timed:
            lhs, rhs = (jax.random.normal(jax.random.key(i), (repeats_in_scan, *shape))
                        for i, shape in enumerate(shapes))
            timed[key] = _scanned_dot_seconds(lhs, rhs, dims) / repeats_in_scan
        total += timed[key]
    return total


def _scanned_dot_seconds(lhs: jax.Array, rhs: jax.Array, dims) -> float:
    """Best seconds of one compiled scan of dot_general(lhs[i], rhs[i], dims) over i."""

    def body(carry, pair):
        return carry, lax.dot_general(pair[0], pair[1], dims)

    run = jax.jit(lambda a, b: lax.scan(body, 0, (a, b))[1])
    return best_time(lambda: run(lhs, rhs).block_until_ready(), repeats=3, min_seconds=0.1)


def update_matmul_bound(agent, obs_dim: int, act_dim: int, seeds: int, batch: int) -> float:
    """FLOP/s of one seed-vmapped gradient step if only its matmuls took time
    (`matmul_only_seconds`); compare with `update_throughput`'s achieved FLOP/s."""
    init = jax.jit(jax.vmap(lambda k: agent.init(k, obs_dim, act_dim)))
    states = init(jax.random.split(jax.random.key(0), seeds))
    update = jax.vmap(agent.update)
    one_step = random_batches(seeds, 1, batch, obs_dim, act_dim)
    step_flops = flops(jax.jit(update).lower(states, one_step).compile())
    return step_flops / matmul_only_seconds(update, states, one_step)
