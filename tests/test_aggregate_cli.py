"""launch/aggregate.py as a user runs it: run dirs made by hand, the reference data, bad input."""

import csv
import json
import os
import shutil

import numpy as np
import pytest
import scipy.stats
from test_analysis_layouts import write_project_run

from tests.helpers.runs import REFERENCE, run

SAC_UTD1 = (REFERENCE / "rl_with_resets_sac"
            / "max_steps_2000000_resets_False_config.updates_per_step_1")
STEPS = range(10_000, 110_000, 10_000)


def aggregate(*args):
    return run("aggregate.py", *args, check=False, timeout=120)


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """Two interventions x three envs, three seeds each; clip scores higher by construction."""
    root = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(0)
    for intervention, base in (("clip", 600.0), ("reset", 400.0)):
        for env in ("cheetah-run", "walker-run", "hopper-hop"):
            curves = {seed: [(s, base * s / 100_000 + rng.normal(0, 30)) for s in STEPS]
                      for seed in range(3)}
            write_project_run(root, env, f"{intervention}_{env}", curves,
                              intervention=intervention, utd=8, num_seeds=3)
    return root


@pytest.fixture(scope="module")
def grouped(logdir, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    result = aggregate(f"--runs={logdir}", "--group_by=intervention", "--step=100000",
                       "--reps=2000", "--curve_reps=200", f"--out={out}", "--seed=3")
    assert result.returncode == 0, result.stderr
    return result, out


def test_grouped_project_runs_give_every_table_and_plot(grouped, logdir):
    result, out = grouped
    assert "detected project layout -> algorithm 'intervention=clip', 9 runs on 3 tasks" in (
        result.stderr)
    for name in ("summary.md", "results.json", "aggregates.csv", "scores.csv",
                 "probability_of_improvement.csv", "sample_efficiency.csv",
                 "performance_profiles.csv"):
        assert (out / name).stat().st_size > 0
    for name in ("interval_estimates.png", "sample_efficiency.png", "performance_profiles.png",
                 "probability_of_improvement.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| intervention=clip |" in result.stdout
    assert (out / "summary.md").read_text() == result.stdout.rstrip("\n") + "\n"


def test_numbers_match_an_independent_computation_from_the_run_files(grouped, logdir):
    result, out = grouped
    final = {}
    for run_dir in logdir.rglob("eval.csv"):
        config = json.loads((run_dir.parent / "config.json").read_text())
        rows = [r for r in read_csv(run_dir) if r["env_step"] == "100000"]
        final.setdefault(config["intervention"], []).extend(float(r["return"]) for r in rows)
    aggregates = {(r["algorithm"], r["metric"]): r for r in read_csv(out / "aggregates.csv")}
    for intervention, scores in final.items():
        row = aggregates[(f"intervention={intervention}", "IQM")]
        assert float(row["estimate"]) == pytest.approx(scipy.stats.trim_mean(scores, 0.25))
        assert (int(row["runs"]), int(row["tasks"])) == (9, 3)
        assert float(row["lower"]) < float(row["estimate"]) < float(row["upper"])
    (poi,) = read_csv(out / "probability_of_improvement.csv")
    assert (poi["x"], poi["y"]) == ("intervention=clip", "intervention=reset")
    assert float(poi["probability"]) > 0.9
    assert f"| intervention=clip | intervention=reset | {float(poi['probability']):.3f} [" in (
        result.stdout) and " | 9 | 9 | 3 |" in result.stdout  # runs of X and Y, tasks
    document = json.loads((out / "results.json").read_text())
    assert document["settings"]["reps"] == 2000 and document["warnings"] == []
    steps = sorted({r["env_step"] for r in document["sample_efficiency"]})
    assert steps == list(STEPS)


def test_same_seed_same_intervals(grouped, logdir, tmp_path):
    _, out = grouped
    again = aggregate(f"--runs={logdir}", "--group_by=intervention", "--step=100000",
                      "--reps=2000", "--curve_reps=200", f"--out={tmp_path}", "--seed=3",
                      "--plots=false")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "aggregates.csv").read_text() == (out / "aggregates.csv").read_text()
    assert (tmp_path / "sample_efficiency.csv").read_text() == (
        out / "sample_efficiency.csv").read_text()


def test_a_bootstrap_beyond_memory_is_one_line_naming_the_flags_that_size_it(logdir, tmp_path):
    result = aggregate(f"--runs={logdir}", "--group_by=intervention", "--step=100000",
                       "--reps=100000000000", "--noprogress", f"--out={tmp_path / 'out'}")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: out of memory (Unable to allocate") and last.endswith(
        "--reps, --curve_reps, --profile_points and --curve_points set the bootstrap's size: "
        "lower them"), last
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_aggregation_into_an_earlier_ones_out_leaves_none_of_its_figures(grouped, logdir,
                                                                            tmp_path):
    """Tables are rewritten every time; figures this aggregation does not draw (--plots=false,
    or one algorithm: no probability of improvement) would show the earlier results."""
    _, out = grouped
    for name in os.listdir(out):
        shutil.copy(out / name, tmp_path / name)
    (tmp_path / "notes.png").write_bytes(b"the user's")
    one = logdir / "sac" / "cheetah-run" / "clip_cheetah-run"
    again = aggregate(f"--runs={one}", "--step=100000", "--reps=200", "--curve_reps=20",
                      f"--out={tmp_path}")
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "interval_estimates.png", "notes.png", "performance_profiles.png",
        "sample_efficiency.png"]
    assert (f"removed {tmp_path / 'probability_of_improvement.png'}: an earlier aggregation's "
            "figures, which this one does not draw") in again.stderr
    again = aggregate(f"--runs={one}", "--step=100000", "--reps=200", "--curve_reps=20",
                      f"--out={tmp_path}", "--plots=false")
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["notes.png"]


