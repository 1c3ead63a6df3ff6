"""What a run script does around training, the same for RL and continual runs: its exit codes
and one-line errors, Ctrl-C, SIGTERM and what each says about resuming.

A kind of run describes itself with a `RunKind` (where it stops on a SIGTERM, how often it
checkpoints, what is kept after a divergence, which settings set its memory); `script_main`,
`checks` and `train` do the rest for every kind.

Exit codes: 0 finished, 2 bad input (one line on stderr, before anything is compiled),
1 a failure while training (a message on stderr), 75 the run directory is in use by another
process (EX_TEMPFAIL: a sweep records such a job as interrupted, which its next launch reruns),
130 interrupted (Ctrl-C), 143 stopped by SIGTERM (at the next boundary, after a checkpoint
there: what a cluster sends before it preempts a job or at its time limit).
"""

import contextlib
import dataclasses
import logging as std_logging
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import jax
from absl import logging

from experiment import ctrl_c
from experiment.config import ConfigError
from experiment.resources import TooLargeForMemory
from experiment.rundir.lock import EXIT_IN_USE, EXIT_STOPPED, RunDirInUse
from experiment.rundir.record import CannotResume
from experiment.rundir.resume import checkpoint_dirs
from experiment.wandb_runs import DashboardError

# what --dry_run says of a run directory, per experiment.rundir.resume's state
DRY_RUN_OUTCOMES = {"fresh": "would be trained", "resume": "would resume from its last checkpoint",
                    "done": "has finished: nothing to do"}


class Diverged(RuntimeError):
    """A NaN or inf while training; the message says where and for which seed."""


class Stopped(RuntimeError):
    """Stopped as asked (SIGTERM) at a boundary, after a checkpoint there; `where` says at
    which ("at env step 5000", "after task 3")."""

    where: str = ""


class StopRequest:
    """Set by a SIGTERM (`train`'s handler): the run stops at its next boundary, after a
    checkpoint there. A run (experiment.train.Trainer, continual.loop.ContinualRun) reads it
    as its `stop`."""

    def __init__(self):
        self.requested = False


@dataclasses.dataclass(frozen=True)
class RunKind:
    """What the shared messages say of one kind of run."""

    boundary: str  # where a SIGTERM stops it: "episode end", "task boundary"
    checkpoints: Callable[[Any], str]  # cfg -> how often it checkpoints
    diverged: Callable[[Any, Diverged], str]  # (cfg, e) -> what is kept to resume from
    out_of_memory: Callable[[Any], str]  # cfg -> which settings set what an update holds
    host_memory: Callable[[Any], str]  # cfg -> what holds the host's memory (a MemoryError)
    failures: tuple[type[Exception], ...] = ()  # more errors that are one line, exit 1


def fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def interrupted(message: str, code: int = 130) -> None:
    """Exit `code` with `message`, skipping the interpreter's shutdown: a Ctrl-C during a
    compilation (the first update's, say) leaves XLA's compiler threads at work, and Python
    finalizing under them crashes (SIGSEGV). Nothing is lost: the logs are flushed row by row,
    and the first Ctrl-C waits for a checkpoint being written (a second one goes through, and
    the next start discards the half-written checkpoint)."""
    print(f"error: {message}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def script_main(body: Callable[[], None]) -> Callable[[list[str]], None]:
    """A run script's absl main: one line for stray arguments, library chatter kept off the
    terminal, a Ctrl-C held while the script imported delivered, and a Ctrl-C before training
    answered with one line; `body()` checks, prepares and trains."""

    def main(argv: list[str]) -> None:
        logging.set_verbosity(logging.WARNING)
        # After a failed checkpoint write, orbax leaves coroutines that Python reports at
        # exit, below the error line that says what happened (see the OSError case of train).
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited",
                                category=RuntimeWarning)
        sys.unraisablehook = _without_closed_loop_callbacks(sys.unraisablehook)
        asyncio_logger = std_logging.getLogger("asyncio")
        if _not_unretrieved_task_exception not in asyncio_logger.filters:
            asyncio_logger.addFilter(_not_unretrieved_task_exception)
        try:
            ctrl_c.deliver()  # raises one held while the script imported its libraries
            with ctrl_c.as_interrupt():
                if len(argv) > 1:
                    fail(f"unexpected arguments {argv[1:]}; every setting is a --flag (see "
                         "--help)", 2)
                body()
        except KeyboardInterrupt:  # during the checks and the run's construction
            interrupted("interrupted before training started")

    return main


def _not_unretrieved_task_exception(record: std_logging.LogRecord) -> bool:
    """A filter for asyncio's logger, False for "Task exception was never retrieved": orbax
    restores a checkpoint's arrays in concurrent tasks, and when one fails (a damaged
    checkpoint, set aside with its one warning line) the others' errors are logged with a
    traceback each as they are garbage-collected, after the fact and at random moments. The
    only asyncio code in a run is orbax's, whose failures the run reports itself."""
    return not record.getMessage().startswith("Task exception was never retrieved")


def _without_closed_loop_callbacks(hook: Callable) -> Callable:
    """`hook` (sys.unraisablehook), less the "Event loop is closed" RuntimeErrors of
    tensorstore's callbacks into the event loop of an orbax restore that failed and was closed
    (a damaged checkpoint, set aside with its one warning line): dozens of tracebacks, after
    the fact, that say nothing about the run."""

    def quiet(unraisable) -> None:
        if unraisable.exc_type is RuntimeError and str(unraisable.exc_value) == \
                "Event loop is closed":
            return
        hook(unraisable)

    return quiet


