"""What each script of `launch/` does first, before it imports JAX (`begin()`): set the XLA
options of `launch.xla_flags`, and, when that script is the program (`python
launch/run_sac.py ...`; not when a test or a notebook imports it as a module), hold a Ctrl-C
that comes while the libraries are imported until the script's main is ready for it; one that
Python drops later is raised in the training loop (`launch.ctrl_c`)."""

import os
import sys

from launch import ctrl_c
from launch.xla_flags import apply_xla_flags

SCRIPTS = ("run_sac.py", "run_bro.py", "sweep.py", "aggregate.py", "plot_run.py",
           "run_continual.py", "aggregate_continual.py", "compare_continual.py",
           "condition_numbers.py", "anisotropic_init.py")


def begin() -> None:
    """XLA's options, then the Ctrl-C hold of a script run as the program."""
    apply_xla_flags()
    program = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    if os.path.basename(program) in SCRIPTS:
        ctrl_c.hold()
