"""Varied settings of a sweep (--vary, a grid file's "vary", --clip_cs): which jobs each axis
crosses, their run names and command lines, the values and keys refused, the methods of an
intervention in the registry's order, the records of jobs with varied settings, and
launch/compare_continual.py passing its --vary, --group_by and --settings on."""

import json
import re
import subprocess
from pathlib import Path
from unittest import mock

import pytest

from sweeps import preflight, progress
from sweeps.axes import event_settings, vary_keys
from sweeps.grid import check_seed_overlap, expand, load_grid_file, make_grid
from sweeps.jobspec import JobSpec, job_flags
from sweeps.run_flags import SweepError
from sweeps.state import Status
from tests.helpers.runs import run, run_patched

ROOT = Path(__file__).resolve().parents[1]
TASK = "random_label_digits"


def names(grid) -> list[str]:
    return [job.run_name for job in grid.jobs()]


def flags_of(job) -> list[str]:
    """The job's command-line flags between its intervention and its seed."""
    argv = job.argv("/logs")
    start = next(i for i, a in enumerate(argv) if a.startswith("--intervention="))
    end = next(i for i, a in enumerate(argv) if a.startswith("--seed="))
    return argv[start + 1:end]


def test_one_axis_crosses_every_job_and_sets_its_flag():
    grid = make_grid("continual", envs=TASK, interventions="none,clip",
                     vary=["learning_rate=0.001,0.01"], seeds=3)
    assert names(grid) == ["none-learning_rate=0.001-seed0", "none-learning_rate=0.01-seed0",
                           "clip-learning_rate=0.001-seed0", "clip-learning_rate=0.01-seed0"]
    assert grid.job_count() == 4 and grid.seed_run_count() == 12
    assert [flags_of(j) for j in grid.jobs()] == [["--learning_rate=0.001"],
                                                  ["--learning_rate=0.01"]] * 2
    job = grid.jobs()[3]
    assert job.run_dir("/logs") == f"/logs/continual/{TASK}/clip-learning_rate=0.01-seed0"
    assert f"--run_name={job.run_name}" in job.argv("/logs")


def test_two_axes_are_their_product_in_the_order_given():
    grid = make_grid("continual", envs=TASK, interventions="none",
                     vary=["layer_norm=true,false", "learning_rate=1e-3,0.01"])
    assert names(grid) == [
        "none-layer_norm=true-learning_rate=0.001-seed0",
        "none-layer_norm=true-learning_rate=0.01-seed0",
        "none-layer_norm=false-learning_rate=0.001-seed0",
        "none-layer_norm=false-learning_rate=0.01-seed0"]
    assert flags_of(grid.jobs()[2]) == ["--layer_norm=false", "--learning_rate=0.001"]
    assert len(grid.jobs()) == grid.job_count() == 4


def test_rl_agents_vary_their_train_config():
    grid = make_grid("sac", envs="cheetah-run", utds="1,2", vary=["buffer_capacity=1000,2000"])
    assert names(grid) == ["none-buffer_capacity=1000-utd1-seed0",
                           "none-buffer_capacity=1000-utd2-seed0",
                           "none-buffer_capacity=2000-utd1-seed0",
                           "none-buffer_capacity=2000-utd2-seed0"]
    assert "--buffer_capacity=2000" in grid.jobs()[3].argv("/logs")
    assert job_flags(grid.jobs()[3].to_dict())["buffer_capacity"] == "2000"  # memory counts it


def test_a_method_setting_crosses_only_the_jobs_with_its_method():
    grid = make_grid("continual", envs=TASK, interventions="none,clip,nap+clip,shrink_perturb",
                     vary=["clip_sides=both,upper", "sp_shrink=0.3,0.5"])
    assert names(grid) == [
        "none-seed0",
        "clip-clip_sides=both-seed0", "clip-clip_sides=upper-seed0",
        "clip+nap-clip_sides=both-seed0", "clip+nap-clip_sides=upper-seed0",
        "shrink_perturb-sp_shrink=0.3-seed0", "shrink_perturb-sp_shrink=0.5-seed0"]
    assert flags_of(grid.jobs()[0]) == []
    assert flags_of(grid.jobs()[-1]) == ["--sp_shrink=0.5"]
    assert grid.job_count() == 7


