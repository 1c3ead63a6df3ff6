"""Reading back what the dashboards wrote, with readers of their own: TensorBoard's
EventAccumulator for the event files, and the leveldb log format (checksums checked) for
wandb's offline .wandb files."""

import json
import os
import struct
import zlib
from collections import defaultdict

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from wandb.proto import wandb_internal_pb2


def tensorboard_scalars(seed_dir) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of every scalar event in a seed's folder, in file order,
    none dropped (no purge of orphaned events, no sampling)."""
    acc = EventAccumulator(str(seed_dir), size_guidance={"scalars": 0},
                           purge_orphaned_data=False)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def tensorboard_hparams(seed_dir) -> dict:
    """The hyperparameters of a seed's folder's hparams session start info."""
    acc = EventAccumulator(str(seed_dir))
    acc.Reload()
    contents = acc.PluginTagToContent("hparams")
    data = plugin_data_pb2.HParamsPluginData.FromString(
        contents["_hparams_/session_start_info"])
    return {key: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
            for key, value in data.session_start_info.hparams.items()}


def leveldb_records(path):
    """The records of a leveldb log file that follows wandb's 7-byte header; each chunk's
    checksum (CRC-32 of its type byte and data) is checked."""
    data = open(path, "rb").read()
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    pos, block, parts = 7, 32768, []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if pos + 7 + length > len(data):
            break  # a record cut short by a killed process
        chunk = data[pos + 7:pos + 7 + length]
        assert zlib.crc32(bytes([kind]) + chunk) == checksum, f"bad checksum in {path} at {pos}"
        pos += 7 + length
        parts = [chunk] if kind in (1, 2) else [*parts, chunk]
        if kind in (1, 4):
            yield b"".join(parts)


def wandb_segments(run_dir, run_id) -> list[str]:
    """The .wandb files of a run id in a run directory, oldest first (one per launch)."""
    folder = os.path.join(run_dir, "wandb")
    names = sorted(n for n in os.listdir(folder) if n.endswith(f"-{run_id}"))
    return [os.path.join(folder, n, f"run-{run_id}.wandb") for n in names]


def wandb_records(path) -> list:
    out = []
    for raw in leveldb_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        out.append(record)
    return out


def wandb_history(run_dir, run_id) -> list[dict]:
    """Every history row of a run id over its segments, oldest first: {key: value}."""
    rows = []
    for path in wandb_segments(run_dir, run_id):
        for record in wandb_records(path):
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or ".".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows


def wandb_run(run_dir, run_id):
    """The run record (id, group, name, config) of the run id's first segment that holds one (a
    segment whose process was killed may hold none)."""
    records = (r for path in wandb_segments(run_dir, run_id) for r in wandb_records(path))
    for record in records:
        if record.WhichOneof("record_type") == "run":
            config = {item.key or ".".join(item.nested_key): json.loads(item.value_json)
                      for item in record.run.config.update}
            return record.run, config
    raise AssertionError(f"no run record for {run_id}")


def by_step(series: list[tuple[int, float]]) -> dict[int, list[float]]:
    out = defaultdict(list)
    for step, value in series:
        out[step].append(value)
    return out
