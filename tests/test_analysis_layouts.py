"""Readers and layout detection on run trees built by hand in tmp_path."""

import dataclasses
import json
import re
import warnings

import numpy as np
import pytest

from analysis.datasets import load_datasets
from analysis.errors import AggregationError, AggregationWarning
from analysis.grouping import config_value, group_runs
from analysis.layouts import detect_layout, load_runs
from analysis.run_curves import canonical_task
from analysis.selection import curve_scores, final_scores


def write_project_run(logdir, env, run_name, curves, **config):
    """A run dir as the trainer writes it; curves: {seed: [(env_step, return), ...]}."""
    run_dir = logdir / config.get("agent", "sac") / env / run_name
    run_dir.mkdir(parents=True)
    record = dict(agent="sac", env=env, intervention="none", utd=1, seed=0,
                  num_seeds=len(curves), max_steps=100_000, eval_every=10_000,
                  agent_config=dict(hidden_dims=[256, 256]), versions=dict(jax="0.10.2"))
    record.update(config)
    (run_dir / "config.json").write_text(json.dumps(record))
    rows = ["env_step,seed,return,wall_time"]
    rows += [f"{step},{seed},{ret},{i * 1.5}" for seed, curve in curves.items()
             for i, (step, ret) in enumerate(curve)]
    (run_dir / "eval.csv").write_text("\n".join(rows) + "\n")
    for seed, curve in curves.items():
        (run_dir / f"{seed}.txt").write_text("".join(f"{s} {r}\n" for s, r in curve))
    return run_dir


def curve(offset, steps=(10_000, 20_000, 30_000)):
    return [(s, offset + s / 1000) for s in steps]


def test_project_runs_are_found_at_any_depth_one_run_per_seed(tmp_path):
    write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0), 1: curve(5)})
    write_project_run(tmp_path, "walker-run", "b", {0: curve(1)})
    assert detect_layout(tmp_path) == "project"
    layout, runs = load_runs(tmp_path / "sac")
    assert layout == "project"
    assert sorted((r.task, r.run_id) for r in runs) == [  # run ids: paths below --runs
        ("cheetah-run", "cheetah-run/a/seed0"), ("cheetah-run", "cheetah-run/a/seed1"),
        ("walker-run", "walker-run/b/seed0")]
    run = next(r for r in runs if r.run_id == "cheetah-run/a/seed1")
    np.testing.assert_array_equal(run.steps, [10_000, 20_000, 30_000])
    np.testing.assert_array_equal(run.returns, [15.0, 25.0, 35.0])
    _, single = load_runs(tmp_path / "sac" / "walker-run" / "b")
    assert [r.run_id for r in single] == ["b/seed0"]


def test_a_loss_past_the_trainers_limit_is_warned_about_and_its_runs_kept(tmp_path):
    run_dir = write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0), 1: curve(1)},
                                num_seeds=2)
    (run_dir / "loss_warnings.json").write_text(json.dumps({"limit": 1e10, "losses": {
        "critic_loss": {"env_step": 20_000, "seed": 1, "value": 1.25e26}}}))
    with pytest.warns(AggregationWarning, match=r"a: critic_loss of seed 1 reached 1.25e\+26 at "
                      r"env step 20000 \(loss_warnings.json\): a loss that grows without bound"):
        _, runs = load_runs(tmp_path)
    assert len(runs) == 2
    (run_dir / "loss_warnings.json").write_text('{"losses": {"critic_loss": 3}}')
    with pytest.raises(AggregationError, match="loss_warnings.json: expected a JSON object"):
        load_runs(tmp_path)


def test_missing_seeds_in_a_project_run_warn(tmp_path):
    write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0)}, num_seeds=3)
    with pytest.warns(AggregationWarning, match="1 of num_seeds=3 seeds"):
        load_runs(tmp_path)


def test_a_seed_in_two_run_dirs_of_one_algorithm_warns(tmp_path):
    write_project_run(tmp_path, "cheetah-run", "none-utd1-seed0", {0: curve(0), 1: curve(1)})
    write_project_run(tmp_path, "cheetah-run", "none-utd1-seed1", {1: curve(1)}, seed=1)
    with pytest.warns(AggregationWarning, match=r"1 seed\(s\) appear in more than one run dir.*"
                      r"seed 1 on cheetah-run in sac/cheetah-run/none-utd1-seed0, "
                      r"sac/cheetah-run/none-utd1-seed1"):
        datasets, _ = load_datasets([str(tmp_path)], group_by=["intervention"])
    assert len(datasets["intervention=none"]) == 3


