"""Aggregation of continual runs against independent computations, the aggregation and analysis
commands as a user runs them, and the sweep's continual grid."""

import csv
import json
import os

import numpy as np
import pytest

from analysis.continual import load_methods, read_runs, summarize
from analysis.errors import AggregationError, AggregationWarning
from analysis.layouts import detect_layout
from continual.anisotropy import anisotropic
from sweeps.grid import make_grid
from sweeps.run_flags import SweepError
from tests.helpers.runs import read_csv, run


def fake_run(root, task, intervention, seeds, scores, layer_norm=True, cond=None, code=None):
    """A run directory with config.json (versions.code = `code` where given), tasks.csv
    (online accuracy = scores (seeds, tasks)), and diagnostics.csv (cond of one layer) when
    `cond` is given."""
    folder = os.path.join(root, "continual", task, f"{intervention}-{layer_norm}-seed{seeds[0]}")
    os.makedirs(folder)
    config = {"task": task, "intervention": intervention, "layer_norm": layer_norm}
    if code is not None:
        config["versions"] = {"jax": "0.10.2", "code": code}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "tasks.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", "seed", "online_accuracy", "final_accuracy", "loss"])
        for t in range(scores.shape[1]):
            w.writerows((t, s, scores[i, t], 1.0, 0.5) for i, s in enumerate(seeds))
    if cond is not None:
        with open(os.path.join(folder, "diagnostics.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["task", "seed", "network", "layer", "metric", "value"])
            for t in range(cond.shape[1]):
                w.writerows((t, s, "net", "MLP_0/Dense_0", "cond", cond[i, t])
                            for i, s in enumerate(seeds))
    return folder


def test_table_curve_and_improvement_match_direct_computation(tmp_path):
    rng = np.random.default_rng(0)
    clip = rng.uniform(0.5, 0.9, (6, 12))
    none_a, none_b = rng.uniform(0.2, 0.6, (3, 12)), rng.uniform(0.2, 0.6, (3, 14))
    fake_run(tmp_path, "random_label_digits", "clip", list(range(6)), clip)
    fake_run(tmp_path, "random_label_digits", "none", [0, 1, 2], none_a)
    fake_run(tmp_path, "random_label_digits", "none", [3, 4, 5], none_b)  # two jobs' seeds
    fake_run(tmp_path, "random_label_digits", "none", [0, 1], clip[:2], layer_norm=False)
    with pytest.warns(AggregationWarning, match=r"1 run\(s\) cut to the 12 task\(s\)"):
        methods = {m.label: m for m in load_methods([str(tmp_path)])}
    assert set(methods) == {"clip", "none", "none (no LayerNorm)"}
    none = np.concatenate([none_a, none_b[:, :12]])  # cut to the tasks every method finished
    np.testing.assert_array_equal(methods["none"].scores, none)
    summary = summarize(list(methods.values()), "clip", last=4, reps=2000, curve_reps=500)
    rows = {r["method"]: r for r in summary.table}
    assert rows["none"]["all_mean"] == pytest.approx(none.mean())
    assert rows["none"]["last4_mean"] == pytest.approx(none[:, -4:].mean())
    assert rows["none"]["all_lower"] < none.mean() < rows["none"]["all_upper"]
    np.testing.assert_allclose(summary.curves["clip"][0], clip.mean(axis=0))
    assert np.all(summary.curves["clip"][1] <= clip.mean(axis=0) + 1e-12)
    # every clip run beats every LayerNorm run on its mean over tasks
    poi = {r["over"]: r for r in summary.improvement}
    assert poi["none"]["probability"] == 1.0
    x, y = clip.mean(axis=1), methods["none (no LayerNorm)"].scores.mean(axis=1)
    wins = np.mean([(a > b) + 0.5 * (a == b) for a in x for b in y])
    assert poi["none (no LayerNorm)"]["probability"] == pytest.approx(wins)


def test_runs_of_the_other_kind_are_named_with_the_command_that_reads_them(tmp_path):
    """RL runs given to the continual aggregation, and continual runs given to the RL one."""
    fake_run(tmp_path / "continual", "permuted_digits", "clip", [0], np.full((1, 3), 0.5))
    rl = tmp_path / "rl" / "sac" / "cheetah-run" / "clip-utd1-seed0"
    rl.mkdir(parents=True)
    (rl / "config.json").write_text("{}")
    (rl / "eval.csv").write_text("env_step,seed,return\n")
    with pytest.raises(AggregationError, match=r"no continual run .*; it holds RL runs "
                       r"\(config.json \+ eval.csv\), which launch/aggregate.py aggregates"):
        load_methods([str(tmp_path / "rl")])
    with pytest.raises(AggregationError, match=r"no runs found under .*; it holds continual runs"
                       r" \(config.json \+ tasks.csv\): aggregate them with "
                       r"launch/aggregate_continual.py"):
        detect_layout(tmp_path / "continual")
    with pytest.raises(AggregationError, match=r"no continual run .*empty$"):
        (tmp_path / "empty").mkdir()
        load_methods([str(tmp_path / "empty")])


@pytest.mark.slow
def test_aggregate_and_condition_number_commands(tmp_path):
    rng = np.random.default_rng(1)
    for name in ("clip", "none"):
        fake_run(tmp_path / "runs", "permuted_digits", name, [0, 1, 2],
                 rng.uniform(0, 1, (3, 15)), cond=np.exp(rng.uniform(0, 3, (3, 15))))
    out = tmp_path / "out"
    proc = run("aggregate_continual.py", f"--runs={tmp_path / 'runs'}", f"--out={out}",
               "--reps=500", "--curve_reps=200")
    assert "P(clip > none)" in proc.stdout
    assert {"curve.png", "curve.csv", "table.md", "table.csv", "summary.json"} <= set(
        os.listdir(out))
    assert len(read_csv(out / "curve.csv")) == 2 * 15
    run("condition_numbers.py", f"--runs={tmp_path / 'runs'}", f"--out={out}")
    rows = read_csv(out / "condition_numbers.csv")
    assert {r["layer"] for r in rows} == {"MLP_0/Dense_0"} and len(rows) == 2 * 15
    bad = run("aggregate_continual.py", f"--runs={tmp_path / 'nothing'}", check=False)
    assert bad.returncode == 2 and "--runs" in bad.stderr.strip().splitlines()[-1]


def test_the_code_that_made_the_runs_is_reported_and_can_split_them(tmp_path):
    rng = np.random.default_rng(2)
    old, new = "0123456789ab", "ba9876543210+changes"
    fake_run(tmp_path, "permuted_digits", "clip", [0, 1], rng.uniform(0, 1, (2, 5)), code=old)
    fake_run(tmp_path, "permuted_digits", "clip", [2, 3], rng.uniform(0, 1, (2, 5)), code=new)
    fake_run(tmp_path, "permuted_digits", "none", [0, 1], rng.uniform(0, 1, (2, 5)), code=new)
    common = [f"--runs={tmp_path}", "--reps=200", "--curve_reps=50", "--plots=false"]
    proc = run("aggregate_continual.py", *common, f"--out={tmp_path / 'pooled'}")
    assert ("warning: the runs were made by 2 versions of the code (ba9876543210+changes: 2 "
            "run(s), 0123456789ab: 1 run(s)); summary.json lists them by method, and "
            "--group_by=versions.code separates them") in proc.stderr
    summary = json.loads((tmp_path / "pooled" / "summary.json").read_text())
    assert summary["code"] == {"clip": {old: 1, new: 1}, "none": {new: 1}}
    split = run("aggregate_continual.py", *common, "--group_by=versions.code",
                f"--reference=clip [versions.code={new}]", f"--out={tmp_path / 'split'}")
    table = json.loads((tmp_path / "split" / "summary.json").read_text())["table"]
    assert [r["method"] for r in table] == [f"clip [versions.code={old}]",
                                            f"clip [versions.code={new}]",
                                            f"none [versions.code={new}]"]
    assert [r["seeds"] for r in table] == [2, 2, 2]
    assert "warning" in split.stderr  # the table still holds runs of both versions
    typo = run("aggregate_continual.py", *common, "--group_by=versions.cod",
               f"--out={tmp_path / 'typo'}", check=False)
    assert typo.returncode == 2
    assert typo.stderr.strip().splitlines()[-1].startswith(
        "error: unknown group key 'versions.cod' in ")


def test_runs_of_unequal_length_are_cut_with_a_warning_or_refused(tmp_path):
    rng = np.random.default_rng(3)
    short = fake_run(tmp_path, "permuted_digits", "clip", [0, 1], rng.uniform(0, 1, (2, 5)))
    long = fake_run(tmp_path, "permuted_digits", "none", [0, 1], rng.uniform(0, 1, (2, 8)))
    fake_run(tmp_path, "permuted_digits", "reset", [0, 1], rng.uniform(0, 1, (2, 5)))
    with pytest.warns(AggregationWarning) as caught:
        methods = load_methods([str(tmp_path)])
    assert [str(w.message) for w in caught] == [
        f"runs of unequal length: 1 run(s) cut to the 5 task(s) of the shortest ({short}): "
        f"{long} (8); --require_equal_length makes this an error"]
    assert all(m.scores.shape == (2, 5) for m in methods)
    with pytest.raises(AggregationError, match=r"cut to the 5 task\(s\).*--require_equal_length "
                       "is set$"):
        load_methods([str(tmp_path)], require_equal_length=True)
    common = [f"--runs={tmp_path}", "--reps=50", "--curve_reps=20", "--plots=false"]
    proc = run("aggregate_continual.py", *common, f"--out={tmp_path / 'out'}")
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [
        f"warning: {caught[0].message}"]
    refused = run("aggregate_continual.py", *common, "--require_equal_length",
                  f"--out={tmp_path / 'refused'}", check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("error: runs of unequal length: 1 run(s) cut")
    assert not (tmp_path / "refused").exists()


def test_one_seed_in_two_run_dirs_of_a_method_is_refused(tmp_path):
    rng = np.random.default_rng(4)
    first = fake_run(tmp_path / "a", "permuted_digits", "clip", [0, 1], rng.uniform(0, 1, (2, 3)))
    second = fake_run(tmp_path / "b", "permuted_digits", "clip", [1, 2], rng.uniform(0, 1, (2, 3)))
    with pytest.raises(AggregationError) as e:
        load_methods([str(tmp_path)])
    assert str(e.value) == (f"clip: seed 1 is in two run directories, {first} and {second}, "
                            "which would count as two independent seeds; their settings are the "
                            "same: keep one of them")
    for folder, rate in ((first, 0.001), (second, 0.01)):
        config = json.loads(open(os.path.join(folder, "config.json")).read())
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({**config, "learning_rate": rate}, f)
    with pytest.raises(AggregationError, match="they differ in learning_rate: split them with "
                       "--settings or --group_by=learning_rate$"):
        load_methods([str(tmp_path)])
    assert [m.scores.shape for m in load_methods([str(tmp_path)], group_by=["learning_rate"])] \
        == [(2, 3), (2, 3)]


def test_a_damaged_config_or_tasks_file_is_one_line_naming_it(tmp_path):
    folder = fake_run(tmp_path, "permuted_digits", "clip", [0], np.full((1, 3), 0.5))
    config, tasks = os.path.join(folder, "config.json"), os.path.join(folder, "tasks.csv")
    with open(tasks, "a") as f:
        f.write("3,0,abc,1.0,0.5\n")
    with pytest.raises(AggregationError) as e:
        read_runs([str(tmp_path)])
    assert str(e.value) == (f"{tasks} line 5: task, seed and online_accuracy must be numbers, got "
                            "{'task': '3', 'seed': '0', 'online_accuracy': 'abc'}")
    with open(tasks, "w") as f:
        f.write("task,seed,final_accuracy\n0,0,0.5\n")
    with pytest.raises(AggregationError, match=f"^{tasks} has no column online_accuracy"):
        read_runs([str(tmp_path)])
    with open(config, "w") as f:
        f.write('{"task": "permuted_digits", "intervention": ')  # cut off mid-write
    proc = run("aggregate_continual.py", f"--runs={tmp_path}", f"--out={tmp_path / 'out'}",
               check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"error: {config} is not valid JSON (Expecting value at line 1, "
                           "column 45)\n")


def test_anisotropic_matrix_has_d_unit_directions_at_the_original_norm():
    rng = np.random.default_rng(2)
    kernel = rng.standard_normal((20, 8)).astype(np.float32)
    w = anisotropic(kernel, 3, 1e-5)
    s = np.linalg.svd(w.astype(np.float64), compute_uv=False)
    assert np.linalg.norm(w) == pytest.approx(np.linalg.norm(kernel), rel=1e-5)
    assert np.allclose(s[:3], s[0]) and np.all(s[3:] < 1e-4 * s[0])
    _, _, vt_w = np.linalg.svd(w.astype(np.float64))
    _, _, vt_k = np.linalg.svd(kernel.astype(np.float64))
    # the unit directions span the kernel's top three right singular vectors
    np.testing.assert_allclose(vt_w[:3].T @ vt_w[:3], vt_k[:3].T @ vt_k[:3], atol=1e-4)


@pytest.mark.slow
def test_anisotropic_init_command(tmp_path):
    run("anisotropic_init.py", "--ds=1,64", "--seeds=2", "--examples=32", "--max_steps=200",
        "--eval_every=50", "--hidden_dim=16", f"--out={tmp_path}")
    rows = read_csv(tmp_path / "anisotropy.csv")
    assert [(r["d"], r["seed"]) for r in rows] == [("1", "0"), ("1", "1"), ("64", "0"),
                                                    ("64", "1")]
    assert all(int(r["steps"]) in (50, 100, 150, 200) for r in rows)
    assert (tmp_path / "anisotropy.png").exists()


def test_sweep_grid_of_continual_methods_tasks_and_c_values(tmp_path):
    grid = make_grid("continual", preset="continual_digits", interventions="all",
                     clip_cs="1.5,2,4", seeds=10, extra=["--num_tasks=20"])
    jobs = grid.jobs()
    names = {(j.env, j.run_name) for j in jobs}
    assert ("random_label_digits", "none-seed0") in names
    assert {("permuted_digits", f"clip-c{c}-seed0") for c in ("1.5", "2", "4")} <= names
    assert ("permuted_digits", "reset-seed0") in names  # c values only with clip
    assert len(jobs) == grid.job_count()
    clip = next(j for j in jobs if j.run_name == "clip-c4-seed0")
    argv = clip.argv(str(tmp_path))
    assert argv[1].endswith("run_continual.py")
    assert "--task=permuted_digits" in argv and "--clip_c=4" in argv and "--num_tasks=20" in argv
    assert not any(a.startswith("--utd") or a.startswith("--env=") for a in argv)
    assert clip.run_dir(str(tmp_path)).endswith("continual/permuted_digits/clip-c4-seed0")
    for kwargs, words in [({"envs": "random_label_mnst"}, ["random_label_mnist"]),
                          ({"envs": "permuted_digits", "utds": "4"}, ["UTD"]),
                          ({"envs": "permuted_digits", "max_steps": 10}, ["max_steps"]),
                          ({"envs": "permuted_digits", "clip_cs": "0.5",
                            "interventions": "clip"}, [">= 1"]),
                          ({"envs": "permuted_digits", "clip_cs": "2",
                            "interventions": "none"}, ["clip"])]:
        with pytest.raises(SweepError) as e:
            make_grid("continual", **kwargs)
        assert all(w in str(e.value) for w in words), str(e.value)


@pytest.mark.slow  # processes of its own, seconds each
def test_the_comparison_of_an_unknown_benchmark_stops_with_the_sweeps_one_line(tmp_path):
    proc = run("compare_continual.py", "--tasks=permuted_digitz", f"--logdir={tmp_path}",
               check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "unknown continual benchmark 'permuted_digitz'; accepted: " in proc.stderr


@pytest.mark.slow
def test_the_comparison_in_one_command(tmp_path):
    proc = run("compare_continual.py", "--tasks=random_label_digits", "--interventions=none,clip",
               "--seeds=2", f"--logdir={tmp_path}", "--reps=200", "--", "--num_tasks=2",
               "--epochs=1", "--hidden_dim=8", "--progress=false", timeout=600)
    assert "P(clip > none)" in proc.stdout
    for name in ("none-seed0", "clip-seed0"):
        assert (tmp_path / "continual" / "random_label_digits" / name / "done.json").exists()
    rows = read_csv(tmp_path / "aggregate" / "random_label_digits" / "table.csv")
    assert {r["method"] for r in rows} == {"none", "clip"}
    assert all(r["seeds"] == "2" and r["tasks"] == "2" for r in rows)
