"""Orbax checkpoints of everything a run needs to continue exactly as if it had never stopped.

A checkpoint holds three items: `device` (the seed-batched agent states, action keys and metric
sums, with PRNG keys stored as their raw data), `host` (the replay buffer's arrays, the env
RNG states, the current observations and pending actions) and `meta` (JSON: env step, log
file offsets, buffer pointers, the numpy generator of the random actions). Orbax writes each
step to a temporary directory and renames it when complete, so a crash while saving leaves the
previous checkpoint intact; the last `keep` are kept.

The host arrays go through `HostArrays`, a small orbax handler that streams each array to its
own .npy file with a CRC-32 (experiment/checkpoint_arrays.py).

Every array is verified on restore: `meta` records a CRC-32 of each device array's bytes, and
one of `meta` itself, written with the checkpoint (the host arrays carry theirs in their
index). A checkpoint whose bytes changed since (a flipped bit on disk, a file edited) is
damaged like a truncated one: named, moved aside, and the one before it is restored, with one
warning line: the reads orbax abandoned in the failed restore (coroutines, tensorstore's
callbacks into its closed event loop) are dropped quietly, not reported as hundreds of lines of
tracebacks (`quiet_abandoned_reads`, experiment/checkpoint_errors.py).
"""

import contextlib
import gc
import json
import os
import re
import shutil
import signal
import sys
import threading

import jax
import numpy as np
import orbax.checkpoint as ocp

from experiment.checkpoint_arrays import (
    HostArraysRestore,
    HostArraysSave,
    data_to_keys,
    device_digests,
    keys_to_data,
    layout,
    meta_digest,
)
from experiment.checkpoint_errors import (
    IO_FAILURES,
    failure_reason,
    io_failure,
    quiet_abandoned_reads,
    shortened,
)
from experiment.rundir.record import CannotResume


class DigestMismatch(ValueError):
    """A checkpoint's array or meta item whose bytes differ from those it was written with."""


def _abstract(tree):
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def as_restored(tree):
    """`tree`'s arrays committed to the default device, as a restore from a checkpoint gives
    them. A program lowers a committed argument with its placement, an uncommitted one
    without, so a fresh run's programs would differ from a resumed run's, and JAX's persistent
    compilation cache would compile every one of them again at each resume."""
    return jax.device_put(tree, jax.devices()[0])


class CheckpointMismatch(CannotResume):
    """A checkpoint that is intact but holds an agent state of another shape than this run's
    (the code or its settings changed since it was written)."""


class CheckpointCorrupt(CannotResume):
    """No checkpoint in the directory could be restored."""


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
                reason = failure_reason(e)
                if isinstance(reason, MemoryError) or "RESOURCE_EXHAUSTED" in str(reason):
                    raise CannotResume(f"restoring the checkpoint {self.at(step)} in "
                                       f"{self.directory} ran out of memory; it is kept, and the "
                                       "same command resumes from it on a machine with more "
                                       "free memory") from None
                if io_failure(reason):
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
        message = shortened(str(error).splitlines()[0] if str(error) else "")
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