@contextlib.contextmanager
def checks(bad_input: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """The checks before training: a ConfigError (or one of `bad_input`) or a run directory
    that cannot be resumed exit 2 with one line, one in use by another process exits 75."""
    try:
        yield
    except (ConfigError, *bad_input) as e:
        fail(str(e), 2)
    except CannotResume as e:
        fail(f"cannot resume: {e}", 2)
    except RunDirInUse as e:  # a sweep takes this exit code for "try again later"
        fail(str(e), EXIT_IN_USE)


def dry_run_line(run_dir: str, state: str) -> str:
    return f"settings checked; {run_dir} {DRY_RUN_OUTCOMES[state]} (--dry_run: nothing done)"


def finished_line(run_dir: str) -> str:
    return f"{run_dir} has already finished; nothing to do"


def train(cfg: Any, kind: RunKind, banner: str, go: Callable[[StopRequest], Any]) -> None:
    """`banner` on stderr, then `go(stop)` (train the run of `cfg`, stopping at its next
    `kind.boundary` once a SIGTERM sets `stop`), each failure one line and its exit code."""
    stop = StopRequest()
    try:  # a Ctrl-C from the banner on is answered with what the run directory holds
        print(banner, file=sys.stderr, flush=True)
        with ctrl_c.as_interrupt():
            signal.signal(signal.SIGTERM, _stop_at_boundary(stop, kind.boundary))
            go(stop)
    except Diverged as e:
        fail(f"training diverged: {e}; {kind.diverged(cfg, e)}", 1)
    except CannotResume as e:
        fail(f"cannot resume: {e}", 1)
    except RunDirInUse as e:  # a second launch that started between the checks and the lock
        fail(str(e), EXIT_IN_USE)
    except (DashboardError, *kind.failures) as e:
        fail(str(e), 1)
    except MemoryError as e:  # numpy's names the allocation
        fail(f"out of memory ({str(e) or 'MemoryError'}); {kind.host_memory(cfg)}; "
             f"{kept(cfg)}", 1)
    except TooLargeForMemory as e:
        fail(too_large(e, cfg), 1)
    except jax.errors.JaxRuntimeError as e:
        if "Out of memory" not in str(e) and "RESOURCE_EXHAUSTED" not in str(e):
            raise
        fail(f"out of memory on the {jax.default_backend().upper()} "
             f"({str(e).splitlines()[0]}); {kind.out_of_memory(cfg)}; {kept(cfg)}", 1)
    except OSError as e:  # a full disk, a lost mount: the checkpoints written so far stand
        # orbax's abandoned write tasks would log their errors at exit, below this one's line
        std_logging.getLogger("asyncio").setLevel(std_logging.CRITICAL)
        if not os.path.isdir(cfg.run_dir):  # a lost mount: what it holds cannot be seen
            again = (f"{same_command(cfg)} resumes {cfg.run_dir} from its last complete "
                     "checkpoint, if one was written,")
        elif checkpoint_dirs(cfg.run_dir)[0]:
            again = (f"{same_command(cfg)} resumes {cfg.run_dir} from its last complete "
                     "checkpoint")
        else:
            again = (f"no checkpoint of {cfg.run_dir} was complete, so {same_command(cfg)} "
                     "starts it over")
        fail(f"{e}; {again} once that is fixed", 1)
    except Stopped as e:
        interrupted(f"stopped by SIGTERM {e.where}, after a checkpoint there; "
                    f"{same_command(cfg)} resumes {cfg.run_dir} from it", EXIT_STOPPED)
    except KeyboardInterrupt:
        if checkpoint_dirs(cfg.run_dir)[0]:
            interrupted(f"interrupted; {same_command(cfg)} resumes {cfg.run_dir} from its last "
                        f"checkpoint ({kind.checkpoints(cfg)})")
        interrupted(f"interrupted before the first checkpoint ({kind.checkpoints(cfg)}) of "
                    f"{cfg.run_dir}; {same_command(cfg)} starts it over")


def _stop_at_boundary(stop: StopRequest, boundary: str) -> Callable:
    """A SIGTERM handler: the run goes on to its next boundary, writes a checkpoint there and
    stops (Stopped), so that a cluster's SIGTERM before a preemption or at a time limit loses
    no training; a second SIGTERM ends the process at once, as SIGTERM otherwise does."""
    message = (f"\nSIGTERM: stopping at the next {boundary}, after a checkpoint there (a second "
               "SIGTERM stops at once)\n").encode()

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stop.requested = True
        # Straight to the file descriptor: a print here, arriving while the progress bar writes
        # to sys.stderr, would be a reentrant call into its buffer (a RuntimeError).
        os.write(2, message)

    return handler


def kept(cfg: Any) -> str:
    """What a run that stopped on an error leaves to resume from."""
    return ("the checkpoints written so far are kept" if checkpoint_dirs(cfg.run_dir)[0]
            else "no checkpoint was written")


def too_large(error: TooLargeForMemory, cfg: Any) -> str:
    return f"out of memory: {error}; {error.advice}; {kept(cfg)}"


def same_command(cfg: Any) -> str:
    """How to relaunch a run that holds checkpoints: --resume=never refuses that."""
    return ("the same command with --resume=auto" if cfg.resume == "never"
            else "the same command")
