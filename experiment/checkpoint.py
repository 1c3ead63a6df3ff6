"""Orbax checkpoints of everything a run needs to continue exactly as if it had never stopped.

A checkpoint holds three items: `device` (the seed-batched agent states, action keys and metric
sums, with PRNG keys stored as their raw data), `host` (the replay buffer's arrays, the env
RNG states, the current observations and pending actions) and `meta` (JSON: env step, log
file offsets, buffer pointers, the numpy generator of the random actions). Orbax writes each
step to a temporary directory and renames it when complete, so a crash while saving leaves the
previous checkpoint intact; the last `keep` are kept.

The host arrays (a 1M-transition buffer is hundreds of MB per seed) go through `HostArrays`, a
small orbax handler that streams each array to its own .npy file with a CRC-32: no copy of the
buffer is made while saving, only its filled slots are written, and a truncated or corrupted
file is detected on restore.

Every array is verified on restore: `meta` records a CRC-32 of each device array's bytes, and
one of `meta` itself, written with the checkpoint (the host arrays carry theirs in their
index). A checkpoint whose bytes changed since (a flipped bit on disk, a file edited) is
damaged like a truncated one: named, moved aside, and the one before it is restored, with one
warning line: the reads orbax abandoned in the failed restore (coroutines, tensorstore's
callbacks into its closed event loop) are dropped quietly, not reported as hundreds of lines of
tracebacks (`quiet_abandoned_reads`).
"""

