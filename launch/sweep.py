"""Run a grid of training runs through submitit: local by default, SLURM with --executor=slurm.

    python launch/sweep.py --agent=sac --preset=resets10 --interventions=none,reset,clip \\
        --utds=1,4,8 --seeds=10 --logdir=runs/sac -- --clip_c=4
    python launch/sweep.py --agent=continual --envs=random_label_mnist --interventions=none,clip \\
        --vary=clip_c=1.5,2,3,4,8 --vary=clip_sides=both,upper,lower --seeds=10 \\
        --logdir=runs/c_sweep
    python launch/sweep.py --logdir=runs/sac --status
    python launch/sweep.py --logdir=runs/sac --retry_failed
    python launch/sweep.py --logdir=runs/sac --stop

Launching again skips finished runs and resumes interrupted ones from their checkpoints.
Flags after `--` (or in --extra) go to every run script. Exit codes: 0 every job done (or
submitted, with --no_wait; --status and --stop whenever the logdir holds a sweep), 1 some job
failed or was interrupted, 2 bad flags or no sweep in the logdir (one line), 130 Ctrl-C (which
stops following the jobs, not the jobs: --stop stops local ones, resumably).
"""

import dataclasses
import os
import resource
import sys

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
from absl import app, flags, logging

from envs import UnknownEnvError
from experiment import ctrl_c
from experiment.cli import one_line_flag_parser
from interventions import registry
from sweeps.grid import (
    AGENTS,
    PRESETS,
    RUN_DEFAULTS,
    check_seed_overlap,
    expand,
    load_grid_file,
    make_grid,
)
from sweeps.jobspec import DEFAULT_SCRIPT_DIR, JobSpec
from sweeps.preflight import (
    check_flags,
    check_run_dirs,
    check_unfinished_launches,
    launch_conflict,
    other_code_warning,
    run_dir_conflict,
)
from sweeps.progress import collect, recorded_jobs, status_line, summary, watch
from sweeps.run_flags import GRID_KEYS, TRAIN_FLAGS, SweepError, split_extra
from sweeps.state import SweepPaths, read_json, sweep_lock
from sweeps.stop import stop
from sweeps.submit import EXECUTORS, ExecutorOptions, launch, machine_parallel, select

FLAGS = flags.FLAGS
flags.DEFINE_enum("agent", "sac", list(AGENTS), "Agent: its run script is launch/run_<agent>.py "
                  "(continual: the supervised benchmarks of run_continual.py).")
flags.DEFINE_list("envs", [], "dm_control tasks as domain-task; for --agent=continual, "
                  "benchmarks (random_label_digits, ...).")
flags.DEFINE_list("preset", [], f"Task lists: {', '.join(PRESETS)}.")
flags.DEFINE_list("interventions", None, f"Any of {', '.join(registry.names())}, or methods "
                  "joined by '+' (nap+clip), or all (none and every registered method); unset: "
                  "the agent's run script default (" + ", ".join(
                      f"{a} {RUN_DEFAULTS[a][0]}" for a in AGENTS) + ").")
flags.DEFINE_list("utds", None, "Update-to-data ratios (integers >= 1); unset: the agent's run "
                  "script default (" + ", ".join(
                      f"{a} {RUN_DEFAULTS[a][1]}" for a in AGENTS if a != "continual") + ").")
flags.DEFINE_list("clip_cs", [], "SingularClip c values: each job whose intervention includes "
                  "clip is run once per value (--clip_c, and -c<c> in its run name); the same "
                  "as --vary=clip_c=...")
flags.DEFINE_multi_string("vary", [], "KEY=V1,V2,...: run each job once per value of the "
                          "run script's flag --KEY (a field of its config, e.g. clip_sides, "
                          "learning_rate), -KEY=<value> in its run name; repeat for more axes "
                          "(their product). A method's setting varies the jobs that use the "
                          "method, --intervention_every (and the event settings) those with an "
                          "event, any other flag every job.")
flags.DEFINE_integer("seeds", 1, "Seeds per (env, intervention, varied settings, UTD).")
flags.DEFINE_integer("first_seed", 0, "Seeds are first_seed .. first_seed + seeds - 1.")
flags.DEFINE_integer("seeds_per_job", 0, "Seeds trained (vmapped) by one job; 0: all of them.")
for _name in TRAIN_FLAGS:
    flags.DEFINE_integer(_name, None, f"Passed to the run script as --{_name}; unset: its "
                         "default.")
