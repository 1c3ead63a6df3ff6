"""A Dense layer's input gradient `g @ kernel.T`: XLA's direct product against the form
networks.layers uses, under the framework's XLA options (importing bench_utils sets them).

    python benchmarks/input_grad.py

Prints microseconds per jitted call (best of 5, at least 0.3 s each) of the input gradient of
an ensemble of `members` Dense layers (vmapped, as the critics are), each seeing `rows` rows, for
the layer shapes of SAC's critics (256 x 256 at batch 256; 8 members = 4 seeds x 2 critics),
BRO's critics (512 x 512 at batch 128), BRO's actor (256 x 256 at batch 128) and a 1024-wide
critic. `layers` is what `networks.layers` runs: the transposed form `(kernel @ g.T).T` where it
has fewer rows than units, the direct product elsewhere (the two columns then time the same
computation).
"""

import jax
from bench_utils import best_time, xla_flags

from networks.layers import _contract_last, _input_grad

# (members, rows, in units, out units)
SHAPES = ((2, 256, 256, 256), (8, 256, 256, 256), (2, 128, 512, 512), (1, 128, 256, 256),
          (2, 128, 1024, 1024))


def main() -> None:
    print(f"{jax.devices()[0].device_kind}; XLA_FLAGS: {xla_flags()}")
    for members, rows, units_in, units_out in SHAPES:
        g = jax.random.normal(jax.random.key(0), (members, rows, units_out))
        kernel = jax.random.normal(jax.random.key(1), (members, units_in, units_out))
        direct, layers = (jax.jit(jax.vmap(f)) for f in (_contract_last, _input_grad))
        times = [best_time(lambda f=f, g=g, k=kernel: f(g, k).block_until_ready(), min_seconds=0.3)
                 for f in (direct, layers)]
        print(f"{members} x {rows} rows, {units_in} x {units_out}: direct {1e6 * times[0]:7.1f} us,"
              f" layers {1e6 * times[1]:7.1f} us ({times[0] / times[1]:.2f}x)")


if __name__ == "__main__":
    main()
