"""A launch script run inside the test process, as `python launch/<name> args...` would run it:
its module executed as `__main__` (runpy) with `sys.argv` set, its exit code, stdout and stderr
captured at the file descriptors, and the process left as it was found (its flags, signal
handlers, hooks, warnings and log filters, environment and working directory). A run then costs its
training and the programs the process has not compiled yet (those of a config stay for its next
run: experiment/step_fns.py), not a new interpreter importing JAX, MuJoCo and orbax."""

import contextlib
import gc
import io
import logging
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings

import jax
from absl import app, flags
from absl import logging as absl_logging

import experiment.cli  # noqa: F401 - its module-level flag (--methods_from) stays defined
from experiment import ctrl_c
from tests.helpers import forkserver

_ready = False
# Past this resident size a worker drops every compiled program after a run (jax.clear_caches).
KEEP_PROGRAMS_BELOW = 3 * 2**30


def _resident_bytes() -> int:
    """This process's resident memory; past the limit where it cannot be read (no /proc)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return KEEP_PROGRAMS_BELOW


def _init_absl_once() -> None:
    """What absl's app.run does the first time in a process (help flags, its log handler), done
    here once, so that every run below goes through app.run's rerun path alike."""
    global _ready
    if not _ready:
        app.define_help_flags()
        absl_logging.use_absl_handler()
        app._run_init.done = True  # noqa: SLF001 - app.run then only parses the flags
        _ready = True


def _stream_handlers() -> list[logging.StreamHandler]:
    loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict
                                      .values() if isinstance(logger, logging.Logger))]
    return [h for logger in loggers for h in logger.handlers
            if isinstance(h, logging.StreamHandler)]


@contextlib.contextmanager
def _captured_fds():
    """stdout and stderr of Python code and of C code (XLA, MuJoCo) into two temporary files;
    yields a function that returns their text so far."""
    files = [tempfile.TemporaryFile(mode="w+b") for _ in range(2)]
    saved_fds = [os.dup(1), os.dup(2)]
    saved_streams = sys.stdout, sys.stderr
    for stream in saved_streams:
        with contextlib.suppress(Exception):
            stream.flush()
    streams = [io.TextIOWrapper(os.fdopen(os.dup(f.fileno()), "wb", buffering=0),
                                encoding="utf-8", errors="replace", write_through=True)
               for f in files]
    os.dup2(files[0].fileno(), 1)
    os.dup2(files[1].fileno(), 2)
    sys.stdout, sys.stderr = streams
    # A library's log handler that writes to stdout or stderr (submitit's) writes to the
    # captured ones, as it would in a run script's own process; set directly, not with
    # setStream, which flushes the stream it leaves.
    outs = {id(s): streams[0] for s in (saved_streams[0], sys.__stdout__)}
    outs.update({id(s): streams[1] for s in (saved_streams[1], sys.__stderr__)})
    moved = {h: h.stream for h in _stream_handlers() if id(h.stream) in outs}
    for handler in moved:
        handler.stream = outs[id(handler.stream)]

    def texts() -> tuple[str, str]:
        out = []
        for stream, f in zip(streams, files, strict=True):
            stream.flush()
            f.seek(0)
            out.append(f.read().decode("utf-8", errors="replace"))
        return out[0], out[1]

    try:
        yield texts
    finally:
        for stream in streams:
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = saved_streams
        for handler, stream in moved.items():
            handler.stream = stream
        for handler in _stream_handlers():  # one the script made writes where the process does
            if handler.stream in streams:
                handler.stream = (sys.__stdout__, sys.__stderr__)[streams.index(handler.stream)]
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        for stream in streams:
            stream.close()
        for f in files:
            f.close()


@contextlib.contextmanager
def _process_state_restored():
    """Whatever a script changes in its process (flags it defines, Ctrl-C and SIGTERM handlers,
    exception hooks, warnings and log filters, the environment, the working directory) back as
    it was."""
    names = set(flags.FLAGS)
    loggers = {name: logging.getLogger(name) for name in ("", "asyncio", "absl")}
    log_filters = {name: logger.filters[:] for name, logger in loggers.items()}
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hooks = sys.excepthook, sys.unraisablehook
    filters = warnings.filters[:]
    environ = dict(os.environ)
    cwd, argv = os.getcwd(), sys.argv[:]
    try:
        yield
    finally:
        for name in set(flags.FLAGS) - names:  # a script defines its flags when it is executed
            delattr(flags.FLAGS, name)
        flags.FLAGS.unparse_flags()
        for s, handler in handlers.items():
            signal.signal(s, handler)
        sys.excepthook, sys.unraisablehook = hooks
        ctrl_c._pending = False  # noqa: SLF001 - a held Ctrl-C belongs to the run that ended
        warnings.filters[:] = filters
        for name, logger in loggers.items():
            logger.filters[:] = log_filters[name]
        warnings._filters_mutated()  # noqa: SLF001 - a "once" warning shows again, as it would
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        sys.argv[:] = argv


def run_script(path: str, args: list[str], cwd: str) -> subprocess.CompletedProcess:
    """Run the launch script at `path` with `args` in this process; a CompletedProcess as
    subprocess.run(capture_output=True, text=True) would return. An exception that escapes the
    script is its traceback on stderr and exit code 1, as Python would end the process."""
    _init_absl_once()
    code = 0
    with _process_state_restored(), _captured_fds() as texts:
        os.chdir(cwd)
        sys.argv[:] = [path, *args]
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            code = forkserver.exit_code(e)
        except KeyboardInterrupt:  # the scripts answer their own; this one stops the tests
            raise
        except BaseException:  # noqa: BLE001 - reported as the process would report it
            traceback.print_exc()
            code = 1
        finally:
            # The run's objects (its run directory's lock among them) go now, as at a process's
            # end. Its compiled programs stay, as in a notebook: a later run of the same config
            # calls them (experiment/step_fns.py), until the process holds KEEP_PROGRAMS_BELOW.
            gc.collect()
            if _resident_bytes() >= KEEP_PROGRAMS_BELOW:
                jax.clear_caches()
        stdout, stderr = texts()
    return subprocess.CompletedProcess([sys.executable, path, *args], code, stdout, stderr)