@pytest.mark.parametrize("agent", ["continual", "sac"])
def test_an_event_setting_crosses_only_the_jobs_with_an_event(agent):
    assert "intervention_every" in event_settings(agent)
    grid = make_grid(agent, envs=TASK if agent == "continual" else "cheetah-run",
                     interventions="none,nap,reset,nap+clip", vary=["intervention_every=1,2"])
    utd = "" if agent == "continual" else "-utd1"
    assert names(grid) == [f"none{utd}-seed0", f"nap{utd}-seed0",
                           f"reset-intervention_every=1{utd}-seed0",
                           f"reset-intervention_every=2{utd}-seed0",
                           f"clip+nap-intervention_every=1{utd}-seed0",
                           f"clip+nap-intervention_every=2{utd}-seed0"]
    assert grid.job_count() == 6


def test_clip_cs_is_vary_clip_c_and_c_comes_first_in_the_name():
    by_flag = make_grid("continual", envs=TASK, interventions="none,clip", clip_cs="1.5,2")
    by_vary = make_grid("continual", envs=TASK, interventions="none,clip",
                        vary=["clip_c=1.5,2.0"])
    assert names(by_flag) == names(by_vary) == ["none-seed0", "clip-c1.5-seed0", "clip-c2-seed0"]
    assert by_flag.jobs() == by_vary.jobs()
    assert flags_of(by_vary.jobs()[2]) == ["--clip_c=2"]
    assert dict(by_vary.jobs()[2].settings) == {"clip_c": "2"}
    later = make_grid("continual", envs=TASK, interventions="clip",
                      vary=["clip_sides=both,upper", "clip_c=2,4"])
    assert names(later) == ["clip-c2-clip_sides=both-seed0", "clip-c4-clip_sides=both-seed0",
                            "clip-c2-clip_sides=upper-seed0", "clip-c4-clip_sides=upper-seed0"]
    assert flags_of(later.jobs()[1]) == ["--clip_c=4", "--clip_sides=both"]
    with pytest.raises(SweepError, match=r"^--clip_cs and --vary=clip_c both give clip c values"):
        make_grid("continual", envs=TASK, interventions="clip", clip_cs="2", vary=["clip_c=3"])


def test_numbers_are_one_value_however_written():
    grid = make_grid("continual", envs=TASK, vary=["learning_rate=0.001,1e-3,1E-03, 0.0010",
                                                   "num_tasks=20,20.0,020"])
    assert names(grid) == ["none-learning_rate=0.001-num_tasks=20-seed0"]
    big = make_grid("continual", envs=TASK, interventions="clip", vary=["clip_c=1000000,1e6"])
    assert names(big) == ["clip-c1e+06-seed0"]  # as --clip_cs named it
    precise = make_grid("continual", envs=TASK, vary=["learning_rate=0.00123456789"])
    assert flags_of(precise.jobs()[0]) == ["--learning_rate=0.00123456789"]  # not rounded
    text = make_grid("continual", envs=TASK, vary=["data_dir=1e-3,0.001"])  # strings as given
    assert names(text) == ["none-data_dir=1e-3-seed0", "none-data_dir=0.001-seed0"]
    flags = make_grid("continual", envs=TASK, vary={"layer_norm": [True, "F", "1"]})
    assert names(flags) == ["none-layer_norm=true-seed0", "none-layer_norm=false-seed0"]


