"""Scoring runs at a step, shared tasks and shared curve steps, and the summary built on them."""

import dataclasses
import warnings

import numpy as np
import pytest
import scipy.stats

from analysis.errors import AggregationError, AggregationWarning
from analysis.report import markdown
from analysis.run_curves import Run
from analysis.selection import curve_scores, final_scores, score_at_step, shared_tasks
from analysis.summary import Settings, summarize


def run(task, run_id, steps, returns=None):
    steps = np.asarray(steps)
    returns = steps / 1000.0 if returns is None else np.asarray(returns, dtype=float)
    return Run(task, run_id, steps, returns, f"{task}/{run_id}")


GRID = np.arange(10_000, 110_000, 10_000)


def test_score_at_step_exact_earlier_within_one_interval_or_dropped():
    r = run("t", "0", GRID)
    assert score_at_step(r, 50_000) == (50.0, 50_000)
    assert score_at_step(r, 55_000) == (50.0, 50_000)
    assert score_at_step(r, 50_000, window=3) == (40.0, 50_000)
    assert score_at_step(r, 110_000) == (100.0, 100_000)
    assert "more than one eval interval" in score_at_step(r, 120_001)
    assert "first evaluation at 10000" in score_at_step(r, 5_000)
    single = run("t", "1", [10_000])
    assert score_at_step(single, 20_000) == "its only evaluation is at 10000, before step 20000"
    with_interval = dataclasses.replace(single, config={"eval_every": 10_000})
    assert score_at_step(with_interval, 20_000) == (10.0, 10_000)
    assert "more than one eval interval" in score_at_step(with_interval, 20_001)
    stopped = dataclasses.replace(r, stopped="diverged at env step 104000: x", stopped_at=104_000)
    assert score_at_step(stopped, 100_000) == (100.0, 100_000)
    assert score_at_step(stopped, 103_000) == (100.0, 100_000), "before it diverged"
    assert score_at_step(stopped, 105_000) == "last evaluation at 100000, before step 105000"


def test_final_scores_pad_missing_runs_and_warn_about_each_rule():
    runs = [run("a", "0", GRID), run("a", "1", GRID[:-1]), run("a", "2", GRID[:5]),
            run("b", "0", GRID)]
    with pytest.warns(AggregationWarning) as record:
        matrix = final_scores(runs, ["a", "b"], 100_000, label="algo")
    messages = " | ".join(str(w.message) for w in record)
    assert "algo: 1 run(s) dropped at step 100000: a/2" in messages
    assert "use the last one before it: a/1 (90000)" in messages
    np.testing.assert_array_equal(matrix.counts, [2, 1])
    np.testing.assert_array_equal(matrix.values, [[100.0, 100.0], [90.0, np.nan]])
    assert matrix.run_ids == (("0", "1"), ("0",))
    assert matrix.used_steps == ((100_000, 90_000), (100_000,))


def test_window_shorter_than_history_is_reported():
    with pytest.warns(AggregationWarning, match="fewer than window=5 evaluations"):
        matrix = final_scores([run("a", "0", GRID[:3])], ["a"], 30_000, window=5)
    assert matrix.values[0, 0] == pytest.approx(20.0)


def test_shared_tasks_keep_the_intersection_and_say_what_was_left_out():
    datasets = {"x": [run("a", "0", GRID), run("b", "0", GRID)],
                "y": [run("b", "0", GRID), run("c", "0", GRID)]}
    with pytest.warns(AggregationWarning) as record:
        assert shared_tasks(datasets) == ["b"]
    assert [str(w.message) for w in record] == [
        "x: tasks not shared by all algorithms are left out: a",
        "y: tasks not shared by all algorithms are left out: c"]
    assert shared_tasks({"z": [run("finger-turn_hard", "0", GRID)]}, ["finger-turn"]) == [
        "finger-turn_hard"]
    with pytest.raises(AggregationError, match="x lacks c"):
        shared_tasks(datasets, ["b", "c"])
    with pytest.raises(AggregationError, match="no task is shared"):
        shared_tasks({"x": [run("a", "0", GRID)], "y": [run("c", "0", GRID)]})


def test_a_task_requested_twice_is_an_error_naming_both_spellings():
    datasets = {"x": [run("finger-turn_hard", "0", GRID), run("b", "0", GRID)]}
    with pytest.raises(AggregationError, match="finger-turn_hard as finger-turn, finger-turn_hard"):
        shared_tasks(datasets, ["finger-turn", "b", "finger-turn_hard"])
    with pytest.raises(AggregationError, match="more than once.*b as b, b"):
        shared_tasks(datasets, ["b", "b"])


def test_curves_use_the_steps_all_runs_share_and_warn_where_one_ends_early():
    runs = [run("a", "0", GRID), run("a", "1", GRID[:6]), run("b", "0", GRID[::2])]
    with pytest.warns(AggregationWarning, match="end before step 100000; its curve stops at"):
        steps, matrix = curve_scores(runs, ["a", "b"])
    np.testing.assert_array_equal(steps, [10_000, 30_000, 50_000])
    assert matrix.values.shape == (2, 2, 3)
    np.testing.assert_array_equal(matrix.values[:, 0], [[10, 30, 50], [10, 30, 50]])
    assert np.isnan(matrix.values[1, 1]).all()
    full = [run("a", str(i), GRID) for i in range(2)]
    steps, _ = curve_scores(full, ["a"], max_points=4)
    np.testing.assert_array_equal(steps, [10_000, 40_000, 70_000, 100_000])
    steps, _ = curve_scores(full, ["a"], max_points=1)
    np.testing.assert_array_equal(steps, [100_000])


