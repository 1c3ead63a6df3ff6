"""Test-wide settings: headless MuJoCo and JAX on the CPU."""

import os
import signal
import tempfile

# A suite started in the background of a non-interactive shell (`nohup ... &`) inherits SIGINT
# ignored, and Python then gives neither this process nor the run scripts the tests start a
# KeyboardInterrupt on Ctrl-C; with a handler here, those scripts start with the default again.
signal.signal(signal.SIGINT, signal.default_int_handler)

# Nothing renders, so no EGL or display is needed (as in envs.names). The suite runs on the CPU
# unless JAX_PLATFORMS says otherwise (e.g. JAX_PLATFORMS=cuda to run it on a GPU); the launch
# scripts it starts inherit both.
os.environ.setdefault("MUJOCO_GL", "disabled")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# The end-to-end tests start many processes that compile the same programs: share JAX's
# persistent compilation cache between them (a cache hit loads the same executable).
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "singularclip-test-jax-cache")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import launch  # noqa: E402,F401 (sets the XLA:CPU options of launch.xla_flags before JAX starts)

if os.environ["JAX_PLATFORMS"] != "cpu":
    # A GPU multiplies float32 in TF32 by default (about 1e-3 relative error); the tests compare
    # against float64 references, so they check the math at full float32 precision.
    import jax  # noqa: E402

    jax.config.update("jax_default_matmul_precision", "highest")
