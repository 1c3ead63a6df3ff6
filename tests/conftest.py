"""Test-wide settings: headless MuJoCo and JAX on the CPU."""

import os
import tempfile

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# The end-to-end tests start many processes that compile the same programs: share JAX's
# persistent compilation cache between them (a cache hit loads the same executable).
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "singularclip-test-jax-cache")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import launch  # noqa: E402,F401 (sets the XLA:CPU options of launch.xla_flags before JAX starts)
