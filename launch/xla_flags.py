"""The XLA options this framework runs with, added to XLA_FLAGS before JAX starts its backend.

Measured on 2 CPU cores (`python benchmarks/throughput.py`, `python benchmarks/bro_update.py`):

- `--xla_cpu_experimental_ynn_fusion_type=` (empty) hands nothing to XNNPACK's YNNPACK kernels:
  XLA runs matmuls and reductions itself. jaxlib 0.10.2's default hands YNNPACK both, and at
  these sizes (256- and 512-wide layers, sums over a few hundred rows or units) it runs both
  slower. First measured with YNNPACK for matmuls only (`=dot`): the SAC update at UTD 8 with
  1 seed went from about 100 to about 135 seed-updates/s, BRO's at UTD 10 from 21 to 25. With
  `networks/layers.py`, dropping YNNPACK for matmuls too took SAC from 164-169 to 187-193 with
  1 seed and from 175-185 to 204-209 with 4; BRO stayed about the same with 1 seed (29.0-30.2
  and 29.7-30.0) and went from 29.5-29.9 to 30.6-30.9 with 4.
- `--xla_disable_hlo_passes=tree_reduction_rewriter` stops XLA:CPU from splitting each reduction
  into a reduce-window and a second reduce (two kernels where one does): another 5-15 %. float32
  sums of 10^4 to 10^7 elements come out bit-identical with and without it.

Neither changes what is computed beyond float32 rounding (the test suite runs with them). The
pass is only disabled where no GPU plugin is installed, since GPU backends have their own
reduction passes.

Where a GPU plugin is installed, `--xla_gpu_deterministic_ops=true` makes a GPU compute the same
numbers every time: without it XLA's GPU kernels may sum in an order that changes from run to
run. On an H200 (jax 0.11.2), two runs of the same tiny `run_sac.py` command wrote eval returns
that differed from the second evaluation on (39.3986 against 39.3349); with it, two runs were
identical, and so was a run killed and resumed (`tests/test_resume.py`), which is what makes a
resume on a GPU exact. It costs throughput: SAC's 4-seed UTD-8 update ran 9,990 seed-updates/s
against 11,484, BRO's 4-seed UTD-10 update 3,426 against 3,973 (one timing each); both then
compiled faster (2.8 s against 7.2, 5.2 s against 15.1).
`XLA_FLAGS=--xla_gpu_deterministic_ops=false` trades the reproducibility for that speed.

A flag the user already put in XLA_FLAGS is left as the user set it;
SINGULARCLIP_STOCK_XLA=1 adds nothing. XLA reads XLA_FLAGS once, when the first computation
starts its backend, so this must run before that: `launch/__init__.py` calls it on import.
"""

import importlib.util
import os
from collections.abc import MutableMapping

CPU_FLAGS = ("--xla_cpu_experimental_ynn_fusion_type=",)
CPU_ONLY_FLAGS = ("--xla_disable_hlo_passes=tree_reduction_rewriter",)
GPU_FLAGS = ("--xla_gpu_deterministic_ops=true",)
GPU_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin")


def gpu_plugin_installed() -> bool:
    return any(importlib.util.find_spec(name) is not None for name in GPU_PLUGINS)


def apply_xla_flags(environ: MutableMapping[str, str] = os.environ,
                    gpu: bool | None = None) -> str:
    """Append this framework's XLA options to `environ["XLA_FLAGS"]`; returns the new value."""
    current = environ.get("XLA_FLAGS", "")
    if environ.get("SINGULARCLIP_STOCK_XLA") == "1":
        return current
    if gpu is None:
        gpu = gpu_plugin_installed()
    wanted = CPU_FLAGS + (GPU_FLAGS if gpu else CPU_ONLY_FLAGS)
    added = [flag for flag in wanted if flag.split("=")[0] not in current]
    if added:
        environ["XLA_FLAGS"] = " ".join([current, *added]).strip()
    return environ.get("XLA_FLAGS", "")