def test_the_same_seed_under_other_settings_is_no_copy(tmp_path):
    write_project_run(tmp_path, "cheetah-run", "c2", {0: curve(0)}, intervention="clip", clip_c=2.0)
    write_project_run(tmp_path, "cheetah-run", "c4", {0: curve(1)}, intervention="clip", clip_c=4.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_datasets([str(tmp_path)])
    messages = [str(w.message) for w in caught]
    assert [m for m in messages if "differ in clip_c (2.0, 4.0)" in m]
    assert not [m for m in messages if "more than one run dir" in m]


def test_group_by_splits_by_config_values_including_dotted_paths(tmp_path):
    for i, (intervention, utd) in enumerate([("clip", 8), ("reset", 8), ("clip", 1)]):
        write_project_run(tmp_path, "cheetah-run", f"r{i}", {0: curve(i)},
                          intervention=intervention, utd=utd)
    _, runs = load_runs(tmp_path)
    groups = group_runs(runs, ["intervention", "utd"])
    assert sorted(groups) == ["intervention=clip,utd=1", "intervention=clip,utd=8",
                              "intervention=reset,utd=8"]
    assert config_value(runs[0].config, "agent_config.hidden_dims", "x") == [256, 256]
    assert list(group_runs(runs, ["versions.jax"])) == ["versions.jax=0.10.2"]
    with pytest.raises(AggregationError, match=r"unknown group key 'agent_config.width' in "
                                               r"\S*config.json: .*hidden_dims"):
        group_runs(runs, ["agent_config.width"])


def test_pooling_different_interventions_without_group_by_warns(tmp_path):
    write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0)}, intervention="clip")
    write_project_run(tmp_path, "cheetah-run", "b", {0: curve(0)}, intervention="reset")
    with pytest.warns(AggregationWarning, match="differ in intervention .*--group_by"):
        datasets, sources = load_datasets([str(tmp_path)])
    assert list(datasets) == [tmp_path.name]
    assert sources[0].layout == "project" and sources[0].runs == 2
    datasets, _ = load_datasets([str(tmp_path)], labels=["mine"], group_by=["intervention"])
    assert sorted(datasets) == ["mine: intervention=clip", "mine: intervention=reset"]


