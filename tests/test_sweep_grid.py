"""Sweep grids: expansion into jobs, the run-script command line, presets, grid files, and
the one-line exit-2 errors of launch/sweep.py."""

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from interventions import registry
from sweeps.grid import PRESETS, expand, load_grid_file, make_grid
from sweeps.jobspec import JobSpec
from sweeps.run_flags import SweepError
from tests.helpers.runs import run

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reference"  # the published curves (reference/README.md)


def test_jobs_are_the_product_with_seeds_split_into_groups():
    grid = make_grid("sac", envs="cheetah-run,walker-run", interventions="none,reset,clip",
                     utds="1,8", seeds=5, first_seed=3, seeds_per_job=2)
    got = [(j.env, j.intervention, j.utd, j.seed, j.num_seeds) for j in grid.jobs()]
    seed_groups = [(3, 2), (5, 2), (7, 1)]
    expected = [(e, i, u, s, n) for e, i, u, (s, n) in itertools.product(
        ("cheetah-run", "walker-run"), ("none", "reset", "clip"), (1, 8), seed_groups)]
    assert got == expected
    for env, intervention, utd in itertools.product(grid.envs, grid.interventions, grid.utds):
        seeds = [s for j in grid.jobs() if (j.env, j.intervention, j.utd) == (env, intervention,
                                                                              utd)
                 for s in range(j.seed, j.seed + j.num_seeds)]
        assert seeds == list(range(3, 8))
    assert len({j.key for j in grid.jobs()}) == len(expected)


def test_all_seeds_in_one_job_by_default():
    (job,) = make_grid("bro", envs="hopper-hop", seeds=10).jobs()
    assert (job.seed, job.num_seeds, job.run_name) == (0, 10, "reset-utd10-seed0")


@pytest.mark.parametrize("agent, utd, intervention", [("sac", 1, "none"), ("bro", 10, "reset")])
def test_interventions_and_utds_left_out_are_the_run_scripts_defaults(agent, utd, intervention):
    """A BRO grid without --utds trains BRO at its UTD 10, not SAC's 1 (it once did)."""
    (job,) = make_grid(agent, envs="hopper-hop").jobs()
    assert (job.utd, job.intervention) == (utd, intervention)
    argv = job.argv("/tmp/logs")
    assert f"--utd={utd}" in argv and f"--intervention={intervention}" in argv


def test_command_line_follows_the_run_script_contract(tmp_path):
    grid = make_grid("bro", envs="dog-run", interventions="clip", utds="4", seeds=3,
                     max_steps=5000, start_steps=0, eval_every=None, extra="--clip_c=2 --x")
    (job,) = grid.jobs()
    argv = job.argv(str(tmp_path))
    assert argv[0] == sys.executable
    assert argv[1] == os.path.join(ROOT, "launch", "run_bro.py")
    parser = argparse.ArgumentParser()
    for name in ("env", "utd", "intervention", "seed", "num_seeds", "max_steps", "start_steps",
                 "eval_every", "logdir", "run_name", "resume"):
        parser.add_argument(f"--{name}")
    flags, rest = parser.parse_known_args(argv[2:])
    assert vars(flags) == {"env": "dog-run", "utd": "4", "intervention": "clip", "seed": "0",
                           "num_seeds": "3", "max_steps": "5000", "start_steps": "0",
                           "eval_every": None, "logdir": str(tmp_path),
                           "run_name": "clip-utd4-seed0", "resume": "auto"}
    assert rest == ["--clip_c=2", "--x"] and argv[-2:] == rest
    assert job.run_dir(str(tmp_path)) == str(tmp_path / "bro" / "dog-run" / "clip-utd4-seed0")
    assert JobSpec.from_dict(json.loads(json.dumps(job.to_dict()))) == job


def _reference_names(folder: Path, suffix: str = "") -> list[str]:
    return sorted(p.name[: len(p.name) - len(suffix)] for p in folder.iterdir())


