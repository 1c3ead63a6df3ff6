"""The batch sums in a bias, scale or shift gradient: XLA's reduce against networks.layers'
pairwise sum of row slices, under the framework's XLA options (importing bench_utils sets them).

    python benchmarks/batch_sums.py

Prints microseconds per jitted call (best of 5, at least 0.3 s each) for the gradient shapes of
SAC's critic ensemble (2 x 256 x 256), BRO's (2 x 128 x 512) and a larger batch (2 x 2560 x 256).
"""

import jax
from bench_utils import best_time, xla_flags
from recording import record

from networks.layers import sum_rows

SHAPES = ((2, 256, 256), (2, 128, 512), (2, 2560, 256))


def main() -> None:
    print(f"{jax.devices()[0].device_kind}; XLA_FLAGS: {xla_flags()}")
    rows = []
    for shape in SHAPES:
        g = jax.random.normal(jax.random.key(0), shape)
        reduce = jax.jit(lambda g: g.sum(axis=1))
        pairwise = jax.jit(jax.vmap(sum_rows))  # one sum over the batch rows per critic
        times = [best_time(lambda f=f, g=g: f(g).block_until_ready(), min_seconds=0.3)
                 for f in (reduce, pairwise)]
        print(f"{' x '.join(map(str, shape)):>14}: XLA reduce {1e6 * times[0]:7.1f} us, "
              f"pairwise sum {1e6 * times[1]:7.1f} us ({times[0] / times[1]:.1f}x)")
        what = f"sum over the batch, {' x '.join(map(str, shape))}"
        rows += [(f"{what}, XLA reduce", 1e6 * times[0], "us"),
                 (f"{what}, pairwise sum", 1e6 * times[1], "us")]
    record("batch_sums", rows)


if __name__ == "__main__":
    main()
