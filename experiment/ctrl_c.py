"""Ctrl-C in the scripts of `launch/`: held while they import their libraries, then raised as
KeyboardInterrupt, and raised again where Python dropped it.

Python raises KeyboardInterrupt wherever its main thread is when SIGINT arrives. In a run
script's first second or two, while jaxlib, MuJoCo and the rest are imported and initialised,
that crashed the interpreter: of 25 Ctrl-Cs sent to `run_sac.py` 0.05 to 1.7 s after its start,
one ended in SIGSEGV and one in SIGABRT, with a traceback from inside `jaxlib`. Later, one
raised inside a garbage-collector callback (JAX registers one) or a ctypes callback
(dm_control's MuJoCo warnings) is printed as "Exception ignored" and dropped: 4 of those 25
runs went on training.

`hold()`, which `experiment/startup.py` calls before a script's other imports when that script is
the program (not when a test or a notebook imports it), holds a Ctrl-C (a second one stops the
process at once) until the script's main calls `deliver()`, and from then on records a
KeyboardInterrupt that Python drops (instead of printing it as "Exception ignored") or that code
it runs through swallows, which `raise_dropped()` raises: the training loop calls it at every
env step, the sweep at every check of its jobs (aggregation, which has no such loop, leaves one
dropped there dropped). A process that never calls `hold()` keeps Python's Ctrl-C as it is.
After `hold()`, a KeyboardInterrupt that no code catches ends the process with one `error:` line
and exit code 130, not a traceback, and so does an error that C code made of one: a
KeyboardInterrupt raised in Python code that C code called (numpy's dtype lookup calling a jax
scalar type's `__hash__`) can come back as a SystemError caused by it, which `as_interrupt()`
turns back into the KeyboardInterrupt. A process that starts with SIGINT ignored (one a shell
started in the background) keeps ignoring it. A Ctrl-C in the first hundredths of a second,
while Python itself starts, before any of this runs, still gives a traceback.
"""

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

_pending = False  # a Ctrl-C held during the imports, or one Python dropped, not raised since


def _hold(signum, frame) -> None:
    global _pending
    _pending = True
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C is not held


def _interrupt(signum, frame) -> None:
    """Python's own Ctrl-C (raise KeyboardInterrupt here), also recorded for
    `raise_dropped`: library code that swallows it (an `except BaseException`) cannot make a
    run go on training. Every place that catches it ends the process."""
    global _pending
    _pending = True
    raise KeyboardInterrupt


def _recording_drops(hook):
    """sys.unraisablehook that records a KeyboardInterrupt Python dropped, for `raise_dropped`,
    instead of printing it as "Exception ignored"; anything else goes to `hook`."""

    def record(unraisable) -> None:
        global _pending
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type,
                                                          KeyboardInterrupt):
            _pending = True
        else:
            hook(unraisable)

    return record


def hold() -> None:
    """Hold a Ctrl-C until `deliver()`, record the ones Python drops, and make one that
    reaches the top one line."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _hold)
    sys.excepthook = _ctrl_c_in_one_line(sys.excepthook)
    sys.unraisablehook = _recording_drops(sys.unraisablehook)


def deliver() -> None:
    """From now on a Ctrl-C raises KeyboardInterrupt (and is recorded, in case something
    swallows it); one held so far is raised now."""
    if signal.getsignal(signal.SIGINT) is _hold or _pending:
        signal.signal(signal.SIGINT, _interrupt)
    raise_dropped()


def raise_dropped() -> None:
    """Raise KeyboardInterrupt for a Ctrl-C that was held or dropped and not raised since."""
    global _pending
    if _pending:
        _pending = False
        raise KeyboardInterrupt


def caused_by_ctrl_c(error: BaseException) -> bool:
    """Whether `error` is a KeyboardInterrupt or was raised from or while handling one."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


@contextlib.contextmanager
def as_interrupt() -> Iterator[None]:
    """Raise an error that came from a Ctrl-C (`caused_by_ctrl_c`) as the KeyboardInterrupt
    it is, so that the script's `except KeyboardInterrupt` answers it."""
    try:
        yield
    except Exception as error:
        if caused_by_ctrl_c(error):
            raise KeyboardInterrupt from error
        raise


def _ctrl_c_in_one_line(hook):
    """sys.excepthook: a KeyboardInterrupt (or an error caused by one) that reached the top is
    one line and exit 130 (with no interpreter shutdown, as `experiment.protocol.interrupted`);
    anything else goes to `hook`."""

    def one_line(kind, value, traceback) -> None:
        if not (issubclass(kind, KeyboardInterrupt) or caused_by_ctrl_c(value)):
            hook(kind, value, traceback)
            return
        try:
            sys.stdout.flush()
        except OSError:  # a closed pipe
            pass
        print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        os._exit(130)

    return one_line