@pytest.mark.parametrize("settings, message", [
    ({"vary": ["nonsense=1,2"]},
     "--vary=nonsense: 'nonsense' is not a flag of run_continual.py; accepted: batch_size, "),
    ({"vary": ["learning_rat=1"]},
     "'learning_rat' is not a flag of run_continual.py (did you mean 'learning_rate'?)"),
    ({"vary": ["seed=1,2"]}, "--vary=seed: --seed is set by the sweep for each job"),
    ({"vary": ["intervention=clip"]}, "--intervention is set by the sweep for each job"),
    ({"vary": ["run_name=x"]}, "--run_name is set by the sweep for each job"),
    ({"agent": "sac", "envs": "cheetah-run", "vary": ["max_steps=100,200"]},
     "--vary=max_steps: --max_steps is set by the sweep for each job"),
    ({"agent": "sac", "envs": "cheetah-run", "vary": ["hidden_dim=32"]},
     "'hidden_dim' is not a flag of run_sac.py"),
    ({"vary": ["learning_rate"]}, "--vary takes KEY=V1,V2,... (a flag of the run script and"),
    ({"vary": ["=1"]}, "--vary takes KEY=V1,V2,..."),
    ({"vary": ["learning_rate=, ,"]}, "--vary=learning_rate gives no values"),
    ({"vary": ["learning_rate=1", "learning_rate=2"]}, "--vary=learning_rate given twice"),
    ({"vary": ["learning_rate=0.1", "layer_norm=true"], "extra": "--learning_rate=0.2"},
     "--vary=learning_rate and the extra flag --learning_rate both set --learning_rate"),
    ({"vary": ["layer_norm=true,false"], "extra": "--nolayer_norm"},
     "the extra flag --layer_norm both set"),
    ({"vary": ["data_dir=a/b"]}, "the value 'a/b' holds '/' or whitespace"),
    ({"vary": {"data_dir": ["a b"]}}, "the value 'a b' holds '/' or whitespace"),
    ({"vary": {"dormant_taus": ["0,0.1"]}}, "the value '0,0.1' holds ','"),
    ({"vary": ["learning_rate=fast"]}, "--vary=learning_rate takes numbers, got 'fast'"),
    ({"vary": ["num_tasks=2.5"]}, "--vary=num_tasks takes integers, got '2.5'"),
    ({"vary": ["layer_norm=maybe"]}, "--vary=layer_norm takes true or false, got 'maybe'"),
    ({"vary": {"learning_rate": {"a": 1}}}, "give its values as \"V1,V2\" or a list"),
    ({"vary": 5}, "vary must be KEY=V1,V2,... strings or an object"),
    ({"vary": ["clip_c=0.5,2"], "interventions": "clip"},
     "--vary=clip_c: --clip_c must be a finite number >= 1 (singular values go into [1/c, c]), "
     "got 0.5"),
    ({"clip_cs": "nan", "interventions": "clip"},
     "--clip_cs: --clip_c must be a finite number >= 1 (singular values go into [1/c, c]), got "
     "nan"),
    # any method's own checks, not only clip's c
    ({"vary": ["redo_tau=-1"], "interventions": "redo"}, "--vary=redo_tau: --redo_tau"),
    ({"vary": ["clip_sides=middle"], "interventions": "clip"},
     "--vary=clip_sides: --clip_sides='middle' is not accepted; use one of: both, upper, lower"),
    ({"vary": ["clip_sides=upper"], "interventions": "none,reset"},
     "--vary=clip_sides: --clip_sides is a setting of clip, crossed with the interventions that "
     "include it; none of none, reset does"),
    ({"vary": ["intervention_every=2"], "interventions": "none,nap"},
     "--intervention_every is read only with an event, crossed with the interventions that have "
     "one; none of none, nap does"),
])
def test_bad_axes_are_one_line(settings, message):
    settings = {"agent": "continual", "envs": TASK, **settings}
    with pytest.raises(SweepError) as error:
        make_grid(**settings)
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_the_keys_an_axis_takes():
    continual = vary_keys("continual")
    assert {"learning_rate", "clip_c", "clip_sides", "sp_shrink", "intervention_every",
            "batch_size", "num_tasks"} <= set(continual)
    assert not {"seed", "num_seeds", "task", "intervention", "logdir", "run_name",
                "resume"} & set(continual)
    sac = vary_keys("sac")
    assert {"buffer_capacity", "clip_c", "intervention_every", "action_repeat"} <= set(sac)
    assert not {"max_steps", "batch_size", "env", "utd", "agent"} & set(sac)


def test_the_methods_of_an_intervention_are_in_the_registrys_order():
    grid = make_grid("continual", envs=TASK, interventions="nap+clip,clip+nap,none,clip,nap+clip")
    assert names(grid) == ["clip+nap-seed0", "none-seed0", "clip-seed0"]
    assert "--intervention=clip+nap" in grid.jobs()[0].argv("/logs")
    # a job recorded as nap+clip (before this order) trains the same seeds as clip+nap
    recorded = JobSpec("continual", TASK, "nap+clip", 1, 0, 1)
    with pytest.raises(SweepError, match=r"clip\+nap-seed0 \(seeds 0-0\) and .*/nap\+clip-seed0"):
        check_seed_overlap([*grid.jobs(), recorded])


