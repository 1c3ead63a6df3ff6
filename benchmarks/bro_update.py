"""BRO's update throughput at UTD 10, humanoid dimensions (obs 67, act 21), default networks.

    python benchmarks/bro_update.py              # 1 and 4 seeds (a few minutes on 2 cores)

Prints seed-updates/s of the jitted, seed-vmapped UTD-10 update (batch 128) and its FLOP/s
(XLA cost analysis) as a fraction of the float32 matmul peak, in --rounds rounds that each time
the peak just before the update (medians and ranges), and the seconds its compilation took.
`python benchmarks/update_matmuls.py --agent=bro` times its matmuls alone.
"""

import argparse

import jax
import numpy as np
from bench_utils import matmul_peak, update_against_peak, xla_flags
from recording import record

from agents import make_agent

OBS_DIM, ACT_DIM = 67, 21  # humanoid
UTD, BATCH = 10, 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=3,
                        help="timings of the update, each just after one of the peak")
    args = parser.parse_args()
    agent = make_agent("bro")
    print(f"BRO update, UTD {UTD}, batch {BATCH}, obs {OBS_DIM}, act {ACT_DIM}, "
          f"{jax.devices()[0].device_kind}; XLA_FLAGS: {xla_flags()}")
    size = matmul_peak()[1]
    rows = []
    for seeds in args.seeds:
        rates, fractions, peaks, compile_seconds, share = update_against_peak(
            agent, OBS_DIM, ACT_DIM, seeds, UTD, BATCH, peak_size=size, rounds=args.rounds)
        print(f"{seeds} seed(s): {np.median(rates):6.1f} seed-updates/s = "
              f"{np.median(fractions):.1%} of the matmul peak (medians of {len(rates)} rounds: "
              f"{min(rates):.1f}-{max(rates):.1f} seed-updates/s, {min(fractions):.1%}-"
              f"{max(fractions):.1%} of {min(peaks) / 1e9:.0f}-{max(peaks) / 1e9:.0f} GFLOP/s; "
              f"compiled in {compile_seconds:.1f} s)")
        print(f"  those are all the FLOPs XLA's cost analysis counts; the matmuls are "
              f"{share:.1%} of them: counting only theirs, {share * np.median(fractions):.1%} "
              "of the peak")
        what = f"BRO update, UTD {UTD}, {seeds} seed(s)"
        rows += [(what, np.median(rates), "seed-updates/s"),
                 (what, 100 * np.median(fractions), "% of matmul peak"),
                 (f"{what}, compilation", compile_seconds, "s")]
    record("bro_update", rows)


if __name__ == "__main__":
    main()
