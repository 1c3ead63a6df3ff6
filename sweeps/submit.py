"""Launching a sweep through submitit and following it through the job records.

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
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

import submitit

from envs import make_env
from experiment import ctrl_c
from experiment.config import AGENT_DEFAULTS
from experiment.memory import buffer_nbytes, env_nbytes, host_memory_bytes, sized
from experiment.rundir.code import CODE, other_code, recorded_code
from experiment.rundir.files import is_finished
from experiment.rundir.lock import EXIT_IN_USE
from experiment.rundir.record import WATCH_SETTINGS, with_added_settings, with_resolved_settings
from sweeps.job import LocalWorker, RunJob
from sweeps.jobspec import FLAG_FIELDS, JobSpec, job_flags
from sweeps.run_flags import SweepError
from sweeps.state import (
    FINAL_STATES,
    Status,
    SweepPaths,
    damaged_record,
    describe,
    process_start,
    read_json,
    slurm_queue,
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


def recorded_jobs(paths: SweepPaths) -> list[JobSpec]:
    """The jobs this logdir's sweeps have recorded."""
    specs = []
    for key in paths.recorded_keys():
        record = read_json(paths.record(key))
        if "spec" in record:
            with damaged_record(paths.record(key)):
                specs.append(JobSpec.from_dict(record["spec"]))
    return specs


def collect(paths: SweepPaths, keys: Sequence[str]) -> dict[str, Status]:
    """The status of each job, read from its record, its run directory and its launch."""
    records = {key: read_json(paths.record(key)) for key in keys}
    on_slurm = any(r.get("executor") == "slurm" and r.get("state") in ("queued", "running",
                                                                         "interrupted")
                   for r in records.values())
    if on_slurm:  # the queue first, then the records: a job gone from it has written its end
        queue = slurm_queue()
        records = {key: read_json(paths.record(key)) for key in keys}
    else:
        queue = None
    launches: dict[str, Mapping] = {}
    for record in records.values():
        if "launch" in record and record["launch"] not in launches:
            launches[record["launch"]] = read_json(paths.launch(record["launch"]))
    statuses = {}
    for key, record in records.items():
        with damaged_record(paths.record(key)):
            statuses[key] = describe(
                record, is_finished(os.path.join(paths.logdir, key)),
                launches.get(record.get("launch", ""), {}), queue)
    return statuses


def status_line(key: str, status: Status, paths: SweepPaths) -> str:
    """One line: state, job, and what is known (the error's last line for a failed job)."""
    line = f"{status.state:<11} {key}"
    if status.detail:
        line += f"  {status.detail}"
    if status.state in ("failed", "interrupted") and os.path.exists(paths.log(key, "err")):
        line += f"  [log: {paths.log(key, 'err')}]"  # a job that never started has none
    return line


