"""A Dense layer's input gradient `g @ kernel.T`: XLA's direct product against the two other
forms networks.layers can use, under the framework's XLA options (importing bench_utils sets
them).

    python benchmarks/input_grad.py

Prints microseconds per jitted call (best of 5, at least 0.3 s each) of the input gradient of
an ensemble of `members` Dense layers (vmapped, as the critics are), each seeing `rows` rows, for
the layer shapes of SAC's critics (256 x 256 at batch 256; 8 members = 4 seeds x 2 critics),
SAC's actor (256 x 256 at batch 256, 1 and 4 seeds), BRO's critics (512 x 512 at batch 128),
BRO's actor (256 x 256 at batch 128) and a 1024-wide critic, in three forms: the direct product
(contracting the last axes of both), the kernel transposed first (a copy of it, then a plain
product), and the transposed product `(kernel @ g.T).T`. `layers` is what `networks.layers`
runs: the transposed product where the layer has fewer rows than units, the kernel transposed
first elsewhere. Timed alone, one product per call: inside an update, with other work around
it, the gains differ (see the module notes of networks/layers.py).
"""

import jax
from bench_utils import best_time, xla_flags
from recording import record

from networks.layers import (
    _contract_last,
    _input_grad,
    _input_grad_kernel_first,
    _input_grad_transposed,
)

FORMS = {"direct": _contract_last, "kernel^T first": _input_grad_kernel_first,
         "(kernel @ g.T).T": _input_grad_transposed, "layers": _input_grad}
# (members, rows, in units, out units)
SHAPES = ((2, 256, 256, 256), (8, 256, 256, 256), (1, 256, 256, 256), (4, 256, 256, 256),
          (2, 128, 512, 512), (1, 128, 256, 256), (2, 128, 1024, 1024))


def main() -> None:
    print(f"{jax.devices()[0].device_kind}; XLA_FLAGS: {xla_flags()}")
    print("members x rows, in x out: " + ", ".join(FORMS) + " (us)")
    results = []
    for members, rows, units_in, units_out in SHAPES:
        g = jax.random.normal(jax.random.key(0), (members, rows, units_out))
        kernel = jax.random.normal(jax.random.key(1), (members, units_in, units_out))
        times = []
        for form in FORMS.values():
            f = jax.jit(jax.vmap(form))
            times.append(best_time(lambda f=f, g=g, k=kernel: f(g, k).block_until_ready(),
                                   min_seconds=0.3))
        print(f"{members} x {rows}, {units_in} x {units_out}: "
              + ", ".join(f"{1e6 * t:7.1f}" for t in times)
              + f"  (layers {times[0] / times[-1]:.2f}x direct)")
        what = f"input gradient, {members} member(s) x {rows} rows, {units_in} x {units_out}"
        results += [(f"{what}, {form}", 1e6 * t, "us")
                    for form, t in zip(FORMS, times, strict=True)]
    record("input_grad", results)


if __name__ == "__main__":
    main()
