"""--settings of launch/aggregate_continual.py (the methods within each combination of config.json
settings, and how the reference ranks across them) and the inertness rule it and --group_by
labels follow, on small fake run directories whose scores make the ranks and probabilities
known."""

import csv
import json
import os

import numpy as np
import pytest

from analysis.continual import load_methods
from analysis.errors import AggregationError
from analysis.grouping import EVENT_SETTINGS, inert
from tests.helpers.runs import read_csv, run

TASKS = 4


def write_run(root, name, seeds, values, **settings):
    """A run directory `name` under root: config.json (task, intervention, layer_norm and
    `settings`) and tasks.csv whose online accuracy is values[i] at every task of seeds[i]."""
    folder = os.path.join(root, name)
    os.makedirs(folder)
    config = {"task": "permuted_digits", "layer_norm": True, "learning_rate": 0.001, **settings}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "tasks.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", "seed", "online_accuracy", "final_accuracy", "loss"])
        for t in range(TASKS):
            w.writerows((t, s, v, 1.0, 0.5) for s, v in zip(seeds, values, strict=True))
    return folder


def p_improvement(x, y):
    """P(X > Y) of two lists of run means, ties one half."""
    return np.mean([(a > b) + 0.5 * (a == b) for a in x for b in y])


def test_inert_settings():
    assert EVENT_SETTINGS == ("intervention_every", "event_opt_state")
    assert inert({"intervention": "none"}, "clip_c")
    assert not inert({"intervention": "clip"}, "clip_c")
    assert not inert({"intervention": "nap+clip"}, "clip_c")
    assert inert({"intervention": "clip"}, "sp_shrink")
    for key in EVENT_SETTINGS:
        assert inert({"intervention": "none"}, key)
        assert inert({"intervention": "nap"}, key)  # a projection: no event
        assert inert({"intervention": "spectral_reg"}, key)  # a loss: no event
        assert not inert({"intervention": "reset"}, key)
        assert not inert({"intervention": "nap+clip"}, key)
    for key in ("learning_rate", "init", "weight_decay", "learner_config.width"):
        assert not inert({"intervention": "none"}, key)
    assert not inert({"intervention": "unknown_method"}, "clip_c")  # it may read it


def test_group_by_labels_leave_out_settings_the_run_does_not_read(tmp_path):
    one = [0.5]
    write_run(tmp_path, "none", [0], one, intervention="none", clip_c=2.0)
    write_run(tmp_path, "nap", [0], one, intervention="nap")  # records no clip_c at all
    write_run(tmp_path, "clip-c2", [0], one, intervention="clip", clip_c=2.0)
    write_run(tmp_path, "clip-c4", [0], one, intervention="clip", clip_c=4.0)
    write_run(tmp_path, "nap+clip", [0], one, intervention="nap+clip", clip_c=4.0)
    labels = {m.label for m in load_methods([str(tmp_path)], group_by=["clip_c"])}
    assert labels == {"none", "nap", "clip [clip_c=2.0]", "clip [clip_c=4.0]",
                      "nap+clip [clip_c=4.0]"}
    with pytest.raises(AggregationError, match=r"unknown group key 'clip_c' in .*clip-c2"):
        os.remove(os.path.join(tmp_path, "clip-c2", "config.json"))
        with open(os.path.join(tmp_path, "clip-c2", "config.json"), "w") as f:
            json.dump({"task": "permuted_digits", "intervention": "clip"}, f)
        load_methods([str(tmp_path)], group_by=["clip_c"])


