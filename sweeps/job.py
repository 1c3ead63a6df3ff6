"""What a sweep submits: a job runs one run script as a subprocess and keeps its record.

The run script resumes from its latest checkpoint when started again (--resume=auto), so
every way a job can end early (killed, preempted, timed out) is repaired by running the same
command again. Under submitit, a preemption / time-out signal stops the script and requeues
the job (both classes are `Checkpointable`); on the local executor a `LocalWorker` takes jobs
one after another from its launch's queue, which is how --max_parallel is kept.
"""

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import submitit
from submitit.core.utils import DelayedSubmission

from experiment.rundir.files import is_finished
from experiment.rundir.lock import EXIT_IN_USE, EXIT_STOPPED
from sweeps.state import HEARTBEAT_S, read_json, this_process, update_record

# After the script dies of a signal, or stops on one (exit 143), wait this long for submitit's
# preemption signal to arrive (SLURM preemption sends SIGTERM to every process, then the signal
# that requeues).
PREEMPT_GRACE_S = 5.0
# A run script answers SIGTERM at its next episode end, with a checkpoint there; before a time
# limit (--signal_delay_s, 90 s by default) this is how long it gets before SIGKILL.
TERMINATE_WAIT_S = 60.0
POLL_S = 0.5
LAST_LINE_CHARS = 300
TAIL_BYTES = 64 * 1024  # last_line reads at most this much of a log
PR_SET_PDEATHSIG = 1
REQUEUED = "requeued after preemption or time-out"


def _requeue_signal() -> signal.Signals:
    return signal.Signals["SIG" + submitit.JobEnvironment.USR_SIG]


def _child_setup(parent_pid: int, cores: Sequence[int] | None = None) -> Callable[[], None]:
    """Runs in the child before exec: dies with its parent, ignores the requeue signal, and
    runs on `cores` alone where given."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None
    requeue = _requeue_signal()

    def setup() -> None:
        signal.signal(requeue, signal.SIG_IGN)
        if cores:
            os.sched_setaffinity(0, cores)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent_pid:
                os._exit(1)

    return setup


@contextlib.contextmanager
def _requeue_deferred() -> Iterator[None]:
    """Hold the requeue signal back: its handler must not run while a record lock or Popen's
    own lock is held, since it stops the script and writes the record itself."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {_requeue_signal()})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def last_line(path: str, offset: int = 0) -> str:
    """The last non-empty line written to `path` after byte `offset` (progress bars too)."""
    with open(path, "rb") as f:
        f.seek(max(offset, f.seek(0, os.SEEK_END) - TAIL_BYTES))  # a log can be large
        text = f.read().decode("utf-8", errors="replace")
    lines = [line.strip() for line in text.replace("\r", "\n").split("\n") if line.strip()]
    return lines[-1][:LAST_LINE_CHARS] if lines else ""