def pooling_warnings(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_datasets(*args, **kwargs)
    return [str(w.message) for w in caught if "pooled into one algorithm" in str(w.message)]


def test_runs_made_by_other_code_are_pooled_with_a_warning_and_split_by_versions_code(tmp_path):
    old, new = "0123456789ab", "ba9876543210"
    write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0), 1: curve(1)},
                      versions=dict(jax="0.10.2", code=old))
    write_project_run(tmp_path, "walker-run", "b", {0: curve(2)},
                      versions=dict(jax="0.10.2", code=new))
    write_project_run(tmp_path, "walker-run", "c", {1: curve(3)},
                      versions=dict(jax="0.10.2", code=new))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_datasets([str(tmp_path)])
    messages = [str(w.message) for w in caught if "versions of the code" in str(w.message)]
    assert messages == [f"{tmp_path.name}: its runs were made by 2 versions of the code ({new}: "
                        f"2 run dir(s), {old}: 1 run dir(s)); use --group_by=versions.code to "
                        "separate them"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        datasets, _ = load_datasets([str(tmp_path)], group_by=["versions.code"])
    assert sorted(datasets) == [f"versions.code={old}", f"versions.code={new}"]
    assert not [w for w in caught if "versions of the code" in str(w.message)]


def test_pooling_runs_that_differ_in_any_setting_that_changes_results_warns(tmp_path):
    base = dict(intervention="clip", utd=8, action_repeat=1, batch_size=256, clip_c=4.0,
                intervention_every=200_000, intervention_steps=[])
    variants = [dict(), dict(action_repeat=2), dict(batch_size=512, max_steps=200_000),
                dict(agent_config=dict(hidden_dims=[512, 512])), dict(clip_c=2.0),
                dict(intervention_steps=[50_000])]
    for i, variant in enumerate(variants):
        write_project_run(tmp_path, "cheetah-run", f"r{i}", {0: curve(i)}, **{**base, **variant})
    (message,) = pooling_warnings([str(tmp_path)])
    assert message == (
        f"{tmp_path.name}: runs differ in action_repeat (1, 2), batch_size (256, 512), "
        "clip_c (2.0, 4.0) and 2 more but are pooled into one algorithm; use "
        "--group_by=action_repeat to separate them (add more keys, comma-separated, as needed)")
    (message,) = pooling_warnings([str(tmp_path / "sac" / "cheetah-run")],
                                  group_by=["action_repeat", "batch_size", "clip_c",
                                            "intervention_steps"])
    assert message.startswith("action_repeat=1,batch_size=256,clip_c=4.0,"
                              "intervention_steps=[]: runs differ in agent_config.hidden_dims "
                              "([256, 256], [512, 512]) but are pooled into one algorithm; use "
                              "--group_by=action_repeat,batch_size,clip_c,"
                              "intervention_steps,agent_config.hidden_dims to separate them")
    assert pooling_warnings([str(tmp_path)], group_by=[
        "agent_config.hidden_dims", "action_repeat", "batch_size", "clip_c",
        "intervention_steps"]) == []  # max_steps differs too: it changes no shared step


def test_algorithms_with_other_action_repeats_warn(tmp_path):
    """Steps are agent steps: at one --step, action repeat 2 has simulated twice as much."""
    for name, repeat in (("a", 1), ("b", 2), ("c", 1)):
        write_project_run(tmp_path / name, "cheetah-run", "r", {0: curve(0)},
                          action_repeat=repeat)

    def repeat_warnings(*args, **kwargs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            load_datasets(*args, **kwargs)
        return [str(w.message) for w in caught if "action repeats" in str(w.message)]

    (message,) = repeat_warnings([str(tmp_path / n) for n in "abc"])
    assert message.startswith("the algorithms ran with different action repeats ('a' 1, "
                              "'b' 2, 'c' 1): their env steps are agent steps")
    assert repeat_warnings([str(tmp_path / n) for n in "ac"]) == []
    write_project_run(tmp_path / "d", "cheetah-run", "r", {0: curve(0)})  # recorded none: 1
    assert repeat_warnings([str(tmp_path / n) for n in "ad"]) == []
    assert repeat_warnings([str(tmp_path / n) for n in "abc"],
                           group_by=["action_repeat"]) == []  # the comparison asked for


def test_reset_steps_past_the_shortest_run_do_not_count_when_pooling(tmp_path):
    """BRO records its reset steps cut to the run's length: runs of one schedule that differ
    in length pool silently (and a seed run twice counts as a repeat); a schedule that differs
    below the shortest run's end still warns."""
    bro = dict(agent="bro", intervention="reset", utd=10, intervention_every=None)
    write_project_run(tmp_path / "a", "cheetah-run", "short", {0: curve(0)}, **bro,
                      max_steps=1_000_000, intervention_steps=[15_001, 50_001, 750_001])
    write_project_run(tmp_path / "a", "walker-run", "long", {0: curve(1)}, **bro,
                      max_steps=2_000_000,
                      intervention_steps=[15_001, 50_001, 750_001, 1_000_001, 1_500_001])
    assert pooling_warnings([str(tmp_path / "a")]) == []
    with pytest.warns(AggregationWarning, match="seed 0 on walker-run in "):
        write_project_run(tmp_path / "a", "walker-run", "again", {0: curve(1)}, **bro,
                          max_steps=1_000_000, intervention_steps=[15_001, 50_001, 750_001])
        load_datasets([str(tmp_path / "a")])
    write_project_run(tmp_path / "b", "cheetah-run", "short", {0: curve(0)}, **bro,
                      max_steps=1_000_000, intervention_steps=[15_001, 750_001])
    write_project_run(tmp_path / "b", "walker-run", "long", {0: curve(1)}, **bro,
                      max_steps=2_000_000, intervention_steps=[15_001, 50_001, 1_500_001])
    assert pooling_warnings([str(tmp_path / "b")]) == [
        "b: runs differ in intervention_steps ([15001, 50001], [15001, 750001]) but are pooled "
        "into one algorithm; use --group_by=intervention_steps to separate them"]


def test_settings_that_cannot_change_results_do_not_warn(tmp_path):
    """Seeds, names, paths, resume/progress/checkpoint/log settings, the diagnostics, library
    versions, and the settings of an intervention not made."""
    write_project_run(tmp_path / "a", "cheetah-run", "none-utd1-seed0", {0: curve(0)})
    mine = write_project_run(tmp_path / "a", "cheetah-run", "mine", {3: curve(1), 4: curve(2)},
                             seed=3, num_seeds=2, resume="never", progress=False,
                             checkpoint_every=5_000, keep_final_buffer=True, log_every=500,
                             diagnostics=False, dormant_taus=[0.1], srank_threshold=0.9,
                             diagnostics_batch_size=1024, clip_c=2.0,
                             clip_method="newton_schulz", intervention_every=100_000,
                             versions=dict(jax="0.4.30", XLA_FLAGS="--xla_foo"),
                             earlier_versions=[dict(until_env_step=10_000,
                                                    versions=dict(jax="0.4"))])
    config = json.loads((mine / "config.json").read_text())
    (mine / "config.json").write_text(json.dumps({**config, "logdir": "/x", "run_name": "mine"}))
    write_project_run(tmp_path / "a", "walker-run", "reset", {0: curve(3)}, intervention="reset",
                      intervention_steps=[20_000], intervention_every=1, clip_c=9.0)
    write_project_run(tmp_path / "a", "walker-run", "reset2", {1: curve(4)}, intervention="reset",
                      intervention_steps=[20_000], clip_ns_steps=3)
    assert pooling_warnings([str(tmp_path / "a")], group_by=["intervention"]) == []
    # eval_every counts: it sets the steps the curves share and the evaluation a run scores.
    write_project_run(tmp_path / "a", "cheetah-run", "often", {0: curve(0)}, eval_every=5_000)
    assert pooling_warnings([str(tmp_path / "a")], group_by=["intervention"]) == [
        "intervention=none: runs differ in eval_every (5000, 10000) but are pooled into one "
        "algorithm; use --group_by=intervention,eval_every to separate them"]


def test_runs_within_each_group_are_checked_for_the_other_settings(tmp_path):
    for i, (intervention, batch_size) in enumerate([("clip", 256), ("reset", 256),
                                                    ("clip", 512)]):
        write_project_run(tmp_path, "cheetah-run", f"r{i}", {0: curve(i)},
                          intervention=intervention, agent_config=dict(
                              hidden_dims=[256, 256], batch_size=batch_size))
    messages = pooling_warnings([str(tmp_path)], group_by=["agent_config.batch_size"])
    assert messages == [
        "agent_config.batch_size=256: runs differ in intervention (clip, reset) but are pooled "
        "into one algorithm; use --group_by=agent_config.batch_size,intervention to separate "
        "them"]
    assert pooling_warnings([str(tmp_path)], labels=["mine"], group_by=["intervention"]) == [
        "mine: intervention=clip: runs differ in agent_config.batch_size (256, 512) but are "
        "pooled into one algorithm; use --group_by=intervention,agent_config.batch_size to "
        "separate them"]
    assert pooling_warnings([str(tmp_path)],
                            group_by=["intervention", "agent_config.batch_size"]) == []


def write_jaxrl_tree(root, tasks, seeds):
    for task in tasks:
        (root / task).mkdir(parents=True)
        for seed in seeds:
            (root / task / f"{seed}.txt").write_text("5000 1.5\n10000 2.5\n")


def test_jaxrl_tree_reads_one_run_per_seed_file_and_warns_on_missing_seeds(tmp_path):
    write_jaxrl_tree(tmp_path, ["cheetah-run", "finger-turn"], range(3))
    (tmp_path / "cheetah-run" / "2.txt").unlink()
    with pytest.warns(AggregationWarning, match=r"missing seeds on cheetah-run \(2/3\)"):
        layout, runs = load_runs(tmp_path)
    assert layout == "jaxrl"
    assert sorted({r.task for r in runs}) == ["cheetah-run", "finger-turn_hard"]
    assert len(runs) == 5
    np.testing.assert_array_equal(runs[0].returns, [1.5, 2.5])


def layout_warnings(root):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layout, _ = load_runs(root)
    return layout, [str(w.message) for w in caught if "it also holds" in str(w.message)]


def test_runs_of_a_second_layout_in_one_entry_are_named_not_dropped_silently(tmp_path):
    write_project_run(tmp_path / "a", "cheetah-run", "r", {0: curve(0)})
    assert layout_warnings(tmp_path / "a") == ("project", [])
    assert layout_warnings(tmp_path / "a" / "sac" / "cheetah-run") == ("project", [])
    write_jaxrl_tree(tmp_path / "a", ["walker-run"], [0])
    np.save(tmp_path / "a" / "dog-run.npy", np.ones((2, 3)))
    assert layout_warnings(tmp_path / "a") == ("project", [
        f"{tmp_path / 'a'}: read as the project layout; it also holds <task>.npy files and "
        "<task>/<seed>.txt folders (walker-run), left out: pass them as a --runs entry of "
        "their own"])
    write_jaxrl_tree(tmp_path / "b", ["walker-run"], [0])
    assert layout_warnings(tmp_path / "b") == ("jaxrl", [])
    np.save(tmp_path / "b" / "dog-run.npy", np.ones((2, 3)))
    (tmp_path / "c").mkdir()
    np.save(tmp_path / "c" / "dog-run.npy", np.ones((2, 3)))
    write_jaxrl_tree(tmp_path / "c", ["walker-run"], [0])
    assert [layout_warnings(tmp_path / d)[1] for d in "bc"] == [[
        f"{tmp_path / d}: read as the npy layout; it also holds <task>/<seed>.txt folders "
        "(walker-run), left out: pass them as a --runs entry of their own"] for d in "bc"]


def test_malformed_txt_row_names_file_and_line(tmp_path):
    write_jaxrl_tree(tmp_path, ["cheetah-run"], [0])
    (tmp_path / "cheetah-run" / "0.txt").write_text("5000 1.0\n10000 oops\n")
    with pytest.raises(AggregationError, match=r"0.txt:2: expected '<env_step> <return>'"):
        load_runs(tmp_path)


def test_malformed_eval_csv_row_names_file_and_line(tmp_path):
    run_dir = write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0)})
    with open(run_dir / "eval.csv", "a") as fh:
        fh.write("40000,0,nan?,1.0\n")
    with pytest.raises(AggregationError, match=r"eval.csv:5: expected env_step, seed, return, "
                                               r"wall_time, with whole numbers for env_step"):
        load_runs(tmp_path)


