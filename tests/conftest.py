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
# persistent compilation cache between them (a cache hit loads the same executable). One cache
# per pytest-xdist worker (`-n 2`): JAX writes an entry in place, so a process of one worker
# could read another's half-written entry, and its warning would reach a run script's stderr.
# The workers inherit the environment that this file sets in pytest's main process.
SHARED_CACHE = os.path.join(tempfile.gettempdir(), "singularclip-test-jax-cache")
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...; unset in one process
if os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", SHARED_CACHE) == SHARED_CACHE and WORKER:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = f"{SHARED_CACHE}-{WORKER}"
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

from experiment.startup import one_blas_thread  # noqa: E402
from experiment.xla_flags import apply_xla_flags  # noqa: E402

apply_xla_flags()  # the XLA:CPU options training runs with, before JAX starts
one_blas_thread()  # and its one OpenBLAS thread, before numpy and scipy load OpenBLAS

if os.environ["JAX_PLATFORMS"] != "cpu":
    # A GPU multiplies float32 in TF32 by default (about 1e-3 relative error); the tests compare
    # against float64 references, so they check the math at full float32 precision.
    import jax  # noqa: E402

    jax.config.update("jax_default_matmul_precision", "highest")

# submitit configures logging when it is imported (logging.config.dictConfig), which closes the
# handlers that exist then; imported here, before pytest adds its log-capturing ones, rather than
# by a sweep script that a test runs in this process.
import pytest  # noqa: E402
import submitit  # noqa: E402, F401

from tests.helpers.fixtures import group_shared_fixtures  # noqa: E402


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    group_shared_fixtures(items)  # before pytest-xdist reads the groups
