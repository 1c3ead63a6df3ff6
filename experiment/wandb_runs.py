"""The wandb runs of a run (--log_to=wandb): one per seed, each resumed by the id dashboards.json
records and sent only the steps it lacks (the last one it holds, from the server or from its
.wandb files)."""

import json
import os
import secrets
import string
import struct
from collections.abc import Iterable, Sequence

from experiment.rundir.record import write_json

IDS_FILE = "dashboards.json"


class DashboardError(RuntimeError):
    """A dashboard that cannot start (wandb without an account, say); one line for the user."""


def run_ids(run_dir: str, seeds: Sequence[int]) -> dict[str, str]:
    """Each seed's wandb run id, from dashboards.json; ids it lacks are drawn and recorded."""
    path = os.path.join(run_dir, IDS_FILE)
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        record = {}
    ids = record.get("wandb_ids") if isinstance(record, dict) else None
    ids = dict(ids) if isinstance(ids, dict) else {}
    alphabet = string.ascii_lowercase + string.digits
    missing = [str(seed) for seed in seeds if not isinstance(ids.get(str(seed)), str)]
    for seed in missing:
        ids[seed] = "".join(secrets.choice(alphabet) for _ in range(8))
    if missing:
        write_json(path, {**(record if isinstance(record, dict) else {}), "wandb_ids": ids},
                   indent=2, sort_keys=True)
    return {str(seed): ids[str(seed)] for seed in seeds}


def wandb_steps(path: str) -> Iterable[int]:
    """The history steps a wandb transaction log (a run's .wandb file) holds: the file header,
    then leveldb log records (32 KiB blocks) of wandb Record protobufs. Reading stops at a
    record cut short, as a killed run leaves its last one."""
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b":W&B":
        return
    pos, block, chunks = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's trailer: too short for a header
            pos += block - pos % block
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        if pos + 7 + length > len(data):
            return
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        chunks = chunk if kind in (1, 2) else chunks + chunk
        if kind not in (1, 4):  # FULL and LAST end a record
            continue
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(chunks)
        except Exception:  # protobuf's DecodeError: a damaged tail
            return
        if record.WhichOneof("record_type") == "history":
            for item in record.history.item:  # "_step" as a key or as a one-part nested key
                if (item.key or ".".join(item.nested_key)) == "_step":
                    yield int(json.loads(item.value_json))


class Wandb:
    """A wandb run per seed (one process, `reinit="create_new"`), resumed by its recorded id."""

    def __init__(self, run_dir: str, cfg, key: str):
        # wandb takes this project's `agents` package for OpenAI's and suggests its Weave
        # tracing on stderr; nothing here calls a language model.
        os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")
        import wandb

        self.wandb, self.cfg, self.run_dir, self.key = wandb, cfg, run_dir, key
        self.runs: dict[int, object] = {}
        self.held: dict[int, int] = {}

    def rewind(self, offsets: dict[str, int]) -> None:
        """Nothing to cut: a resumed wandb run is sent only the steps it lacks."""

    def _local_steps(self, run_id: str) -> int:
        """The last step this run's earlier parts wrote to their .wandb files, or -1."""
        folder = os.path.join(self.run_dir, "wandb")
        names = os.listdir(folder) if os.path.isdir(folder) else []
        paths = [os.path.join(folder, n, f"run-{run_id}.wandb") for n in names
                 if n.endswith(f"-{run_id}")]
        return max((step for path in paths if os.path.isfile(path)
                    for step in wandb_steps(path)), default=-1)

    def open(self, record: dict, env_step: int) -> None:
        cfg = self.cfg
        ids = run_ids(self.run_dir, cfg.seeds)
        key = self.key
        for seed in cfg.seeds:
            run_id = ids[str(seed)]
            local = self._local_steps(run_id)
            try:
                run = self.wandb.init(
                    id=run_id, resume="allow", reinit="create_new", mode=cfg.wandb_mode,
                    project=cfg.wandb_project or None, entity=cfg.wandb_entity or None,
                    group=cfg.wandb_group or key, name=f"{key}/seed{seed}", dir=self.run_dir,
                    config={**record, "seed": seed},
                    settings=self.wandb.Settings(console="off", silent=True))
            except Exception as e:  # wandb's own errors: no account, no network, ...
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise DashboardError(f"wandb could not start the run of seed {seed} "
                                     f"({type(e).__name__}: {first}); --wandb_mode=offline "
                                     "logs without an account or network") from None
            self.runs[seed] = run
            # online: the server's last step (starting_step is one past it); offline: the files'
            self.held[seed] = run.starting_step - 1 if cfg.wandb_mode == "online" else local

    def log(self, seed: int, env_step: int, values: dict[str, float]) -> None:
        if env_step > self.held[seed]:
            self.runs[seed].log(values, step=env_step, commit=True)
            self.held[seed] = env_step

    def flush(self) -> None:
        """wandb's service writes and syncs on its own."""

    def offsets(self) -> dict[str, int]:
        return {}

    def close(self, failed: bool) -> None:
        for run in self.runs.values():
            run.finish(exit_code=1 if failed else 0)
        self.runs = {}