flags.DEFINE_string("extra", "", "More flags for every run script, e.g. '--clip_c=2'.")
flags.DEFINE_string("grid", None, "JSON grid file: an object, a list of objects or "
                    f"{{\"grids\": [...]}} with keys {', '.join(GRID_KEYS)}; keys an object "
                    "leaves out come from the flags.")
flags.DEFINE_string("logdir", "runs", "Results tree: <logdir>/<agent>/<env>/<run_name>/; the "
                    "sweep's records and logs go to <logdir>/.sweep/.")
flags.DEFINE_string("script_dir", DEFAULT_SCRIPT_DIR, "Folder holding run_<agent>.py.")
flags.DEFINE_enum("executor", "local", list(EXECUTORS), "Where jobs run.")
flags.DEFINE_integer("max_parallel", 0, "Local executor: jobs running at once; 0: as many as "
                     "the machine holds (one per core this process may use, fewer where the "
                     "memory would not hold them).")
flags.DEFINE_boolean("pin_cores", True, "Local executor: run each worker's jobs on their own "
                     "share of the cores (CPU affinity), with XLA's CPU threads to match, "
                     "instead of letting every job's threads use every core.")
flags.DEFINE_integer("max_jobs", 10_000, "Refuse a grid of more jobs than this (a typo in "
                     "--seeds or seeds_per_job can ask for millions).", lower_bound=1)
flags.DEFINE_integer("max_seed_runs", 100_000, "Refuse a grid of more seed-runs (one seed of one "
                     "env, intervention, varied settings and UTD; a job trains seeds_per_job of "
                     "them) than this.",
                     lower_bound=1)
flags.DEFINE_boolean("no_wait", False, "Submit and exit instead of following the jobs.")
flags.DEFINE_boolean("status", False, "Show each job's state and exit (no grid flags needed).")
flags.DEFINE_boolean("retry_failed", False, "Launch failed jobs again too.")
flags.DEFINE_boolean("stop", False, "Stop this logdir's local jobs on this host: running ones "
                     "at their next episode end, after a checkpoint there; queued ones before "
                     "they start. Launching again resumes them. SLURM jobs: prints the scancel "
                     "that stops them.")
flags.DEFINE_float("poll_s", 2.0, "Seconds between checks while following the jobs.",
                   lower_bound=0.1)
flags.DEFINE_string("partition", "", "SLURM partition (empty: the cluster's default).")
flags.DEFINE_integer("timeout_min", 24 * 60, "SLURM time limit of a job in minutes; a job "
                     "that reaches it is requeued and resumes.")
flags.DEFINE_integer("gpus_per_node", 0, "SLURM GPUs per job.")
flags.DEFINE_integer("cpus_per_task", 0, "SLURM CPUs per job (0: the cluster's default).")
flags.DEFINE_float("mem_gb", 0.0, "SLURM memory per job in GB (0: the cluster's default).")
flags.DEFINE_integer("array_parallelism", 256, "SLURM: jobs of the array running at once.")
flags.DEFINE_integer("max_requeues", 3, "SLURM: time-outs a job may requeue after.")
flags.DEFINE_integer("signal_delay_s", 90, "SLURM: seconds before the time limit that a job is "
                     "told to stop and requeue.")
flags.DEFINE_string("job_name", "sweep", "Scheduler job name.")
flags.DEFINE_string("compilation_cache", "", "Folder for JAX's persistent compilation cache, "
                    "shared by the jobs (they compile the same programs); empty: off.")


def _extra_flags(trailing: list[str]) -> list[str]:
    for arg in trailing:
        if not arg.startswith("-"):
            raise SweepError(f"unexpected argument {arg!r}; flags for the run scripts go after "
                             "`--` or in --extra, as --name=value")
    return [*split_extra(FLAGS.extra), *trailing]


