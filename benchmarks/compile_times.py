"""Benchmark compilation: what a run pays before its first step and at its first event.

    python benchmarks/compile_times.py                      # every part (a few minutes)
    python benchmarks/compile_times.py --parts=draws,bisection
    python benchmarks/compile_times.py --parts=run --methods=reset,redo

(1) draws: XLA compiling a seed-vmapped `jax.random.normal(key, (m, n))` against the same numbers
drawn flat and reshaped (`numerics.rng.normal`), for a classifier head's (256, 10) and a
hidden layer's (784, 256), 10 keys.
(2) bisection: the two extreme eigenvalues of ten 256 x 256 symmetric tridiagonal matrices (the
Gram route of `numerics.linalg.extreme_singular_values`) by two
`jax.scipy.linalg.eigh_tridiagonal` calls against `linalg._tridiagonal_extremes`' multisection:
compile seconds, run time and largest error against float64 over lambda_max; and compiling
`extreme_singular_values` of ten 784 x 256 matrices by the Gram route against by SVDs.
(3) run: a continual run under random_label_mnist's protocol on MNIST-sized synthetic inputs (10
seeds), each method's in a process of its own: the first call of its init, task, diagnostics
and event (of each of --methods) against a later call; the difference, the compilation, also in
task calls.
(4) agents: the seed-vmapped init and UTD update of SAC (humanoid's dimensions) and BRO (dog's),
4 seeds, UTD 2, batch 128: tracing, lowering and compiling each (the update's tracing also
on its own: the part of a run's start that JAX's persistent compilation cache cannot save).

Compile times are the least of --repeats compilations (each after jax.clear_caches()) where the
part compiles a function alone, or one first call where it runs a whole run's calls.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from experiment.startup import one_blas_thread

one_blas_thread()  # before numpy and scipy load OpenBLAS, as the launch scripts do

# isort: split
import jax
import jax.numpy as jnp
import numpy as np
from bench_utils import best_time, random_batches
from continual_speed import make_run, source_of, task_call
from recording import record

from agents import make_agent
from continual.tasks import DIAGNOSTICS
from interventions import registered
from numerics import linalg, rng
from numerics.linalg import (
    EXTREMES_GRAM_MIN_SIDE,
    _tridiagonal_extremes,
    extreme_singular_values,
)

PARTS = ("draws", "bisection", "run", "agents")
EVENTS = ("clip", "reset", "redo", "layer_reset", "shrink_perturb", "dash")
Rows = list[tuple[str, float, str]]


def compile_seconds(fn: Callable, *args, repeats: int) -> float:
    """The least time of `repeats` lowerings and compilations of jit(fn) on args."""
    best = float("inf")
    for _ in range(repeats):
        jax.clear_caches()
        start = time.perf_counter()
        jax.jit(fn).lower(*args).compile()
        best = min(best, time.perf_counter() - start)
    return best


def draws_part(repeats: int) -> Rows:
    keys = jax.random.split(jax.random.key(0), 10)
    compile_seconds(lambda k: k, keys, repeats=1)  # the first compilation of the process
    rows = []
    for shape in ((256, 10), (784, 256)):
        for name, draw in (("jax.random.normal", jax.random.normal), ("rng.normal", rng.normal)):
            fn = jax.vmap(lambda k, draw=draw, shape=shape: draw(k, shape))
            seconds = compile_seconds(fn, keys, repeats=repeats)
            print(f"{name} {shape}, 10 keys vmapped: compiles in {seconds:.2f} s")
            rows.append((f"{name} {shape[0]} x {shape[1]}, 10 keys vmapped, compile", seconds,
                         "s"))
    return rows


def eigh_tridiagonal_extremes(d: jax.Array, e: jax.Array) -> tuple[jax.Array, jax.Array]:
    n = d.shape[-1]

    def one(d, e):
        return tuple(jax.scipy.linalg.eigh_tridiagonal(d, e, eigvals_only=True, select="i",
                                                        select_range=(k, k))[0]
                     for k in (0, n - 1))

    return jax.vmap(one)(d, e)


def bisection_part(repeats: int) -> Rows:
    rng_np = np.random.default_rng(0)
    w = rng_np.standard_normal((10, 784, 256)) / 28
    gram = jnp.asarray(np.einsum("bij,bik->bjk", w, w), jnp.float32)
    # One LAPACK call per matrix, as the library makes them (batched ones can deadlock).
    _, d, e, _ = jax.jit(lambda g: linalg.unrolled(jax.lax.linalg.tridiagonal, g))(gram)
    t = np.zeros((10, 256, 256))
    idx = np.arange(256)
    t[:, idx, idx] = np.asarray(d, np.float64)
    t[:, idx[:-1], idx[1:]] = t[:, idx[1:], idx[:-1]] = np.asarray(e, np.float64)
    lam = np.linalg.eigvalsh(t)
    rows = []
    for name, fn in (("eigh_tridiagonal x2", eigh_tridiagonal_extremes),
                     ("multisection", _tridiagonal_extremes)):
        seconds = compile_seconds(fn, d, e, repeats=repeats)
        f = jax.jit(fn)
        lo, hi = f(d, e)
        error = max(np.max(np.abs(np.asarray(lo) - lam[:, 0]) / lam[:, -1]),
                    np.max(np.abs(np.asarray(hi) - lam[:, -1]) / lam[:, -1]))
        ms = best_time(lambda f=f: jax.block_until_ready(f(d, e)), repeats=7) * 1e3
        print(f"{name}: compiles in {seconds:.2f} s, runs in {ms:.2f} ms, error {error:.1e} "
              "of lambda_max")
        what = f"extreme eigenvalues of ten 256 x 256 tridiagonals, {name}"
        rows += [(f"{what}, compile", seconds, "s"), (f"{what}, run", ms, "ms"),
                 (f"{what}, largest error over lambda_max", error, "")]
    stack = jnp.asarray(w, jnp.float32)
    for route, min_side in (("Gram route", 1), ("SVDs", 10**9)):
        linalg.EXTREMES_GRAM_MIN_SIDE = min_side
        seconds = compile_seconds(extreme_singular_values, stack, repeats=repeats)
        print(f"extreme singular values of ten 784 x 256 matrices, {route}: compiles in "
              f"{seconds:.2f} s")
        rows.append((f"extreme singular values of ten 784 x 256 matrices, {route}, compile",
                     seconds, "s"))
    linalg.EXTREMES_GRAM_MIN_SIDE = EXTREMES_GRAM_MIN_SIDE
    return rows


def first_and_later(fn: Callable) -> tuple[float, float]:
    """(seconds of fn's first call, seconds of its best later call); fn blocks."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    return first, best_time(fn, repeats=3)


def run_calls(method: str) -> dict[str, tuple[float, float]]:
    """A continual run's calls in its order, in this process: {call: (first, later seconds)}
    for its init, task, diagnostics and, unless `method` is none, its event."""
    task, source = source_of("mnist")
    run = make_run(task, source, method, 10, 2, tempfile.mkdtemp())
    calls = {"init": first_and_later(lambda: jax.block_until_ready(run.init_fn(run.init_keys)))}
    start = time.perf_counter()
    go, states = task_call(run)
    calls["task"] = (time.perf_counter() - start, best_time(go, repeats=3))
    batch = run.examples(0, DIAGNOSTICS, run.cfg.batch_size)
    calls["diagnostics"] = first_and_later(lambda: jax.block_until_ready(run.diagnose(states,
                                                                                      batch)))
    spectra = jax.device_get(run.diagnose(states, batch))
    if run.event is not None:
        calls["event"] = first_and_later(lambda: jax.block_until_ready(
            run.event(jax.tree.map(jnp.copy, states), 0, spectra)[0]))
    return calls


def run_part(methods: list[str]) -> Rows:
    """Each method's run in a process of its own, as a run is: nothing that one run compiled
    (weight_extremes' programs, for one) is there for the next."""
    what = "random_label_mnist, MNIST-sized synthetic, 10 seeds"
    rows = []

    def report(name: str, first: float, later: float, task_seconds: float) -> None:
        compiled = max(first - later, 0.0)
        print(f"{name}: first call {first:.2f} s, later {later * 1e3:.0f} ms: compiling "
              f"{compiled:.2f} s, {compiled / task_seconds:.1f} task calls")
        rows.extend([(f"{what}, {name}, first call", first, "s"),
                     (f"{what}, {name}, a later call", later * 1e3, "ms"),
                     (f"{what}, {name}, compiling in task calls", compiled / task_seconds, "")])

    def calls_of(method: str) -> dict:
        out = subprocess.run([sys.executable, __file__, f"--run_calls={method}"], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    base = calls_of("none")
    task_seconds = base["task"][1]
    for call in ("init", "task", "diagnostics"):
        report(call, *base[call], task_seconds)
    for name in methods:
        report(f"{name} event (its report included)", *calls_of(name)["event"], task_seconds)
    return rows


def agents_part() -> Rows:
    rows = []
    for name, obs_dim, act_dim in (("sac", 67, 21), ("bro", 223, 38)):
        agent = make_agent(name)
        keys = jax.random.split(jax.random.key(0), 4)
        init = jax.jit(jax.vmap(lambda k, agent=agent, o=obs_dim, a=act_dim: agent.init(k, o, a)))
        start = time.perf_counter()
        lowered = init.lower(keys)
        compiled_init = lowered.compile()
        init_seconds = time.perf_counter() - start
        states = compiled_init(keys)
        batches = random_batches(4, 2, 128, obs_dim, act_dim)
        update = jax.jit(jax.vmap(agent.update), donate_argnums=0)
        start = time.perf_counter()
        traced = update.trace(states, batches)
        trace_seconds = time.perf_counter() - start
        traced.lower().compile()
        update_seconds = time.perf_counter() - start
        print(f"{name}: init compiles in {init_seconds:.2f} s, the UTD update in "
              f"{update_seconds:.2f} s ({trace_seconds:.2f} s of it tracing)")
        what = f"{name}, obs {obs_dim}, act {act_dim}, 4 seeds"
        rows += [(f"{what}, init, compile", init_seconds, "s"),
                 (f"{what}, UTD 2 update at batch 128, compile", update_seconds, "s"),
                 (f"{what}, UTD 2 update at batch 128, tracing (part of compile)",
                  trace_seconds, "s")]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--methods", default=",".join(EVENTS),
                        help="events of the run part, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run_calls", help=argparse.SUPPRESS)  # the run part's child process
    args = parser.parse_args()
    if args.run_calls:
        print(json.dumps(run_calls(args.run_calls)))
        return
    parts = args.parts.split(",")
    if set(parts) - set(PARTS):
        parser.error(f"--parts: unknown {', '.join(sorted(set(parts) - set(PARTS)))}; "
                     f"accepted: {', '.join(PARTS)}")
    methods = args.methods.split(",")
    events = [n for n, m in registered().items() if m.kind == "event"]
    if set(methods) - set(events):
        parser.error(f"--methods: not events: {', '.join(sorted(set(methods) - set(events)))};"
                     f" accepted: {', '.join(events)}")
    rows = []
    if "draws" in parts:
        rows += draws_part(args.repeats)
    if "bisection" in parts:
        rows += bisection_part(args.repeats)
    if "run" in parts:
        rows += run_part(methods)
    if "agents" in parts:
        rows += agents_part()
    record("compile_times", rows)


if __name__ == "__main__":
    main()