def test_a_row_with_fields_missing_is_an_error_and_a_last_row_being_written_is_left_out(
        tmp_path):
    run_dir = write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0)})
    with open(run_dir / "eval.csv", "a") as fh:
        fh.write("40000,0,26")  # '40000,0,263.5,4.5\n' half written
    with pytest.warns(AggregationWarning, match=r"last row \('40000,0,26'\) has no line end"):
        _, runs = load_runs(tmp_path)
    np.testing.assert_array_equal(runs[0].steps, [10_000, 20_000, 30_000])
    with open(run_dir / "eval.csv", "a") as fh:
        fh.write("\n")  # now a whole row, without its wall_time
    with pytest.raises(AggregationError, match=r"eval.csv:5: expected env_step, seed, return, "
                                               r"wall_time"):
        load_runs(tmp_path)


def test_run_ids_are_paths_below_the_runs_entry_and_dirs_without_eval_csv_warn(tmp_path):
    for logdir in ("first", "second"):
        write_project_run(tmp_path / logdir, "cheetah-run", "none-utd1-seed0", {0: curve(0)})
    (tmp_path / "third" / "sac" / "cheetah-run" / "none-utd1-seed0").mkdir(parents=True)
    (tmp_path / "third" / "sac" / "cheetah-run" / "none-utd1-seed0" / "config.json").write_text(
        json.dumps({"env": "cheetah-run"}))
    with pytest.warns(AggregationWarning, match="none-utd1-seed0: config.json but no eval.csv"):
        _, runs = load_runs(tmp_path)
    assert sorted(r.run_id for r in runs) == ["first/sac/cheetah-run/none-utd1-seed0/seed0",
                                              "second/sac/cheetah-run/none-utd1-seed0/seed0"]


