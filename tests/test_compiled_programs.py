"""A run's programs are the same in every process, so JAX's persistent compilation cache (a
sweep's --compilation_cache) serves each new launch and resume instead of compiling again."""

import os
import subprocess
import sys

import pytest

from interventions import registry
from tests.helpers.runs import HELPERS, REPO


@pytest.mark.slow
def test_every_methods_programs_are_the_same_under_any_hash_seed():
    """Python orders a set of strings by their hashes, seeded anew in each process: a program
    traced in a set's order (a reset's event over a network's large matrices, ReDo's changed
    parameters) was a cache miss in every new process."""
    procs = [subprocess.Popen([sys.executable, os.path.join(HELPERS, "compiled_programs.py")],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}) for seed in ("1", "2")]
    outs = [proc.communicate(timeout=300) for proc in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    digests = [dict((line.rsplit(" ", 1)[0], line.rsplit(" ", 1)[1])
                    for line in out.splitlines()) for out, _ in outs]
    events = {name for name in registry.names() if registry.event_of(name) is not None}
    assert {key.split()[0] for key in digests[0] if key.endswith(" event")} == events
    assert "none update" in digests[0] and "nap update" in digests[0]
    differ = sorted(key for key in digests[0] if digests[0][key] != digests[1].get(key))
    assert not differ, f"programs that differ between two processes: {differ}"
