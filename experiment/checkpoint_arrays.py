"""How a checkpoint stores and verifies its arrays: PRNG keys as their raw data, CRC-32 digests
of the device arrays and of `meta`, the device tree's layout, and HostArrays, the orbax handler
of the host arrays.

The host arrays (a 1M-transition buffer is hundreds of MB per seed) go through `HostArrays`,
which streams each array to its own .npy file with a CRC-32: no copy of the buffer is made
while saving, only its filled slots are written, and a truncated or corrupted file is detected
on restore.
"""

import dataclasses
import json
import os
import zlib
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


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


def layout(tree) -> dict[str, list]:
    """Every leaf's path, shape and dtype (PRNG keys as their data), as JSON for `meta`."""
    leaves = jax.tree_util.tree_flatten_with_path(keys_to_data(tree))[0]
    return {jax.tree_util.keystr(path): [list(x.shape), str(x.dtype)] for path, x in leaves}