@pytest.mark.parametrize("layout", ["config.json", "eval.csv", "txt", "npy"])
def test_unreadable_files_are_errors_naming_the_file(layout, tmp_path):
    """Half-written or foreign files, as a live log directory has them, are AggregationErrors
    (one line from launch/aggregate.py), not tracebacks from json, csv, numpy or the codec."""
    if layout in ("config.json", "eval.csv"):
        run_dir = write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0)})
        broken = run_dir / layout
        broken.write_bytes(b'{"env": "chee' if layout == "config.json" else b"env_step,\xff\xfe")
    elif layout == "txt":
        write_jaxrl_tree(tmp_path, ["cheetah-run"], [0])
        broken = tmp_path / "cheetah-run" / "0.txt"
        broken.write_bytes(b"5000 \xff\n")
    else:
        broken = tmp_path / "cheetah-run.npy"
        np.save(broken, np.array([{"not": "numbers"}], dtype=object), allow_pickle=True)
    with pytest.raises(AggregationError, match=rf"{broken.name}: cannot read it \("):
        load_runs(tmp_path)


@pytest.mark.parametrize("layout", ["eval.csv", "txt"])
def test_env_steps_that_are_not_whole_numbers_are_errors(layout, tmp_path):
    if layout == "eval.csv":
        run_dir = write_project_run(tmp_path, "cheetah-run", "a", {0: [(100.5, 1.0)]})
        where = re.escape(f"{run_dir / 'eval.csv'}:2: expected env_step")
    else:
        (tmp_path / "cheetah-run").mkdir()
        (tmp_path / "cheetah-run" / "0.txt").write_text("100.0 1.0\n200.5 2.0\n")
        where = re.escape(f"{tmp_path / 'cheetah-run' / '0.txt'}:2: expected")
    with pytest.raises(AggregationError, match=where):
        load_runs(tmp_path)