def grid_jobs(trailing: list[str]) -> list[JobSpec]:
    """The jobs the flags (or --grid) describe."""
    settings = {"agent": FLAGS.agent, "envs": FLAGS.envs, "preset": FLAGS.preset,
                "interventions": FLAGS.interventions, "utds": FLAGS.utds,
                "clip_cs": FLAGS.clip_cs, "vary": FLAGS.vary,
                "seeds": FLAGS.seeds, "first_seed": FLAGS.first_seed,
                "seeds_per_job": FLAGS.seeds_per_job, "extra": _extra_flags(trailing),
                "script_dir": FLAGS.script_dir,
                **{name: FLAGS[name].value for name in TRAIN_FLAGS}}
    grids = load_grid_file(FLAGS.grid, settings) if FLAGS.grid else [make_grid(**settings)]
    count = sum(grid.job_count() for grid in grids)
    if count > FLAGS.max_jobs:  # checked before the jobs are expanded in memory
        raise SweepError(f"the grid has {count:,} jobs, more than --max_jobs={FLAGS.max_jobs:,}; "
                         "check its envs, interventions, vary, utds, seeds and seeds_per_job "
                         "(each job trains seeds_per_job seeds, all of them when 0), or raise "
                         "--max_jobs")
    seed_runs = sum(grid.seed_run_count() for grid in grids)
    if seed_runs > FLAGS.max_seed_runs:
        raise SweepError(f"the grid has {seed_runs:,} seed-runs (each seed of each env, "
                         "intervention, varied settings and UTD), more than --max_seed_runs="
                         f"{FLAGS.max_seed_runs:,}; check its envs, interventions, vary, utds "
                         "and seeds, or raise --max_seed_runs")
    return expand(grids)


JOBS_GO_ON: list[bool] = []  # set once this process launches jobs or follows running ones
STOPPING: list[bool] = []  # set once --stop has begun stopping jobs

# The flags that describe a grid's jobs (besides --envs, --preset and --grid).
GRID_FLAGS = ("agent", "interventions", "utds", "clip_cs", "vary", "seeds", "first_seed",
              "seeds_per_job", "extra", *TRAIN_FLAGS)


def executor_options() -> ExecutorOptions:
    return ExecutorOptions(
        kind=FLAGS.executor, max_parallel=FLAGS.max_parallel, timeout_min=FLAGS.timeout_min,
        partition=FLAGS.partition, gpus_per_node=FLAGS.gpus_per_node,
        cpus_per_task=FLAGS.cpus_per_task, mem_gb=FLAGS.mem_gb,
        array_parallelism=FLAGS.array_parallelism, max_requeues=FLAGS.max_requeues,
        signal_delay_s=FLAGS.signal_delay_s, job_name=FLAGS.job_name,
        compilation_cache=FLAGS.compilation_cache, pin_cores=FLAGS.pin_cores)


