"""A checkpoint's read and write errors told apart: I/O failures (the checkpoint is kept and
tried again) from damaged files, the error that names the damaged file, and the reports of the
reads orbax abandons in a failed restore, dropped (quiet_abandoned_reads)."""

import logging
import os
import sys
from typing import Any

import orbax.checkpoint as ocp

# Status codes and messages of tensorstore errors that are I/O failures, not bugs.
IO_FAILURES = ("RESOURCE_EXHAUSTED", "No space left", "PERMISSION_DENIED", "Input/output error")


def io_failure(error: Exception) -> bool:
    """Whether a restore failed reading its files (I/O errors, permissions: try again later),
    not on their contents (corrupt, truncated or missing files). Tensorstore reports the OS
    error of a failed read as a ValueError with its os_error_code."""
    if isinstance(error, OSError):
        return not isinstance(error, FileNotFoundError)
    text = str(error)
    return isinstance(error, ValueError) and (
        "os_error_code=" in text and "os_error_code='2'" not in text  # ENOENT: missing file
        or any(code in text for code in IO_FAILURES))


ORBAX_SOURCE = os.path.dirname(ocp.__file__)  # where orbax's coroutines are defined


def _orbax_coroutine(thing: Any) -> bool:
    code = getattr(thing, "cr_code", None)
    return code is not None and code.co_filename.startswith(ORBAX_SOURCE)


def _closed_loop_callback(unraisable: Any) -> bool:
    """asyncio's RuntimeError("Event loop is closed") from a call_soon_threadsafe that no Python
    code called: tensorstore's thread finishing a read for an orbax restore that has ended."""
    tb = unraisable.exc_traceback
    return (unraisable.exc_type is RuntimeError and str(unraisable.exc_value) ==
            "Event loop is closed" and tb is not None and
            tb.tb_frame.f_code.co_name == "call_soon_threadsafe")


def _not_an_orbax_task_exception(record: logging.LogRecord) -> bool:
    """asyncio's logger, less "Task exception was never retrieved" of an orbax coroutine."""
    message = record.getMessage()
    return not (message.startswith("Task exception was never retrieved") and
                ORBAX_SOURCE in message)


def quiet_abandoned_reads() -> None:
    """Drop what orbax's abandoned reads report after a restore fails (a damaged checkpoint,
    which restore_latest reports in one line): when one array cannot be read, orbax's restore
    ends with the others' read coroutines still pending. Garbage-collected later, each raises
    (orbax wraps even the GeneratorExit that closes it) as an "Exception ignored in:
    <coroutine object ...>" with the array's whole TensorStore spec, some 60 lines each;
    tensorstore's threads finishing those reads call into the closed event loop ("Event loop
    is closed"), and finished tasks nobody awaited are logged. Only these are dropped: other
    unraisable exceptions and asyncio errors are shown as before. Installed once per process
    (sys.unraisablehook and a filter on the asyncio logger)."""
    if getattr(sys.unraisablehook, "quiets_orbax", False):
        return
    shown = sys.unraisablehook

    def quiet(unraisable) -> None:
        if _orbax_coroutine(unraisable.object) or _closed_loop_callback(unraisable):
            return
        shown(unraisable)

    quiet.quiets_orbax = True
    sys.unraisablehook = quiet
    asyncio_logger = logging.getLogger("asyncio")
    if _not_an_orbax_task_exception not in asyncio_logger.filters:
        asyncio_logger.addFilter(_not_an_orbax_task_exception)


def shortened(text: str, most: int = 400) -> str:
    """`text`, its middle left out where it is longer than `most` characters: tensorstore's
    errors name the file's path at the start and what is wrong with it at the end."""
    if len(text) <= most:
        return text
    return f"{text[:most // 2 - 3]} ... {text[-(most // 2 - 2):]}"


def failure_reason(error: BaseException) -> BaseException:
    """The error that says what is wrong with a checkpoint's file: orbax wraps tensorstore's
    ("OUT_OF_RANGE: Error reading ... value of size 0") in one that names the array's index
    and prints its whole spec."""
    while isinstance(error.__cause__, Exception) and str(error).startswith(
            "Encountered error while reading array index"):
        error = error.__cause__
    return error
