"""Shrink & Perturb: shrink 1 and perturb 0 leave the state bit for bit; shrink 0 and perturb 1
give a fresh initialisation; the interpolation towards a fresh draw against float64 numpy; the
Gaussian noise's moments on a large layer; optimizer states reset or kept; through the loop's
event, each seed draws its own noise."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiment.config import ConfigError, TrainConfig, check_read_when, validate
from experiment.events import build_intervention
from interventions import EventContext, get_part
from interventions.methods import shrink_perturb
from tests.helpers import batches
from tests.helpers.fixtures import shared_fixture
from tests.helpers.plans import ACT, OBS, hooked, init_states
from tests.helpers.trees import assert_bit_identical, numeric_leaves

PARAMS = ("actor.params", "critic.params", "target_critic_params")


@shared_fixture
def sac():
    """SAC with S&P at its defaults, 2 seeds: (agent, plan, cfg, init_fn, keys, trained, fresh)."""
    agent, plan, cfg = hooked("sac", "shrink_perturb", num_seeds=2)
    init_fn, keys, first = init_states(agent, seeds=(0, 1))
    batch = batches.random_batch(jax.random.key(1), 3, 16, OBS, ACT)
    trained, _ = jax.jit(jax.vmap(agent.update, in_axes=(0, None)))(first, batch)
    fresh = init_fn(jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, 7))
    return agent, plan, cfg, init_fn, keys, trained, fresh


def apply(trained, fresh, **settings):
    """The event on seed 0's state with these settings, fresh draw `fresh` (seed 0's)."""
    cfg = shrink_perturb.ShrinkPerturbConfig(**settings)
    one = lambda tree: jax.tree.map(lambda x: x[0], tree)
    ctx = EventContext(key=jax.random.key(3), fresh=one(fresh))
    return one(trained), jax.jit(lambda s, c: shrink_perturb.apply(s, PARAMS, cfg, c))(
        one(trained), ctx), one(fresh)


@pytest.mark.slow
@pytest.mark.parametrize("noise", ["fresh", "gaussian"])
def test_shrink_one_perturb_zero_is_the_identity_bit_for_bit(sac, noise):
    trained, fresh = sac[5], sac[6]
    state, new, _ = apply(trained, fresh, shrink=1.0, perturb=0.0, noise=noise, opt_state="keep")
    assert_bit_identical(new, state)


def test_shrink_zero_perturb_one_is_a_fresh_initialisation(sac):
    trained, fresh = sac[5], sac[6]
    state, new, draw = apply(trained, fresh, shrink=0.0, perturb=1.0)
    for path in PARAMS:
        assert_bit_identical(get_part(new, path), get_part(draw, path))
    for part in ("actor", "critic"):  # Adam's moments and count as a new init has them
        assert_bit_identical(getattr(new, part).opt_state, getattr(draw, part).opt_state)
        assert int(getattr(new, part).step) == int(getattr(state, part).step), "its own count"
    assert_bit_identical(new.temp, state.temp)


def test_the_default_interpolates_towards_a_fresh_draw(sac):
    trained, fresh = sac[5], sac[6]
    state, new, draw = apply(trained, fresh)  # shrink 0.2, perturb 0.8 (FIRE's SAC code)
    for path in PARAMS:
        for got, theta, noise in zip(numeric_leaves(get_part(new, path)),
                                     numeric_leaves(get_part(state, path)),
                                     numeric_leaves(get_part(draw, path)), strict=True):
            expected = 0.2 * theta.astype(np.float64) + 0.8 * noise.astype(np.float64)
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    # the target critic moves towards the fresh critic (a new init's target is its critic)
    assert_bit_identical(get_part(draw, "target_critic_params"), get_part(draw, "critic.params"))
    assert int(new.critic.opt_state[0].count) == 0 and int(state.critic.opt_state[0].count) == 3


def test_keep_leaves_the_optimizer_states(sac):
    trained, fresh = sac[5], sac[6]
    state, new, _ = apply(trained, fresh, opt_state="keep")
    for part in ("actor", "critic"):
        assert_bit_identical(getattr(new, part).opt_state, getattr(state, part).opt_state)


def test_gaussian_noise_moments_on_a_large_layer():
    """theta <- 0.3 theta + N(0, 0.01^2) (DASH's supervised S&P) on a 1024 x 1024 kernel: the
    result minus 0.3 theta has mean 0 and standard deviation 0.01, and is uncorrelated with
    theta; the LayerNorm is left as it was with leaves=layers."""
    rng = np.random.default_rng(0)
    theta = rng.normal(0.0, 0.05, (1024, 1024)).astype(np.float32)
    state = {"params": {"Dense_0": {"kernel": jnp.asarray(theta), "bias": jnp.ones(1024)},
                        "LayerNorm_0": {"scale": jnp.ones(1024), "bias": jnp.zeros(1024)}}}
    cfg = shrink_perturb.ShrinkPerturbConfig(shrink=0.3, perturb=1.0, noise="gaussian",
                                             sigma=0.01, leaves="layers", opt_state="keep")
    new = shrink_perturb.apply(state, ("params",), cfg, EventContext(key=jax.random.key(0)))
    noise = np.asarray(new["params"]["Dense_0"]["kernel"], np.float64) - 0.3 * theta
    n = noise.size
    assert abs(noise.mean()) < 5 * 0.01 / np.sqrt(n)
    np.testing.assert_allclose(noise.std(), 0.01, rtol=0.01)
    assert abs(np.corrcoef(noise.ravel(), theta.ravel())[0, 1]) < 5 / np.sqrt(n)
    bias_noise = np.asarray(new["params"]["Dense_0"]["bias"], np.float64) - 0.3
    np.testing.assert_allclose(bias_noise.std(), 0.01, rtol=0.1)
    assert_bit_identical(new["params"]["LayerNorm_0"], state["params"]["LayerNorm_0"])


def test_through_the_loop_each_seed_draws_its_own_noise(sac):
    agent, plan, cfg, init_fn, keys, trained, _ = sac
    event = build_intervention(agent, cfg, plan, init_fn, keys)
    new, rows = event.apply(trained, 100)
    again, _ = event.apply(trained, 200)
    kernel = lambda s: np.asarray(s.critic.params["net"]["MLP_0"]["Dense_1"]["kernel"])
    assert not np.allclose(kernel(new)[0], kernel(new)[1])
    assert not np.allclose(kernel(new), kernel(again)), "each event draws anew"
    assert not np.allclose(kernel(new), kernel(trained))
    assert {r[2] for r in rows} == {"shrink_perturb"} and {r[1] for r in rows} == {0, 1}
    assert {r[3] for r in rows} == {"actor", "critic", "target_critic"}


@pytest.mark.parametrize("settings, flag", [({"sp_shrink": -1.0}, "--sp_shrink"),
                                            ({"sp_shrink": float("inf")}, "--sp_shrink"),
                                            ({"sp_perturb": float("nan")}, "--sp_perturb"),
                                            ({"sp_sigma": 0.0}, "--sp_sigma")])
def test_settings_that_cannot_work_are_refused_naming_the_flag(settings, flag):
    with pytest.raises(ConfigError, match=f"^{flag} must be"):
        validate(TrainConfig(intervention="shrink_perturb", **settings))


def test_sigma_is_read_only_with_gaussian_noise():
    with pytest.raises(ConfigError, match="--sp_sigma=0.01 needs --sp_noise=gaussian"):
        check_read_when(TrainConfig(intervention="shrink_perturb"), {"sp_sigma"})
    check_read_when(TrainConfig(intervention="shrink_perturb", sp_noise="gaussian"), {"sp_sigma"})
