"""Taking a run directory for training, for RL and continual runs alike: whether it can be
written, what it holds (fresh, resume, done), and the lock held while a process trains it."""

import errno
import os
import tempfile
from collections.abc import Callable

from experiment.config import ConfigError
from experiment.rundir.lock import lock_run_dir

PATH_MAX = 4096  # Linux's limit on a path's length, in bytes
CHECKPOINT_PATH_ROOM = 256  # below the run directory: checkpoints/<step>.orbax-...-tmp/... files


def claim(run_dir: str, decide: Callable[[], str]):
    """(lock, state): `decide()` ("fresh", "resume" or "done", what the directory holds) and
    the directory's lock, which is taken before it is read where a process has trained there
    (a .lock), so that a second launch is refused (RunDirInUse) rather than racing this one.
    A finished run gets no lock (lock None): it is only read, and may be archived read-only."""
    try:
        lock = lock_dir(run_dir) if os.path.exists(os.path.join(run_dir, ".lock")) else None
    except ConfigError:  # read-only: a finished run needs no lock to say so
        if decide() != "done":
            raise
        return None, "done"
    state = decide()  # a refusal here creates nothing
    if state == "done":
        if lock is not None:
            lock.close()
        return None, state
    check_writable(run_dir)
    return lock or lock_dir(run_dir), state


def lock_dir(run_dir: str):
    """lock_run_dir, with a .lock that cannot be opened (a read-only run directory) refused as
    an unwritable one (ConfigError)."""
    try:
        return lock_run_dir(run_dir)
    except OSError as e:
        raise ConfigError(f"cannot write to the run directory {run_dir}: {e.strerror}; "
                          "choose a writable --logdir") from None


def check_writable(run_dir: str, create: bool = True) -> None:
    """Raise ConfigError unless the run directory can be created and written. Without `create`
    it is judged without leaving anything behind: the nearest folder that exists must be a
    directory where a probe folder can be made (and is removed at once; permissions alone
    pass root anywhere, /proc included), and the names below it to create must fit."""
    path = os.path.abspath(run_dir)
    if "[" in path or "]" in path:  # orbax finds a checkpoint's files with a glob below it
        raise ConfigError(f"the run directory {path} has '[' or ']' in its path; checkpoints "
                          "written below such a path cannot be restored (orbax reads the "
                          "brackets as a glob pattern): choose a --logdir and --run_name "
                          "without them")
    if len(os.fsencode(path)) > PATH_MAX - CHECKPOINT_PATH_ROOM:
        raise ConfigError(f"the run directory's path is {len(os.fsencode(path))} bytes long; its "
                          f"checkpoints' files need up to {CHECKPOINT_PATH_ROOM} more, within "
                          f"the system's limit of {PATH_MAX}: choose a shorter --logdir")
    try:
        if create:
            os.makedirs(run_dir, exist_ok=True)
            probe = os.path.join(run_dir, ".write_test")
            with open(probe, "w") as f:
                f.write("ok")
            os.remove(probe)
            return
        folder, missing = os.path.abspath(run_dir), []
        while not os.path.lexists(folder):  # the part a launch would create
            folder, name = os.path.split(folder)
            missing.append(name)
        if any(len(os.fsencode(name)) > 255 for name in missing):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, f"{folder} is not a writable directory")
        os.rmdir(tempfile.mkdtemp(prefix=".dry_run_probe_", dir=folder))
    except OSError as e:
        raise ConfigError(f"cannot write to the run directory {run_dir}: {e.strerror}; "
                          "choose a writable --logdir") from None
