"""Launching a sweep through submitit: the executor, how many local jobs run at once and on
which cores, the jobs' environment, and which jobs a launch (re)starts. Following the launched
jobs is sweeps/progress.py; the checks before a launch, sweeps/preflight.py.

Local executor: min(--max_parallel, jobs) `LocalWorker`s share the launch's job list and
claim jobs one at a time, so at most --max_parallel scripts run and the launch goes on when
the sweep process exits; with --pin_cores each worker runs its scripts on its own share of the
cores, with XLA's CPU thread pools sized to it. SLURM: one array job, one task per sweep job,
at most --array_parallelism at once; preempted or timed-out tasks requeue themselves.
"""

import contextlib
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence

import submitit

from envs import make_env
from experiment.config import AGENT_DEFAULTS
from experiment.memory import buffer_nbytes, env_nbytes, host_memory_bytes, sized
from sweeps.job import LocalWorker, RunJob
from sweeps.jobspec import JobSpec, job_flags
from sweeps.run_flags import SweepError
from sweeps.state import (
    Status,
    SweepPaths,
    process_start,
    read_json,
    this_process,
    update_record,
    write_json,
)

EXECUTORS = ("local", "slurm")
# Local workers run until their queue is empty: no time limit of their own (a year).
LOCAL_TIMEOUT_MIN = 365 * 24 * 60


@dataclasses.dataclass(frozen=True)
class ExecutorOptions:
    """How jobs run: the executor and, for SLURM, the resources of each job (0 = unset)."""

    kind: str = "local"
    max_parallel: int = 1
    timeout_min: int = 24 * 60
    partition: str = ""
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    mem_gb: float = 0.0
    array_parallelism: int = 256
    max_requeues: int = 3
    signal_delay_s: int = 90
    job_name: str = "sweep"
    compilation_cache: str = ""
    pin_cores: bool = True  # local: each worker's jobs on their own share of the cores

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise SweepError(f"unknown executor {self.kind!r}; accepted: {', '.join(EXECUTORS)}")
        if self.max_parallel < 0:
            raise SweepError(f"--max_parallel must be >= 1, or 0 for as many jobs as the machine "
                             f"holds, got {self.max_parallel}")
        for name in ("timeout_min", "array_parallelism"):
            if getattr(self, name) < 1:
                raise SweepError(f"--{name} must be >= 1, got {getattr(self, name)}")
        for name in ("gpus_per_node", "cpus_per_task", "mem_gb", "max_requeues",
                     "signal_delay_s"):
            if getattr(self, name) < 0:
                raise SweepError(f"--{name} must be >= 0, got {getattr(self, name)}")


def make_executor(options: ExecutorOptions, folder: str) -> submitit.AutoExecutor:
    """A submitit executor for `options`; SweepError when SLURM is asked for but absent."""
    if options.kind == "local":
        executor = submitit.AutoExecutor(folder, cluster="local")
        executor.update_parameters(timeout_min=LOCAL_TIMEOUT_MIN, name=options.job_name)
        return executor
    try:
        executor = submitit.AutoExecutor(folder, cluster="slurm",
                                         slurm_max_num_timeout=options.max_requeues)
    except RuntimeError:
        raise SweepError("--executor=slurm needs SLURM's commands (srun, sbatch) on PATH; "
                         "use --executor=local on a machine without SLURM") from None
    resources = {"gpus_per_node": options.gpus_per_node, "cpus_per_task": options.cpus_per_task,
                 "mem_gb": options.mem_gb, "slurm_partition": options.partition}
    executor.update_parameters(
        name=options.job_name, timeout_min=options.timeout_min,
        slurm_array_parallelism=options.array_parallelism,
        slurm_signal_delay_s=options.signal_delay_s,
        **{name: value for name, value in resources.items() if value})
    return executor


