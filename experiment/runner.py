"""What every run script does after defining its flags: validate, build, train, exit codes.

Exit codes: 0 finished, 2 bad input (one line on stderr, before anything is compiled),
1 a failure while training (a message on stderr), 75 the run directory is in use by another
process (EX_TEMPFAIL: a sweep records such a job as interrupted, which its next launch reruns),
130 interrupted (Ctrl-C), 143 stopped by SIGTERM (at the next episode end, after a checkpoint
there: what a cluster sends before it preempts a job or at its time limit).
"""

import errno
import logging as std_logging
import os
import signal
import sys
import tempfile
import warnings
from collections.abc import Callable

import jax
from absl import flags, logging

from agents import make_agent
from envs import UnknownEnvError, check_env_name, make_env
from envs.envpool_backend import EnvBackendError, check_task
from experiment import ctrl_c
from experiment.cli import config_from_flags, one_line_flag_parser
from experiment.config import (
    ConfigError,
    TrainConfig,
    dashboards_warning,
    diagnostics_warning,
    early_warning,
    schedule_warning,
    seed_warning,
    unused_flags_warning,
    validate,
)
from experiment.dashboards import DashboardError, check_installed
from experiment.events import intervention_plan
from experiment.resources import TooLargeForMemory, check_fits
from experiment.rundir.lock import (
    EXIT_IN_USE,
    EXIT_STOPPED,
    RunDirInUse,
    check_not_in_use,
    lock_run_dir,
)
from experiment.rundir.record import CannotResume, config_record
from experiment.rundir.resume import checkpoint_dirs, resume_state
from experiment.train import Diverged, Stopped, Trainer, UnevenEpisodes, make_trainer, seed_init

__all__ = ["ConfigError", "main"]


parse_flags = one_line_flag_parser()


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def _interrupted(message: str, code: int = 130) -> None:
    """Exit `code` with `message`, skipping the interpreter's shutdown: a Ctrl-C during a
    compilation (the first update's, say) leaves XLA's compiler threads at work, and Python
    finalizing under them crashes (SIGSEGV). Nothing is lost: the logs are flushed row by row,
    and the first Ctrl-C waits for a checkpoint being written (a second one goes through, and
    the next start discards the half-written checkpoint)."""
    print(f"error: {message}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _stop_at_episode_end(trainer: Trainer) -> Callable:
    """A SIGTERM handler: the run goes on to its next episode end, writes a checkpoint there
    and stops (Stopped), so that a cluster's SIGTERM before a preemption or at a time limit
    loses no training (a suite episode is 1,000 env steps); a second SIGTERM ends the process
    at once, as SIGTERM otherwise does."""

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        trainer.stop_requested = True
        # Straight to the file descriptor: a print here, arriving while the progress bar writes
        # to sys.stderr, would be a reentrant call into its buffer (a RuntimeError).
        os.write(2, b"\nSIGTERM: stopping at the next episode end, after a checkpoint there (a "
                    b"second SIGTERM stops at once)\n")

    return handler


def main(argv: list[str], agent_name: str, agent_config: Callable) -> None:
    """Validate the flags, build the agent (`agent_config()`: its config from the flags) and
    train."""
    logging.set_verbosity(logging.WARNING)  # keep library chatter off the terminal
    # After a failed checkpoint write, orbax leaves coroutines that Python reports at exit,
    # below the error line that says what happened (see the OSError case below).
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited",
                            category=RuntimeWarning)
    sys.unraisablehook = _without_closed_loop_callbacks(sys.unraisablehook)
    asyncio_logger = std_logging.getLogger("asyncio")
    if _not_unretrieved_task_exception not in asyncio_logger.filters:
        asyncio_logger.addFilter(_not_unretrieved_task_exception)
    try:
        ctrl_c.deliver()  # raises one held while the script imported its libraries
        with ctrl_c.as_interrupt():
            _main(argv, agent_name, agent_config)
    except KeyboardInterrupt:  # during the checks and the agent's construction
        _interrupted("interrupted before training started")


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