import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import zlib
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from experiment.rundir.record import CannotResume


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def keys_to_data(tree):
    """Replace typed PRNG keys by their uint32 data (orbax stores plain arrays)."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def data_to_keys(tree, template):
    """Inverse of `keys_to_data`, taking the key positions from `template`."""
    return jax.tree.map(lambda x, t: jax.random.wrap_key_data(x) if _is_key(t) else x,
                        tree, template)


def _crc32(array: np.ndarray, crc: int = 0) -> int:
    """CRC-32 of the array's bytes in C order, without copying it when it is a view of a
    larger array (the replay buffer's filled slots): block by block along the first axis."""
    if array.flags.c_contiguous:
        return zlib.crc32(memoryview(array).cast("B"), crc)
    for block in array:
        crc = _crc32(np.asarray(block), crc)
    return crc


def array_crc32(array) -> int:
    """CRC-32 of an array's bytes in C order, of any dtype (bfloat16, PRNG key data, 0-d)."""
    return zlib.crc32(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def device_digests(tree) -> dict[str, int]:
    """The CRC-32 of every leaf of a device tree (PRNG keys as their data), by leaf path."""
    leaves = jax.tree_util.tree_flatten_with_path(jax.device_get(keys_to_data(tree)))[0]
    return {jax.tree_util.keystr(path): array_crc32(np.asarray(x)) for path, x in leaves}


def meta_digest(meta: dict) -> int:
    """CRC-32 of `meta` (less its own digest) as canonical JSON: what the checkpoint's meta
    item holds, read back, gives the same number."""
    body = {k: v for k, v in meta.items() if k != "meta_crc32"}
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


class DigestMismatch(ValueError):
    """A checkpoint's array or meta item whose bytes differ from those it was written with."""


class HostArrays(ocp.CheckpointHandler):
    """Numpy arrays, one .npy file each, written straight from their memory, with CRC-32s of
    their data and, in the index, their dtypes and shapes."""

    INDEX = "index.json"

    def save(self, directory, args: "HostArraysSave") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        index = {}
        for i, (name, array) in enumerate(sorted(args.arrays.items())):
            array = np.asarray(array)  # np.save writes a non-contiguous view in chunks
            filename = f"{i}.npy"
            with open(directory / filename, "wb") as f:
                np.save(f, array, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            index[name] = {"file": filename, "crc32": _crc32(array), "dtype": array.dtype.str,
                           "shape": list(array.shape)}
        (directory / self.INDEX).write_text(json.dumps(index))

    def restore(self, directory, args: "HostArraysRestore | None" = None) -> dict:
        index = json.loads((directory / self.INDEX).read_text())
        out = {}
        for name, entry in index.items():
            # Mapped, not read into memory: the replay buffer copies its arrays into its own, so
            # a resume holds the buffer once in memory (and in the page cache), not twice.
            array = np.load(directory / entry["file"], mmap_mode="r", allow_pickle=False)
            # The CRC-32 covers the data, the index the header (indexes written before it did
            # record no dtype and shape)
            written = (entry.get("dtype", array.dtype.str), entry.get("shape", list(array.shape)))
            if (array.dtype.str, list(array.shape)) != written:
                raise ValueError(f"{entry['file']} ({name}) holds a {array.dtype.str} array of "
                                 f"shape {list(array.shape)}; {written[0]} of shape "
                                 f"{written[1]} was written")
            if _crc32(array) != entry["crc32"]:
                raise ValueError(f"checksum mismatch in {entry['file']} ({name})")
            out[name] = array
        return out

    def metadata(self, directory) -> None:
        return None


@ocp.args.register_with_handler(HostArrays, for_save=True)
@dataclasses.dataclass
class HostArraysSave(ocp.args.CheckpointArgs):
    arrays: dict[str, np.ndarray]


@ocp.args.register_with_handler(HostArrays, for_restore=True)
@dataclasses.dataclass
class HostArraysRestore(ocp.args.CheckpointArgs):
    pass


def _abstract(tree):
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def layout(tree) -> dict[str, list]:
    """Every leaf's path, shape and dtype (PRNG keys as their data), as JSON for `meta`."""
    leaves = jax.tree_util.tree_flatten_with_path(keys_to_data(tree))[0]
    return {jax.tree_util.keystr(path): [list(x.shape), str(x.dtype)] for path, x in leaves}


class CheckpointMismatch(CannotResume):
    """A checkpoint that is intact but holds an agent state of another shape than this run's
    (the code or its settings changed since it was written)."""


# Status codes and messages of tensorstore errors that are I/O failures, not bugs.
IO_FAILURES = ("RESOURCE_EXHAUSTED", "No space left", "PERMISSION_DENIED", "Input/output error")


def _io_failure(error: Exception) -> bool:
    """Whether a restore failed reading its files (I/O errors, permissions: try again later),
    not on their contents (corrupt, truncated or missing files). Tensorstore reports the OS
    error of a failed read as a ValueError with its os_error_code."""
    if isinstance(error, OSError):
        return not isinstance(error, FileNotFoundError)
    text = str(error)
    return isinstance(error, ValueError) and (
        "os_error_code=" in text and "os_error_code='2'" not in text  # ENOENT: missing file
        or any(code in text for code in IO_FAILURES))


class CheckpointCorrupt(CannotResume):
    """No checkpoint in the directory could be restored."""


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


def _shortened(text: str, most: int = 400) -> str:
    """`text`, its middle left out where it is longer than `most` characters: tensorstore's
    errors name the file's path at the start and what is wrong with it at the end."""
    if len(text) <= most:
        return text
    return f"{text[:most // 2 - 3]} ... {text[-(most // 2 - 2):]}"


def _reason(error: BaseException) -> BaseException:
    """The error that says what is wrong with a checkpoint's file: orbax wraps tensorstore's
    ("OUT_OF_RANGE: Error reading ... value of size 0") in one that names the array's index
    and prints its whole spec."""
    while isinstance(error.__cause__, Exception) and str(error).startswith(
            "Encountered error while reading array index"):
        error = error.__cause__
    return error


@contextlib.contextmanager
def interrupts_deferred():
    """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block has finished, then
    raise KeyboardInterrupt as it would have (nothing if SIGINT was ignored): a checkpoint
    being written is completed, not abandoned half-written among orbax's worker threads."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler installed outside Python: let it be the default's
        previous = signal.SIG_DFL

    def hold(signum, frame):
        received.append(signum)
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C is not held: a hung save ends

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if not received or previous == signal.SIG_IGN:
        return
    if callable(previous):  # Python's default_int_handler raises KeyboardInterrupt
        previous(signal.SIGINT, None)
    else:  # SIG_DFL: deliver it again
        os.kill(os.getpid(), signal.SIGINT)


HALF_WRITTEN = re.compile(r"(\d+)\.orbax-checkpoint-tmp")  # orbax's name while it writes


UNITS = ("env step", "task")  # what a checkpoint's step counts: env steps, or tasks done


class Checkpointer:
    """Saves and restores `(device, host, meta)` triples by step in `directory`: an RL run's
    env step, or (`unit="task"`) a continual run's tasks done, which its messages name as the
    task the checkpoint follows."""

    def __init__(self, directory: str, keep: int = 2, unit: str = "env step"):
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
        self.unit = unit
        self.directory = os.path.abspath(directory)
        # Checkpoints a process stopped in the middle of writing, which orbax deletes on opening.
        names = os.listdir(self.directory) if os.path.isdir(self.directory) else []
        self.discarded = sorted(int(m[1]) for m in map(HALF_WRITTEN.match, names) if m)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=False, cleanup_tmp_directories=True
        )
        self.manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("device", "host", "meta")
        )

    def steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def at(self, step: int) -> str:
        """Where the checkpoint of `step` is, for messages: "at env step 250", or for a
        continual run, whose step counts the tasks done, "after task 2" (of step 3)."""
        return f"after task {step - 1}" if self.unit == "task" else f"at env step {step}"

    def save(self, env_step: int, device, host: dict[str, np.ndarray], meta: dict) -> None:
        """Write the checkpoint of `env_step`; a Ctrl-C meanwhile stops the run after it. The
        meta item records the device tree's layout, which a restore checks first, the CRC-32s
        of its arrays and its own."""
        meta = {**meta, "device_layout": layout(device), "device_crc32": device_digests(device)}
        meta = json.loads(json.dumps(meta))  # as it reads back: tuples as lists, say
        meta["meta_crc32"] = meta_digest(meta)
        with interrupts_deferred():
            try:
                self.manager.save(
                    env_step,
                    args=ocp.args.Composite(
                        device=ocp.args.StandardSave(keys_to_data(device)),
                        host=HostArraysSave(host),
                        meta=ocp.args.JsonSave(meta),
                    ),
                    force=True,
                )
                self.manager.wait_until_finished()
            except ValueError as e:  # tensorstore's I/O failures (a full disk) are ValueErrors
                if not ("os_error_code=" in str(e) or any(code in str(e) for code in IO_FAILURES)):
                    raise
                first = next((line for line in str(e).splitlines() if line.strip()), "")
                raise OSError(f"writing the checkpoint {self.at(env_step)} in "
                              f"{self.directory} failed ({first[:300]})") from None

    def _read_meta(self, step: int) -> dict:
        """The checkpoint's meta item; DigestMismatch where it is not what was written
        (checkpoints written before meta recorded its CRC-32 are not checked)."""
        meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        meta = meta["meta"]
        if "meta_crc32" in meta and meta_digest(meta) != meta["meta_crc32"]:
            raise DigestMismatch("its meta item does not match the CRC-32 written with it")
        return meta

    def _check_layout(self, step: int, meta: dict, device_template) -> None:
        """CheckpointMismatch when the checkpoint's recorded device layout is not the
        template's (checkpoints written before layouts were recorded are not checked)."""
        there = meta.get("device_layout")
        if there is None:
            return
        here = layout(device_template)
        differ = sorted(k for k in set(there) | set(here) if there.get(k) != here.get(k))
        if differ:
            shown = "; ".join(f"{k}: {there.get(k)} there, {here.get(k)} now" for k in differ[:3])
            raise CheckpointMismatch(
                f"the checkpoint {self.at(step)} in {self.directory} holds an agent state "
                f"other than this run's ({len(differ)} arrays differ, {shown}): the code or its "
                "settings changed since it was written. It is kept; resume with the code it was "
                "written by, or start over under another --run_name")

    def _restore(self, step: int, device_template):
        meta = self._read_meta(step)
        self._check_layout(step, meta, device_template)
        template = keys_to_data(device_template)
        try:
            out = self.manager.restore(
                step,
                args=ocp.args.Composite(
                    device=ocp.args.StandardRestore(_abstract(template)),
                    host=HostArraysRestore(),
                ),
            )
        except ValueError as e:
            if "tree structures do not match" not in str(e):
                raise
            out = self._restore_by_paths(step, template)
        written = meta.get("device_crc32")  # none in checkpoints written before it was recorded
        if written is not None:
            read = device_digests(out["device"])
            differ = sorted(k for k in set(written) | set(read) if written.get(k) != read.get(k))
            if differ:
                raise DigestMismatch(f"{len(differ)} device array(s) do not match the CRC-32s "
                                     f"written with them ({', '.join(differ[:3])})")
        meta = {k: v for k, v in meta.items()  # the caller's
                if k not in ("device_layout", "device_crc32", "meta_crc32")}
        return data_to_keys(out["device"], device_template), out["host"], meta

    def _restore_by_paths(self, step: int, template) -> dict:
        """The checkpoint with its device arrays placed into `template` leaf by leaf, by their
        paths: a checkpoint written before the state gained an empty container (a learner's
        `plasticity` without per-step methods) holds every array the template does, but orbax
        compares container structures too. A template leaf missing there is a mismatch."""
        out = self.manager.restore(step, args=ocp.args.Composite(
            device=ocp.args.StandardRestore(), host=HostArraysRestore()))
        paths, treedef = jax.tree_util.tree_flatten_with_path(template)
        leaves = []
        for path, like in paths:
            node = out["device"]
            for key in path:
                name = getattr(key, "name", getattr(key, "key", getattr(key, "idx", None)))
                try:
                    node = node[name]
                except (KeyError, IndexError, TypeError):
                    raise CheckpointMismatch(
                        f"the checkpoint {self.at(step)} in {self.directory} has no array "
                        f"{jax.tree_util.keystr(path)}: the code changed since it was written. It "
                        "is kept; resume with the code it was written by, or start over under "
                        "another --run_name") from None
            leaves.append(jax.numpy.asarray(node, dtype=like.dtype))
        return {**out, "device": jax.tree_util.tree_unflatten(treedef, leaves)}

    def restore_latest(self, device_template):
        """The newest checkpoint that restores cleanly, as `(device, host, meta)`, or None.

        A checkpoint that fails to restore (corrupt or truncated files, or bytes that do not
        match the CRC-32s written with them) is reported on stderr, moved aside to
        `corrupt_<step>` for inspection, and the one before it is tried. One that holds
        another agent layout, or whose restore runs out of memory (host or XLA's
        RESOURCE_EXHAUSTED) or meets an I/O error, is kept: CannotResume says why.
        """
        steps = self.steps()
        if steps:
            quiet_abandoned_reads()
        for step in reversed(steps):
            try:
                return self._restore(step, device_template)
            except CheckpointMismatch:
                raise
            except Exception as e:
                reason = _reason(e)
                if isinstance(reason, MemoryError) or "RESOURCE_EXHAUSTED" in str(reason):
                    raise CannotResume(f"restoring the checkpoint {self.at(step)} in "
                                       f"{self.directory} ran out of memory; it is kept, and the "
                                       "same command resumes from it on a machine with more "
                                       "free memory") from None
                if _io_failure(reason):
                    raise CannotResume(f"reading the checkpoint {self.at(step)} in "
                                       f"{self.directory} failed ({type(reason).__name__}: "
                                       f"{reason}); it is kept, and the same command tries it "
                                       "again") from None
                self._set_aside(step, reason)  # orbax/tensorstore raise many types for bad files
            # The failed restore's abandoned reads, collected now rather than at random moments
            # later (quiet_abandoned_reads drops what they report)
            gc.collect()
        if steps:
            raise CheckpointCorrupt(f"none of the checkpoints {steps} in {self.directory} "
                                    "could be restored (moved to corrupt_<step>, with the "
                                    "logs left as they are; renaming one back to <step> "
                                    "tries it again)")
        return None

    def _set_aside(self, step: int, error: BaseException) -> None:
        """Move a checkpoint that cannot be read to corrupt_<step>, for inspection."""
        aside = os.path.join(self.directory, f"corrupt_{step}")
        message = _shortened(str(error).splitlines()[0] if str(error) else "")
        print(f"warning: checkpoint {self.at(step)} in {self.directory} cannot be "
              f"restored ({type(error).__name__}: {message}); moved to {aside}; trying the "
              "previous one", file=sys.stderr)
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(os.path.join(self.directory, str(step)), aside)
        self.manager.reload()

    def keep_latest_only(self) -> None:
        """Delete every checkpoint but the newest (a finished run resumes from none of them)."""
        for step in self.steps()[:-1]:
            self.manager.delete(step)

    def close(self) -> None:
        self.manager.close()
