"""BRO's update throughput at UTD 10, humanoid dimensions (obs 67, act 21), default networks.

    python benchmarks/bro_update.py              # 1 and 4 seeds (a few minutes on 2 cores)
    python benchmarks/bro_update.py --profile    # also: where one gradient step's time goes

Prints seed-updates/s of the jitted, seed-vmapped UTD-10 update (batch 128) and its FLOP/s
(XLA cost analysis) as a fraction of the float32 matmul peak measured in the same run, before
and after the update (the larger of the two is used), and the seconds its compilation took.
--profile traces a few updates with jax.profiler and sums the thread time of each kind of XLA
op per gradient step, next to the wall time per step, to show how much of the step is matmul
and how busy the threads are.
"""

import argparse
import collections
import glob
import gzip
import json
import re
import tempfile

import jax
from bench_utils import (
    matmul_peak,
    random_batches,
    update_throughput,
    xla_flags,
)

from agents import make_agent

OBS_DIM, ACT_DIM = 67, 21  # humanoid
UTD, BATCH = 10, 128
MATMUL_OPS = ("ynn_fusion", "dot", "xnn_fusion", "convolution")


def op_times(trace_dir: str, steps: int) -> tuple[dict[str, float], dict[str, float]]:
    """Per gradient step: thread seconds of each kind of XLA op, and busy seconds per thread."""
    path = sorted(glob.glob(f"{trace_dir}/**/*.json.gz", recursive=True))[-1]
    with gzip.open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    kinds, threads = collections.Counter(), collections.Counter()
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or name.startswith(("$", "ThunkExecutor", "PjitFunction")):
            continue
        kinds[re.sub(r"\.\d+$", "", name)] += e["dur"] * 1e-6 / steps
        threads[e.get("tid")] += e["dur"] * 1e-6 / steps
    return dict(kinds), dict(threads)


def profile(agent, seeds: int, calls: int = 3) -> None:
    """Thread time per gradient step by op kind, from a jax.profiler trace of `calls` updates."""
    init = jax.jit(jax.vmap(lambda k: agent.init(k, OBS_DIM, ACT_DIM)))
    states = init(jax.random.split(jax.random.key(0), seeds))
    update = jax.jit(jax.vmap(agent.update))
    batches = random_batches(seeds, UTD, BATCH, OBS_DIM, ACT_DIM)
    jax.block_until_ready(update(states, batches))
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(update(states, batches))
        kinds, threads = op_times(trace_dir, calls * UTD)
    matmul = sum(t for k, t in kinds.items() if k.startswith(MATMUL_OPS))
    total = sum(kinds.values())
    print(f"\nprofile, {seeds} seed(s), per gradient step: op thread time {1e3 * total:.1f} ms, "
          f"of which matmul {1e3 * matmul:.1f} ms; busiest threads "
          + ", ".join(f"{1e3 * t:.1f}" for t in sorted(threads.values(), reverse=True)[:4])
          + " ms")
    for kind, t in sorted(kinds.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {1e3 * t:8.2f} ms  {kind}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    agent = make_agent("bro")
    print(f"BRO update, UTD {UTD}, batch {BATCH}, obs {OBS_DIM}, act {ACT_DIM}, "
          f"{jax.devices()[0].device_kind}; XLA_FLAGS: {xla_flags()}")
    for seeds in args.seeds:
        before = matmul_peak()[0]
        rate, flops_per_s, compile_seconds = update_throughput(agent, OBS_DIM, ACT_DIM, seeds,
                                                               UTD, BATCH)
        peak = max(before, matmul_peak()[0])
        print(f"{seeds} seed(s): {rate:6.1f} seed-updates/s, {flops_per_s / 1e9:6.1f} GFLOP/s "
              f"= {flops_per_s / peak:.1%} of the matmul peak {peak / 1e9:.0f} GFLOP/s "
              f"({flops_per_s / rate / 1e9:.2f} GFLOP per seed and gradient step; compiled in "
              f"{compile_seconds:.1f} s)")
    if args.profile:
        for seeds in args.seeds:
            profile(agent, seeds)


if __name__ == "__main__":
    main()