def test_presets_are_the_task_lists_of_the_published_data():
    bro = _reference_names(REFERENCE / "bro_dmc", ".npy")
    assert sorted(PRESETS["bro15"]) == sorted(
        "finger-turn_hard" if n == "finger-turn" else n for n in bro)
    resets = REFERENCE / "rl_with_resets_sac"
    for config in resets.iterdir():
        assert sorted(PRESETS["resets10"]) == _reference_names(config)
    grid = make_grid("sac", preset="resets10,bro15", envs="cartpole-swingup,cheetah-run")
    assert len(grid.envs) == len(set(PRESETS["resets10"]) | set(PRESETS["bro15"])) + 1


@pytest.mark.parametrize("settings, message", [
    ({"agent": "ppo", "envs": "cheetah-run"}, "unknown agent 'ppo'; accepted: sac, bro"),
    ({"envs": "cheetah-run", "interventions": "none,shrink"},
     "unknown intervention 'shrink'; accepted: " + ", ".join(registry.names())),
    ({"envs": "cheetah-run", "utds": "1,0"}, "utd must be an integer >= 1, got '0'"),
    ({"envs": "cheetah-run", "utds": "two"}, "utd must be an integer, got 'two'"),
    ({"envs": " , "}, "no envs given"),
    ({"preset": "bro16"}, "unknown preset 'bro16'; accepted: bro15, resets10"),
    ({"envs": "cheetah-rnu"}, "unknown env 'cheetah-rnu'; did you mean 'cheetah-run'?"),
    ({"envs": "cheetah-run", "seeds": 0}, "seeds must be an integer >= 1, got 0"),
    ({"envs": "cheetah-run", "max_steps": 0}, "max_steps must be an integer >= 1, got 0"),
    ({"envs": "cheetah-run", "script_dir": "/nonexistent"}, "run script /nonexistent/run_sac.py"),
    ({"envs": "cheetah-run", "seeds": 1e400}, "seeds must be an integer, got inf"),
    ({"envs": "cheetah-run", "seeds": True}, "seeds must be an integer, got True"),
    ({"envs": "cheetah-run", "extra": '--clip_c="2'}, "cannot split the extra flags"),
    ({"envs": "cheetah-run", "extra": 5}, "extra must be a string or a list of strings"),
    ({"envs": "cheetah-run", "utds": "1,4", "extra": "--utd=8"},
     "the extra flag '--utd=8' sets --utd, which the sweep sets for each job"),
    ({"envs": "cheetah-run", "extra": ["--run_name", "x"]}, "sets --run_name"),
    ({"envs": "cheetah-run", "max_steps": 100, "extra": "--max_steps=200"},
     "the extra flag '--max_steps=200' and the sweep setting max_steps both set --max_steps"),
    ({"envs": "cheetah-run", "extra": "--noprogress --progress=true"},
     "--progress given more than once"),
    ({"envs": "cheetah-run", "extra": "--clip_c -2 --clip_c=3"}, "--clip_c given more than once"),
    ({"envs": "cheetah-run", "extra": "--dry_run"}, "--dry_run among the run scripts' flags"),
])
def test_bad_settings_raise_one_line(settings, message):
    with pytest.raises(ValueError) as error:
        make_grid(**{"agent": "sac", **settings})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_grid_file_entries_default_to_the_flags(tmp_path):
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"grids": [
        {"agent": "sac", "preset": "resets10", "interventions": ["none", "reset", "clip"],
         "utds": [1, 4, 8]},
        {"agent": "bro", "envs": ["dog-run"], "interventions": "none,clip", "max_steps": 100},
    ]}))
    defaults = {"envs": "walker-run", "seeds": 2, "seeds_per_job": 1, "max_steps": 50}
    sac, bro = load_grid_file(str(path), defaults)
    assert (sac.envs, sac.utds, sac.seeds) == (PRESETS["resets10"], (1, 4, 8), 2)
    assert (bro.envs, bro.interventions, bro.utds) == (("dog-run",), ("none", "clip"), (10,))
    assert dict(sac.train_flags) == {"max_steps": 50} and dict(bro.train_flags) == {
        "max_steps": 100}
    assert len(expand([sac, bro])) == 10 * 3 * 3 * 2 + 1 * 2 * 2