def test_reference_sac_reproduces_501_and_missing_seeds_warn(tmp_path):
    result = aggregate(f"--runs={SAC_UTD1}", "--labels=SAC", "--reps=1000",
                       "--curve_reps=50", "--curve_points=20", f"--out={tmp_path}",
                       "--plots=false", "--normalize")
    assert result.returncode == 0, result.stderr
    assert "detected jaxrl layout -> algorithm 'SAC', 100 runs on 10 tasks" in result.stderr
    iqm = next(r for r in read_csv(tmp_path / "aggregates.csv") if r["metric"] == "IQM")
    assert round(float(iqm["estimate"]) * 1000) == 501
    assert "| SAC | 0.501 [" in result.stdout


@pytest.mark.slow
def test_warnings_are_printed_and_kept_in_the_outputs(tmp_path):
    logdir = tmp_path / "runs"
    write_project_run(logdir, "cheetah-run", "a", {0: [(10_000, 5.0)], 1: [(10_000, 7.0)]},
                      num_seeds=4)
    result = aggregate(f"--runs={logdir}", "--step=10000", "--reps=100", "--curve_reps=10",
                       f"--out={tmp_path / 'out'}", "--plots=false")
    assert result.returncode == 0, result.stderr
    assert "warning: " in result.stderr and "2 of num_seeds=4 seeds" in result.stderr
    assert "## Warnings" in result.stdout and "num_seeds=4" in result.stdout
    # One algorithm: no comparison, but the table still opens (its header, no rows).
    assert (tmp_path / "out" / "probability_of_improvement.csv").read_text() == (
        "x,y,probability,lower,upper,tasks,runs_x,runs_y\n")
    # Scored past the runs' end: the error says where they end, and no empty --out is left.
    result = aggregate(f"--runs={logdir}", f"--out={tmp_path / 'new'}", "--plots=false")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "no run has an evaluation usable at step 1000000 (the runs evaluated from step 10000 "
        "to 10000); --step sets the step each run is scored at")
    assert not (tmp_path / "new").exists()