def scheduler_id() -> str:
    """The submitit job id of the calling process ("123", "123_4" in an array), or ''."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return ""
    return submitit.JobEnvironment().job_id


class RunJob(submitit.helpers.Checkpointable):
    """One run script invocation; calling it runs the script to its end and records how."""

    def __init__(self, key: str, argv: Sequence[str], run_dir: str, record: str, stdout: str,
                 stderr: str, env: Mapping[str, str | None] | None = None):
        self.key, self.argv, self.run_dir = key, list(argv), run_dir
        self.record, self.stdout, self.stderr = record, stdout, stderr
        self.env = dict(env or {})
        self._proc: subprocess.Popen | None = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_proc"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _proc=None)

    @property
    def finished(self) -> bool:
        """Whether the run's done.json reads as a finished run's (a damaged one is not taken
        for finished: the script says so and checks the run)."""
        return is_finished(self.run_dir)

    def __call__(self, cores: Sequence[int] | None = None) -> str:
        """Run (or resume) the script, on `cores` alone where given (a local worker's share of
        the machine); returns the final state: done, failed or interrupted."""
        if self.finished:
            self._update(state="done", detail="finished before this attempt")
            return "done"
        os.makedirs(os.path.dirname(self.record), exist_ok=True)
        with open(self.record + ".run", "a") as run_lock:
            try:
                fcntl.flock(run_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "running"
            except OSError:  # a filesystem without locks: run unguarded (the run script warns)
                pass
            return self._run(cores)

    def _run(self, cores: Sequence[int] | None) -> str:
        attempt = read_json(self.record).get("attempt", 0) + 1
        now = time.time()
        cores = sorted(cores) if cores else None
        self._update(state="running", detail=f"attempt {attempt}", attempt=attempt, started=now,
                     heartbeat=now, finished=None, returncode=None, stop_sent_to=None,
                     scheduler_id=scheduler_id(), cores=cores, **this_process())
        os.makedirs(os.path.dirname(self.stdout), exist_ok=True)
        with open(self.stdout, "ab") as out, open(self.stderr, "ab") as err:
            on = f" on cores {','.join(map(str, cores))}" if cores else ""
            header = (f"=== {self.key} attempt {attempt} on {socket.gethostname()}{on} at "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(self.argv)}\n").encode()
            for stream in (out, err):
                stream.write(header)
                stream.flush()
            start = err.tell()
            with _requeue_deferred():
                self._proc = subprocess.Popen(self.argv, stdout=out, stderr=err,
                                              env=self._child_env(cores),
                                              preexec_fn=_child_setup(os.getpid(), cores))
                update_record(self.record, child_pid=self._proc.pid)
            returncode = self._wait()
        self._proc = None
        state, detail = self._outcome(returncode, start)
        self._update(state=state, detail=detail, returncode=returncode, finished=time.time())
        return state

    def _update(self, **changes) -> None:
        with _requeue_deferred():
            update_record(self.record, **changes)

    def _child_env(self, cores: Sequence[int] | None = None) -> dict[str, str]:
        """The script's environment: the sweep's, with the job's settings, and, for a script
        pinned to `cores`, XLA's CPU thread pools sized to them (jaxlib reads PJRT_NPROC for
        their size; else one thread per core of the machine) unless PJRT_NPROC is set."""
        env = dict(os.environ)  # MUJOCO_GL unset means 'disabled' in the run (envs.names)
        for name, value in self.env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        if cores:
            env.setdefault("PJRT_NPROC", str(len(cores)))
        return env

    def _wait(self) -> int:
        """Poll the script, beating the heartbeat; submitit's signal handler runs only in sleep."""
        beat = time.time()
        while True:
            with _requeue_deferred():
                returncode = self._proc.poll()
                if returncode is not None:
                    return returncode
                if time.time() - beat >= HEARTBEAT_S:
                    beat = time.time()
                    update_record(self.record, heartbeat=beat)
            time.sleep(POLL_S)

    def _outcome(self, returncode: int, err_start: int) -> tuple[str, str]:
        if returncode == 0:
            if self.finished:
                return "done", ""
            return "failed", "exit 0 without writing done.json"
        if returncode == EXIT_IN_USE:  # another process trains it: a relaunch tries again
            return "interrupted", f"exit {returncode}: {last_line(self.stderr, err_start)}"
        if returncode > 0 and returncode != EXIT_STOPPED:
            return "failed", f"exit {returncode}: {last_line(self.stderr, err_start)}"
        if os.environ.get("SUBMITIT_EXECUTOR"):
            time.sleep(PREEMPT_GRACE_S)
        if returncode == EXIT_STOPPED:  # a SIGTERM, answered with a checkpoint: it resumes
            return "interrupted", f"exit {returncode}: {last_line(self.stderr, err_start)}"
        return "interrupted", f"run script killed by {signal.Signals(-returncode).name}"

    def stop(self, detail: str) -> None:
        """Stop the script (SIGTERM, then SIGKILL) and record the job as queued again."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=TERMINATE_WAIT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        update_record(self.record, state="queued", detail=detail)

    def checkpoint(self) -> DelayedSubmission:
        """submitit calls this on preemption / time-out: stop, then requeue this same job."""
        self.stop(REQUEUED)
        return super().checkpoint()


def claim(claims: str, key: str) -> bool:
    """Take job `key` of a local launch (its claims folder): True for the first caller only."""
    os.makedirs(claims, exist_ok=True)
    path = os.path.join(claims, key.replace("/", "__"))
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    return False


class LocalWorker(submitit.helpers.Checkpointable):
    """Runs the jobs of one local launch that no other worker has claimed, one at a time, each
    on `cores` alone where given."""

    def __init__(self, jobs: Sequence[RunJob], claims: str,
                 cores: Sequence[int] | None = None):
        self.jobs, self.claims = list(jobs), claims
        self.cores = tuple(cores) if cores else None
        self.current: int | None = None

    def __call__(self) -> list[tuple[str, str]]:
        """Run the job this worker was running before a requeue, then every unclaimed one."""
        outcomes = []
        if self.current is not None:
            job = self.jobs[self.current]
            outcomes.append((job.key, job(self.cores)))
            self.current = None
        for index, job in enumerate(self.jobs):
            if claim(self.claims, job.key):
                self.current = index
                outcomes.append((job.key, job(self.cores)))
                self.current = None
        return outcomes

    def checkpoint(self) -> DelayedSubmission:
        """Stop the current job and requeue this worker; it resumes that job first."""
        if self.current is not None:
            self.jobs[self.current].stop(REQUEUED)
        return super().checkpoint()
