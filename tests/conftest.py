"""Test-wide settings: headless MuJoCo and JAX on the CPU."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