def test_grid_file_errors_name_the_entry(tmp_path):
    path = tmp_path / "grid.json"
    path.write_text(json.dumps([{"agent": "sac", "envs": "cheetah-run", "utd": 3}]))
    with pytest.raises(SweepError, match=r"grid 0 has unknown key\(s\) utd; accepted: agent"):
        load_grid_file(str(path), {})
    path.write_text("{not json")
    with pytest.raises(SweepError, match="cannot read grid file"):
        load_grid_file(str(path), {})
    path.write_text("[]")
    with pytest.raises(SweepError, match="grid.json: no grid in it"):
        load_grid_file(str(path), {})
    path.write_text('{"grids": {}}')
    with pytest.raises(SweepError, match='grid.json: "grids" must be a list of JSON objects'):
        load_grid_file(str(path), {})
    path.write_bytes(bytes([0xfe, 0xff, 0x00, 0x80]))
    with pytest.raises(SweepError, match="cannot read grid file .*can't decode"):
        load_grid_file(str(path), {})
    path.write_text('[{"envs": "cheetah-run", "seeds": 5, "seeds": 1}]')  # json keeps the last
    with pytest.raises(SweepError, match=r"grid.json: key\(s\) seeds given twice in one object"):
        load_grid_file(str(path), {})


def test_numbers_in_a_grid_file_may_be_single_values(tmp_path):
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"agent": "sac", "envs": "cheetah-run", "utds": 4}))
    (grid,) = load_grid_file(str(path), {})
    assert grid.utds == (4,)


def test_jobs_training_a_seed_twice_are_an_error():
    a = make_grid("sac", envs="cheetah-run", seeds=3)
    b = make_grid("sac", envs="cheetah-run", seeds=2, first_seed=1)
    with pytest.raises(SweepError, match=r"none-utd1-seed0 \(seeds 0-2\) and "
                                         r"sac/cheetah-run/none-utd1-seed1 \(seeds 1-2\)"):
        expand([a, b])
    c = make_grid("sac", envs="cheetah-run", seeds=2, first_seed=3)  # seeds 3-4: no overlap
    assert len(expand([a, c])) == 2
    d = make_grid("sac", envs="cheetah-run", utds="4", seeds=2)  # another UTD: other runs
    assert len(expand([a, d])) == 2


def test_two_grids_writing_one_run_directory_differently_is_an_error():
    a = make_grid("sac", envs="cheetah-run", max_steps=100)
    b = make_grid("sac", envs="cheetah-run", max_steps=200)
    assert expand([a, a]) == a.jobs()
    with pytest.raises(SweepError, match=re.escape(
            "same run directory sac/cheetah-run/none-utd1-seed0 with different settings "
            "(--max_steps: 100 and 200)")):
        expand([a, b])
    # the same flags in another order or place are the same job
    c = make_grid("sac", envs="cheetah-run", extra="--clip_c=2 --hidden_dim 32", max_steps=100)
    d = make_grid("sac", envs="cheetah-run", extra="--hidden_dim=32 --max_steps=100 --clip_c 2")
    assert expand([c, d]) == c.jobs()


@pytest.mark.parametrize("args, message", [
    (["--agent=ppo", "--envs=cheetah-run"], "sweep: flag --agent=ppo: value should be one of"),
    (["--envs=cheetah-run", "--utds=1,0"], "sweep: utd must be an integer >= 1, got '0'"),
    (["--envs="], "sweep: no envs given"),
    (["--envs=cheetah-rnu"], "sweep: unknown env 'cheetah-rnu'; did you mean 'cheetah-run'?"),
    (["--envs=cheetah-run", "--executor=slurm", "--max_parallel=-1"],
     "sweep: --max_parallel must be >= 1, or 0 for as many jobs as the machine holds, got -1"),
    (["--envs=cheetah-run", "--poll_s=-1"], "sweep: flag --poll_s=-1: "),
    (["--envs=cheetah-run", "--extra=--clip_c=2", "--", "--clip_c=3"],
     "sweep: --clip_c given more than once for the run scripts (--extra and the flags after"),
    (["--status", "--utds=2", "--max_steps=400"], "sweep: --utds, --max_steps describe a grid, "
     "and without --envs, --preset or --grid the recorded jobs are read as they were launched"),
    (["--retry_failed", "--", "--hidden_dim=16"], "sweep: flags after -- describe a grid"),
    (["--envs=cheetah-run", "--logdir="], "sweep: --logdir is empty; give the results tree"),
    (["--envs=cheetah-run,walker-run", "--seeds=100000000", "--seeds_per_job=1"],
     "sweep: the grid has 200,000,000 jobs, more than --max_jobs=10,000; check its envs"),
    (["--envs=cheetah-run", "--seeds=1000000"], "sweep: --seeds=1,000,000 with --seeds_per_job=0 "
     "(all of them) puts 1,000,000 seeds in one job, and a run script trains at most 1,000 per "
     "process: set --seeds_per_job to 1,000 or fewer"),
    (["--envs=cheetah-run", "--seeds=2000", "--seeds_per_job=1500"], "sweep: --seeds_per_job="
     "1,500 puts 1,500 seeds in one job, and a run script trains at most 1,000"),
    (["--envs=cheetah-run,walker-run", "--seeds=1000000", "--seeds_per_job=1000"],
     "sweep: the grid has 2,000,000 seed-runs (each seed of each env, intervention, varied "
     "settings and UTD), more than --max_seed_runs=100,000"),
])
def test_cli_bad_flags_exit_2_with_one_line(args, message, tmp_path):
    proc = run("sweep.py", f"--logdir={tmp_path}", *args, check=False, separate=False,
               cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / ".sweep").exists()