def _main(argv: list[str], agent_name: str, agent_config: Callable) -> None:
    if len(argv) > 1:
        _fail(f"unexpected arguments {argv[1:]}; every setting is a --flag (see --help)", 2)
    try:
        cfg = config_from_flags(agent_name)
        validate(cfg)
        check_env_name(cfg.env)
        check_installed(cfg)
        if cfg.env_backend == "envpool":
            check_task(cfg.env, cfg.seed + cfg.num_seeds - 1 + cfg.eval_seed_offset)
        agent = make_agent(agent_name, agent_config())
        intervention_plan(agent, cfg)  # its parts: an error here, before anything compiles
        if flags.FLAGS.dry_run:
            _dry_run(cfg, agent)
            return
        # Held until the process ends: a second launch of this run is refused, before it reads
        # or writes anything there, rather than racing this one over checkpoints and logs.
        record = config_record(cfg, agent.config)
        try:
            lock = (_lock(cfg.run_dir) if os.path.exists(os.path.join(cfg.run_dir, ".lock"))
                    else None)
        except ConfigError:  # read-only: a finished run (archived) needs no lock to say so
            if resume_state(cfg, record) != "done":
                raise
            lock, state = None, "done"
        else:
            state = resume_state(cfg, record)  # refusals create nothing
        if state == "done":
            kept = (" (--keep_final_buffer changes nothing here: a run keeps its replay buffer "
                    "or not when it finishes)" if cfg.keep_final_buffer else "")
            print(f"{cfg.run_dir} has already finished; nothing to do{kept}", file=sys.stderr)
            return
        check_writable(cfg.run_dir)
        lock = lock or _lock(cfg.run_dir)  # noqa: F841 - released when the process ends
    except (ConfigError, UnknownEnvError, EnvBackendError) as e:
        _fail(str(e), 2)
    except CannotResume as e:
        _fail(f"cannot resume: {e}", 2)
    except RunDirInUse as e:  # a sweep takes this exit code for "try again later"
        _fail(str(e), EXIT_IN_USE)
    _warn(cfg)
    try:  # a Ctrl-C from the banner on is answered with what the run directory holds
        print(f"{agent_name} on {cfg.env}: seeds {cfg.seeds}, utd {cfg.utd}, "
              f"intervention {cfg.intervention} -> {cfg.run_dir}", file=sys.stderr, flush=True)
        with ctrl_c.as_interrupt():
            trainer = make_trainer(agent, cfg)
            signal.signal(signal.SIGTERM, _stop_at_episode_end(trainer))
            trainer.run()
    except Diverged as e:
        if e.resumed_from is not None:  # a damaged checkpoint would do this too: name it
            kept = (f"{e.env_step - e.resumed_from} env step(s) after resuming from the "
                    f"checkpoint at env step {e.resumed_from} "
                    f"({cfg.run_dir}/checkpoints/{e.resumed_from}), which is kept")
        elif checkpoint_dirs(cfg.run_dir)[0]:
            kept = f"the last good checkpoint is kept in {cfg.run_dir}/checkpoints"
        else:
            kept = "no checkpoint was written before it"
        _fail(f"training diverged: {e}; {kept}", 1)
    except CannotResume as e:
        _fail(f"cannot resume: {e}", 1)
    except (UnevenEpisodes, DashboardError) as e:
        _fail(str(e), 1)
    except MemoryError as e:  # numpy's names the allocation; the buffer is the large one
        _fail(f"out of memory ({str(e) or 'MemoryError'}); the replay buffer holds "
              f"--buffer_capacity={cfg.buffer_capacity:,} transitions for each of "
              f"--num_seeds={cfg.num_seeds} seed(s): lower them or free memory; {_kept(cfg)}", 1)
    except TooLargeForMemory as e:
        _fail(_too_large(e, cfg), 1)
    except jax.errors.JaxRuntimeError as e:
        if not _out_of_memory(e):
            raise
        _fail(f"out of memory on the {jax.default_backend().upper()} "
              f"({str(e).splitlines()[0]}); the networks' sizes and --num_seeds x --utd x "
              f"--batch_size ({cfg.num_seeds} x {cfg.utd} x {cfg.batch_size}) set what an "
              f"update holds: lower them; {_kept(cfg)}", 1)
    except OSError as e:  # a full disk, a lost mount: the checkpoints written so far stand
        # orbax's abandoned write tasks would log their errors at exit, below this one's line
        std_logging.getLogger("asyncio").setLevel(std_logging.CRITICAL)
        if not os.path.isdir(cfg.run_dir):  # a lost mount: what it holds cannot be seen
            again = (f"{_same_command(cfg)} resumes {cfg.run_dir} from its last complete "
                     "checkpoint, if one was written,")
        elif checkpoint_dirs(cfg.run_dir)[0]:
            again = (f"{_same_command(cfg)} resumes {cfg.run_dir} from its last complete "
                     "checkpoint")
        else:
            again = (f"no checkpoint of {cfg.run_dir} was complete, so {_same_command(cfg)} "
                     "starts it over")
        _fail(f"{e}; {again} once that is fixed", 1)
    except Stopped as e:
        _interrupted(f"stopped by SIGTERM at env step {e.env_step}, after a checkpoint there; "
                     f"{_same_command(cfg)} resumes {cfg.run_dir} from it", EXIT_STOPPED)
    except KeyboardInterrupt:
        if checkpoint_dirs(cfg.run_dir)[0]:
            _interrupted(f"interrupted; {_same_command(cfg)} resumes {cfg.run_dir} from its last "
                         f"checkpoint (every {cfg.checkpoint_every:,} env steps, at an episode "
                         "end)")
        _interrupted(f"interrupted before the first checkpoint (every {cfg.checkpoint_every:,} "
                     f"env steps, at an episode end) of {cfg.run_dir}; {_same_command(cfg)} "
                     "starts it over")