# Per-seed run means (3 seeds). none and nap read no event_opt_state: trained once per init,
# they count in both event_opt_state combinations of their init.
RUNS = {  # (intervention, init, event_opt_state or None): the seeds' means
    ("none", "orthogonal", None): [0.49, 0.50, 0.51],
    ("none", "pytorch", None): [0.59, 0.60, 0.61],
    ("nap", "orthogonal", None): [0.59, 0.60, 0.61],
    ("nap", "pytorch", None): [0.69, 0.70, 0.71],
    ("clip", "orthogonal", "keep"): [0.89, 0.90, 0.91],  # best
    ("clip", "orthogonal", "reset"): [0.79, 0.80, 0.81],  # second to reset
    ("clip", "pytorch", "keep"): [0.50, 0.55, 0.60],  # third, P overlapping none and reset
    ("clip", "pytorch", "reset"): [0.45, 0.50, 0.55],  # third
    ("reset", "orthogonal", "keep"): [0.69, 0.70, 0.71],
    ("reset", "orthogonal", "reset"): [0.84, 0.85, 0.86],
    ("reset", "pytorch", "keep"): [0.52, 0.57, 0.40],
    ("reset", "pytorch", "reset"): [0.30, 0.35, 0.40],
    ("clip", "lecun_normal", "keep"): [0.70, 0.70, 0.70],  # alone in its combination
}
EXPECTED_RANK = {("orthogonal", "keep"): 1, ("orthogonal", "reset"): 2, ("pytorch", "keep"): 3,
                 ("pytorch", "reset"): 3, ("lecun_normal", "keep"): 1}


def members(init, opt_state):
    """{method: seed means} of the combination, by hand: inert runs count in both."""
    return {m: v for (m, i, e), v in RUNS.items() if i == init and e in (opt_state, None)}


def test_sensitivity_ranks_probabilities_and_factors(tmp_path):
    for (method, init, opt_state), values in RUNS.items():
        settings = {"intervention": method, "init": init, "weight_decay": 0.0,
                    "event_opt_state": opt_state or "method", "intervention_every": 1}
        write_run(tmp_path / "runs", f"{method}-{init}-{opt_state}", [0, 1, 2], values,
                  **settings)
    out = tmp_path / "out"
    proc = run("aggregate_continual.py", f"--runs={tmp_path / 'runs'}", f"--out={out}",
               "--settings=init,event_opt_state", "--reps=200", "--last=2")
    assert "warning" not in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"] == ["init", "event_opt_state"]
    rows = {(r["settings"]["init"], r["settings"]["event_opt_state"]): r
            for r in summary["sensitivity"]}
    # the product of the values read (not "method": only none and nap record it, inertly);
    # lecun_normal with reset has no run at all
    assert list(rows) == [("lecun_normal", "keep"), ("orthogonal", "keep"),
                          ("orthogonal", "reset"), ("pytorch", "keep"), ("pytorch", "reset")]
    assert summary["without_runs"] == [{"init": "lecun_normal", "event_opt_state": "reset"}]
    for combo, row in rows.items():
        expected = members(*combo)
        assert row["rank"] == EXPECTED_RANK[combo], combo
        assert row["methods"] == len(expected)
        means = {m: np.mean(v) for m, v in expected.items()}
        assert row["means"] == pytest.approx(means)
        assert row["reference_mean"] == pytest.approx(means["clip"])
        assert row["best"] == max(means, key=means.get)
        assert row["best_mean"] == pytest.approx(max(means.values()))
        poi = {r["over"]: r for r in row["improvement"]}
        assert set(poi) == set(expected) - {"clip"}
        for m, r in poi.items():
            assert r["probability"] == pytest.approx(p_improvement(expected["clip"],
                                                                   expected[m]))
            assert r["lower"] <= r["probability"] <= r["upper"]
        # inert runs count in every combination of their init: the same run directory
        runs = summary["runs"][row["table"].split("/")[1]]
        for m in ("none", "nap"):
            if m in expected:
                assert runs[m] == [str(tmp_path / "runs" / f"{m}-{combo[0]}-None")]
    pk = {r["over"]: r["probability"] for r in rows[("pytorch", "keep")]["improvement"]}
    assert pk == pytest.approx({"none": 1.5 / 9, "nap": 0.0, "reset": 6 / 9})  # a tie: 1/2
    assert rows[("lecun_normal", "keep")]["improvement"] == []
    assert rows[("lecun_normal", "keep")]["mean_probability"] is None

    # which factor moves the ranking: pairs differing in one key only, both with clip and
    # another method (lecun_normal's combination has none besides clip)
    mean_p = {c: np.mean([p_improvement(members(*c)["clip"], v)
                          for m, v in members(*c).items() if m != "clip"])
              for c in EXPECTED_RANK if c[0] != "lecun_normal"}
    factors = {f["setting"]: f for f in summary["factors"]}
    pairs = {"init": [(("orthogonal", "keep"), ("pytorch", "keep")),
                      (("orthogonal", "reset"), ("pytorch", "reset"))],
             "event_opt_state": [(("orthogonal", "keep"), ("orthogonal", "reset")),
                                 (("pytorch", "keep"), ("pytorch", "reset"))]}
    for key, pair in pairs.items():
        f = factors[key]
        assert f["pairs"] == 2
        assert f["rank_changed"] == sum(EXPECTED_RANK[a] != EXPECTED_RANK[b] for a, b in pair)
        assert f["mean_abs_rank_change"] == pytest.approx(
            np.mean([abs(EXPECTED_RANK[a] - EXPECTED_RANK[b]) for a, b in pair]))
        assert f["mean_abs_probability_change"] == pytest.approx(
            np.mean([abs(mean_p[a] - mean_p[b]) for a, b in pair]))
    assert factors["init"]["rank_changed"] == 2 and factors["event_opt_state"]["rank_changed"] == 1

    # the files: a table per combination, the overview as markdown and csv
    table = read_csv(out / "settings" / "init=pytorch,event_opt_state=keep" / "table.csv")
    assert {r["method"] for r in table} == {"clip", "none", "nap", "reset"}
    text = (out / "settings" / "init=pytorch,event_opt_state=keep" / "table.md").read_text()
    assert text.startswith("# init=pytorch, event_opt_state=keep\n")
    assert "P(clip > none) | 0.167" in text
    assert not (out / "settings" / "init=lecun_normal,event_opt_state=reset").exists()
    assert not (out / "table.md").exists() and not (out / "curve.png").exists()
    overview = read_csv(out / "sensitivity.csv")
    assert [(r["init"], r["event_opt_state"], r["rank"], r["methods"]) for r in overview] == [
        (*c, str(EXPECTED_RANK[c]), str(len(members(*c)))) for c in rows]
    assert float(overview[3]["P(clip > none)"]) == pytest.approx(1.5 / 9)
    assert overview[0]["P(clip > none)"] == ""  # lecun_normal has no none run
    md = (out / "sensitivity.md").read_text()
    assert "| pytorch | keep | 3 of 4 | 0.550 | nap (0.700) | 0.278 | 0.000 [0.000, 0.000] |" in md
    assert "| init | 2 | 2 of 2 |" in md and "| event_opt_state | 2 | 1 of 2 |" in md
    assert "No runs: init=lecun_normal,event_opt_state=reset." in md
    assert md in proc.stdout


