"""The XLA options this framework runs with, added to XLA_FLAGS before JAX starts its backend.

- `--xla_cpu_experimental_ynn_fusion_type=` (empty) hands nothing to XNNPACK's YNNPACK kernels,
  which jaxlib 0.10.2 gives matmuls and reductions by default and which run both slower than XLA
  itself at this project's sizes (256- and 512-wide layers).
- `--xla_disable_hlo_passes=tree_reduction_rewriter` stops XLA:CPU from splitting each reduction
  into a reduce-window and a second reduce (two kernels where one does), which changes no result
  beyond float32 rounding. Only where no GPU plugin is installed: GPU backends have their own
  reduction passes.
- `--xla_gpu_deterministic_ops=true`, where a GPU plugin is installed, makes a GPU compute the
  same numbers every time (XLA's GPU kernels may otherwise sum in an order that changes from run
  to run), which a bit-identical resume needs; it costs some update speed, and
  `XLA_FLAGS=--xla_gpu_deterministic_ops=false` trades the reproducibility for it.

`python benchmarks/xla_options.py` runs the SAC update under other options. A flag the user
already put in XLA_FLAGS is left as the user set it; SINGULARCLIP_STOCK_XLA=1 adds nothing. XLA
reads XLA_FLAGS once, when the first computation starts its backend, so this must run before
that: the entry points call it through `experiment.startup.begin()` before they import JAX, and
tests/conftest.py before the suite does; importing this module changes nothing.
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