def test_ragged_runs_per_task_give_mean_plus_gap_equal_to_max_return(tmp_path):
    """At 2M steps 7 runs of the reference SAC (UTD 32, resets) end early: 6-10 runs per task,
    no return above 1000, so Mean + Optimality gap = 1000 (tasks weigh alike in both)."""
    resets = (REFERENCE / "rl_with_resets_sac"
              / "max_steps_2000000_resets_True_config.updates_per_step_32_reset_interval_200000")
    result = aggregate(f"--runs={resets}", "--step=2000000", "--reps=500", "--curve_reps=10",
                       "--curve_points=5", f"--out={tmp_path}", "--plots=false")
    assert result.returncode == 0, result.stderr
    rows = {r["metric"]: r for r in read_csv(tmp_path / "aggregates.csv")}
    assert (rows["Mean"]["min_runs_per_task"], rows["Mean"]["max_runs_per_task"]) == ("6", "10")
    for low, high in (("estimate", "estimate"), ("lower", "upper"), ("upper", "lower")):
        assert float(rows["Mean"][low]) + float(rows["Optimality gap"][high]) == pytest.approx(
            1000.0, rel=1e-9)
    assert max(float(r["score"]) for r in read_csv(tmp_path / "scores.csv")) <= 1000.0


def test_a_task_whose_only_run_diverged_before_evaluating_is_named(tmp_path):
    logdir = tmp_path / "runs"
    write_project_run(logdir, "cheetah-run", "a", {0: [(10_000, 5.0)]})
    lost = write_project_run(logdir, "walker-run", "a", {}, num_seeds=1)
    (lost / "diverged.json").write_text(json.dumps(
        {"env_step": 3_000, "seed": 0, "what": "critic_loss is nan", "seeds_stopped": [0]}))
    result = aggregate(f"--runs={logdir}", "--step=10000", "--reps=100", "--curve_reps=10",
                       f"--out={tmp_path / 'out'}", "--plots=false")
    assert result.returncode == 0, result.stderr
    assert (f"warning: {lost}: seed 0 diverged at env step 3000 (critic_loss is nan) before any "
            "evaluation; its run is left out") in result.stderr
    assert "Tasks (1): cheetah-run" in result.stdout and "diverged at env step 3000" in (
        result.stdout)


def bad_inputs(tmp_path, logdir):
    (tmp_path / "empty").mkdir()
    return {
        "missing path": ([f"--runs={tmp_path / 'nope'}"], "runs path does not exist"),
        "no runs": ([f"--runs={tmp_path / 'empty'}"], "no runs found under"),
        "no --runs": ([], "no --runs given"),
        "labels": ([f"--runs={logdir}", "--labels=a,b"], "2 labels for 1 --runs entries"),
        "group key": ([f"--runs={logdir}", "--group_by=agent_config.nope"],
                      "unknown group key 'agent_config.nope'"),
        "reps": ([f"--runs={logdir}", "--reps=0"], "--reps must be >= 1"),
        "seed": ([f"--runs={logdir}", "--seed=-1"], "--seed must be >= 0, got -1"),
        "empty runs entry": ([f"--runs={logdir},"], "--runs entry 2 of 2 is empty"),
        "empty label": ([f"--runs={logdir},{logdir}", "--labels=a,"],
                        "--labels entry 2 of 2 is empty"),
        "group key twice": ([f"--runs={logdir}", "--group_by=utd,intervention,utd"],
                            "--group_by names utd twice; give each key once"),
        "not a number": ([f"--runs={logdir}", "--step=abc"], "flag --step=abc"),
        "unknown flag": ([f"--runs={logdir}", "--bogus=1"], "Unknown command line flag 'bogus'"),
        "out is a file": ([f"--runs={logdir}", f"--out={tmp_path / 'a_file'}"],
                          f"--out={tmp_path / 'a_file'}: cannot create the output directory"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", ["missing path", "no runs", "no --runs", "labels",
                                  "group key", "group key twice", "reps", "seed",
                                  "empty runs entry", "empty label",
                                  "out is a file", "not a number", "unknown flag"])
def test_bad_input_is_one_line_on_stderr_and_exit_code_2(case, tmp_path, logdir):
    (tmp_path / "a_file").write_text("not a directory")
    args, message = bad_inputs(tmp_path, logdir)[case]
    result = aggregate(f"--out={tmp_path / 'out'}", *args)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (
        result.stderr)
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists(), "bad input creates no output directory"
