"""Ctrl-C in the scripts of `launch/`: held while they import their libraries, then raised as
KeyboardInterrupt, and raised again where Python dropped it.

Python raises KeyboardInterrupt wherever its main thread is when SIGINT arrives. In a run
script's first second or two, while jaxlib, MuJoCo and the rest are imported and initialised,
that crashed the interpreter: of 25 Ctrl-Cs sent to `run_sac.py` 0.05 to 1.7 s after its start,
one ended in SIGSEGV and one in SIGABRT, with a traceback from inside `jaxlib`. Later, one
raised inside a garbage-collector callback (JAX registers one) or a ctypes callback
(dm_control's MuJoCo warnings) is printed as "Exception ignored" and dropped: 4 of those 25
runs went on training.

`hold()`, which each script calls before its other imports (`import launch.startup`), holds a
Ctrl-C (a second one stops the process at once) until the script's main calls `deliver()`.
Nothing else calls it: a notebook that imports this package keeps its own Ctrl-C. From then on
a Ctrl-C raises KeyboardInterrupt and is also recorded, and `raise_dropped()`, which the
training loop calls at every env step, raises one that Python dropped (printing no "Exception
ignored" traceback for it). A KeyboardInterrupt that no code catches ends the process with one
`error:` line and exit code 130, not a traceback. A process that starts with SIGINT ignored (one
a shell started in the background) keeps ignoring it. A Ctrl-C in the first hundredths of a
second, while Python itself starts, before any of this runs, still gives a traceback.
"""

import os
import signal
import sys

_received = False  # a Ctrl-C came that no KeyboardInterrupt has answered yet


def _hold(signum, frame) -> None:
    global _received
    _received = True
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C is not held


def _raise(signum, frame) -> None:
    global _received
    _received = True
    raise KeyboardInterrupt


def raise_dropped() -> None:
    """Raise KeyboardInterrupt for a Ctrl-C that came and was not answered by one."""
    global _received
    if _received:
        _received = False
        raise KeyboardInterrupt


def hold() -> None:
    """Hold a Ctrl-C until `deliver()`; one that reaches the top later is one line, and one
    that Python drops (`raise_dropped` raises it) prints no "Exception ignored" traceback."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _hold)
    sys.excepthook = _ctrl_c_in_one_line
    sys.unraisablehook = _without_dropped_ctrl_c(sys.unraisablehook)


def _without_dropped_ctrl_c(hook):
    def quiet(unraisable) -> None:
        if unraisable.exc_type is not KeyboardInterrupt:
            hook(unraisable)

    return quiet


def deliver() -> None:
    """From now on a Ctrl-C raises KeyboardInterrupt (and is recorded, for `raise_dropped`);
    one held so far is raised now."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _raise)
    raise_dropped()


def _ctrl_c_in_one_line(kind, value, traceback, previous=sys.excepthook) -> None:
    """sys.excepthook: a KeyboardInterrupt that reached the top is one line and exit 130."""
    if not issubclass(kind, KeyboardInterrupt):
        previous(kind, value, traceback)
        return
    try:
        sys.stdout.flush()
    except OSError:  # a closed pipe
        pass
    print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
    os._exit(130)
