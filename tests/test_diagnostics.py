"""Spectral diagnostics against direct numpy computations and hand-built cases."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import make_agent
from agents.sac import SACConfig
from experiment.config import TrainConfig
from experiment.diagnose import make_diagnostics, rows
from interventions import (
    clip_event_report,
    dormant_ratio,
    event_report,
    feature_metrics,
    registered,
    singular_clip,
    srank,
    weight_changes,
    weight_extremes,
    weight_metrics,
)
from interventions.diagnostics import DORMANT_TAUS, RESIDUAL, SRANK_THRESHOLD
from learners.batch import Batch

RTOL = 1e-4


def np_weight_metrics(w: np.ndarray) -> dict[str, np.ndarray]:
    s = np.linalg.svd(w.astype(np.float64), compute_uv=False)
    return {
        "cond": s[..., 0] / s[..., -1],
        "stable_rank": (s**2).sum(-1) / s[..., 0] ** 2,
        "sigma_max": s[..., 0],
        "sigma_min": s[..., -1],
        "fro": np.sqrt((w.astype(np.float64) ** 2).sum((-2, -1))),
    }


def np_srank(h: np.ndarray, threshold: float = 0.99) -> int:
    s = np.linalg.svd(h.astype(np.float64), compute_uv=False)
    for k in range(1, len(s) + 1):
        if s[:k].sum() >= threshold * s.sum():
            return k
    raise AssertionError("unreachable")


def np_dormant(h: np.ndarray, tau: float) -> float:
    unit = np.abs(h).mean(axis=0)
    return float(np.mean(unit / unit.mean() <= tau))


def params(rng) -> dict:
    return {
        "actor": {
            "params": {
                "Dense_0": {"kernel": rng.standard_normal((3, 6, 4)), "bias": np.zeros((3, 4))},
                "LayerNorm_0": {"scale": np.ones((3, 4))},
            }
        },
        "critic": {
            "params": {
                "VmapCritic_0": {"Dense_0": {"kernel": rng.standard_normal((3, 2, 5, 7))}},
                "Conv_0": {"kernel": rng.standard_normal((3, 3, 3, 2, 4))},
            }
        },
    }


def test_weight_metrics_match_numpy():
    tree = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params(np.random.default_rng(0)))
    metrics = jax.jit(weight_metrics)(tree)
    views = {
        "actor/Dense_0": tree["actor"]["params"]["Dense_0"]["kernel"],
        "critic/VmapCritic_0/Dense_0": tree["critic"]["params"]["VmapCritic_0"]["Dense_0"][
            "kernel"
        ],
        "critic/Conv_0": tree["critic"]["params"]["Conv_0"]["kernel"].reshape(3, 18, 4),
    }
    assert set(metrics) == set(views)
    for name, w in views.items():
        expected = np_weight_metrics(np.asarray(w))
        assert set(metrics[name]) == set(expected)
        for metric, value in expected.items():
            assert metrics[name][metric].shape == value.shape == w.shape[:-2]
            np.testing.assert_allclose(metrics[name][metric], value, rtol=RTOL)


def test_weight_metrics_hand_built():
    w = np.diag([4.0, 2.0, 1.0]).astype(np.float32)
    m = weight_metrics({"Dense_0": {"kernel": jnp.asarray(w)}})["Dense_0"]
    np.testing.assert_allclose(m["cond"], 4.0, rtol=RTOL)
    np.testing.assert_allclose(m["stable_rank"], 21.0 / 16.0, rtol=RTOL)
    np.testing.assert_allclose(m["fro"], np.sqrt(21.0), rtol=RTOL)


def test_srank_and_dormant_match_numpy():
    rng = np.random.default_rng(1)
    h = np.maximum(rng.standard_normal((3, 2, 64, 16)) * rng.uniform(0, 3, 16), 0)
    h[..., 5] = 0.0
    h[0, 1, :, :8] = h[0, 1, :, 8:] @ rng.standard_normal((8, 8))
    got = feature_metrics({"critic/Dense_0": jnp.asarray(h, jnp.float32)})["critic/Dense_0"]
    assert set(got) == {"srank", "dormant_tau0", "dormant_tau0.025"}
    for idx in np.ndindex(3, 2):
        assert int(got["srank"][idx]) == np_srank(h[idx])
        for tau in (0.0, 0.025):
            np.testing.assert_allclose(got[f"dormant_tau{tau:g}"][idx], np_dormant(h[idx], tau))


def test_srank_hand_built():
    rng = np.random.default_rng(2)
    q = np.linalg.qr(rng.standard_normal((50, 10)))[0]
    low_rank = rng.standard_normal((50, 3)) @ rng.standard_normal((3, 10))
    assert int(srank(jnp.asarray(low_rank, jnp.float32))) <= 3
    assert int(srank(jnp.asarray(q, jnp.float32))) == 10
    dominated = q * np.array([1000.0] + [1.0] * 9)
    # singular values 1000, 1 x 9: cumulative sums 1000 + (k - 1) out of 1009
    assert int(srank(jnp.asarray(dominated, jnp.float32))) == 1
    assert int(srank(jnp.asarray(dominated, jnp.float32), threshold=0.999)) == 9
    assert int(srank(jnp.asarray(dominated, jnp.float32), threshold=0.9995)) == 10
    assert int(srank(jnp.zeros((8, 4)))) == 0


def test_dormant_hand_built():
    h = np.ones((10, 4), np.float32)
    h[:, 0] = 0.0
    h[:, 1] = 0.01
    # unit means (0, 0.01, 1, 1), layer mean 0.5025: scores 0, 0.0199, 1.99, 1.99
    assert float(dormant_ratio(jnp.asarray(h), 0.0)) == 0.25
    assert float(dormant_ratio(jnp.asarray(h), 0.025)) == 0.5
    assert float(dormant_ratio(jnp.asarray(-h), 0.025)) == 0.5
    assert float(dormant_ratio(jnp.zeros((5, 3)), 0.0)) == 1.0
    keys = feature_metrics({"h": jnp.asarray(h)}, taus=(0.0, 0.1))["h"].keys()
    assert set(keys) == {"srank", "dormant_tau0", "dormant_tau0.1"}


def test_dormant_is_relative_to_the_layer_and_uses_mean_absolute_values():
    # unit means (0.1, 10, 10, 10): the first is 0.013 of the layer's mean 7.525, dormant at
    # 0.025 however the layer is scaled (an unnormalised score would be 0.1, then 1e-4)
    h = np.full((6, 4), 10.0, np.float32)
    h[:, 0] = 0.1
    for scale in (1.0, 1e-3, 1e3):
        assert float(dormant_ratio(jnp.asarray(h * scale), 0.025)) == 0.25
    # a unit of +1 and -1 is active: its mean |h| is 1 (its |mean h| would be 0)
    signed = np.array([[1.0, 1.0], [-1.0, 1.0]], np.float32)
    assert float(dormant_ratio(jnp.asarray(signed), 0.0)) == 0.0


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="needs the SVD of diag(3, 1) to be exactly 3 and 1, as LAPACK's is")
def test_srank_counts_reaching_the_threshold_exactly():
    # singular values 3 and 1: the first reaches 0.75 of the total 4 exactly (3.0 in float32)
    assert int(srank(jnp.diag(jnp.array([3.0, 1.0])), threshold=0.75)) == 1
    assert int(srank(jnp.diag(jnp.array([3.0, 1.0])), threshold=0.76)) == 2


def test_a_residual_stream_gets_srank_but_no_dormant_ratios():
    h = jnp.asarray(np.random.default_rng(3).standard_normal((32, 8)), jnp.float32)
    got = feature_metrics({f"block_0/{RESIDUAL}": h, "block_0/relu": jax.nn.relu(h)})
    assert set(got[f"block_0/{RESIDUAL}"]) == {"srank"}
    assert set(got["block_0/relu"]) == {"srank", "dormant_tau0", "dormant_tau0.025"}


@pytest.mark.slow
def test_sac_features_are_each_hidden_layers_output_after_its_relu():
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(16, 16)))
    state = agent.init(jax.random.key(0), 4, 2)
    rng = np.random.default_rng(0)
    batch = Batch(*(np.asarray(rng.normal(size=shape), np.float32) for shape in [
        (32, 4), (32, 2), (32,), (32, 4), (32,)]))
    feats = agent.features(state, batch)
    assert set(feats["actor"]) == {"MLP_0/hidden_0", "MLP_0/hidden_1"}
    assert set(feats["critic"]) == {"net/MLP_0/hidden_0", "net/MLP_0/hidden_1"}
    mlp = jax.tree.map(lambda x: np.asarray(x, np.float64), dict(state.actor.params["MLP_0"]))
    x = batch.observations.astype(np.float64)
    for i in range(2):
        x = x @ mlp[f"Dense_{i}"]["kernel"] + mlp[f"Dense_{i}"]["bias"]
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
        x = np.maximum(x * mlp[f"LayerNorm_{i}"]["scale"] + mlp[f"LayerNorm_{i}"]["bias"], 0)
        np.testing.assert_allclose(feats["actor"][f"MLP_0/hidden_{i}"], x, rtol=1e-4, atol=1e-5)
    assert all(float(f.min()) >= 0 for f in feats["critic"].values())


def test_rows_label_each_seed_and_ensemble_member():
    values = {"critic": {"net/h/features": {"srank": np.array([[1, 2], [3, 4]])}},
              "actor": {"h/features": {"dormant_tau0": np.array([0.5, 0.25])}}}
    assert list(rows(100, [7, 8], values)) == [
        (100, 7, "critic", "net/h/features[0]", "srank", "1"),
        (100, 7, "critic", "net/h/features[1]", "srank", "2"),
        (100, 8, "critic", "net/h/features[0]", "srank", "3"),
        (100, 8, "critic", "net/h/features[1]", "srank", "4"),
        (100, 7, "actor", "h/features", "dormant_tau0", "0.5"),
        (100, 8, "actor", "h/features", "dormant_tau0", "0.25"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("c", [1.5, 4.0])
def test_clip_event_report(c):
    tree = jax.tree.map(lambda x: jnp.asarray(5 * x, jnp.float32), params(np.random.default_rng(3)))
    after = singular_clip(tree, c)
    report = jax.jit(clip_event_report)(tree, after)
    pairs = {
        "actor/Dense_0": lambda t: t["actor"]["params"]["Dense_0"]["kernel"],
        "critic/Conv_0": lambda t: t["critic"]["params"]["Conv_0"]["kernel"].reshape(3, 18, 4),
    }
    for name, get in pairs.items():
        old, new = np.asarray(get(tree), np.float64), np.asarray(get(after), np.float64)
        np.testing.assert_allclose(
            report[name]["fro_change"], np.sqrt(((new - old) ** 2).sum((-2, -1))), rtol=RTOL
        )
        np.testing.assert_allclose(
            report[name]["cond_before"], np_weight_metrics(old)["cond"], rtol=RTOL
        )
        np.testing.assert_allclose(
            report[name]["cond_after"], np_weight_metrics(new)["cond"], rtol=RTOL
        )
        assert np.all(np.asarray(report[name]["cond_after"]) <= c**2 * (1 + 1e-4))
    unchanged = clip_event_report(tree, tree)
    assert all(float(jnp.max(m["fro_change"])) == 0.0 for m in unchanged.values())
    with pytest.raises(ValueError, match="different layers"):
        clip_event_report(tree, {"actor": after["actor"]})


def assert_reports_close(got: dict, want: dict, rtol: float) -> None:
    """Two event reports with the same layers and every metric of each within rtol."""
    assert got.keys() == want.keys()
    for name in want:
        for metric in ("fro_change", "cond_before", "cond_after"):
            np.testing.assert_allclose(got[name][metric], want[name][metric], rtol=rtol,
                                       err_msg=f"{name} {metric}")


@pytest.mark.parametrize("sides", ["both", "upper", "lower"])
def test_clip_report_from_the_spectra_before_matches_one_from_svds(sides):
    """The report the continual loop writes at a clip (cond_before from the diagnostics'
    sigma_max and sigma_min, cond_after through the clip's spectral map) equals the one with
    an SVD of every matrix before and after, also for a layer the clip leaves alone."""
    tree = jax.tree.map(lambda x: jnp.asarray(5 * x, jnp.float32), params(np.random.default_rng(4)))
    after = singular_clip(tree, 2.0, sides=sides)
    clip_method = registered()["clip"]
    after["actor"]["params"]["Dense_0"]["kernel"] = tree["actor"]["params"]["Dense_0"]["kernel"]
    cfg = clip_method.make_config({"clip_c": 2.0, "clip_sides": sides})
    spectral = clip_method.spectral_map(cfg)
    extremes = {name: (m["sigma_max"], m["sigma_min"]) for name, m in weight_metrics(tree).items()}
    fast = clip_event_report(tree, after, extremes=extremes, spectral_map=spectral)
    full = clip_event_report(tree, after)
    assert_reports_close(fast, full, rtol=1e-3)
    kept = "actor/Dense_0"
    np.testing.assert_array_equal(fast[kept]["cond_after"], fast[kept]["cond_before"])
    ns = clip_method.make_config({"clip_method": "newton_schulz"})
    assert clip_method.spectral_map(ns) is None  # approximate: its report takes an SVD


def test_a_report_keeps_the_cond_of_what_an_event_left_unchanged():
    """Without a spectral map, cond_after of an unchanged matrix is its cond_before, bit for
    bit (a layer no seed's event changed is not factored at all); a changed one's is its own."""
    tree = jax.tree.map(lambda x: jnp.asarray(5 * x, jnp.float32), params(np.random.default_rng(5)))
    after = jax.tree.map(jnp.copy, tree)
    kernel = after["actor"]["params"]["Dense_0"]["kernel"]
    after["actor"]["params"]["Dense_0"]["kernel"] = kernel.at[1].multiply(jnp.arange(1.0, 5.0))
    report = jax.jit(clip_event_report)(tree, after)
    changed = {k: np.asarray(v) for k, v in report["actor/Dense_0"].items()}
    np.testing.assert_array_equal(changed["cond_after"][[0, 2]], changed["cond_before"][[0, 2]])
    np.testing.assert_allclose(changed["cond_after"][1],
                               np_weight_metrics(np.asarray(after["actor"]["params"]["Dense_0"]
                                                            ["kernel"][1]))["cond"], rtol=RTOL)
    assert changed["fro_change"][1] > 0 and not np.any(changed["fro_change"][[0, 2]])
    for name in ("critic/VmapCritic_0/Dense_0", "critic/Conv_0"):
        np.testing.assert_array_equal(report[name]["cond_after"], report[name]["cond_before"])


def test_a_report_in_parts_matches_the_one_call_report():
    """weight_changes, weight_extremes (skipping the layers no seed changed: zeros) and
    event_report, called one after another outside jit as the events do for their large
    matrices, give clip_event_report's report, whose `defer` leaves those layers' cond_after
    out; weight_metrics from weight_extremes gives its own."""
    tree = jax.tree.map(lambda x: jnp.asarray(5 * x, jnp.float32), params(np.random.default_rng(5)))
    after = jax.tree.map(jnp.copy, tree)
    kernel = after["actor"]["params"]["Dense_0"]["kernel"]
    after["actor"]["params"]["Dense_0"]["kernel"] = kernel.at[1].multiply(jnp.arange(1.0, 5.0))
    changes = weight_changes(tree, after)
    kept = {name: jnp.all(fro == 0) for name, fro in changes.items()}
    after_extremes = weight_extremes(after, skip=kept)
    assert not np.any(np.asarray(after_extremes["critic/Conv_0"][0]))  # skipped: not factored
    parts = event_report(changes, weight_extremes(tree), after_extremes)
    whole = clip_event_report(tree, after)
    assert_reports_close(parts, whole, rtol=1e-6)
    assert weight_extremes(tree, layers={"critic/Conv_0"}).keys() == {"critic/Conv_0"}
    deferred = clip_event_report(tree, after, defer={"actor/Dense_0"})
    assert deferred["actor/Dense_0"].keys() == {"fro_change", "cond_before"}
    assert deferred["critic/Conv_0"].keys() == whole["critic/Conv_0"].keys()
    from_extremes = weight_metrics(tree, extremes=weight_extremes(tree))
    for name, metrics in weight_metrics(tree).items():
        for metric, value in metrics.items():
            np.testing.assert_allclose(from_extremes[name][metric], value, rtol=1e-6)


@pytest.mark.slow
def test_make_diagnostics_uses_the_given_taus_and_srank_threshold():
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(16, 16)))
    states = jax.vmap(lambda k: agent.init(k, 4, 2))(jnp.stack([jax.random.key(s)
                                                                for s in (0, 1)]))
    rng = np.random.default_rng(0)
    batch = Batch(*(np.asarray(rng.normal(size=shape), np.float32) for shape in [
        (2, 32, 4), (2, 32, 2), (2, 32), (2, 32, 4), (2, 32)]))
    loose, tight = (jax.jit(make_diagnostics(agent, (0.0, 0.5), t))(states, batch)
                    for t in (0.5, 0.99))
    layers = {k: v for k, v in loose["actor"].items() if k.endswith("/features")}
    assert layers and all(set(m) == {"srank", "dormant_tau0", "dormant_tau0.5"}
                          for m in layers.values())
    loose_ranks = np.concatenate([np.ravel(m["srank"]) for m in layers.values()])
    tight_ranks = np.concatenate([np.ravel(tight["actor"][k]["srank"]) for k in layers])
    assert np.all(loose_ranks <= tight_ranks) and np.any(loose_ranks < tight_ranks)
    assert TrainConfig().dormant_taus == DORMANT_TAUS
    assert TrainConfig().srank_threshold == SRANK_THRESHOLD
