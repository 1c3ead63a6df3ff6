"""TensorBoard and Weights & Biases views of a run (`--log_to`), beside its CSV files.

The dashboards get exactly the rows the CSV files get (`RunFiles` hands each batch to
`Dashboards.rows`), under the same names in both:

    eval/return, eval/return_mean           a seed's return; the mean over the run's seeds
    train/<metric>, train/steps_per_s       train.csv's metrics; env steps per second
    task/<metric>                           a continual run's tasks.csv: online_accuracy,
    task/online_accuracy_mean                 final_accuracy, loss; the seeds' mean online
                                              accuracy (the step is the task)
    diagnostics/<network>/<layer>/<metric>  every diagnostics.csv value
    intervention/<network>/<layer>/<metric> an intervention's per-layer report, and
    intervention/<kind>                     1 at each event

Each seed is a dashboard run of its own: event files in <run_dir>/tensorboard/seed<k>/, and a
wandb run grouped by the run's name, whose id dashboards.json records. The packages are
imported only when asked for.

A resumed run rewinds to its checkpoint. Its event files are cut back to their length at the
checkpoint (`RunFiles` records it with the CSV files'), and the new event file starts with a
purge marker, which makes a TensorBoard that read the events past it drop them. wandb keeps
every step it was sent and takes only increasing steps, so a wandb run learns the last step it
holds (online, from the server; offline, from its .wandb files), is sent the CSV rows it lacks
up to the checkpoint, and then the new rows past what it holds: every step once
(experiment/wandb_runs.py).
"""

import importlib
import json
import os
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterable, Sequence

from experiment.config import ConfigError
from experiment.rundir.record import flat_settings
from experiment.wandb_runs import Wandb

# The pip requirement of each dashboard (as setup.py's "logging" extra pins it).
REQUIREMENTS = {"tensorboard": "tensorboardX==2.6.5", "wandb": "wandb==0.31.0"}
MODULES = {"tensorboard": "tensorboardX", "wandb": "wandb"}
# a step's order; an RL run writes the first two, a continual run tasks.csv
CSV_FILES = ("train.csv", "eval.csv", "tasks.csv", "diagnostics.csv", "interventions.csv")
TASK_METRICS = ("online_accuracy", "final_accuracy", "loss")  # tasks.csv's, after task and seed
# a value each seed logs -> the mean over the seeds logged beside it
MEANS = {"eval/return": "eval/return_mean", "task/online_accuracy": "task/online_accuracy_mean"}


def wanted(cfg) -> list[str]:
    """The dashboards this run writes to: --log_to, less wandb with --wandb_mode=disabled."""
    return [name for name in cfg.log_to
            if not (name == "wandb" and cfg.wandb_mode == "disabled")]


def check_installed(cfg) -> None:
    """ConfigError naming the pip command for the first dashboard whose package cannot be
    imported (imported here, so a broken install is caught too, before anything compiles)."""
    for name in wanted(cfg):
        try:
            importlib.import_module(MODULES[name])
        except ImportError as e:
            raise ConfigError(f"--log_to={name} needs the {MODULES[name]} package, which cannot "
                              f"be imported ({e}): pip install {REQUIREMENTS[name]} (or pip "
                              "install -e '.[logging]')") from None


