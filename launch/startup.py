"""Imported by each script of `launch/` before its other imports. When that script is the
program (`python launch/run_sac.py ...`; not when a test or a notebook imports it as a
module), a Ctrl-C that comes while the libraries are imported is held until the script's main
is ready for it, and one that Python drops later is raised in the training loop
(`launch.ctrl_c`)."""

import os
import sys

from launch import ctrl_c

SCRIPTS = ("run_sac.py", "run_bro.py", "sweep.py", "aggregate.py", "plot_run.py",
           "run_continual.py", "aggregate_continual.py", "compare_continual.py",
           "condition_numbers.py", "anisotropic_init.py")

_program = getattr(sys.modules.get("__main__"), "__file__", None) or ""
if os.path.basename(_program) in SCRIPTS:
    ctrl_c.hold()
