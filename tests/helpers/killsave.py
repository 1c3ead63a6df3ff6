"""Run a launch script and SIGKILL it in the middle of writing its N-th checkpoint.

    python tests/helpers/killsave.py N launch/run_sac.py --flags...

KILLSAVE_SIGNAL=SIGINT sends that signal instead (a Ctrl-C while saving).

The kill lands after orbax has written the checkpoint's arrays into its temporary directory
and before the step is committed (the JSON item is written last of the three).
"""

import os
import runpy
import signal
import sys

import orbax.checkpoint as ocp

target = int(sys.argv[1])
calls = 0
original = ocp.JsonCheckpointHandler.async_save


async def killing_save(self, *args, **kwargs):
    global calls
    calls += 1
    if calls == target:
        os.kill(os.getpid(), getattr(signal, os.environ.get("KILLSAVE_SIGNAL", "SIGKILL")))
    return await original(self, *args, **kwargs)


ocp.JsonCheckpointHandler.async_save = killing_save
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
