"""SAC's update with the policy's mean and log-std heads as one product, or as two Dense layers.

    python benchmarks/policy_heads.py              # 1 and 4 seeds, 8 rounds (a few minutes)
    python benchmarks/policy_heads.py --seeds 4 --rounds 4

`networks.policies.TanhGaussianPolicy` computes its two heads with `networks.layers.dense_heads`
(one `x @ [k_mean k_log_std]` product, split). This compiles the seed-vmapped, donated UTD-8
update (humanoid dimensions) twice in one process, once with that policy and once with a copy
whose heads are two `Dense` layers (the same parameters and initialisation), and times them in
alternating rounds, since this machine's speed drifts by several percent over seconds. Prints
each version's median seed-updates/s and the median of the per-round ratios.
"""

import argparse
import statistics

import flax.linen as nn
import jax
from bench_utils import CompiledUpdate, best_time, compile_update, xla_flags
from recording import record

import agents.sac
from agents import make_agent
from networks.common import MLP, default_init
from networks.layers import Dense
from networks.policies import TanhGaussianPolicy, squash_log_std

OBS_DIM, ACT_DIM, UTD, BATCH = 67, 21, 8, 256


class TwoDenseHeads(TanhGaussianPolicy):
    """The policy with its heads as two Dense layers instead of `dense_heads`."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = MLP(self.hidden_dims, self.layer_norm)(obs)
        mean = Dense(self.act_dim, kernel_init=default_init(), name="mean")(x)
        raw = Dense(self.act_dim, kernel_init=default_init(), name="log_std")(x)
        return mean, squash_log_std(raw, self.log_std_min, self.log_std_max)


def compiled_update(policy: type, seeds: int) -> CompiledUpdate:
    """The trainer's update (seed-vmapped, states donated) with `policy` as SAC's actor."""
    agents.sac.TanhGaussianPolicy = policy  # read by agents.sac.networks() when tracing
    try:
        return compile_update(make_agent("sac"), OBS_DIM, ACT_DIM, seeds, UTD, BATCH)
    finally:
        agents.sac.TanhGaussianPolicy = TanhGaussianPolicy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    if args.rounds < 1 or min(args.seeds) < 1:
        parser.error("--rounds and --seeds must be >= 1")
    print(f"SAC update, UTD {UTD}, batch {BATCH}, humanoid dimensions; XLA_FLAGS: {xla_flags()}")
    rows = []
    for seeds in args.seeds:
        versions = {name: compiled_update(policy, seeds) for name, policy in
                    (("one product", TanhGaussianPolicy), ("two Dense layers", TwoDenseHeads))}
        rates = {name: [] for name in versions}
        for _ in range(args.rounds):
            for name, update in versions.items():
                rates[name].append(seeds * UTD / best_time(update.call, repeats=3,
                                                           min_seconds=0.6))
        one, two = rates["one product"], rates["two Dense layers"]
        ratios = [a / b for a, b in zip(one, two, strict=True)]
        print(f"{seeds} seed(s): heads as one product {statistics.median(one):.0f} seed-updates/s,"
              f" as two Dense layers {statistics.median(two):.0f}; ratio "
              f"{statistics.median(ratios):.3f} (median of {args.rounds} rounds, "
              f"{min(ratios):.3f} to {max(ratios):.3f})")
        what = f"SAC update, UTD {UTD}, {seeds} seed(s), policy heads"
        rows += [(f"{what} as one product", statistics.median(one), "seed-updates/s"),
                 (f"{what} as two Dense layers", statistics.median(two), "seed-updates/s"),
                 (f"{what}, one product / two Dense layers", statistics.median(ratios), "x")]
    record("policy_heads", rows)


if __name__ == "__main__":
    main()
