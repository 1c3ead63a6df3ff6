"""Parseval regularization: the penalty over the hidden layers (W = kernel^T, rows the output
units, s = 2, lambda rescaled by (64 / rows)^2) and its gradient against float64 numpy and
finite differences; output layers left out; a part of output layers alone refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiment.config import ConfigError
from interventions.methods import parseval
from tests.helpers.plans import ACT, OBS, hooked
from tests.helpers.runs import run


def np_penalty(params: dict, coef: float, scale: float, reference: int) -> float:
    """coef * sum over the hidden kernels (those under MLP_0) of (reference / rows)^2 *
    ||W W^T - s I||_F^2 per ensemble member, W = kernel^T, float64 with explicit transposes."""
    total = 0.0
    for module in params["MLP_0"].values():
        if "kernel" not in module:
            continue
        kernel = np.asarray(module["kernel"], np.float64)
        for member in kernel.reshape(-1, *kernel.shape[-2:]):
            w = member.T  # (out, in): a row per output unit
            rows = w.shape[0]
            residual = w @ w.T - scale * np.eye(rows)
            total += (reference / rows) ** 2 * np.sum(residual ** 2)
    return coef * total


@pytest.mark.parametrize("shapes", [[(5, 6), (6, 6)], [(2, 7, 4), (2, 4, 3)]],
                         ids=["wider", "ensemble-narrower"])
def test_penalty_and_gradient_against_finite_differences(shapes):
    rng = np.random.default_rng(0)
    mlp = {f"Dense_{i}": {"kernel": rng.normal(size=shape) * 0.7,
                          "bias": rng.normal(size=shape[:-2] + shape[-1:])}
           for i, shape in enumerate(shapes)}
    mlp["LayerNorm_0"] = {"scale": np.ones(shapes[0][:-2] + shapes[0][-1:])}
    head = shapes[-1][:-2] + (shapes[-1][-1], 2)
    params = {"MLP_0": mlp, "mean": {"kernel": rng.normal(size=head)}}
    cfg = parseval.ParsevalConfig(coef=0.01, reference_width=4)
    jparams = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    value, grads = jax.value_and_grad(parseval.penalty)(jparams, (), cfg)
    np.testing.assert_allclose(float(value), np_penalty(params, 0.01, 2.0, 4), rtol=1e-5)
    eps = 1e-6
    for name in [f"Dense_{i}" for i in range(len(shapes))]:
        x = params["MLP_0"][name]["kernel"]
        numeric = np.zeros_like(x)
        for index in np.ndindex(x.shape):
            shifted = []
            for sign in (1, -1):
                y = x.copy()
                y[index] += sign * eps
                at = {**params, "MLP_0": {**mlp, name: {**mlp[name], "kernel": y}}}
                shifted.append(np_penalty(at, 0.01, 2.0, 4))
            numeric[index] = (shifted[0] - shifted[1]) / (2 * eps)
        np.testing.assert_allclose(np.asarray(grads["MLP_0"][name]["kernel"]), numeric,
                                   rtol=1e-4, atol=1e-6, err_msg=name)
    for untouched in (grads["mean"]["kernel"], grads["MLP_0"]["Dense_0"]["bias"],
                      grads["MLP_0"]["LayerNorm_0"]["scale"]):
        assert not np.any(np.asarray(untouched))


@pytest.mark.slow
def test_orthogonal_initial_layers_start_at_their_floor():
    """At init, a hidden kernel with orthogonal columns scaled by sqrt(2) has W W^T = 2 I
    (zero penalty); a first layer with fewer inputs than units can only reach s^2 (out - in)."""
    agent, plan, _ = hooked("sac", "parseval")
    state = jax.jit(lambda key: agent.init(key, OBS, ACT))(jax.random.key(0))
    cfg = plan.bound[0].config
    floor = lambda inputs: cfg.coef * (64 / 16) ** 2 * 4.0 * (16 - inputs)
    np.testing.assert_allclose(float(parseval.penalty(state.actor.params, (), cfg)), floor(OBS),
                               rtol=1e-4)  # the actor's first layer: 5 -> 16
    np.testing.assert_allclose(float(parseval.penalty(state.critic.params, (), cfg)),
                               2 * floor(OBS + ACT), rtol=1e-4)  # two critics' 7 -> 16


def test_a_part_of_output_layers_alone_is_refused():
    with pytest.raises(ConfigError, match="parseval cannot act on actor.params.mean.*hidden"):
        hooked("sac", "parseval", parseval_parts=("actor.params.mean",))
    hooked("sac", "parseval", parseval_parts=("actor.params.MLP_0",))


def test_a_loss_term_on_a_target_network_is_refused_in_one_line(tmp_path):
    """A target network is not trained by gradient steps, so no loss would carry the term."""
    with pytest.raises(ConfigError, match="--parseval_parts=target_critic_params: a loss term"):
        hooked("sac", "parseval", parseval_parts=("target_critic_params",))
    proc = run("run_sac.py", "--dry_run", "--intervention=nap,parseval", "--layer_norm=false",
               f"--logdir={tmp_path}", check=False, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "nap cannot act on actor.params" in proc.stderr and "--nap_layers=all" in proc.stderr