class EventFile:
    """A TensorBoard event file: TFRecord framing (length, masked CRC-32C of the length, data,
    masked CRC-32C of the data) of serialized Event protobufs, appended by the caller's thread.
    `flush` hands the bytes to the OS, `sync` also to the disk."""

    def __init__(self, path: str):
        from tensorboardX.record_writer import masked_crc32c

        self.path, self.crc = path, masked_crc32c
        self.file = open(path, "wb")  # noqa: SIM115 - closed by close()

    def write(self, data: bytes) -> None:
        header = struct.pack("<Q", len(data))
        self.file.write(header + struct.pack("<I", self.crc(header)) + data
                        + struct.pack("<I", self.crc(data)))

    def flush(self) -> None:
        self.file.flush()

    def sync(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.sync()
        self.file.close()


class TensorBoard:
    """A TensorBoard event file per seed and process start, written as each step ends (not in
    a thread, as tensorboardX's SummaryWriter does), so that its length at a checkpoint holds
    every step up to it: what a resume cuts it back to. tensorboardX's protobufs and hparams
    summary make the events."""

    def __init__(self, run_dir: str, seeds: Sequence[int], headline: str = "eval/return"):
        from tensorboardX.proto import event_pb2, summary_pb2
        from tensorboardX.summary import hparams

        self.event_pb2, self.summary_pb2, self.hparams = event_pb2, summary_pb2, hparams
        self.run_dir, self.seeds, self.headline = run_dir, list(seeds), headline
        self.root = os.path.join(run_dir, "tensorboard")
        self.writers: dict[int, EventFile] = {}
        self.rewound = False
        self.kept = False  # whether the files hold the run up to the step it opens at
        self.held = -1

    def _files(self) -> list[str]:
        """The event files under tensorboard/, relative to the run directory."""
        found = []
        for folder, _, names in os.walk(self.root):
            found += [os.path.relpath(os.path.join(folder, n), self.run_dir) for n in names
                      if ".tfevents." in n]
        return sorted(found)

    def rewind(self, offsets: dict[str, int]) -> None:
        """Cut the event files back to `offsets` (a checkpoint's lengths) and delete the files
        written after it; without offsets for every file it lists intact, delete them all (the
        rows come back from the CSV files)."""
        self.rewound = True
        files = self._files()
        sizes = {name: os.path.getsize(os.path.join(self.run_dir, name)) for name in files}
        self.kept = bool(offsets) and all(sizes.get(name, -1) >= size
                                          for name, size in offsets.items())
        for name in files:
            path = os.path.join(self.run_dir, name)
            if self.kept and name in offsets:
                os.truncate(path, offsets[name])
            else:
                os.remove(path)

    def open(self, record: dict, env_step: int) -> None:
        """A new event file per seed, from `env_step` on: a purge marker at the first step it
        may write, and the run's settings (the hyperparameters panel) where no earlier file
        has them."""
        if not self.rewound:
            self.rewind({})
        self.held = env_step if self.kept else -1
        for seed in self.seeds:
            folder = os.path.join(self.root, f"seed{seed}")
            os.makedirs(folder, exist_ok=True)
            self.writers[seed] = EventFile(os.path.join(
                folder, f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                        f"{os.getpid()}"))
            self._write(seed, self.event_pb2.Event(wall_time=time.time(),
                                                   file_version="brain.Event:2"))
            self._write(seed, self.event_pb2.Event(
                wall_time=time.time(), step=self.held + 1,
                session_log=self.event_pb2.SessionLog(status=self.event_pb2.SessionLog.START)))
            if self.held < 0:
                settings = {key: value if isinstance(value, bool | int | float | str)
                            else json.dumps(value)
                            for key, value in flat_settings({**record, "seed": seed}).items()
                            if value is not None}
                for summary in self.hparams(settings, {self.headline: 0.0,
                                                       MEANS[self.headline]: 0.0}):
                    self._write(seed, self.event_pb2.Event(wall_time=time.time(), step=0,
                                                           summary=summary))
        self.flush()

    def _write(self, seed: int, event) -> None:
        self.writers[seed].write(event.SerializeToString())

    def log(self, seed: int, env_step: int, values: dict[str, float]) -> None:
        if env_step <= self.held:
            return
        value = self.summary_pb2.Summary.Value
        summary = self.summary_pb2.Summary(value=[value(tag=tag, simple_value=v)
                                                  for tag, v in values.items()])
        self._write(seed, self.event_pb2.Event(wall_time=time.time(), step=env_step,
                                               summary=summary))

    def flush(self) -> None:
        for writer in self.writers.values():
            writer.flush()

    def offsets(self) -> dict[str, int]:
        """The files' lengths, on disk as the checkpoint that records them will be."""
        for writer in self.writers.values():
            writer.sync()
        return {os.path.relpath(w.path, self.run_dir): os.path.getsize(w.path)
                for w in self.writers.values()}

    def close(self, failed: bool) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers = {}


class Dashboards:
    """The dashboards of one run, fed the rows its CSV files get (see the module docstring).
    A step's rows are sent together when it ends (`end_step`), one event or wandb row per seed.

    `cfg` is a TrainConfig or a ContinualConfig (its run_dir, seeds, log_to and wandb_*); `key`
    names the run on wandb (<agent>/<env>/<run_name>, continual/<task>/<run_name>), whose runs
    are grouped by it unless --wandb_group is given; `headline` is the value each seed logs
    that TensorBoard's hyperparameters panel shows with its mean.
    """

    def __init__(self, cfg, key: str, headline: str = "eval/return"):
        names = wanted(cfg)
        self.sinks = ([TensorBoard(cfg.run_dir, cfg.seeds, headline)]
                      if "tensorboard" in names else []) \
            + ([Wandb(cfg.run_dir, cfg, key)] if "wandb" in names else [])
        self.cfg, self.seeds = cfg, cfg.seeds
        self.step: int | None = None  # the step whose rows are pending
        self.pending: dict[int, dict[str, float]] = {}
        self.live = True  # False while catching up on CSV rows: no steps/s for them
        self.last_train: tuple[int, float] | None = None  # (env step, time) of train rows

    def rewind(self, offsets: dict[str, int]) -> None:
        """Back to a checkpoint's `offsets` (the dashboards' entries of it; {}: the start)."""
        for sink in self.sinks:
            sink.rewind(offsets)

    def open(self, record: dict, env_step: int, csv_rows: Callable[[str], list[list[str]]]) -> None:
        """Start the dashboards at `env_step` (the checkpoint's, 0 for a fresh run), after
        sending each the rows of the CSV files (`csv_rows(name)`) that it lacks."""
        for sink in self.sinks:
            sink.open(record, env_step)
        since = min((self._held(sink) for sink in self.sinks), default=env_step)
        if since < env_step:
            steps: dict[int, list[tuple[str, list[str]]]] = {}
            for name in CSV_FILES:
                for row in csv_rows(name):
                    if since < int(row[0]) <= env_step:
                        steps.setdefault(int(row[0]), []).append((name, row))
            self.live = False
            for step in sorted(steps):
                for name, row in steps[step]:
                    self.rows(name, [row])
            self.end_step()
            self.live = True
        self.last_train = (env_step, time.perf_counter())
        self._announce()

    @staticmethod
    def _held(sink) -> int:
        held = sink.held
        return min(held.values(), default=-1) if isinstance(held, dict) else held

    def _announce(self) -> None:
        """One line per dashboard on stderr: where it writes."""
        for sink in self.sinks:
            if isinstance(sink, TensorBoard):
                print(f"tensorboard: event files in {sink.root} (tensorboard --logdir "
                      f"{sink.root})", file=sys.stderr)
            else:
                ids = ", ".join(f"{run.id} (seed {seed})" for seed, run in sink.runs.items())
                where = (f"; {os.path.join(sink.run_dir, 'wandb')} holds them for `wandb sync`"
                         if self.cfg.wandb_mode == "offline" else "")
                print(f"wandb ({self.cfg.wandb_mode}): runs {ids}{where}", file=sys.stderr)

    def rows(self, name: str, rows: Iterable[Sequence]) -> None:
        """Rows as `name` (one of CSV_FILES) gets them: (env step or task, seed, ...)."""
        for row in rows:
            step, seed = int(row[0]), int(row[1])
            if step != self.step:
                self.end_step()
                self.step = step
            values = self.pending.setdefault(seed, {})
            if name == "eval.csv":
                values["eval/return"] = float(row[2])
            elif name == "tasks.csv":
                values.update({f"task/{metric}": float(value)
                               for metric, value in zip(TASK_METRICS, row[2:], strict=True)})
            elif name == "train.csv":
                values[f"train/{row[2]}"] = float(row[3])
            elif name == "diagnostics.csv":
                values[f"diagnostics/{row[2]}/{row[3]}/{row[4]}"] = float(row[5])
            elif name == "interventions.csv":
                values[f"intervention/{row[3]}/{row[4]}/{row[5]}"] = float(row[6])
                values[f"intervention/{row[2]}"] = 1.0

    def end_step(self) -> None:
        """Send the pending step's values, with the seeds' means (MEANS) and, for training rows
        written now, the env steps per second since the last ones."""
        if self.step is None:
            return
        step, pending = self.step, self.pending
        self.step, self.pending = None, {}
        for each, mean in MEANS.items():
            logged = [v[each] for v in pending.values() if each in v]
            if len(logged) == len(self.seeds):
                for values in pending.values():
                    values[mean] = sum(logged) / len(logged)
        if self.live and any(key.startswith("train/") for v in pending.values() for key in v):
            now = time.perf_counter()
            if self.last_train is not None and now > self.last_train[1]:
                rate = (step - self.last_train[0]) / (now - self.last_train[1])
                for values in pending.values():
                    values["train/steps_per_s"] = rate
            self.last_train = (step, now)
        for seed in sorted(pending):
            for sink in self.sinks:
                sink.log(seed, step, pending[seed])
        for sink in self.sinks:
            sink.flush()

    def offsets(self) -> dict[str, int]:
        """The event files' lengths now (for a checkpoint), every pending row written first."""
        self.end_step()
        out = {}
        for sink in self.sinks:
            out.update(sink.offsets())
        return out

    def close(self, failed: bool = False) -> None:
        """Send what is pending and close every dashboard (wandb marks a failed run so). After
        a failure, an error of the dashboards' own is dropped: the failure is what to report."""
        try:
            self.end_step()
            for sink in self.sinks:
                sink.close(failed)
        except Exception:
            if not failed:
                raise
        finally:
            self.sinks = []


def for_config(cfg) -> Dashboards | None:
    """An RL run's dashboards (a TrainConfig's), or None when it writes to none."""
    return Dashboards(cfg, f"{cfg.agent}/{cfg.env}/{cfg.name}") if wanted(cfg) else None


def for_continual(cfg) -> Dashboards | None:
    """A continual run's dashboards (a ContinualConfig's), or None when it writes to none."""
    return (Dashboards(cfg, f"continual/{cfg.task}/{cfg.name}", "task/online_accuracy")
            if wanted(cfg) else None)
