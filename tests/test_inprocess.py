"""tests/helpers/inprocess.py: a launch script run inside the test process answers as the same
command started as a process of its own, and leaves the test process as it found it."""

import logging
import signal
import sys

import pytest
from absl import flags

from tests.helpers import inprocess
from tests.helpers.runs import run


@pytest.mark.slow  # processes of its own, seconds each
def test_a_script_in_process_answers_as_its_own_process(tmp_path):
    for args in (["--help"], ["--env=cheetah-rnu"], ["--num_seeds=0"], ["stray"]):
        inside = run("run_sac.py", *args, f"--logdir={tmp_path}", check=False, separate=False)
        apart = run("run_sac.py", *args, f"--logdir={tmp_path}", check=False, separate=True)
        assert (inside.returncode, inside.stdout, inside.stderr) == (
            apart.returncode, apart.stdout, apart.stderr), args


def test_the_process_is_left_as_it_was(tmp_path):
    inprocess._init_absl_once()  # noqa: SLF001 - absl's help flags stay, made once a process
    names = set(flags.FLAGS)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    hooks = sys.excepthook, sys.unraisablehook
    filters = list(logging.getLogger("asyncio").filters)
    proc = run("run_continual.py", "--task=random_label_digits", "--num_tasks=1", "--epochs=1",
               "--num_seeds=1", "--progress=false", f"--logdir={tmp_path}", separate=False)
    assert "random_label_digits" in proc.stderr
    assert set(flags.FLAGS) == names and not flags.FLAGS.is_parsed()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert (sys.excepthook, sys.unraisablehook) == hooks
    assert logging.getLogger("asyncio").filters == filters
    # and the next script defines its flags anew
    assert run("run_bro.py", "--help", separate=False).stdout.count("--critic_width") == 1