def test_settings_errors(tmp_path):
    write_run(tmp_path, "none", [0], [0.5], intervention="none", weight_decay=0.0)
    write_run(tmp_path, "clip-a", [0, 1], [0.6, 0.7], intervention="clip", weight_decay=0.0)
    write_run(tmp_path, "clip-b", [1, 2], [0.6, 0.7], intervention="clip", weight_decay=0.1)
    common = [f"--runs={tmp_path}", "--reps=50", f"--out={tmp_path / 'out'}"]
    cases = [  # the pooled seed 1 of clip, split by --settings=weight_decay
        ([], "clip: seed 1 is in two run directories, "
             f"{tmp_path / 'clip-a'} and {tmp_path / 'clip-b'}, which would count as two "
             "independent seeds; they differ in weight_decay"),
        (["--settings=sp_shrink"], "--settings: no run reads sp_shrink"),
        (["--settings=event_opt_state"], "unknown --settings key 'event_opt_state' in "
                                         f"{tmp_path / 'clip-a' / 'config.json'}"),
        (["--settings=weight_decay,weight_decay"], "--settings names a setting twice")]
    for flags_, message in cases:
        proc = run("aggregate_continual.py", *common, *flags_, check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"error: {message}"), \
            proc.stderr
    run("aggregate_continual.py", *common, "--settings=weight_decay")

