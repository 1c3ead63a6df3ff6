"""The XLA:CPU options of experiment.xla_flags: how they are added, and that they take effect."""

import os
import subprocess
import sys
import textwrap

import jaxlib
import pytest

from experiment.xla_flags import CPU_FLAGS, CPU_ONLY_FLAGS, GPU_FLAGS, apply_xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_adds_every_flag_on_cpu():
    env = {}
    value = apply_xla_flags(env, gpu=False)
    assert value.split() == [*CPU_FLAGS, *CPU_ONLY_FLAGS]
    assert apply_xla_flags(env, gpu=False) == value  # applying twice adds nothing


def test_keeps_the_users_flags_and_settings():
    env = {"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type=dot,reduce --xla_dump_to=/tmp/x"}
    value = apply_xla_flags(env, gpu=False)
    assert value.split() == ["--xla_cpu_experimental_ynn_fusion_type=dot,reduce",
                             "--xla_dump_to=/tmp/x", *CPU_ONLY_FLAGS]


def test_gpu_keeps_its_reduction_passes_and_stock_opt_out():
    assert apply_xla_flags({}, gpu=True).split() == [*CPU_FLAGS, *GPU_FLAGS]
    env = {"SINGULARCLIP_STOCK_XLA": "1", "XLA_FLAGS": "--xla_dump_to=/tmp/x"}
    assert apply_xla_flags(env, gpu=False) == "--xla_dump_to=/tmp/x"
    assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"


def test_gpu_computes_deterministically_unless_the_user_says_otherwise():
    """Without deterministic GPU ops, two runs of one command can differ on a GPU, and so can a
    resumed run and an uninterrupted one (experiment/xla_flags.py)."""
    assert "--xla_gpu_deterministic_ops=true" in apply_xla_flags({}, gpu=True).split()
    assert "--xla_gpu_deterministic_ops=true" not in apply_xla_flags({}, gpu=False).split()
    env = {"XLA_FLAGS": "--xla_gpu_deterministic_ops=false"}
    assert apply_xla_flags(env, gpu=True).split() == ["--xla_gpu_deterministic_ops=false",
                                                      *CPU_FLAGS]


PROBE = textwrap.dedent("""
    import agents, analysis, envs, interventions, networks, replay  # what run scripts import
    import launch.run_sac  # noqa: F401 (its imports, then launch's flags)
    import jax, jax.numpy as jnp
    x = jnp.ones((256, 256))
    text = jax.jit(lambda a, b: (jnp.sum(a * b, axis=0), a @ b)).lower(x, x).compile().as_text()
    print(text.count('"kind":"__ynn_fusion"'))
""")


def _ynn_fusions(stock: bool) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "SINGULARCLIP_STOCK_XLA")}
    env["JAX_PLATFORMS"] = "cpu"  # the options are XLA:CPU's, also where the suite runs on a GPU
    if stock:
        env["SINGULARCLIP_STOCK_XLA"] = "1"
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.slow
@pytest.mark.skipif(jaxlib.__version__ != "0.10.2", reason="counts the YNNPACK fusions that "
                    f"jaxlib 0.10.2 (setup.py's pin) forms; this is jaxlib {jaxlib.__version__}")
def test_flags_take_effect_when_the_run_scripts_import_the_project():
    """XLA reads XLA_FLAGS at its first compilation: an import-time computation anywhere in the
    project would silently drop the options. Stock jaxlib 0.10.2 gives the matmul and the
    reduction to YNNPACK (2 fusions); with the options XLA runs both itself (0)."""
    assert _ynn_fusions(stock=True) == 2
    assert _ynn_fusions(stock=False) == 0


def test_the_scripts_run_lapack_on_one_openblas_thread_unless_the_user_says_otherwise():
    from experiment.startup import one_blas_thread
    environ = {}
    one_blas_thread(environ)
    assert environ == {"OPENBLAS_NUM_THREADS": "1"}
    environ = {"OPENBLAS_NUM_THREADS": "4"}
    one_blas_thread(environ)
    assert environ == {"OPENBLAS_NUM_THREADS": "4"}