def summary(statuses: Mapping[str, Status]) -> str:
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status.state] = counts.get(status.state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def watch(paths: SweepPaths, keys: Sequence[str], poll_s: float = 2.0,
          emit: Callable[[str], None] = print) -> dict[str, Status]:
    """Follow the jobs until each is done, failed or interrupted; a line per state change."""
    seen: dict[str, tuple[str, str]] = {}
    while True:
        ctrl_c.raise_dropped()  # a Ctrl-C that Python dropped in a callback since the last poll
        statuses = collect(paths, keys)
        for key, status in statuses.items():
            if seen.get(key) != (status.state, status.detail):
                seen[key] = (status.state, status.detail)
                emit(f"{time.strftime('%H:%M:%S')} {status_line(key, status, paths)}")
        if all(s.state in FINAL_STATES for s in statuses.values()):
            return statuses
        time.sleep(poll_s)


def _text(value: object) -> str:
    """A setting as lower-case text, absl's boolean spellings (t, f) as true and false."""
    text = str(value).strip().lower()
    return {"t": "true", "f": "false"}.get(text, text)


def same_setting(there: object, now: object) -> bool:
    """A config.json value (or a flag's text) and a flag's text: numbers as numbers, lists as
    comma-separated items (as absl reads them, stripped) compared item by item, booleans and
    the rest as text."""
    if isinstance(there, str) and "," in there:  # a list flag's text
        there = there.split(",")
    if isinstance(there, list | tuple):
        items = str(now).split(",") if str(now).strip() else []
        return len(items) == len(there) and all(map(same_setting, there, items))
    try:
        return float(there) == float(now)
    except (TypeError, ValueError):
        return _text(there) == _text(now)


_MISSING = object()
# Extra flags that change nothing a finished run computed.
HARMLESS_EXTRA = ("progress", "resume", "keep_final_buffer", *WATCH_SETTINGS)


def recorded_setting(config: Mapping, name: str) -> object:
    """The value config.json records for the flag `name`: a top-level setting or an agent
    hyperparameter (SAC's --hidden_dim and --num_layers from its hidden_dims); _MISSING if
    it records none."""
    if name in config:
        return config[name]
    agent = config.get("agent_config")
    if not isinstance(agent, dict):
        return _MISSING
    if name in agent:
        return agent[name]
    dims = agent.get("hidden_dims")
    if isinstance(dims, list) and dims:
        if name == "num_layers":
            return len(dims)
        if name == "hidden_dim" and len(set(dims)) == 1:
            return dims[0]
    return _MISSING


def _extra_flags(extra: Sequence[str]) -> dict[str, str]:
    """`_job_flags` of extra flags alone."""
    return _job_flags({"extra": extra})


def _job_flags(spec: Mapping) -> dict[str, str]:
    """`job_flags` less the harmless ones and an empty --intervention_steps=, which asks for
    the default schedule, given or not (config.json records it filled in, e.g. BRO's reset
    steps)."""
    return {name: value for name, value in job_flags(spec).items()
            if name not in HARMLESS_EXTRA and (value or name != "intervention_steps")}


def _flag_differences(before: Mapping[str, str], after: Mapping[str, str], then: str,
                      config: Mapping | None = None) -> list[str]:
    """How a job's flags now differ from `before` (those it was launched with): a flag dropped
    since (its setting may have gone back to the default), a value changed, or a flag added;
    with `config`, only added ones config.json does not record (it is compared with the
    others)."""
    out = [f"--{n}={v} {then}, not given now" for n, v in before.items() if n not in after]
    out += [f"--{n}={before[n]} {then}, --{n}={v} now" for n, v in after.items()
            if n in before and not same_setting(before[n], v)]
    out += [f"--{n}={v} not given {then}" for n, v in after.items() if n not in before
            and (config is None or recorded_setting(config, n) is _MISSING)]
    return out


def check_run_dirs(specs: Sequence[JobSpec], statuses: Mapping[str, Status], logdir: str,
                   launching: Collection[str]) -> None:
    """SweepError when the run directory of a finished job, or of a started one about to be
    launched again (its key in `launching`), holds a run with other settings than the job asks
    for (`run_dir_conflict`)."""
    for spec in specs:
        conflict = run_dir_conflict(spec, statuses[spec.key], logdir, spec.key in launching)
        if conflict:
            raise SweepError(f"{spec.run_dir(logdir)} holds {conflict}; use another --logdir, "
                             "or leave that job out of the grid")


def run_dir_conflict(spec: JobSpec, status: Status, logdir: str, launching: bool) -> str | None:
    """'a finished run with other settings (...)' (or 'a started run ...') when the job's run
    directory holds a run with other settings than the job asks for; None when it holds this
    job's run, none at all, or a started run not about to be launched again (`launching`). A
    finished run would count as done and leave the grid's run undone (it is never started
    again); a started one would be refused by its run script while the jobs of the grid that
    had not started trained with the new settings. The settings compared are those config.json
    records and the flags the sweep launched the job with, so a flag dropped since (its setting
    back at the run script's default) is noticed too. SweepError for an unreadable
    config.json."""
    done = status.state == "done"
    if not done and not launching:
        return None
    path = os.path.join(spec.run_dir(logdir), "config.json")
    config = read_json(path)  # a SweepError naming it when half-written or edited by hand
    if not isinstance(config, dict):
        raise SweepError(f"{path} holds no JSON object; repair it or move that run "
                         "directory away")
    if not config:  # never started
        return None
    # A setting added since, at the value it ran with; --diagnostics_batch_size=0 as the
    # --batch_size it stands for, there and in the job's flags (as the run script reads them).
    config = with_resolved_settings(with_added_settings(config))
    wanted = {"env": spec.env, "task": spec.env, "utd": spec.utd,
              "intervention": spec.intervention, "seed": spec.seed, "num_seeds": spec.num_seeds,
              **dict(spec.settings), **dict(spec.train_flags)}
    wanted.update(_extra_flags(spec.extra))
    if same_setting(0, wanted.get("diagnostics_batch_size", "")):
        wanted["diagnostics_batch_size"] = wanted.get("batch_size", config.get("batch_size"))
    differ = []
    for name, value in wanted.items():
        there = recorded_setting(config, name)
        if there is not _MISSING and not same_setting(there, value):
            differ.append(f"{name}: {there!r} there, {value!r} now")
    launched = status.record.get("spec", {})
    if isinstance(launched, Mapping) and ("extra" in launched or "train_flags" in launched):
        differ += _flag_differences(_job_flags(launched), _job_flags(spec.to_dict()), "there",
                                    config)
    if not differ:
        return None
    run = "a finished run" if done else "a started run"
    return f"{run} with other settings ({'; '.join(differ[:3])})"


def other_code_warning(specs: Sequence[JobSpec], statuses: Mapping[str, Status],
                       logdir: str) -> str | None:
    """One warning line naming the grid's finished runs known to have run other code than this
    checkout (experiment/rundir/code.py), which a sweep counts as done; None when there are none."""
    runs = {}
    for spec in specs:
        if statuses[spec.key].state != "done":
            continue
        try:
            code = recorded_code(read_json(os.path.join(spec.run_dir(logdir), "config.json")))
        except SweepError:  # check_run_dirs names it
            continue
        if other_code(code):
            runs[spec.run_dir(logdir)] = code
    if not runs:
        return None
    run_dir, code = next(iter(runs.items()))
    return (f"warning: {len(runs)} finished run(s) ran other code than this checkout ({CODE}), "
            f"e.g. {run_dir} ({code}); they count as done and are not run again: move them "
            "away, or use another --logdir, to run them with this code")


def check_unfinished_launches(specs: Sequence[JobSpec],
                              statuses: Mapping[str, Status]) -> None:
    """SweepError when a job of the grid is queued or running from an earlier launch with
    other flags (`launch_conflict`)."""
    for spec in specs:
        conflict = launch_conflict(spec, statuses[spec.key])
        if conflict:
            raise SweepError(f"{spec.key} is {conflict}; wait for it to end (--status), or use "
                             "another --logdir")


def launch_conflict(spec: JobSpec, status: Status) -> str | None:
    """'queued, launched with other flags (...)' (or 'running, ...') when the job is queued or
    running from an earlier launch with other flags than `spec`: it trains as launched then,
    and a summary would count it for this grid. None otherwise."""
    if status.state not in ("queued", "running") or "spec" not in status.record:
        return None
    then, now = JobSpec.from_dict(status.record["spec"]).to_dict(), spec.to_dict()
    differ = [f"{k}: {then.get(k)} then, {v} now" for k, v in now.items()
              if k not in FLAG_FIELDS and then.get(k) != v]
    differ += _flag_differences(_job_flags(then), _job_flags(now), "then")
    if not differ:
        return None
    return f"{status.state}, launched with other flags ({'; '.join(differ[:3])})"


DRY_RUNS_AT_ONCE = 4


def check_flags(specs: Sequence[JobSpec], logdir: str, timeout_s: float = 300.0,
                emit: Callable[[str], None] = print) -> None:
    """Run each kind of job once with --dry_run, where its run script checks its settings and
    exits (on the CPU, training nothing); SweepError with the script's error line if one
    refuses, so a misspelt or out-of-range extra flag stops the sweep before it launches jobs
    that would each fail on it. Jobs that differ only in env, UTD or seed share a check (the
    sweep checks env names and UTDs itself; the job with the highest seeds runs it, as seeds
    are checked against an upper bound); `check_run_dirs` compares each job's run directory.
    The warnings a check prints are shown once each."""
    kinds: dict[tuple, JobSpec] = {}
    for spec in sorted(specs, key=lambda s: -(s.seed + s.num_seeds)):
        kinds.setdefault((spec.script, spec.intervention, spec.settings, spec.train_flags,
                          spec.extra), spec)
    todo = list(kinds.values())
    emit(f"checking the flags of {len(todo)} kind(s) of job with the run scripts' --dry_run")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    warned: set[str] = set()
    for start in range(0, len(todo), DRY_RUNS_AT_ONCE):
        running: list[tuple[JobSpec, subprocess.Popen]] = []
        try:
            for spec in todo[start:start + DRY_RUNS_AT_ONCE]:
                python, script, *args = spec.argv(logdir)
                running.append((spec, subprocess.Popen(
                    [python, script, "--dry_run", *args], env=env, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)))
            deadline = time.time() + timeout_s
            for spec, proc in running:
                try:
                    out, err = proc.communicate(timeout=max(deadline - time.time(), 0.1))
                except subprocess.TimeoutExpired:
                    raise SweepError(f"{spec.script} --dry_run (job {spec.key}) did not finish "
                                     f"in {timeout_s:.0f} s; nothing was launched") from None
                lines = [line for line in err.splitlines() if line.strip()]
                if proc.returncode == EXIT_IN_USE:  # the flags passed; the job waits its turn
                    emit(f"{spec.key}: {lines[-1] if lines else 'in use'} (its job is "
                         "recorded interrupted, and the next launch of the sweep reruns it)")
                    continue
                if proc.returncode != 0 or "settings checked; " not in out:
                    why = (lines[-1] if lines and proc.returncode != 0 else
                           f"exit code {proc.returncode} without checking the settings")
                    raise SweepError(f"{os.path.basename(spec.script)} refuses the flags of job "
                                     f"{spec.key}: {why}; nothing was launched")
                for line in lines:
                    if line.startswith("warning: ") and line not in warned:
                        warned.add(line)
                        emit(f"{spec.key}: {line}")
        finally:
            for _, proc in running:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def select(specs: Sequence[JobSpec], statuses: Mapping[str, Status], retry_failed: bool,
           ) -> list[JobSpec]:
    """The jobs to (re)launch: never started or interrupted, and failed ones if asked."""
    rerun = {"pending", "interrupted", *(("failed",) if retry_failed else ())}
    return [spec for spec in specs if statuses[spec.key].state in rerun]
