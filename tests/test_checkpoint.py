"""Checkpointer: exact round trip (typed PRNG keys included), keep-last-2, and corrupt files or
bytes that differ from their digests detected with a fall back to the previous checkpoint, said
in one line (in tasks for a continual run), without the tracebacks of orbax's abandoned reads."""

import asyncio
import json
import logging
import os
import signal
import sys
import zlib
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiment.checkpoint import (
    CheckpointCorrupt,
    Checkpointer,
    CheckpointMismatch,
    interrupts_deferred,
)
from experiment.checkpoint_arrays import keys_to_data
from experiment.checkpoint_errors import ORBAX_SOURCE, quiet_abandoned_reads
from experiment.rundir.record import CannotResume
from tests.helpers import forkserver
from tests.helpers.continual_files import write_cifar
from tests.helpers.runs import KILLSAVE, REPO, run, script
from tests.helpers.trees import assert_bit_identical


def device_tree(value: float):
    return {"params": {"w": jnp.full((3, 4), value)}, "rng": jax.random.key(int(value)),
            "step": jnp.int32(value)}


def host_arrays(value: float):
    return {"buffer/observations": np.full((2, 100, 5), value, np.float32),
            "buffer/terminated": np.zeros((2, 100), bool), "obs": np.full((2, 5), value)}


def raising(error: BaseException):
    """A stand-in for a function, raising `error` whatever it is called with."""

    def stand_in(*args, **kwargs):
        raise error

    return stand_in


@pytest.fixture
def saved(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "checkpoints"))
    for step in (1, 2, 3):
        ckpt.save(step, device_tree(float(step)), host_arrays(step), {"env_step": step})
    return ckpt


def test_round_trip_and_keep_last_two(saved):
    assert saved.steps() == [2, 3]
    device, host, meta = saved.restore_latest(device_tree(0.0))
    assert meta == {"env_step": 3}
    assert_bit_identical(device, device_tree(3))
    assert set(host) == set(host_arrays(3))
    for name, array in host_arrays(3).items():
        np.testing.assert_array_equal(host[name], array)
        assert host[name].dtype == array.dtype


def anonymous_memory_mib() -> float:
    """This process's resident anonymous memory (not file pages), from /proc."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) / 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc")
def test_host_arrays_are_restored_without_a_copy_in_memory(tmp_path):
    """The replay buffer copies the restored arrays into its own, so a restore that read them
    into memory first would hold a full buffer twice while resuming; mapped, the checkpoint's
    pages stay file pages the system can drop."""
    ckpt = Checkpointer(str(tmp_path / "checkpoints"))
    big = np.random.default_rng(0).standard_normal((2, 4_000_000), dtype=np.float32)  # 61 MiB
    ckpt.save(1, device_tree(1.0), {"buffer/observations": big}, {"env_step": 1})
    before = anonymous_memory_mib()
    _, host, _ = ckpt.restore_latest(device_tree(0.0))
    grown = anonymous_memory_mib() - before
    np.testing.assert_array_equal(host["buffer/observations"], big)
    assert grown < 20, f"restoring 61 MiB of host arrays took {grown:.0f} MiB of memory"


@pytest.mark.parametrize("damage", ["truncate", "flip a byte", "dtype in the header",
                                    "shape in the header"])
def test_corrupt_host_file_falls_back_to_previous(saved, damage, capsys):
    """A damaged .npy file: its data (the CRC-32 sees them) or its header (the index records
    each array's dtype and shape), which read otherwise would restore other numbers."""
    host_dir = os.path.join(saved.directory, "3", "host")
    biggest = max((os.path.join(host_dir, f) for f in os.listdir(host_dir) if f.endswith(".npy")),
                  key=os.path.getsize)
    size = os.path.getsize(biggest)
    with open(biggest, "r+b") as f:
        if damage == "truncate":
            f.truncate(size - 7)
        elif damage.endswith("in the header"):  # same length: the data bytes stay where they are
            header = f.read(128)
            old, new = ((b"'<f4'", b"'<i4'") if damage.startswith("dtype")
                        else (b"(2, 100, 5)", b"(2, 5, 100)"))
            assert old in header
            f.seek(0)
            f.write(header.replace(old, new))
        else:
            f.seek(size - 10)
            byte = f.read(1)
            f.seek(size - 10)
            f.write(bytes([byte[0] ^ 0xFF]))
    device, host, meta = saved.restore_latest(device_tree(0.0))
    assert meta["env_step"] == 2
    assert_bit_identical(device, device_tree(2))
    err = capsys.readouterr().err
    assert "checkpoint at env step 3" in err and "cannot be restored" in err
    assert saved.steps() == [2]
    assert os.path.isdir(os.path.join(saved.directory, "corrupt_3"))


def test_all_corrupt_is_an_error(saved):
    for step in saved.steps():
        os.remove(os.path.join(saved.directory, str(step), "host", "index.json"))
    with pytest.raises(CheckpointCorrupt, match="none of the checkpoints"):
        saved.restore_latest(device_tree(0.0))


XLA_OUT_OF_MEMORY = RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                                 "17592186044416 bytes.")  # as jaxlib's JaxRuntimeError says