def test_returns_that_are_not_numbers_and_negative_steps_are_errors(tmp_path):
    np.save(tmp_path / "cheetah-run.npy", np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(AggregationError, match=r"cheetah-run.npy\[:, 0\]: env steps and returns "
                                               "must be numbers"):
        load_runs(tmp_path)
    (tmp_path / "cheetah-run.npy").unlink()
    write_project_run(tmp_path, "cheetah-run", "a", {0: [(-100, 1.0), (0, 2.0)]})
    with pytest.raises(AggregationError, match="env step -100 is negative; env steps count "
                                               "from 0"):
        load_runs(tmp_path)


def test_npy_layout_builds_the_step_grid_and_drops_nan_tails(tmp_path):
    table = np.arange(12, dtype=float).reshape(4, 3)
    table[2:, 1] = np.nan
    np.save(tmp_path / "finger-turn.npy", table)
    with pytest.warns(AggregationWarning, match="2 non-finite returns"):
        layout, runs = load_runs(tmp_path, npy_eval_every=25_000)
    assert layout == "npy"
    assert [r.task for r in runs] == ["finger-turn_hard"] * 3
    np.testing.assert_array_equal(runs[0].steps, [25_000, 50_000, 75_000, 100_000])
    np.testing.assert_array_equal(runs[1].steps, [25_000, 50_000])
    np.testing.assert_array_equal(runs[2].returns, table[:, 2])
    with pytest.warns(AggregationWarning):
        _, shifted = load_runs(tmp_path, npy_eval_every=10, npy_first_step=0)
    np.testing.assert_array_equal(shifted[0].steps, [0, 10, 20, 30])
    with pytest.raises(AggregationError, match="--npy_first_step must be >= 0, got -10"):
        load_runs(tmp_path, npy_eval_every=10, npy_first_step=-10)
    with pytest.warns(AggregationWarning):  # the last of 4 evaluations at 2^53 exactly: exact
        _, far = load_runs(tmp_path, npy_eval_every=2**51, npy_first_step=2**53 - 3 * 2**51)
    assert far[0].steps[-1] == 2**53 and far[0].steps.dtype == np.int64
    for every, first in [(10**20, None), (2**62, None), (2**51, 2**53 - 3 * 2**51 + 1)]:
        with pytest.raises(AggregationError, match=r"finger-turn.npy: its 4 evaluations would "
                           r"end at env step [\d,]+ \(--npy_first_step=\d+"
                           + (" by default" if first is None else "")
                           + r", --npy_eval_every=\d+\), past 2\^53"):
            load_runs(tmp_path, npy_eval_every=every, npy_first_step=first)


def test_bad_paths_and_empty_dirs_are_errors(tmp_path):
    with pytest.raises(AggregationError, match="does not exist"):
        detect_layout(tmp_path / "nope")
    with pytest.raises(AggregationError, match="no runs found under .*accepted"):
        detect_layout(tmp_path)
    with pytest.raises(AggregationError, match="2 labels for 1 --runs entries"):
        load_datasets([str(tmp_path)], labels=["a", "b"])


def test_task_aliases():
    assert canonical_task("finger-turn") == "finger-turn_hard"
    assert canonical_task("cheetah-run") == "cheetah-run"


def test_a_diverged_run_is_dropped_with_the_reason_from_its_diverged_json(tmp_path):
    run_dir = write_project_run(tmp_path, "cheetah-run", "a",
                                {0: curve(0, (10_000,)), 1: curve(5, (10_000,))})
    (run_dir / "diverged.json").write_text(json.dumps(
        {"env_step": 14_000, "seed": 1, "what": "critic_loss is nan", "seeds_stopped": [0, 1]}))
    write_project_run(tmp_path, "cheetah-run", "b", {2: curve(1)})
    _, runs = load_runs(tmp_path / "sac" / "cheetah-run")
    with pytest.warns(AggregationWarning) as caught:
        scores = final_scores(runs, ["cheetah-run"], 30_000)
    assert scores.run_ids == (("b/seed2",),)
    text = " ".join(str(w.message) for w in caught)
    assert "a/seed1 (last evaluation at 10000, before step 30000; diverged at env step 14000: " \
           "critic_loss is nan)" in text
    assert "stopped at env step 14000 when seed 1 of its process diverged" in text


def test_a_run_that_diverged_before_its_first_evaluation_is_named(tmp_path):
    lost = write_project_run(tmp_path, "walker-run", "a", {}, num_seeds=1)  # eval.csv: header
    (lost / "diverged.json").write_text(json.dumps(
        {"env_step": 4_000, "seed": 0, "what": "critic_loss is nan", "seeds_stopped": [0]}))
    process = write_project_run(tmp_path, "hopper-hop", "b", {}, seed=3, num_seeds=2)
    (process / "diverged.json").write_text(json.dumps(
        {"env_step": 7_000, "seed": 4, "what": "actions are not finite"}))  # no seeds_stopped
    write_project_run(tmp_path, "cheetah-run", "c", {0: curve(0)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, runs = load_runs(tmp_path)
    messages = [str(w.message) for w in caught]
    assert f"{lost}: seed 0 diverged at env step 4000 (critic_loss is nan) before any " \
           "evaluation; its run is left out (eval.csv has 0 of num_seeds=1 seeds)" in messages
    assert f"{process}: seed 4 diverged at env step 7000 (actions are not finite) before any " \
           "evaluation, stopping seeds 3, 4 of its process; their runs are left out (eval.csv " \
           "has 0 of num_seeds=2 seeds)" in messages
    assert not [m for m in messages if m.startswith(f"{lost}: eval.csv has")]
    assert [r.run_id for r in runs] == ["sac/cheetah-run/c/seed0"]


def test_a_diverged_run_is_left_out_of_the_curves_instead_of_cutting_them(tmp_path):
    diverged = write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0, (10_000,))})
    (diverged / "diverged.json").write_text(json.dumps(
        {"env_step": 14_000, "seed": 0, "what": "critic_loss is nan", "seeds_stopped": [0]}))
    write_project_run(tmp_path, "cheetah-run", "b", {1: curve(1), 2: curve(2)})
    _, runs = load_runs(tmp_path / "sac" / "cheetah-run")
    with pytest.warns(AggregationWarning, match="stopped early and are left out of the "
                      "sample-efficiency curve: cheetah-run/a/seed0 \\(diverged at env step"):
        steps, scores = curve_scores(runs, ["cheetah-run"])
    np.testing.assert_array_equal(steps, [10_000, 20_000, 30_000])
    assert scores.run_ids == (("b/seed1", "b/seed2"),)
    # A task whose runs all stopped keeps them: its curve ends where they stopped.
    with_other_task = [r for r in runs if r.run_id != "b/seed1"]
    with_other_task = [r if r.run_id != "b/seed2" else dataclasses.replace(r, task="walker-run")
                       for r in with_other_task]
    with pytest.warns(AggregationWarning, match="its curve stops at 10000"):
        steps, scores = curve_scores(with_other_task, ["cheetah-run", "walker-run"])
    np.testing.assert_array_equal(steps, [10_000])
    assert scores.run_ids == (("a/seed0",), ("b/seed2",))
    # Every run stopped at the same step: the curve is short for them all, and it says why.
    with pytest.warns(AggregationWarning, match=r"1 run\(s\) stopped early, as did every other "
                      r"run of their task, .*: cheetah-run/a/seed0 \(diverged at env step 14000"):
        steps, _ = curve_scores([r for r in runs if r.run_id == "a/seed0"], ["cheetah-run"])
    np.testing.assert_array_equal(steps, [10_000])


