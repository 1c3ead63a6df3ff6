"""The checks before a sweep launches jobs: each kind of job's flags through its run script's
--dry_run (check_flags), and run directories or earlier launches that hold runs with other
settings than the grid asks for, or finished runs of other code."""

import os
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from experiment.rundir.code import CODE, other_code, recorded_code
from experiment.rundir.lock import EXIT_IN_USE
from experiment.rundir.record import WATCH_SETTINGS, with_added_settings, with_resolved_settings
from sweeps.jobspec import FLAG_FIELDS, JobSpec, job_flags
from sweeps.run_flags import SweepError
from sweeps.state import Status, read_json


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
