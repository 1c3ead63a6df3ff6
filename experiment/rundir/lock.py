"""The lock a training process holds on its run directory (`.lock`), so that a second launch
of the same run is refused rather than racing the first over its checkpoints and logs."""

import fcntl
import os
import platform
import sys


class RunDirInUse(RuntimeError):
    """Another process holds the run directory's lock (it trains that run now)."""


EXIT_IN_USE = 75  # a run script's exit code for RunDirInUse (EX_TEMPFAIL: try again later)

EXIT_STOPPED = 143  # a run script's exit code after a SIGTERM (128 + 15): it checkpointed


def _in_use(run_dir: str, handle) -> RunDirInUse:
    handle.seek(0)
    holder = handle.read().strip() or "another process"
    handle.close()
    path = os.path.join(run_dir, ".lock")
    return RunDirInUse(f"{run_dir} is being trained by {holder}; wait for it to end or stop it "
                       "first (if that process is gone, as with a node that crashed, delete "
                       f"{path})")


def check_not_in_use(run_dir: str) -> None:
    """RunDirInUse when another process holds the run directory's lock; writes nothing."""
    try:
        handle = open(os.path.join(run_dir, ".lock"))  # noqa: SIM115 - closed below
    except OSError:  # no lock file: nothing trains there
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(run_dir, handle) from None
    except OSError:  # a filesystem without locks: a launch would warn and train
        pass
    handle.close()


def lock_run_dir(run_dir: str):
    """An exclusive lock on the run directory (its `.lock` file) for as long as the returned
    file stays open (the process's life); RunDirInUse naming the holder when another process
    has it, as when the same run is launched twice. A filesystem without locks warns."""
    path = os.path.join(run_dir, ".lock")
    handle = open(path, "a+")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(run_dir, handle) from None
    except OSError as e:  # a filesystem without locks (some Lustre and NFS mounts)
        print(f"warning: cannot lock {path} ({e.strerror}); a second launch of this run "
              "would not be refused", file=sys.stderr)
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {platform.node()}\n")
    handle.flush()
    return handle