def test_jobs_of_other_varied_settings_are_other_runs():
    a = make_grid("continual", envs=TASK, interventions="clip", vary=["clip_c=2,4"], seeds=3)
    b = make_grid("continual", envs=TASK, interventions="clip", vary=["clip_c=8"], seeds=3)
    assert len(expand([a, b, a])) == 3
    c = make_grid("continual", envs=TASK, interventions="clip", vary=["clip_c=4"], seeds=2,
                  first_seed=1)
    with pytest.raises(SweepError, match=r"clip-c4-seed0 \(seeds 0-2\) and .*clip-c4-seed1 "
                                         r"\(seeds 1-2\)"):
        expand([a, c])


def test_a_grid_file_takes_vary_as_an_object_or_flag_strings(tmp_path):
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"grids": [
        {"interventions": "none,clip", "vary": {"clip_c": [1.5, 2], "clip_sides": "both,upper"}},
        {"interventions": "reset", "vary": ["learning_rate=0.01"]},
        {"interventions": "reset", "first_seed": 5},
    ]}))
    defaults = {"agent": "continual", "envs": TASK, "vary": ["intervention_every=2"]}
    clip, lr, plain = load_grid_file(str(path), defaults)
    assert names(clip) == ["none-seed0", "clip-c1.5-clip_sides=both-seed0",
                           "clip-c1.5-clip_sides=upper-seed0", "clip-c2-clip_sides=both-seed0",
                           "clip-c2-clip_sides=upper-seed0"]
    assert names(lr) == ["reset-learning_rate=0.01-seed0"]
    assert names(plain) == ["reset-intervention_every=2-seed5"]  # the flags' axes
    path.write_text(json.dumps([{"vary": {"clip_sides": ["upper"]}}]))
    with pytest.raises(SweepError, match=r"grid.json: grid 0: --vary=clip_sides: --clip_sides is "
                                         r"a setting of clip"):
        load_grid_file(str(path), {"agent": "continual", "envs": TASK})
    path.write_text('{"vary": {"clip_c": [2], "clip_c": [3]}}')
    with pytest.raises(SweepError, match=r"key\(s\) clip_c given twice in one object"):
        load_grid_file(str(path), {"agent": "continual", "envs": TASK})


def test_a_job_spec_round_trips_and_old_records_load():
    (job,) = make_grid("continual", envs=TASK, interventions="clip",
                       vary=["clip_sides=upper", "clip_c=4"]).jobs()
    assert job.settings == (("clip_c", "4"), ("clip_sides", "upper"))
    record = json.loads(json.dumps(job.to_dict()))
    assert record["settings"] == [["clip_c", "4"], ["clip_sides", "upper"]]
    assert JobSpec.from_dict(record) == job
    # records written before varied settings: a clip_c field (None without a c value)
    old = {"agent": "sac", "env": "cheetah-run", "intervention": "clip", "utd": 1, "seed": 0,
           "num_seeds": 1, "train_flags": [["max_steps", 100]], "extra": [],
           "script_dir": str(ROOT / "launch"), "clip_c": 1.5}
    spec = JobSpec.from_dict(old)
    assert spec.settings == (("clip_c", "1.5"),)
    assert spec.key == "sac/cheetah-run/clip-c1.5-utd1-seed0"
    assert spec == make_grid("sac", envs="cheetah-run", interventions="clip", clip_cs="1.5",
                             max_steps=100).jobs()[0]
    assert job_flags(old)["clip_c"] == "1.5" == job_flags(spec.to_dict())["clip_c"]
    none = JobSpec.from_dict({**old, "intervention": "none", "clip_c": None})
    assert none.settings == () and none.run_name == "none-utd1-seed0"
    assert JobSpec.from_dict({k: v for k, v in old.items() if k != "clip_c"}).settings == ()


def test_a_run_dir_of_other_varied_settings_and_launches_of_them_are_refused(tmp_path):
    (job,) = make_grid("continual", envs=TASK, interventions="clip",
                       vary=["clip_sides=upper"]).jobs()
    (tmp_path / job.key).mkdir(parents=True)
    (tmp_path / job.key / "config.json").write_text(json.dumps(
        {"task": TASK, "intervention": "clip", "seed": 0, "num_seeds": 1,
         "clip_sides": "both"}))
    done = Status("done", "", {"spec": job.to_dict()})
    assert "clip_sides: 'both' there, 'upper' now" in preflight.run_dir_conflict(
        job, done, str(tmp_path), launching=False)
    other = JobSpec.from_dict({**job.to_dict(), "settings": [["clip_sides", "lower"]]})
    running = Status("running", "", {"spec": other.to_dict()})
    assert "--clip_sides=lower then, --clip_sides=upper now" in preflight.launch_conflict(
        job, running)