def test_summary_drops_a_task_without_usable_runs_everywhere_and_counts_runs():
    rng = np.random.default_rng(0)
    datasets = {
        "x": [run(t, str(i), GRID, rng.random(GRID.size) * 100) for t in "abc" for i in range(4)],
        "y": [run(t, str(i), GRID if t != "c" else GRID[:3], rng.random(GRID.size)[
            : GRID.size if t != "c" else 3] * 100) for t in "abc" for i in range(3)],
    }
    with pytest.warns(AggregationWarning) as record:
        summary = summarize(datasets, Settings(step=100_000, reps=200, curve_reps=50))
    messages = [str(w.message) for w in record]
    assert messages[0].startswith("y: 3 run(s) dropped at step 100000: c/0 (last evaluation")
    assert "task c left out for every algorithm: no usable run in y" in messages
    assert summary.tasks == ["a", "b"]
    iqm = {r["algorithm"]: r for r in summary.aggregates if r["metric"] == "IQM"}
    assert (iqm["x"]["runs"], iqm["x"]["tasks"], iqm["y"]["runs"]) == (8, 2, 6)
    x_scores = np.array([r.returns[-1] for r in datasets["x"] if r.task in "ab"])
    assert iqm["x"]["estimate"] == pytest.approx(scipy.stats.trim_mean(x_scores, 0.25))
    assert iqm["x"]["lower"] <= iqm["x"]["estimate"] <= iqm["x"]["upper"]
    (poi,) = summary.improvement
    assert (poi["x"], poi["y"]) == ("x", "y")


def test_normalisation_divides_by_max_return_and_sets_the_gap_threshold():
    datasets = {"x": [run("a", str(i), GRID, np.full(GRID.size, 250.0 * i)) for i in range(4)]}
    raw = summarize(datasets, Settings(step=100_000, reps=50, curve_reps=10))
    unit = summarize(datasets, Settings(step=100_000, reps=50, curve_reps=10, normalize=True))
    gap = lambda s: next(r for r in s.aggregates if r["metric"] == "Optimality gap")
    assert gap(raw)["estimate"] == pytest.approx(1000 - 375)
    assert gap(unit)["estimate"] == pytest.approx(1 - 0.375)
    assert unit.curves[-1]["iqm"] == pytest.approx(raw.curves[-1]["iqm"] / 1000)


def test_mean_and_optimality_gap_weigh_tasks_alike_with_ragged_runs_in_estimates_and_intervals():
    """4, 1 and 7 runs per task, no score above max_return: Mean + Gap = max_return in the
    estimate and at each bootstrap interval's (mirrored) ends."""
    rng = np.random.default_rng(5)
    datasets = {"x": [run(t, str(i), GRID, rng.uniform(0, 1000, GRID.size))
                      for t, n in zip("abc", (4, 1, 7), strict=True) for i in range(n)]}
    summary = summarize(datasets, Settings(step=100_000, reps=2000, curve_reps=10))
    rows = {r["metric"]: r for r in summary.aggregates}
    mean, gap = rows["Mean"], rows["Optimality gap"]
    finals = {t: [r.returns[-1] for r in datasets["x"] if r.task == t] for t in "abc"}
    assert mean["estimate"] == pytest.approx(np.mean([np.mean(v) for v in finals.values()]))
    assert mean["estimate"] + gap["estimate"] == pytest.approx(1000.0, rel=1e-12)
    assert mean["lower"] + gap["upper"] == pytest.approx(1000.0, rel=1e-9)
    assert mean["upper"] + gap["lower"] == pytest.approx(1000.0, rel=1e-9)
    assert (mean["min_runs_per_task"], mean["max_runs_per_task"]) == (1, 7)


@pytest.mark.parametrize("confidence,label", [(0.95, "95%"), (0.995, "99.5%"), (0.9, "90%")])
def test_interval_coverage_is_written_as_set(confidence, label):
    datasets = {"x": [run("a", str(i), GRID, np.full(GRID.size, 250.0 * i)) for i in range(4)]}
    summary = summarize(datasets, Settings(step=100_000, reps=20, curve_reps=5,
                                           confidence=confidence))
    assert f" {label} stratified-bootstrap percentile intervals" in markdown(summary)


@pytest.mark.parametrize("field,value", [("reps", 0), ("window", 0), ("confidence", 1.5),
                                         ("profile_points", 1), ("max_return", float("inf")),
                                         ("max_return", float("nan"))])
def test_settings_out_of_range_are_errors(field, value):
    with pytest.raises(AggregationError, match=field):
        summarize({"x": [run("a", "0", GRID)]}, Settings(**{field: value}))


def test_scores_above_max_return_are_warned_about_and_labels_stay_in_their_cells():
    """Above --max_return a score has no optimality gap and normalises past 1: returns summed
    wrongly, or the wrong --max_return. A '|' in a label would split its markdown cell."""
    datasets = {"a|b": [run("t", str(i), GRID, np.full(GRID.size, 900.0 + 100 * i))
                        for i in range(3)]}
    with pytest.warns(AggregationWarning, match=r"a\|b: 1 of its 3 scores exceed "
                      r"--max_return=1000 \(up to 1100\)"):
        summary = summarize(datasets, Settings(step=100_000, reps=20, curve_reps=5))
    assert "| a\\|b | " in markdown(summary)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summarize(datasets, Settings(step=100_000, reps=20, curve_reps=5, max_return=1100.0))