def test_runs_recorded_before_a_setting_existed_group_by_the_value_they_ran_with(tmp_path):
    write_project_run(tmp_path, "cheetah-run", "old", {0: curve(0)})  # no init_scale recorded
    write_project_run(tmp_path, "cheetah-run", "new", {1: curve(1)}, clip_ns_steps=8,
                      clip_opt_state="reset",
                      agent_config=dict(hidden_dims=[256, 256], init_scale=0.5))
    _, runs = load_runs(tmp_path / "sac" / "cheetah-run")
    groups = group_runs(runs, ["agent_config.init_scale", "clip_ns_steps", "clip_opt_state"])
    assert {label: [r.run_id for r in rs] for label, rs in groups.items()} == {
        "agent_config.init_scale=0.5,clip_ns_steps=8,clip_opt_state=reset": ["new/seed1"],
        "agent_config.init_scale=1.4142135623730951,clip_ns_steps=20,clip_opt_state=keep":
            ["old/seed0"]}


def test_missing_runs_of_a_sweep_are_warned_about_across_tasks_and_groups(tmp_path):
    for env in ("cheetah-run", "walker-run"):
        for intervention in ("clip", "none"):
            for seed in (0, 1):
                if (env, intervention, seed) != ("walker-run", "none", 1):  # its dir is gone
                    write_project_run(tmp_path, env, f"{intervention}-utd1-seed{seed}",
                                      {seed: curve(seed)}, intervention=intervention, seed=seed)
    with pytest.warns(AggregationWarning, match=r"missing runs \(fewer than the 2 of the most "
                      r"complete task\): intervention=none on walker-run \(1/2\)$"):
        load_datasets([str(tmp_path)], group_by=["intervention"])
    with pytest.warns(AggregationWarning, match=r"missing runs .*: \S+ on walker-run \(3/4\)$"):
        load_datasets([str(tmp_path)])
    with warnings.catch_warnings(record=True) as caught:  # walker-run is not aggregated
        warnings.simplefilter("always")
        load_datasets([str(tmp_path)], group_by=["intervention"], tasks=["cheetah-run"])
    assert not [w for w in caught if "missing runs" in str(w.message)]