def test_dry_runs_check_each_varied_setting(monkeypatch):
    started = []

    class Finished:
        returncode = 0

        def __init__(self, argv, **kwargs):
            started.append(argv)

        def communicate(self, timeout):
            return "settings checked; x would be trained\n", ""

        def poll(self):
            return 0

    monkeypatch.setattr(preflight.subprocess, "Popen", Finished)
    grid = make_grid("continual", envs="permuted_digits,random_label_digits",
                     interventions="clip", vary=["clip_c=2,4"], seeds=2, seeds_per_job=1)
    preflight.check_flags(grid.jobs(), "/logs", emit=lambda line: None)
    assert sorted(a for argv in started for a in argv if a.startswith("--clip_c=")) == [
        "--clip_c=2", "--clip_c=4"]


def sweep(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """launch/sweep.py's checks and --status, which start no job, in this process."""
    return run("sweep.py", *args, check=False, separate=False, cwd=cwd)


def test_the_sweep_command_line_takes_repeated_vary_flags(tmp_path):
    proc = sweep(f"--logdir={tmp_path}", "--agent=continual", f"--envs={TASK}",
                 "--interventions=none,nap+clip", "--vary=clip_c=2,4",
                 "--vary=learning_rate=1e-3", "--status", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    keys = [line.split()[1] for line in proc.stdout.splitlines()[:-1]]
    assert keys == [f"continual/{TASK}/none-learning_rate=0.001-seed0",
                    f"continual/{TASK}/clip+nap-c2-learning_rate=0.001-seed0",
                    f"continual/{TASK}/clip+nap-c4-learning_rate=0.001-seed0"]
    for args, message in [
            (["--vary=clip_c=2", "--clip_cs=3"], "sweep: --clip_cs and --vary=clip_c both give"),
            (["--vary=bogus=1"], "sweep: --vary=bogus: 'bogus' is not a flag of "
                                 "run_continual.py; accepted: "),
            (["--vary=learning_rate=0.1", "--", "--learning_rate=0.2"],
             "sweep: --vary=learning_rate and the extra flag --learning_rate both set")]:
        proc = sweep(f"--logdir={tmp_path}", "--agent=continual", f"--envs={TASK}",
                     "--interventions=clip", *args, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
    proc = sweep(f"--logdir={tmp_path}", "--status", "--vary=clip_c=2", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("sweep: --vary describe a grid")
    assert not (tmp_path / ".sweep").exists()


def compare(*args: str) -> subprocess.CompletedProcess:
    """launch/compare_continual.py (in this process) with the sweep and aggregation commands it
    would start printed, not run."""
    start = subprocess.run

    def printed(command, *rest, **options):
        if Path(command[1]).name not in ("sweep.py", "aggregate_continual.py"):
            return start(command, *rest, **options)
        print(" ".join(command[2:]))
        return subprocess.CompletedProcess(command, 0)

    with mock.patch.object(subprocess, "run", printed):
        return run_patched("compare_continual.py", *args, cwd=ROOT)


def test_compare_continual_passes_vary_group_by_and_settings_on(tmp_path):
    proc = compare("--tasks=permuted_digits,random_label_digits", "--interventions=none,clip",
                   "--vary=clip_c=2,4", "--vary=clip_sides=both,upper",
                   "--group_by=clip_c", "--settings=clip_sides", f"--logdir={tmp_path}",
                   "--seeds=2", "--reps=100", "--", "--num_tasks=2")
    assert proc.returncode == 0, proc.stderr
    sweep_line, *aggregate = proc.stdout.splitlines()
    # failed jobs are trained again: a relaunch of the comparison finishes it
    assert (" --vary=clip_c=2,4 --vary=clip_sides=both,upper --retry_failed -- --num_tasks=2"
            in sweep_line)
    assert "--agent=continual --envs=permuted_digits,random_label_digits" in sweep_line
    assert len(aggregate) == 2
    for task, line in zip(("permuted_digits", "random_label_digits"), aggregate, strict=True):
        assert f"--runs={tmp_path}/continual/{task}" in line
        assert line.endswith("--reps=100 --group_by=clip_c --settings=clip_sides")
    plain = compare(f"--logdir={tmp_path}", "--tasks=permuted_digits")
    assert plain.returncode == 0, plain.stderr
    assert "--vary" not in plain.stdout and "--group_by" not in plain.stdout
    assert "--settings" not in plain.stdout
    left = compare(f"--logdir={tmp_path}", "--tasks=permuted_digits", "--noretry_failed")
    assert "--retry_failed" not in left.stdout


@pytest.mark.parametrize("args, message", [
    (["--reps=0"], "error: --reps must be an integer >= 1, got 0"),
    (["--seeds=0"], "error: --seeds must be an integer >= 1, got 0"),
    (["--max_parallel=-1"], "error: --max_parallel must be an integer >= 0, got -1"),
    (["--tasks="], "error: --tasks is empty"),
    (["--vary=clip_c=2,4", "--vary=clip_sides=both,upper", "--group_by=clip_c"],
     "error: clip_sides takes several values (--vary, --clip_cs) that --group_by and --settings "
     "leave out"),
    (["--clip_cs=2,4"], "error: clip_c takes several values"),
])
def test_compare_continual_refuses_its_bad_flags_before_training(args, message):
    proc = compare(*args)
    assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == "", proc.stdout
    assert not re.search("Traceback", proc.stderr)


def test_recorded_jobs_with_varied_settings_and_older_ones_are_read_back(tmp_path):
    """--status without the grid reads the jobs from their records: a job with varied
    settings, and one recorded before them (its c value as clip_c)."""
    from sweeps.state import SweepPaths, update_record

    paths = SweepPaths(str(tmp_path))
    (new,) = make_grid("continual", envs=TASK, interventions="clip",
                       vary=["clip_c=4", "learning_rate=0.01"]).jobs()
    old = {**make_grid("continual", envs=TASK, interventions="clip", first_seed=1).jobs()[0]
           .to_dict(), "clip_c": 2.0}
    del old["settings"]
    for key, spec in ((new.key, new.to_dict()), (f"continual/{TASK}/clip-c2-seed1", old)):
        update_record(paths.record(key), key=key, spec=spec, state="interrupted",
                      detail="stopped", launch="L")
    assert sorted(j.key for j in progress.recorded_jobs(paths)) == [
        f"continual/{TASK}/clip-c2-seed1", f"continual/{TASK}/clip-c4-learning_rate=0.01-seed0"]
    proc = sweep(f"--logdir={tmp_path}", "--status", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "2 interrupted", proc.stdout


def test_a_run_name_too_long_for_a_directory_is_refused():
    grid = make_grid("continual", envs=TASK, vary=[f"data_dir={'d' * 250}"])
    with pytest.raises(SweepError, match=r"longer than a directory's name may be \(255 bytes\)"):
        expand([grid])


@pytest.mark.parametrize("damage, words", [
    ({"config.json": "{"}, ["config.json", "mend it or move it away"]),
    ({"tasks.csv": "task,seed,online_accuracy,final_accuracy,loss\n0,0,x,0.1,2.3\n"},
     ["tasks.csv", "line 2", "mend it or move it away"]),
])
def test_compare_continual_refuses_a_damaged_finished_run_before_training(tmp_path, damage,
                                                                           words):
    """A finished run in the logdir that the aggregation could not read is one line before the
    sweep trains anything, not a failure after it; an unfinished one is left to its resume."""
    folder = tmp_path / "continual" / "random_label_digits" / "clip-seed0"
    folder.mkdir(parents=True)
    files = {"config.json": json.dumps({"task": "random_label_digits", "intervention": "clip"}),
             "tasks.csv": "task,seed,online_accuracy,final_accuracy,loss\n0,0,0.2,0.1,2.3\n",
             **damage}
    for name, text in files.items():
        (folder / name).write_text(text)
    unfinished = compare(f"--logdir={tmp_path}", "--tasks=random_label_digits")
    assert unfinished.returncode == 0, unfinished.stderr  # no done.json: its resume mends it
    (folder / "done.json").write_text("{}")
    proc = compare(f"--logdir={tmp_path}", "--tasks=random_label_digits")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "sweep.py" not in proc.stdout  # nothing launched
    for word in words:
        assert word in lines[0], lines[0]
