"""The continual learner's settings the paper leaves open: the initialisation scheme (against
PyTorch's documented bounds and the schemes' moments), decoupled weight decay (against optax's
AdamW), and what every event does to the optimizer state (--event_opt_state)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from continual.learner import Examples, LearnerConfig, make_learner
from interventions import make_plan
from interventions.registry import EventContext, all_settings
from networks.inits import INITS, layer_init
from tests.helpers.trees import assert_bit_identical


def _params(init: str, network: str = "mlp", seed: int = 0) -> dict:
    shape = (8, 8, 3) if network == "conv" else (784,)
    config = LearnerConfig(network=network, input_shape=shape, hidden_dims=(256,),
                           channels=(16,) if network == "conv" else (), init=init)
    return make_learner(config).init(jax.random.key(seed)).net.params


def test_pytorch_init_is_uniform_in_one_over_sqrt_fan_in_kernels_and_biases():
    params = _params("pytorch")
    for layer, fan_in in ((params["MLP_0"]["Dense_0"], 784), (params["Dense_0"], 256)):
        bound = 1 / math.sqrt(fan_in)
        for name in ("kernel", "bias"):
            x = np.asarray(layer[name], np.float64)
            # all below the bound, the largest near it (P(max < b (1 - 20 / n)) < e^-20)
            assert bound * (1 - 20 / x.size) < np.abs(x).max() <= bound
            # U(-b, b): mean 0, variance b^2 / 3 (PyTorch's kaiming_uniform_ with a = sqrt(5))
            assert abs(x.mean()) < 4 * bound / math.sqrt(3 * x.size)
            # the sample variance's relative sd is sqrt(0.8 / n) for a uniform: 5 of them
            assert x.var() == pytest.approx(bound**2 / 3, rel=5 * math.sqrt(0.8 / x.size))
    # The 784 x 256 kernel's singular values start well below SingularClip's 1/c = 0.5 at c = 2
    s = np.linalg.svd(np.asarray(params["MLP_0"]["Dense_0"]["kernel"]), compute_uv=False)
    assert s.min() < 0.3 and s.max() < 1.0


def test_pytorch_init_of_a_conv_layer_counts_its_taps_in_fan_in():
    params = _params("pytorch", "conv")
    conv = params["Conv_0"]
    bound = 1 / math.sqrt(9 * 3)  # 3 x 3 taps of 3 input channels
    for name in ("kernel", "bias"):
        x = np.asarray(conv[name])
        assert np.abs(x).max() <= bound
    assert np.asarray(conv["kernel"]).var() == pytest.approx(bound**2 / 3, rel=0.15)


@pytest.mark.parametrize("init, variance", [("lecun_normal", 1.0), ("he_normal", 2.0)])
def test_normal_inits_have_their_variance_and_zero_biases(init, variance):
    layer = _params(init)["MLP_0"]["Dense_0"]
    assert np.asarray(layer["kernel"]).var() == pytest.approx(variance / 784, rel=0.02)
    assert not np.asarray(layer["bias"]).any()


def test_the_default_init_is_orthogonal_sqrt2_with_zero_biases():
    kernel = np.asarray(_params("orthogonal")["MLP_0"]["Dense_0"]["kernel"], np.float64)
    np.testing.assert_allclose(kernel.T @ kernel, 2 * np.eye(256), atol=1e-4)
    assert_bit_identical(_params("orthogonal"), make_learner(LearnerConfig(
        hidden_dims=(256,))).init(jax.random.key(0)).net.params)


def test_unknown_init_is_refused():
    with pytest.raises(ValueError, match="init must be one of"):
        layer_init("xavier", 10)
    with pytest.raises(ValueError, match="init must be one of"):
        LearnerConfig(init="xavier")
    assert set(INITS) == {"orthogonal", "pytorch", "lecun_normal", "he_normal"}


def _batch(n=32) -> Examples:
    rng = np.random.default_rng(0)
    return Examples(jnp.asarray(rng.random((n, 12)), jnp.float32),
                    jnp.asarray(rng.integers(0, 10, n), jnp.int32))


@pytest.mark.parametrize("decay", [0.0, 0.05])
def test_weight_decay_is_optax_adamw_and_none_is_plain_adam(decay):
    config = LearnerConfig(input_shape=(12,), hidden_dims=(16,), learning_rate=1e-2,
                           weight_decay=decay)
    learner = make_learner(config)
    state = learner.init(jax.random.key(1))
    data = _batch()
    tx = optax.adamw(1e-2, weight_decay=decay) if decay else optax.adam(1e-2)
    params, opt = state.net.params, tx.init(state.net.params)
    apply = state.net.apply_fn
    for _ in range(3):
        state, _ = learner.update(state, data)
        grads = jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(
            apply({"params": p}, data.x), data.y).mean())(params)
        updates, opt = tx.update(grads, opt, params)
        params = optax.apply_updates(params, updates)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                 state.net.params, params)


def test_weight_decay_shrinks_the_weights_against_no_decay():
    data = _batch()
    norms = {}
    for decay in (0.0, 1.0):
        learner = make_learner(LearnerConfig(input_shape=(12,), hidden_dims=(16,),
                                             learning_rate=1e-2, weight_decay=decay))
        state = learner.init(jax.random.key(1))
        for _ in range(20):
            state, _ = learner.update(state, data)
        norms[decay] = float(jnp.linalg.norm(state.net.params["MLP_0"]["Dense_0"]["kernel"]))
    assert norms[1.0] < 0.9 * norms[0.0]


def _event(method: str, event_opt_state: str):
    """(state before, state after) of one seed's event of `method` after three steps."""
    learner = make_learner(LearnerConfig(input_shape=(12,), hidden_dims=(16,)))
    settings = {flag: field.default for flag, (_, field, _) in all_settings().items()}
    plan = make_plan(method, settings, learner, event_opt_state)
    state = learner.init(jax.random.key(0))
    for _ in range(3):
        state, _ = learner.update(state, _batch())
    fresh = learner.init(jax.random.key(5))
    ctx = EventContext(key=jax.random.key(2), initial=fresh, fresh=fresh, reinit=fresh,
                       data=Examples(_batch().x[None], _batch().y[None]), learner=learner)
    return state, plan.apply_event(state, ctx), learner


@pytest.mark.parametrize("method", ["reset", "clip", "shrink_perturb", "layer_reset"])
def test_event_opt_state_keep_and_reset_act_alike_for_every_event(method):
    before, kept, _ = _event(method, "keep")
    assert_bit_identical(kept.net.opt_state, before.net.opt_state)
    _, reset, learner = _event(method, "reset")
    assert_bit_identical(reset.net.opt_state, reset.net.tx.init(reset.net.params))
    # the weights are the event's whatever happens to the optimizer state
    _, own, _ = _event(method, "method")
    assert_bit_identical(kept.net.params, own.net.params)
    assert_bit_identical(reset.net.params, own.net.params)


def test_event_opt_state_method_is_each_methods_own_rule():
    before, reset, _ = _event("reset", "method")  # a reset starts the optimizer anew
    assert int(reset.net.opt_state[0].count) == 0 and int(before.net.opt_state[0].count) == 3
    before, clipped, _ = _event("clip", "method")  # clip keeps it (--clip_opt_state=keep)
    assert_bit_identical(clipped.net.opt_state, before.net.opt_state)


def test_unknown_event_opt_state_is_refused():
    learner = make_learner(LearnerConfig(input_shape=(12,), hidden_dims=(16,)))
    with pytest.raises(ValueError, match="--event_opt_state='sometimes' is not accepted"):
        make_plan("clip", {}, learner, "sometimes")
