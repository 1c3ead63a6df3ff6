"""How much of a gradient step is matmul: each matmul of the compiled update, timed alone.

    python benchmarks/update_matmuls.py                        # SAC, 4 seeds, UTD 8, batch 256
    python benchmarks/update_matmuls.py --agent=bro --seeds 1  # BRO, UTD 10, batch 128
    python benchmarks/update_matmuls.py --seeds 1 --top 40

Compiles the seed-vmapped update with its states donated (as the trainer runs it), on humanoid
dimensions and random minibatches, and times a gradient step. Then it takes every dot
instruction of the compiled program (each runs once per gradient step) and compiles the same
products (operand shapes, contracting and batch dimensions from the HLO; operands in row-major
layout, as XLA lays them out in these updates) into one call with nothing else, on random
operands, and times it. Prints the step time, the matmuls' time and its share of the step, and
what the update would reach as a fraction of the float32 matmul peak measured in the same run
if everything but its matmuls took no time: the ceiling that the matmuls, as XLA:CPU runs
them, put on that fraction. Then each distinct product (timed as a few copies in one call):
its time, how often it runs per step, its FLOP/s as a fraction of the peak, where in the
networks it is (from its op name) and its shapes.

A profiler trace is no substitute here: XLA:CPU runs some products asynchronously on its
thread pool, so a product's trace event can end before its work does (and shows it above the
peak).
"""

import argparse
import collections
import time

import jax
from bench_utils import Product, best_time, compile_update, matmul_peak, products, xla_flags
from recording import record

from agents import make_agent

OBS_DIM, ACT_DIM = 67, 21  # humanoid
SHAPES = {"sac": (8, 256), "bro": (10, 128)}  # UTD, batch: each agent's defaults
REPEATS = 4  # copies of a product per timed call, when it is timed on its own


def time_products(batch: list[Product]) -> float:
    """Best seconds of one jitted call computing every product of `batch`, each on its own
    random float32 operands: matmuls back to back, as in the update, with one call's overhead
    shared by all of them."""
    keys = iter(jax.random.split(jax.random.key(0), 2 * len(batch)))
    operands = [(jax.random.normal(next(keys), p.lhs), jax.random.normal(next(keys), p.rhs))
                for p in batch]

    @jax.jit
    def run(operands):
        return [jax.lax.dot_general(a, b, p.dims) for p, (a, b) in zip(batch, operands,
                                                                        strict=True)]

    return best_time(lambda: jax.block_until_ready(run(operands)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agent", choices=sorted(SHAPES), default="sac")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--top", type=int, default=20, help="distinct products listed")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    utd, batch = SHAPES[args.agent]
    agent = make_agent(args.agent)
    peak = matmul_peak()[0]
    update = compile_update(agent, OBS_DIM, ACT_DIM, args.seeds, utd, batch)
    step = best_time(update.call, repeats=5, min_seconds=2.0) / utd
    step_flops = update.step_flops
    found, other_layout = products(update.compiled.as_text())
    start = time.perf_counter()
    matmul_seconds = time_products([p for p, _ in found])
    alone = {p: time_products([p] * REPEATS) / REPEATS for p in dict.fromkeys(p for p, _ in found)}
    matmul_flops = sum(p.flops for p, _ in found)

    print(f"{args.agent.upper()} update, {args.seeds} seed(s), UTD {utd}, batch {batch}, "
          f"humanoid dimensions; {jax.devices()[0].device_kind}; XLA_FLAGS: {xla_flags()}")
    print(f"matmul peak {peak / 1e9:.0f} GFLOP/s; a gradient step takes {step * 1e3:.2f} ms, "
          f"{step_flops / 1e9:.3f} GFLOP (XLA's cost analysis) = {step_flops / step / peak:.1%} "
          "of the peak")
    print(f"its {len(found)} matmuls ({matmul_flops / 1e9:.3f} GFLOP), in one call with nothing "
          f"else ({time.perf_counter() - start:.0f} s to time): {matmul_seconds * 1e3:.2f} ms = "
          f"{matmul_seconds / step:.0%} of the step, {matmul_flops / matmul_seconds / peak:.1%} "
          f"of the peak; with everything else taking no time the update would reach "
          f"{step_flops / matmul_seconds / peak:.1%} of the peak in all the FLOPs XLA's cost "
          f"analysis counts (the matmuls' are {matmul_flops / step_flops:.1%} of them)")
    if other_layout:
        print(f"  operands not in row-major layout in the update: {', '.join(other_layout)}")
    where = collections.defaultdict(list)
    for p, name in found:
        where[p].append(name)
    ranked = sorted(alone, key=lambda p: -alone[p] * len(where[p]))
    print(f"each distinct product, timed as {REPEATS} copies in one call:")
    print(f"{'us':>9} {'runs':>4} {'peak':>6}  where (first of its runs)")
    for p in ranked[:args.top]:
        print(f"{alone[p] * 1e6:9.0f} {len(where[p]):4d} {p.flops / alone[p] / peak:6.1%}  "
              f"{where[p][0][:60]:60s} {p.describe()}")
    what = f"{args.agent.upper()} update, {args.seeds} seed(s), UTD {utd}"
    record("update_matmuls", [
        ("matmul peak (float32)", peak / 1e9, "GFLOP/s"),
        (f"{what}, gradient step", step * 1e3, "ms"),
        (f"{what}, gradient step", 100 * step_flops / step / peak, "% of matmul peak"),
        (f"{what}, its matmuls alone", matmul_seconds * 1e3, "ms"),
        (f"{what}, its matmuls alone", 100 * matmul_flops / matmul_seconds / peak,
         "% of matmul peak"),
        (f"{what}, ceiling with everything but the matmuls free",
         100 * step_flops / matmul_seconds / peak, "% of matmul peak")])


if __name__ == "__main__":
    main()