def _kept(cfg: TrainConfig) -> str:
    """What a run that stopped on an error leaves to resume from."""
    return ("the checkpoints written so far are kept" if checkpoint_dirs(cfg.run_dir)[0]
            else "no checkpoint was written")


def _out_of_memory(error: Exception) -> bool:
    """Whether a JAX runtime error is an allocation that failed (on the CPU or a GPU)."""
    text = str(error)
    return "Out of memory" in text or "RESOURCE_EXHAUSTED" in text


def _same_command(cfg: TrainConfig) -> str:
    """How to relaunch a run that holds checkpoints: --resume=never refuses that."""
    return ("the same command with --resume=auto" if cfg.resume == "never"
            else "the same command")


def _dry_run(cfg: TrainConfig, agent) -> None:
    """--dry_run: the checks a run makes before it trains, its run directory's included (in
    use by another process, holding a run of other settings, a --resume mode that forbids
    what is there, not writable), whether the agents' states fit this process's device and
    the whole run the host's memory (`check_fits`), and its warnings; it reads that directory
    and leaves nothing behind. Each failure exits as the run would."""
    check_not_in_use(cfg.run_dir)
    state = resume_state(cfg, config_record(cfg, agent.config))
    if state != "done":  # a finished run is read only (it may be archived read-only)
        check_writable(cfg.run_dir, create=False)
    try:
        probe = make_env(cfg.env, cfg.seed, cfg.action_repeat)
        check_fits(*seed_init(agent, cfg.seeds, probe.obs_dim, probe.act_dim), cfg, probe)
    except TooLargeForMemory as e:
        _fail(_too_large(e, cfg), 1)
    _warn(cfg)
    outcome = {"fresh": "would be trained", "resume": "would resume from its last checkpoint",
               "done": "has finished: nothing to do"}[state]
    print(f"settings checked; {cfg.run_dir} {outcome} (--dry_run: nothing done)")


def _too_large(error: TooLargeForMemory, cfg: TrainConfig) -> str:
    return f"out of memory: {error}; {error.advice}; {_kept(cfg)}"


def _warn(cfg: TrainConfig) -> None:
    """Settings that work but may not do what was meant: a line each on stderr."""
    given = [name for name in flags.FLAGS if flags.FLAGS[name].present]
    for warning in (schedule_warning(cfg, given), early_warning(cfg), seed_warning(cfg),
                    diagnostics_warning(cfg), unused_flags_warning(cfg, given),
                    dashboards_warning(cfg, given)):
        if warning is not None:
            print(f"warning: {warning}", file=sys.stderr)


def _lock(run_dir: str):
    """lock_run_dir, with a .lock that cannot be opened (a read-only run directory) refused as
    an unwritable one."""
    try:
        return lock_run_dir(run_dir)
    except OSError as e:
        raise ConfigError(f"cannot write to the run directory {run_dir}: {e.strerror}; "
                          "choose a writable --logdir") from None


PATH_MAX = 4096  # Linux's limit on a path's length, in bytes
CHECKPOINT_PATH_ROOM = 256  # below the run directory: checkpoints/<step>.orbax-...-tmp/... files


def check_writable(run_dir: str, create: bool = True) -> None:
    """Raise ConfigError unless the run directory can be created and written. Without `create`
    it is judged without leaving anything behind: the nearest folder that exists must be a
    directory where a probe folder can be made (and is removed at once; permissions alone
    pass root anywhere, /proc included), and the names below it to create must fit."""
    path = os.path.abspath(run_dir)
    if "[" in path or "]" in path:  # orbax finds a checkpoint's files with a glob below it
        raise ConfigError(f"the run directory {path} has '[' or ']' in its path; checkpoints "
                          "written below such a path cannot be restored (orbax reads the "
                          "brackets as a glob pattern): choose a --logdir and --run_name "
                          "without them")
    if len(os.fsencode(path)) > PATH_MAX - CHECKPOINT_PATH_ROOM:
        raise ConfigError(f"the run directory's path is {len(os.fsencode(path))} bytes long; its "
                          f"checkpoints' files need up to {CHECKPOINT_PATH_ROOM} more, within "
                          f"the system's limit of {PATH_MAX}: choose a shorter --logdir")
    try:
        if create:
            os.makedirs(run_dir, exist_ok=True)
            probe = os.path.join(run_dir, ".write_test")
            with open(probe, "w") as f:
                f.write("ok")
            os.remove(probe)
            return
        folder, missing = os.path.abspath(run_dir), []
        while not os.path.lexists(folder):  # the part a launch would create
            folder, name = os.path.split(folder)
            missing.append(name)
        if any(len(os.fsencode(name)) > 255 for name in missing):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, f"{folder} is not a writable directory")
        os.rmdir(tempfile.mkdtemp(prefix=".dry_run_probe_", dir=folder))
    except OSError as e:
        raise ConfigError(f"cannot write to the run directory {run_dir}: {e.strerror}; "
                          "choose a writable --logdir") from None
