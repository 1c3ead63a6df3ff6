"""DASH against a float64 numpy computation of its rule (the negative-gradient average over the
minibatches, then each unit's incoming weights scaled by clamp(cos, lambda, 1)) on an MLP, a conv
net and SAC's ensemble critic; everything else in the state bit for bit as it was; DASH end to
end."""

import dataclasses

import flax
import jax
import numpy as np
import pytest

from agents import make_agent
from agents.sac import SACConfig
from interventions import EventContext, get_part, set_part
from interventions.methods import dash
from tests.helpers import event_runs
from tests.helpers.batches import random_batch
from tests.helpers.toy_learner import Classifier, ConvNet, ToyLearner, examples
from tests.helpers.trees import assert_bit_identical

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out


def flat(tree) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, np.float64)
            for k, v in flax.traverse_util.flatten_dict(tree, sep="/").items()}


def reference(params: dict, grads: list[dict], alpha: float, lam: float) -> dict:
    """DASH in float64: g = EMA_alpha(-grad) from zero; a Dense kernel (..., in, out) scaled per
    output column, a conv kernel (..., kh, kw, in, out) per (in, out) over its taps, a layer's
    bias (..., out) as one vector, by clamp(cos(w, g), lam, 1); normalisation leaves kept."""
    average = {k: np.zeros_like(v) for k, v in params.items()}
    for grad in grads:
        average = {k: (1 - alpha) * average[k] + alpha * -grad[k] for k in average}
    layers = {k.rpartition("/")[0] for k in params if k.endswith("/kernel")}
    out = {}
    for key, w in params.items():
        module, _, leaf = key.rpartition("/")
        if module not in layers:
            out[key] = w
            continue
        conv = module.rpartition("/")[2].startswith("Conv")
        axes = (-1,) if leaf == "bias" else (-4, -3) if conv else (-2,)
        g = average[key]
        dot = np.sum(w * g, axis=axes, keepdims=True)
        norms = [np.maximum(np.sqrt(np.sum(x * x, axis=axes, keepdims=True)), 1e-8)
                 for x in (w, g)]
        out[key] = w * np.clip(dot / (norms[0] * norms[1]), lam, 1.0)
    return out


def check_against_reference(learner, state, data, part, cfg):
    """DASH on `part` against `reference`, with the gradients the learner gives for each
    minibatch and key the event hands out (ctx.key split once per minibatch)."""
    key = jax.random.key(7)
    ctx = EventContext(key=key, data=data)
    after = jax.jit(lambda s, c: dash.apply(s, (part,), cfg, c._replace(learner=learner)))(
        state, ctx)
    n = data[0].shape[0]
    keys = jax.random.split(key, n)
    grads = [flat(learner.loss_grads(state, jax.tree.map(lambda x, i=i: x[i], data),
                                     keys[i])[part]) for i in range(n)]
    want = reference(flat(get_part(state, part)), grads, cfg.alpha, cfg.min_scale)
    got = flat(get_part(after, part))
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=1e-7, err_msg=k)
    scale = np.concatenate([(got[k] / np.where(want[k] == 0, 1, flat(get_part(state, part))[k]))
                            .ravel() for k in want if k.endswith("/kernel")])
    assert np.isclose(scale, cfg.min_scale, rtol=1e-4).any(), "some units shrink by lambda"
    assert_bit_identical(set_part(after, part, get_part(state, part)), state)
    return scale


@pytest.mark.parametrize("min_scale", [0.3, 0.01])
def test_dash_on_an_mlp_matches_float64(min_scale):
    learner = ToyLearner(Classifier((16, 16), 5))
    data = examples((12,), 5, (4, 32))
    state = learner.train(learner.init(jax.random.key(0), data.x[0]), examples((12,), 5, (3, 32)))
    cfg = dataclasses.replace(dash.DashConfig(), min_scale=min_scale)
    scale = check_against_reference(learner, state, data, "net.params", cfg)
    if min_scale < 0.1:  # cosines between lambda and 1 scale by themselves
        assert ((scale > min_scale * 1.01) & (scale < 0.99)).any()


def test_dash_on_a_conv_net_matches_float64():
    learner = ToyLearner(ConvNet((4, 6), 8, 3))
    data = examples((8, 8, 2), 3, (3, 16))
    state = learner.init(jax.random.key(0), data.x[0])
    check_against_reference(learner, state, data, "net.params",
                            dataclasses.replace(dash.DashConfig(), min_scale=0.05))


def test_dash_on_sac_critics_matches_float64_per_member():
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(16, 16)))
    state = agent.init(jax.random.key(0), 5, 2)
    state, _ = jax.jit(agent.update)(state, random_batch(jax.random.key(10), 4, 32, 5, 2))
    data = random_batch(jax.random.key(11), 3, 32, 5, 2)
    check_against_reference(agent, state, data, "critic.params",
                            dataclasses.replace(dash.DashConfig(), min_scale=0.05, alpha=0.5))


def test_lambda_one_changes_nothing():
    learner = ToyLearner(Classifier((8,), 3))
    data = examples((4,), 3, (2, 16))
    state = learner.init(jax.random.key(0), data.x[0])
    cfg = dataclasses.replace(dash.DashConfig(), min_scale=1.0)
    after = dash.apply(state, ("net.params",), cfg,
                       EventContext(key=jax.random.key(1), data=data, learner=learner))
    assert_bit_identical(after, state)


@pytest.mark.parametrize("field, value", [("min_scale", 0.0), ("alpha", 1.5), ("batches", 0)])
def test_settings_that_cannot_work_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        dash.DashConfig(**{field: value})


def test_dash_end_to_end_in_sac_resumes_bit_identically(tmp_path):
    change = event_runs.sac_resumes_bit_identically(tmp_path, "dash", "--dash_batches=2",
                                                    "--dash_batch_size=32")
    assert change[("critic", "net/MLP_0/Dense_1[1]")] > 0 and change[("actor", "mean")] > 0
    assert not any(change[key] for key in change if key[0] == "target_critic")


def test_dash_end_to_end_in_bro(tmp_path):
    change = event_runs.bro_events(tmp_path, "dash", "--dash_parts=critic.params")
    assert change[("critic", "net/quantiles[0]")] > 0
    assert not any(change[key] for key in change if key[0] != "critic")