def usable_cores() -> list[int]:
    """The CPU cores this process may run on (its affinity, where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def core_shares(workers: int, cores: Sequence[int]) -> list[tuple[int, ...]]:
    """The cores each of `workers` local workers runs its jobs on: consecutive shares, as equal
    as the counts allow; with more workers than cores, one core each, in turn."""
    if workers >= len(cores):
        return [(cores[i % len(cores)],) for i in range(workers)]
    bounds = [i * len(cores) // workers for i in range(workers + 1)]
    return [tuple(cores[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]


def job_memory(spec: JobSpec, baseline: int, env_bytes: Mapping[str, tuple[int, int, int]]
               ) -> int:
    """About the host memory a job's run script holds: `baseline` (its process with its
    libraries loaded, as measured on the jobs' dry runs), its replay buffer and its envs, as
    the run script counts them (experiment.memory); `env_bytes`: (obs_dim, act_dim, bytes) of one
    env of each task."""
    flags = job_flags(spec.to_dict())
    defaults = AGENT_DEFAULTS[spec.agent]
    try:
        capacity = int(flags.get("buffer_capacity", defaults.buffer_capacity))
        max_steps = int(flags.get("max_steps", defaults.max_steps))
    except ValueError:  # the dry run has refused such a flag already
        capacity = max_steps = defaults.buffer_capacity
    obs_dim, act_dim, env_size = env_bytes[spec.env]
    return (baseline + buffer_nbytes(spec.num_seeds, min(capacity, max_steps), obs_dim, act_dim)
            + 2 * spec.num_seeds * env_size)


def machine_parallel(specs: Sequence[JobSpec], baseline: int) -> tuple[int, str]:
    """How many of the local jobs `specs` run at once by default: one per core this process may
    use, fewer where the host's memory does not hold that many of the largest one
    (`job_memory`); and why, in words."""
    cores = len(usable_cores())
    sizes = {}
    for name in sorted({spec.env for spec in specs}):
        env = make_env(name, 0)
        sizes[name] = (env.obs_dim, env.act_dim, env_nbytes(env))
    largest = max(job_memory(spec, baseline, sizes) for spec in specs)
    memory = host_memory_bytes()
    held = memory // largest if memory else cores
    parallel = max(1, min(len(specs), cores, held))
    why = f"{cores} core(s)"
    if memory:
        why += f", {sized(memory)} of memory, about {sized(largest)} for the largest job"
    return parallel, why


def job_env(options: ExecutorOptions) -> dict[str, str | None]:
    """Environment for the run scripts: JAX's persistent compilation cache if asked for (jobs
    of one agent compile the same programs). Local jobs see the devices the sweep sees
    (submitit would hide GPUs) and share them without JAX preallocating most of a GPU each."""
    env: dict[str, str | None] = {}
    if options.compilation_cache:
        env["JAX_COMPILATION_CACHE_DIR"] = os.path.abspath(options.compilation_cache)
    if options.kind != "local":
        return env
    env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    if options.max_parallel > 1:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE",
                                                              "false")
    return env


@contextlib.contextmanager
def _stdio_to(path: str) -> Iterator[None]:
    """Point this process's stdout/stderr at `path` while local workers start, so workers that
    outlive the sweep do not hold its terminal or pipe open."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        yield
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP)


@contextlib.contextmanager
def _terminal_signals_ignored() -> Iterator[None]:
    """Start local workers with SIGINT and SIGHUP ignored, which they and the run scripts they
    start inherit: Ctrl-C in the sweep's terminal, and closing it (or an ssh connection
    dropping), reach its whole process group, and should end only the sweep's following of
    the jobs, not the jobs (stop those with --stop)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in TERMINAL_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def launch(specs: Sequence[JobSpec], paths: SweepPaths, options: ExecutorOptions) -> str:
    """Record the jobs as queued and submit them; returns the launch id."""
    executor = make_executor(options, paths.submitit)  # before any record says "queued"
    launch_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    launch_path = paths.launch(launch_id)
    write_json(launch_path, {"executor": options.kind, "keys": [s.key for s in specs],
                             "submitter": this_process(), "submitted": False}, indent=1)
    jobs = []
    for spec in specs:
        argv = spec.argv(paths.logdir)
        update_record(paths.record(spec.key), key=spec.key, spec=spec.to_dict(), argv=argv,
                      state="queued", detail=f"launch {launch_id} ({options.kind})",
                      launch=launch_id, executor=options.kind)
        jobs.append(RunJob(spec.key, argv, spec.run_dir(paths.logdir), paths.record(spec.key),
                           paths.log(spec.key, "out"), paths.log(spec.key, "err"),
                           job_env(options)))
    try:
        if options.kind == "local":
            workers = []
            count = min(options.max_parallel, len(jobs))
            shares = core_shares(count, usable_cores()) if options.pin_cores else [None] * count
            with _stdio_to(os.path.join(paths.root, "local_workers.log")), \
                    _terminal_signals_ignored():
                for cores in shares:
                    try:
                        workers.append(executor.submit(LocalWorker(
                            jobs, paths.claims(launch_id), cores)))
                    except Exception:
                        if not workers:
                            raise  # none started: the jobs are relaunchable (below)
                        break  # those that started claim every job: fewer run at once
            pids = [int(w.job_id) for w in workers]
            details = {"workers": [{**this_process(), "pid": p, "pid_start": process_start(p)}
                                   for p in pids]}
        else:
            with executor.batch():
                submitted = [executor.submit(job) for job in jobs]
            details = {"scheduler_ids": {j.key: s.job_id for j, s in zip(jobs, submitted,
                                                                          strict=True)}}
    except Exception as e:  # nothing was started: a relaunch submits these jobs again
        message = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        for job in jobs:
            update_record(job.record, state="interrupted", detail=f"submission failed: {message}")
        raise SweepError(f"submitting the jobs failed: {message}") from None
    write_json(launch_path, {**read_json(launch_path), **details, "submitted": True}, indent=1)
    return launch_id


def select(specs: Sequence[JobSpec], statuses: Mapping[str, Status], retry_failed: bool,
           ) -> list[JobSpec]:
    """The jobs to (re)launch: never started or interrupted, and failed ones if asked."""
    rerun = {"pending", "interrupted", *(("failed",) if retry_failed else ())}
    return [spec for spec in specs if statuses[spec.key].state in rerun]