@pytest.mark.parametrize("error", [MemoryError(), XLA_OUT_OF_MEMORY, KeyboardInterrupt()],
                         ids=["host", "xla", "ctrl-c"])
def test_running_out_of_memory_or_a_ctrl_c_while_restoring_keeps_the_checkpoint(saved, error,
                                                                                 monkeypatch):
    monkeypatch.setattr(saved, "_restore", raising(error))
    ctrl_c = isinstance(error, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt if ctrl_c else CannotResume,
                       match=None if ctrl_c else "ran out of memory; it is kept"):
        saved.restore_latest(device_tree(0.0))
    assert saved.steps() == [2, 3]
    assert not [n for n in os.listdir(saved.directory) if n.startswith("corrupt_")]


def test_empty_directory_restores_nothing(tmp_path):
    assert Checkpointer(str(tmp_path / "none")).restore_latest(device_tree(0.0)) is None


def test_a_ctrl_c_inside_is_held_until_the_end_and_a_second_one_is_not():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            signal.raise_signal(signal.SIGINT)
            done.append("the block finished")
    assert done == ["the block finished"]
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)  # a second one goes through at once
            done.append("not reached")
    assert done == ["the block finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a sweep's local worker runs
    try:
        with interrupts_deferred():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_checkpoint_of_another_agent_state_is_kept_and_named(saved):
    """A code or settings change since the checkpoint: not corruption, so nothing is moved."""
    other = {**device_tree(0.0), "params": {"w": jnp.zeros((3, 5))}}
    with pytest.raises(CheckpointMismatch, match=r"1 arrays differ, \['params'\]\['w'\]: "
                       r"\[\[3, 4\], 'float32'\] there, \[\[3, 5\], 'float32'\] now.*It is kept"):
        saved.restore_latest(other)
    assert saved.steps() == [2, 3]


def test_an_io_error_while_restoring_keeps_the_checkpoint(saved, monkeypatch):
    monkeypatch.setattr(np, "load", raising(OSError(5, "Input/output error")))
    with pytest.raises(CannotResume, match="failed \\(OSError: \\[Errno 5\\] Input/output error"
                       "\\); it is kept"):
        saved.restore_latest(device_tree(0.0))
    assert saved.steps() == [2, 3]


def test_a_full_disk_while_saving_is_an_os_error_and_a_bug_is_not(saved, monkeypatch):
    full = ValueError('RESOURCE_EXHAUSTED: Error writing local file "x": Failed to write: '
                      "No space left on device [os_error_code='28']")
    monkeypatch.setattr(saved.manager, "save", raising(full))
    with pytest.raises(OSError, match=r"writing the checkpoint at env step 4 in .* failed "
                                      r"\(RESOURCE_EXHAUSTED: Error writing local file"):
        saved.save(4, device_tree(4.0), host_arrays(4), {"env_step": 4})

    too_long = ValueError('Error opening "zarr" driver: Error writing "x": '
                          "[os_error_code='36'] File name too long")
    monkeypatch.setattr(saved.manager, "save", raising(too_long))
    with pytest.raises(OSError, match=r"writing the checkpoint .* failed .*File name too long"):
        saved.save(4, device_tree(4.0), host_arrays(4), {"env_step": 4})

    monkeypatch.setattr(saved.manager, "save", raising(ValueError("a tree that does not fit")))
    with pytest.raises(ValueError, match="a tree that does not fit"):
        saved.save(4, device_tree(4.0), host_arrays(4), {"env_step": 4})


def test_a_read_error_reported_by_tensorstore_keeps_the_checkpoint(saved, monkeypatch):
    """Tensorstore reports a failed read (EIO, a stale NFS handle) as a ValueError carrying the
    OS error; a missing file (ENOENT) is damage, and that checkpoint is set aside."""
    unreadable = ValueError("UNKNOWN: Error reading local file \"3/device/d/x\": "
                            "[os_error_code='5']")
    monkeypatch.setattr(saved, "_restore", raising(unreadable))
    with pytest.raises(CannotResume, match="failed \\(ValueError: UNKNOWN: Error reading.*it is "
                                           "kept"):
        saved.restore_latest(device_tree(0.0))
    assert saved.steps() == [2, 3]

    missing = ValueError("NOT_FOUND: Error opening \"x\": [os_error_code='2']")
    monkeypatch.setattr(saved, "_restore", raising(missing))
    with pytest.raises(CheckpointCorrupt):
        saved.restore_latest(device_tree(0.0))


def flip_byte(path: str, offset: int) -> None:
    """Flip every bit of the byte at `offset` of the file (its size stays as it is)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def random_device_tree(step: int):
    """Arrays of random floats (little to compress), so that a flipped byte in their data
    files decodes to other numbers, not to an error."""
    weights = np.random.default_rng(step).standard_normal((64, 64), dtype=np.float32)
    return {"params": {"w": jnp.asarray(weights)}, "rng": jax.random.key(step),
            "step": jnp.int32(step)}


@pytest.fixture
def saved_random(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "checkpoints"))
    for step in (1, 2):
        ckpt.save(step, random_device_tree(step), host_arrays(step), {"env_step": step,
                                                                     "offsets": {"eval.csv": 7}})
    return ckpt


def test_a_flipped_byte_in_the_device_arrays_is_caught_by_their_digest(saved_random, capsys):
    """A flip inside orbax's data files restores as other numbers, without an error of its
    own: the CRC-32s that meta records of each device array catch it."""
    data = os.path.join(saved_random.directory, "2", "device")
    files = [os.path.join(root, name) for root, _, names in os.walk(data) for name in names
             if os.sep + "d" + os.sep in os.path.join(root, name) + os.sep]
    biggest = max(files, key=os.path.getsize)
    assert os.path.getsize(biggest) > 64 * 64 * 3  # the weights' data
    flip_byte(biggest, os.path.getsize(biggest) // 2)
    device, _, meta = saved_random.restore_latest(random_device_tree(0))
    assert meta["env_step"] == 1
    assert_bit_identical(device, random_device_tree(1))
    err = capsys.readouterr().err
    assert "checkpoint at env step 2" in err and "DigestMismatch" in err
    assert "['params']['w']" in err and "CRC-32" in err
    assert saved_random.steps() == [1]
    assert os.path.isdir(os.path.join(saved_random.directory, "corrupt_2"))


@pytest.mark.parametrize("old, new", [(b'"eval.csv": 7', b'"eval.csv": 9'),
                                      (b'"meta_crc32": ', b'"meta_crc32":-')],
                         ids=["a value", "its own digest"])
def test_meta_that_still_reads_as_json_but_changed_is_caught_by_its_digest(saved_random, capsys,
                                                                          old, new):
    """A flipped digit in meta (a log offset, say) is valid JSON holding another number: a
    resume would cut the logs at the wrong place. Its CRC-32 catches it, and one of the digest
    itself too."""
    path = os.path.join(saved_random.directory, "2", "meta", "metadata")
    with open(path, "rb") as f:
        text = f.read()
    assert text.count(old) == 1
    with open(path, "wb") as f:
        f.write(text.replace(old, new))
    _, _, meta = saved_random.restore_latest(random_device_tree(0))
    assert meta == {"env_step": 1, "offsets": {"eval.csv": 7}}
    err = capsys.readouterr().err
    assert "checkpoint at env step 2" in err and "its meta item does not match" in err
    assert saved_random.steps() == [1]


def test_every_array_and_meta_carry_a_digest_checked_against_an_independent_one(saved_random):
    """The digests meta records are zlib's CRC-32 of each array's bytes, computed here from
    the arrays saved, and meta's of its own canonical JSON."""
    with open(os.path.join(saved_random.directory, "2", "meta", "metadata")) as f:
        meta = json.load(f)
    tree = random_device_tree(2)
    expected = {"['params']['w']": zlib.crc32(np.asarray(tree["params"]["w"]).tobytes()),
                "['rng']": zlib.crc32(np.asarray(jax.random.key_data(tree["rng"])).tobytes()),
                "['step']": zlib.crc32(np.int32(2).tobytes())}
    assert meta["device_crc32"] == expected
    body = {k: v for k, v in meta.items() if k != "meta_crc32"}
    assert meta["meta_crc32"] == zlib.crc32(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def test_a_checkpoint_written_before_digests_were_recorded_restores_unchecked(saved_random):
    path = os.path.join(saved_random.directory, "2", "meta", "metadata")
    with open(path) as f:
        meta = json.load(f)
    del meta["device_crc32"], meta["meta_crc32"]
    with open(path, "w") as f:
        json.dump(meta, f)
    device, _, meta = saved_random.restore_latest(random_device_tree(0))
    assert meta["env_step"] == 2
    assert_bit_identical(device, random_device_tree(2))


def test_a_checkpoint_without_a_later_empty_container_restores_into_the_new_state(saved):
    """A state that gained an empty container (a learner's `plasticity` without per-step
    methods) restores an earlier checkpoint by its arrays' paths; a missing array is a
    mismatch, kept for the code that wrote it."""
    template = {**device_tree(0.0), "plasticity": {}}
    device, _, meta = saved.restore_latest(template)
    assert meta == {"env_step": 3}
    assert_bit_identical(device, {**device_tree(3), "plasticity": {}})
    with pytest.raises(CheckpointMismatch, match=r"has no array \['extra'\]"):
        saved._restore_by_paths(3, keys_to_data({**device_tree(0.0), "extra": jnp.zeros(2)}))
    assert saved.steps() == [2, 3]


def test_a_continual_runs_checkpoints_are_named_by_the_task_they_follow(tmp_path, capsys,
                                                                        monkeypatch):
    """A continual run's step counts the tasks done: its checkpoint of step 3 follows task 2,
    as "resumed after task 2" says; "env step 3" would be wrong."""
    ckpt = Checkpointer(str(tmp_path / "checkpoints"), unit="task")
    for step in (1, 2, 3):
        ckpt.save(step, device_tree(float(step)), {}, {"tasks_done": step})
    os.remove(os.path.join(ckpt.directory, "3", "meta", "metadata"))
    _, _, meta = ckpt.restore_latest(device_tree(0.0))
    assert meta == {"tasks_done": 2}
    err = capsys.readouterr().err
    assert err.startswith(f"warning: checkpoint after task 2 in {ckpt.directory} cannot be "
                          "restored (") and "env step" not in err, err
    with pytest.raises(CheckpointMismatch, match=r"^the checkpoint after task 1 in .* holds an "
                       "agent state other than this run's"):
        ckpt.restore_latest({**device_tree(0.0), "params": {"w": jnp.zeros((3, 5))}})
    monkeypatch.setattr(ckpt, "_restore", raising(MemoryError()))
    with pytest.raises(CannotResume, match="restoring the checkpoint after task 1 in .* ran out "
                       "of memory"):
        ckpt.restore_latest(device_tree(0.0))
    full = ValueError("RESOURCE_EXHAUSTED: No space left on device [os_error_code='28']")
    monkeypatch.setattr(ckpt.manager, "save", raising(full))
    with pytest.raises(OSError, match="writing the checkpoint after task 3 in "):
        ckpt.save(4, device_tree(4.0), {}, {"tasks_done": 4})
    assert Checkpointer(str(tmp_path / "rl")).at(250) == "at env step 250"
    with pytest.raises(ValueError, match="unit must be one of"):
        Checkpointer(str(tmp_path / "x"), unit="tasks")


class Pending:
    """An awaitable that never completes: a read still in flight."""

    def __await__(self):
        yield


def abandoned_read(filename: str):
    """A coroutine defined in `filename`, suspended in a read, that raises when it is closed, as
    orbax's _read_array_index_and_device_put does (it wraps every BaseException, the
    GeneratorExit of its close() too): dropped unawaited, it is an "Exception ignored in"."""
    source = ("async def read(pending):\n"
              "    try:\n"
              "        await pending\n"
              "    except BaseException as e:\n"
              "        raise Exception('Encountered error while reading array index') from e\n")
    namespace = {}
    exec(compile(source, filename, "exec"), namespace)
    coroutine = namespace["read"](Pending())
    coroutine.send(None)
    return coroutine


def test_what_orbax_abandons_in_a_failed_restore_is_dropped_and_nothing_else(monkeypatch):
    shown = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: shown.append(u.exc_type))
    logger = logging.getLogger("asyncio")
    monkeypatch.setattr(logger, "filters", list(logger.filters))
    quiet_abandoned_reads()
    quiet_abandoned_reads()  # once per process
    assert len(logger.filters) == 1

    coroutine = abandoned_read(os.path.join(ORBAX_SOURCE, "_src", "serialization.py"))
    del coroutine  # finalized: close() raises inside orbax's coroutine
    assert shown == []
    coroutine = abandoned_read(__file__)
    del coroutine  # anyone else's is shown
    assert shown == [Exception]

    loop = asyncio.new_event_loop()
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed") as error:
        loop.call_soon_threadsafe(print)
    from_python = error.value.__traceback__  # the frames from this test's call on
    from_a_thread = from_python.tb_next  # from call_soon_threadsafe on: no Python caller
    assert from_a_thread.tb_frame.f_code.co_name == "call_soon_threadsafe"
    for tb in (from_a_thread, from_python):
        sys.unraisablehook(SimpleNamespace(exc_type=RuntimeError, exc_value=error.value,
                                           exc_traceback=tb, err_msg=None, object=None))
    assert shown == [Exception, RuntimeError]  # tensorstore's callback dropped, not the other

    def logged(message: str) -> bool:
        return bool(logger.filter(logger.makeRecord("asyncio", logging.ERROR, __file__, 1,
                                                    message, None, None)))

    task = ("Task exception was never retrieved\nfuture: <Task finished name='Task-9' coro=<"
            "_read_array_index_and_device_put() done, defined at {}:269> exception=...>")
    assert not logged(task.format(os.path.join(ORBAX_SOURCE, "serialization.py")))
    assert logged(task.format("/elsewhere/code.py"))
    assert logged("Unclosed client session")


@pytest.mark.slow
def test_zero_length_array_files_in_a_runs_newest_checkpoint_are_one_warning_line(tmp_path):
    """A tiny continual run (a conv net: many arrays, read concurrently) killed while writing
    its 4th checkpoint; array data files of the newest complete one (after task 2) cut to zero
    length: every one above 1 KiB but the largest (some files of a checkpoint are older
    versions of its index, which a restore does not read; the largest is still being read when
    the others fail). The resume falls back to the one before with one warning line; before,
    the reads orbax abandoned printed hundreds to thousands of lines of tracebacks ("Exception
    ignored in: <coroutine object _read_array_index_and_device_put>", "Event loop is
    closed")."""
    write_cifar(str(tmp_path / "data"), per_batch=8)
    flags = ["--task=random_label_cifar", f"--data_dir={tmp_path / 'data'}", "--examples=32",
             "--batch_size=16", "--num_tasks=4", "--num_seeds=2", "--epochs=1",
             "--checkpoint_every=1", "--diagnostics=false", "--progress=false",
             f"--logdir={tmp_path}"]
    killed = forkserver.run([sys.executable, KILLSAVE, "4", script("run_continual.py"), *flags],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    checkpoints = tmp_path / "continual" / "random_label_cifar" / "none-seed0" / "checkpoints"
    data = checkpoints / "3" / "device" / "ocdbt.process_0" / "d"
    arrays = sorted((p for p in data.iterdir() if p.stat().st_size > 1024),
                    key=lambda p: p.stat().st_size)
    assert len(arrays) >= 2, os.listdir(data)
    for path in arrays[:-1]:
        os.truncate(path, 0)
    resumed = run("run_continual.py", *flags)
    lines = resumed.stderr.splitlines()
    assert "Traceback" not in resumed.stderr and "Exception ignored" not in resumed.stderr, \
        resumed.stderr[:3000]
    warnings = [line for line in lines if line.startswith("warning: checkpoint")]
    assert len(warnings) == 1, resumed.stderr
    assert warnings[0].startswith(f"warning: checkpoint after task 2 in {checkpoints} cannot be "
                                  "restored (ValueError: "), warnings[0]
    assert warnings[0].endswith(f"moved to {checkpoints / 'corrupt_3'}; trying the previous one")
    assert "resumed after task 1 from its checkpoint" in lines
    assert len(lines) <= 6, resumed.stderr  # data, banner, warning, resumed (and a versions one)
