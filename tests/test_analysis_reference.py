"""The published reference data: reproduce the authors' IQM and handle its irregularities."""

import numpy as np
import pytest
import scipy.stats

from analysis.datasets import load_datasets
from analysis.errors import AggregationWarning
from analysis.layouts import load_runs
from analysis.summary import Settings, summarize
from tests.helpers.runs import REFERENCE

SAC = REFERENCE / "rl_with_resets_sac"
SAC_UTD1 = SAC / "max_steps_2000000_resets_False_config.updates_per_step_1"
SAC_UTD32_RESETS = (SAC / "max_steps_2000000_resets_True_config"
                    ".updates_per_step_32_reset_interval_200000")
FAST = Settings(reps=500, curve_reps=20, curve_points=20)


def iqm_row(summary):
    return next(r for r in summary.aggregates if r["metric"] == "IQM")


def test_sac_utd1_without_resets_reproduces_the_published_iqm_of_501():
    _, runs = load_runs(SAC_UTD1)
    summary = summarize({"sac": runs}, FAST)
    row = iqm_row(summary)
    assert (row["runs"], row["tasks"]) == (100, 10)
    assert round(row["estimate"]) == 501
    at_1m = [r.returns[r.steps == 1_000_000][0] for r in runs]
    assert row["estimate"] == pytest.approx(scipy.stats.trim_mean(at_1m, 0.25), rel=1e-12)


@pytest.mark.parametrize("window", [2, 5, 10])
def test_averaging_the_last_evaluations_does_not_give_501(window):
    _, runs = load_runs(SAC_UTD1)
    summary = summarize({"sac": runs}, Settings(reps=200, curve_reps=10, curve_points=5,
                                                window=window))
    assert round(iqm_row(summary)["estimate"]) != 501


def test_runs_that_end_early_are_dropped_with_a_warning_and_counted():
    _, runs = load_runs(SAC_UTD32_RESETS)
    short = [r for r in runs if r.steps[-1] < 2_000_000 - 5_000]
    assert short
    with pytest.warns(AggregationWarning) as record:
        summary = summarize({"utd32": runs}, Settings(step=2_000_000, reps=200, curve_reps=10,
                                                      curve_points=10))
    messages = " | ".join(str(w.message) for w in record)
    assert f"utd32: {len(short)} run(s) dropped at step 2000000" in messages
    assert "its curve stops at" in messages
    assert iqm_row(summary)["runs"] == 100 - len(short)


def test_bro_and_sac_line_up_on_shared_tasks_through_the_finger_turn_alias():
    with pytest.warns(AggregationWarning) as record:
        datasets, sources = load_datasets([str(SAC_UTD1), str(REFERENCE / "bro_dmc")],
                                          labels=["SAC", "BRO"])
        summary = summarize(datasets, FAST)
    assert [(s.layout, s.runs, s.tasks) for s in sources] == [("jaxrl", 100, 10),
                                                             ("npy", 150, 15)]
    assert "finger-turn_hard" in summary.tasks and len(summary.tasks) == 9
    assert any("SAC: tasks not shared by all algorithms are left out: swimmer-swimmer15"
               == str(w.message) for w in record)
    bro_curve = [r["env_step"] for r in summary.curves if r["algorithm"] == "BRO"]
    assert bro_curve[0] == 25_000 and bro_curve[-1] == 1_000_000
    bro = np.load(REFERENCE / "bro_dmc" / "finger-turn.npy")
    scores = summary.scores["BRO"]
    np.testing.assert_array_equal(scores.values[:, scores.tasks.index("finger-turn_hard")],
                                  bro[-1])