def test_run_dirs_gathered_by_symlinks_are_found_once(tmp_path):
    """Runs linked into a results folder count; a link back up is not followed forever."""
    run_dir = write_project_run(tmp_path / "runs", "cheetah-run", "clip", {0: curve(0)})
    paper = tmp_path / "paper"
    paper.mkdir()
    (paper / "clip").symlink_to(run_dir)
    (paper / "again").symlink_to(paper)
    layout, runs = load_runs(paper)
    assert layout == "project" and [r.run_id for r in runs] == ["clip/seed0"]


def test_a_folder_of_algorithms_names_the_subfolders_to_pass(tmp_path):
    write_jaxrl_tree(tmp_path / "resets", ["cheetah-run"], range(2))
    write_jaxrl_tree(tmp_path / "no_resets", ["cheetah-run"], range(2))
    with pytest.raises(AggregationError, match=r"its subfolders no_resets, resets hold runs: "
                                               r"pass each as a --runs entry"):
        detect_layout(tmp_path)


def test_one_seed_spelled_several_ways_is_one_run(tmp_path):
    """"0", " 0" and "0.0" are one seed: as three runs, it would count three times."""
    run_dir = write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0, (10_000,))})
    with open(run_dir / "eval.csv", "a") as f:
        f.write("20000,0.0,30.0,1.0\n30000, 0,40.0,2.0\n")
    _, runs = load_runs(tmp_path)
    assert [(r.run_id, list(r.steps)) for r in runs] == [
        ("sac/cheetah-run/a/seed0", [10_000, 20_000, 30_000])]
    with open(run_dir / "eval.csv", "a") as f:
        f.write("40000,0.5,30.0,1.0\n")
    with pytest.raises(AggregationError, match=r"eval.csv:5: expected env_step, seed, return, "
                       r"wall_time, with whole numbers for env_step and seed"):
        load_runs(tmp_path)


def test_a_diverged_json_with_a_step_as_text_or_float_still_drops_the_run(tmp_path):
    """The trainer writes whole numbers; a step spelled "14000" or 14000.0 must not let the
    run be scored from before it diverged, and one that is no step is an error."""
    for i, step in enumerate(["14000", 14_000.0]):
        run_dir = write_project_run(tmp_path / str(i), "cheetah-run", "a",
                                    {0: curve(0, (10_000,))})
        (run_dir / "diverged.json").write_text(json.dumps(
            {"env_step": step, "seed": "0", "what": "critic_loss is nan"}))
        _, runs = load_runs(tmp_path / str(i))
        assert runs[0].stopped_at == 14_000
        assert runs[0].stopped == "diverged at env step 14000: critic_loss is nan"
    (run_dir / "diverged.json").write_text(json.dumps({"env_step": "soon", "seed": 0}))
    with pytest.raises(AggregationError, match="diverged.json: expected a JSON object with "
                       "env_step and seed as whole numbers"):
        load_runs(tmp_path / "1")


def test_eval_csv_oddities_are_read_or_named(tmp_path):
    """A byte-order mark and spaces after the header's commas (as spreadsheets save) name the
    same columns; a config.json whose env is no task name, and csv's own errors, are one
    AggregationError naming the file."""
    run_dir = write_project_run(tmp_path, "cheetah-run", "a", {0: curve(0)})
    text = (run_dir / "eval.csv").read_text()
    (run_dir / "eval.csv").write_text("\ufeff" + text.replace(",", ", ", 3), encoding="utf-8")
    _, runs = load_runs(tmp_path)
    np.testing.assert_array_equal(runs[0].returns, [10.0, 20.0, 30.0])
    (run_dir / "eval.csv").write_text(text + "40000,0," + "1" * 200_000 + ",3.0\n")
    with pytest.raises(AggregationError, match="eval.csv: not a readable CSV"):
        load_runs(tmp_path)
    (run_dir / "eval.csv").write_text(text)
    for env in (["cheetah-run"], 5, None):
        config = json.loads((run_dir / "config.json").read_text())
        (run_dir / "config.json").write_text(json.dumps({**config, "env": env}))
        with pytest.raises(AggregationError, match="config.json: expected a JSON object with "
                           "an 'env' key naming the task"):
            load_runs(tmp_path)
