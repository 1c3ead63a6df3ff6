"""BRO's update throughput at UTD 10, humanoid dimensions (obs 67, act 21), default networks.

    python benchmarks/bro_update.py              # 1 and 4 seeds (a few minutes on 2 cores)

Prints seed-updates/s of the jitted, seed-vmapped UTD-10 update (batch 128) and its FLOP/s
(XLA cost analysis) as a fraction of the float32 matmul peak measured in the same run, before
and after the update (the larger of the two is used), and the seconds its compilation took.
`python benchmarks/update_matmuls.py --agent=bro` times its matmuls alone.
"""

import argparse

import jax
from bench_utils import matmul_peak, update_throughput, xla_flags

from agents import make_agent

OBS_DIM, ACT_DIM = 67, 21  # humanoid
UTD, BATCH = 10, 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4])
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


if __name__ == "__main__":
    main()