@pytest.mark.slow
@pytest.mark.parametrize("jobs_go_on, message", [
    (False, "interrupted; nothing was launched"),
    (True, "stopped following; the jobs go on (see --status)")])
def test_ctrl_c_says_whether_jobs_were_launched(jobs_go_on, message):
    code = ("import sys\n"
            "from absl import app\n"
            "from launch import sweep\n"
            "def interrupted(trailing):\n"
            f"    if {jobs_go_on}: sweep.JOBS_GO_ON.append(True)\n"
            "    raise KeyboardInterrupt\n"
            "sweep.run = interrupted\n"
            "app.run(sweep.main, argv=['sweep.py', '--envs=cheetah-run'])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 130 and proc.stderr.strip() == message, proc.stderr


@pytest.mark.slow
def test_a_job_record_that_is_not_json_is_one_line_naming_it(tmp_path):
    record = tmp_path / ".sweep" / "jobs" / "sac" / "cheetah-run" / "none-utd1-seed0.json"
    record.parent.mkdir(parents=True)
    record.write_text("")  # emptied by hand, or cut short
    for args in (["--status"], ["--envs=cheetah-run", "--no_wait"]):
        proc = run("sweep.py", f"--logdir={tmp_path}", *args, check=False, separate=False,
                   cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith(
            f"sweep: {record} cannot be read (Expecting value"), proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr


def test_extra_flags_with_separate_values_are_not_taken_for_repeated_flags(tmp_path):
    """`--clip_c 2 --clip_ns_steps 2` repeats a value, not a flag (--status launches nothing)."""
    proc = run("sweep.py", f"--logdir={tmp_path}", "--envs=cheetah-run", "--status",
               "--extra=--clip_c 2 --clip_ns_steps 2", check=False, separate=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "pending" in proc.stdout


def test_status_names_jobs_a_cut_short_launch_listed_but_never_recorded(tmp_path):
    """A launcher killed while it wrote its records leaves jobs only its launch file names:
    --status without the grid says so, rather than showing the recorded ones as all."""
    from experiment.rundir.record import write_json
    from sweeps.state import SweepPaths, update_record

    paths = SweepPaths(str(tmp_path))
    jobs = make_grid("sac", envs="cheetah-run", seeds=3, seeds_per_job=1).jobs()
    update_record(paths.record(jobs[0].key), key=jobs[0].key, spec=jobs[0].to_dict(),
                  state="interrupted", detail="stopped", launch="L")
    os.makedirs(os.path.dirname(paths.launch("L")), exist_ok=True)
    write_json(paths.launch("L"), {"executor": "local", "keys": [j.key for j in jobs],
                                   "submitted": False})
    proc = run("sweep.py", f"--logdir={tmp_path}", "--status", check=False, separate=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "launch L lists 2 more job(s) without a record (it was cut short while recording them, "
        f"e.g. {jobs[1].key}): launch the grid again to run them")