def children_peak_memory() -> int:
    """The largest resident memory a process this one started and waited for reached (the run
    scripts' dry runs: each with its libraries loaded), in bytes."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux counts kilobytes


def unrecorded(paths: SweepPaths) -> None:
    """Say which launches list jobs that have no record (a launch killed while it wrote
    them): read without the grid, the sweep knows nothing else of them."""
    recorded = set(paths.recorded_keys())
    for launch_id in paths.launch_ids():
        keys = read_json(paths.launch(launch_id)).get("keys", [])
        missing = [k for k in keys if k not in recorded] if isinstance(keys, list) else []
        if missing:
            print(f"launch {launch_id} lists {len(missing)} more job(s) without a record (it "
                  f"was cut short while recording them, e.g. {missing[0]}): launch the grid "
                  "again to run them")


def to_launch(specs: list[JobSpec], statuses: dict, paths: SweepPaths) -> list[JobSpec]:
    """The jobs of the grid to launch now; SweepError when the logdir holds other runs."""
    check_unfinished_launches(specs, statuses)
    todo = select(specs, statuses, FLAGS.retry_failed)
    check_run_dirs(specs, statuses, paths.logdir, launching={s.key for s in todo})
    return todo


def run(trailing: list[str]) -> int:
    """The sweep; returns the exit code. Bad settings raise SweepError."""
    if not FLAGS.logdir.strip():
        raise SweepError("--logdir is empty; give the results tree the sweep writes under "
                         "(default: runs)")
    paths = SweepPaths(os.path.abspath(FLAGS.logdir))
    if FLAGS.stop:
        given = [f"--{flag.name}" for flag in FLAGS.get_flags_for_module(sys.modules[__name__])
                 if flag.present and flag.name not in ("logdir", "poll_s", "script_dir", "stop")]
        if given or trailing:
            raise SweepError(f"--stop takes only --logdir (and --poll_s), not "
                             f"{', '.join(given + (['flags after --'] if trailing else []))}")
        if not recorded_jobs(paths):
            raise SweepError(f"no sweep recorded in {paths.root}; nothing to stop")
        STOPPING.append(True)
        with sweep_lock(paths, "a --stop", print):  # a launch at work records its jobs first
            stop(paths, FLAGS.poll_s, print)
        return 0
    given = FLAGS.grid or FLAGS.envs or FLAGS.preset
    if not given and (FLAGS.status or FLAGS.retry_failed):
        unread = [f"--{name}" for name in GRID_FLAGS if FLAGS[name].present]
        unread += ["flags after --"] if trailing else []
        if unread:
            raise SweepError(f"{', '.join(unread)} describe a grid, and without --envs, --preset "
                             "or --grid the recorded jobs are read as they were launched: give "
                             "the grid, or leave them out")
        specs = recorded_jobs(paths)
        if not specs:
            raise SweepError(f"no sweep recorded in {paths.root}; give the grid (--envs, "
                             "--preset or --grid)")
    else:
        specs = grid_jobs(trailing)
        keys = {s.key for s in specs}
        check_seed_overlap([*specs, *(r for r in recorded_jobs(paths) if r.key not in keys)],
                           f"this grid and the sweeps recorded in {paths.root}")
    statuses = collect(paths, [s.key for s in specs])
    if FLAGS.status:
        conflicts = 0
        for spec in specs:  # with a grid given, a job that holds another run says so
            status = statuses[spec.key]
            line = status_line(spec.key, status, paths)
            conflict = bool(given) and (launch_conflict(spec, status) or run_dir_conflict(
                spec, status, paths.logdir, launching=True))
            if conflict:
                conflicts += 1
                line += f"  [not this grid's run: {conflict}]"
            print(line)
        print(summary(statuses) + (f"; {conflicts} of them not this grid's runs (a launch with "
                                   "these flags refuses them)" if conflicts else ""))
        if not given:
            unrecorded(paths)
        warning = other_code_warning(specs, statuses, paths.logdir)
        if warning:
            print(warning, file=sys.stderr)
        return 0
    todo = to_launch(specs, statuses, paths)
    options = executor_options()
    doing = "checking the jobs' flags"
    try:
        if todo:
            check_flags(todo, paths.logdir)
        doing = "waiting for another launch or --stop of this sweep"
        with sweep_lock(paths, "a launch", print):
            # Another launch, or a --stop, may have changed the records since they were read.
            checked = {s.key for s in todo}
            statuses = collect(paths, [s.key for s in specs])
            todo = to_launch(specs, statuses, paths)
            if any(s.key not in checked for s in todo):  # stopped since, say
                doing = "checking the jobs' flags"
                check_flags([s for s in todo if s.key not in checked], paths.logdir)
            print(f"{len(specs)} jobs: {summary(statuses)}; launching {len(todo)} on "
                  f"{options.kind}")
            if not FLAGS.retry_failed and any(s.state == "failed" for s in statuses.values()):
                print("failed jobs are left alone; --retry_failed runs them again")
            warning = other_code_warning(specs, statuses, paths.logdir)
            if warning:
                print(warning, file=sys.stderr)
            if todo and options.kind == "local" and not options.max_parallel:
                parallel, why = machine_parallel(todo, children_peak_memory())
                options = dataclasses.replace(options, max_parallel=parallel)
                print(f"running {parallel} at once ({why}; --max_parallel sets it)")
            if todo:
                JOBS_GO_ON.append(True)  # a Ctrl-C from here on leaves the launched jobs going
                launch_id = launch(todo, paths, options)
                print(f"launch {launch_id}: records and logs in {paths.root}")
    except KeyboardInterrupt:
        if JOBS_GO_ON:
            raise
        print(f"\ninterrupted while {doing}; nothing was launched", file=sys.stderr)
        return 130
    if FLAGS.no_wait:
        print("not waiting; follow with --status")
        return 0
    launched = {s.key for s in todo}
    follow = [k for k, s in statuses.items() if k in launched or s.state in ("queued", "running")]
    if follow:
        JOBS_GO_ON.append(True)
        statuses = {**statuses, **watch(paths, follow, FLAGS.poll_s)}
    print(summary(statuses))
    return 0 if all(s.state == "done" for s in statuses.values()) else 1


def main(argv: list[str]) -> None:
    logging.set_verbosity(logging.WARNING)
    try:
        ctrl_c.deliver()  # raises one held while this script imported its libraries
        with ctrl_c.as_interrupt():
            sys.exit(run(argv[1:]))
    except (SweepError, UnknownEnvError) as e:
        print(f"sweep: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # an unusable --logdir or grid file, a full disk
        print(f"sweep: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        if STOPPING:
            print("\nstopped waiting; the jobs signalled still stop at their next episode end "
                  "(--stop again waits for them)", file=sys.stderr)
        else:
            print("\nstopped following; the jobs go on (see --status)" if JOBS_GO_ON
                  else "\ninterrupted; nothing was launched", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser("sweep: "))
