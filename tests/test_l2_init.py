"""L2 Init: the penalty (lambda / 2) ||theta - theta_0||^2 over kernels and biases (LayerNorm
parameters left out) and its gradient against float64 numpy and finite differences; theta_0 is
the initial part, kept along a run and re-taken by a reset."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from interventions import EventContext, get_part
from interventions.methods import l2_init, reset
from tests.helpers import batches
from tests.helpers.plans import ACT, OBS, hooked
from tests.helpers.trees import assert_bit_identical


def np_penalty(params: dict, initial: dict, coef: float) -> float:
    """(coef / 2) * the squared distance of every kernel and bias to its initial value, float64;
    LayerNorm parameters do not count."""
    total = 0.0
    for name, module in params.items():
        if name.startswith("LayerNorm"):
            continue
        for key, value in module.items():
            total += np.sum((np.asarray(value, np.float64) - initial[name][key]) ** 2)
    return 0.5 * coef * total


def test_penalty_and_gradient_against_finite_differences():
    rng = np.random.default_rng(0)
    initial = {"Dense_0": {"kernel": rng.normal(size=(2, 3, 4)), "bias": rng.normal(size=(2, 4))},
               "LayerNorm_0": {"scale": np.ones((2, 4)), "bias": np.zeros((2, 4))},
               "mean": {"kernel": rng.normal(size=(4, 2)), "bias": np.zeros(2)}}
    params = jax.tree.map(lambda x: x + rng.normal(size=x.shape) * 0.1, initial)
    cfg = l2_init.L2InitConfig(coef=0.3)
    as32 = lambda tree: jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), tree)
    aux = l2_init.init(as32(initial), cfg)
    value, grads = jax.value_and_grad(l2_init.penalty)(as32(params), aux, cfg)
    np.testing.assert_allclose(float(value), np_penalty(params, initial, 0.3), rtol=1e-5)
    eps = 1e-6
    for name, module in params.items():
        for key, x in module.items():
            numeric = np.zeros_like(x)
            for index in np.ndindex(x.shape):
                plus, minus = x.copy(), x.copy()
                plus[index] += eps
                minus[index] -= eps
                at = lambda v, name=name, module=module, key=key: {
                    **params, name: {**module, key: v}}
                numeric[index] = (np_penalty(at(plus), initial, 0.3)
                                  - np_penalty(at(minus), initial, 0.3)) / (2 * eps)
            np.testing.assert_allclose(np.asarray(grads[name][key]), numeric, rtol=1e-4,
                                       atol=1e-7, err_msg=f"{name}/{key}")
    assert not np.any(np.asarray(grads["LayerNorm_0"]["scale"]))


@pytest.mark.slow
def test_the_anchor_is_the_initial_part_and_a_reset_takes_it_anew():
    agent, plan, cfg = hooked("sac", "l2_init+reset")
    init = jax.jit(lambda key: agent.init(key, OBS, ACT))
    first = init(jax.random.key(0))
    batch = batches.random_batch(jax.random.key(1), 3, 16, OBS, ACT)
    trained, info = jax.jit(agent.update)(first, batch)
    assert float(info["critic_penalty"]) > 0 and float(info["actor_penalty"]) > 0
    l2, reset_bound = plan.bound
    for state in (first, trained):
        for i, path in enumerate(l2.parts):
            anchors = state.plasticity["l2_init"][i]
            initial = [leaf for key, leaf in jax.tree_util.tree_leaves_with_path(
                get_part(first, path)) if not str(key[-2].key).startswith("LayerNorm")]
            assert_bit_identical(anchors, initial)
    fresh = init(jax.random.key(5))
    after = reset.apply(trained, reset_bound.parts, reset_bound.config,
                        EventContext(reinit=fresh))
    assert_bit_identical(after.plasticity, fresh.plasticity)
    assert not np.allclose(fresh.actor.params["MLP_0"]["Dense_0"]["kernel"],
                           first.actor.params["MLP_0"]["Dense_0"]["kernel"])
