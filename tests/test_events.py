"""The intervention events of the training loop: BRO-style resets restore the run's first
state bit for bit, SAC-style resets draw new weights, and both keep every other part."""

import dataclasses

import jax
import numpy as np
import pytest

from agents import make_agent
from agents.sac import SACConfig
from experiment.config import TrainConfig
from experiment.diagnose import make_diagnostics
from experiment.diagnose import rows as rows_of
from experiment.events import build_intervention, intervention_plan
from interventions import DEFAULT_NS_STEPS, clip_event_report, ns_clip_matrices
from interventions.diagnostics import shared_layers
from learners.batch import Batch
from tests.helpers.fixtures import shared_fixture
from tests.helpers.trees import assert_bit_identical

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out

OBS, ACT = 4, 2


@shared_fixture
def setup():
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(16, 16)))
    init_fn = jax.jit(jax.vmap(lambda k: agent.init(k, OBS, ACT)))
    keys = jax.numpy.stack([jax.random.key(s) for s in (0, 1)])
    first = init_fn(keys)
    rng = np.random.default_rng(0)
    # Train a few steps so the state differs from its initial value everywhere.
    batches = Batch(*(np.asarray(rng.normal(size=shape), np.float32) for shape in [
        (2, 3, 8, OBS), (2, 3, 8, ACT), (2, 3, 8), (2, 3, 8, OBS), (2, 3, 8)]))
    trained, _ = jax.jit(jax.vmap(agent.update))(first, batches)
    return agent, init_fn, keys, first, trained


def build(agent, cfg, init_fn, keys):
    return build_intervention(agent, cfg, intervention_plan(agent, cfg), init_fn, keys)


def event(agent, init_fn, keys, reset_to):
    agent = agent._replace(reset_to=reset_to)
    cfg = TrainConfig(intervention="reset", intervention_every=100, num_seeds=2)
    return build(agent, cfg, init_fn, keys)


def test_initial_reset_restores_the_first_state_bit_for_bit(setup):
    agent, init_fn, keys, first, trained = setup
    new, rows = event(agent, init_fn, keys, "initial").apply(trained, 100)
    for part in ("actor", "critic", "target_critic_params", "temp"):
        assert_bit_identical(getattr(new, part), getattr(first, part))
    assert_bit_identical(new.rng, trained.rng)  # not a reset part: untouched
    assert {r[2] for r in rows} == {"reset"} and {r[1] for r in rows} == {0, 1}


def test_fresh_reset_draws_new_weights(setup):
    agent, init_fn, keys, first, trained = setup
    new, _ = event(agent, init_fn, keys, "fresh").apply(trained, 100)
    again, _ = event(agent, init_fn, keys, "fresh").apply(trained, 200)
    kernel = lambda s: np.asarray(s.actor.params["MLP_0"]["Dense_0"]["kernel"])
    assert not np.allclose(kernel(new), kernel(first))
    assert not np.allclose(kernel(new), kernel(trained))
    assert not np.allclose(kernel(new), kernel(again)), "each event draws its own weights"
    fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))
    np.testing.assert_array_equal(kernel(new), kernel(init_fn(fold(keys, 100))))  # bit for bit
    assert int(new.temp.step[0]) == 0 and int(trained.temp.step[0]) == 3


def test_clip_ns_steps_reaches_the_newton_schulz_clip(setup):
    agent, init_fn, keys, _, trained = setup
    kernel = lambda s: np.asarray(s.actor.params["MLP_0"]["Dense_1"]["kernel"])
    clipped = {}
    for steps in (2, 12):
        cfg = TrainConfig(intervention="clip", intervention_every=100, num_seeds=2, clip_c=1.5,
                          clip_method="newton_schulz", clip_ns_steps=steps)
        clipped[steps] = kernel(build(agent, cfg, init_fn, keys).apply(trained, 100)[0])
        expected = ns_clip_matrices(kernel(trained), 1 / 1.5, 1.5, steps)
        np.testing.assert_allclose(clipped[steps], expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(clipped[2], clipped[12], atol=1e-4)


def test_the_config_default_is_the_library_default():
    assert TrainConfig().clip_ns_steps == DEFAULT_NS_STEPS


@pytest.mark.parametrize("opt_state", ["keep", "reset"])
def test_a_clip_keeps_or_resets_the_optimizer_state_of_the_networks_it_clips(setup, opt_state):
    """SPEC.md: the clip keeps optimizer state, and that is a config choice. With "reset",
    each clipped network's Adam moments and step count go back to `tx.init`'s; the
    temperature, which is not clipped, keeps its own, and the target critic has none."""
    agent, init_fn, keys, first, trained = setup
    cfg = TrainConfig(intervention="clip", intervention_every=100, num_seeds=2, clip_c=1.2,
                      clip_opt_state=opt_state)
    new, _ = build(agent, cfg, init_fn, keys).apply(trained, 100)
    kernel = lambda s: np.asarray(s.actor.params["MLP_0"]["Dense_1"]["kernel"])
    assert not np.allclose(kernel(new), kernel(trained)), "clipped either way"
    for part in ("actor", "critic"):
        expected = getattr(trained if opt_state == "keep" else first, part).opt_state
        assert_bit_identical(getattr(new, part).opt_state, expected)
    assert_bit_identical(new.temp, trained.temp)
    assert int(new.actor.step[0]) == 3, "the TrainState's own step counts on"


def test_an_events_report_reuses_the_diagnostics_programs_and_matches_one_call():
    """After the diagnostics of a state, a fresh reset's first event compiles no program for
    the extreme singular values of its 128 x 128 matrices, before or after: those go through
    the programs the diagnostics compiled. Its rows equal clip_event_report's in one call."""
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(128, 128)))
    init_fn = jax.jit(jax.vmap(lambda k: agent.init(k, OBS, ACT)))
    keys = jax.numpy.stack([jax.random.key(s) for s in (0, 1)])
    states = init_fn(keys)
    assert shared_layers(agent.weights(states)["critic"]) == {"net/MLP_0/Dense_1"}
    spectra = jax.device_get(make_diagnostics(agent)(states))
    apply = event(agent, init_fn, keys, "fresh").apply
    lowered = []

    def listen(name, secs, fun_name="", **kwargs):
        if name == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            lowered.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        new, rows = apply(states, 100, spectra)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert "jit(event)" in lowered and "jit(_extremes_unless)" not in lowered, lowered
    before, after = agent.weights(states), agent.weights(new)
    expected = {net: clip_event_report(before[net], after[net]) for net in before}
    want = {row[:-1]: float(row[-1]) for row in rows_of(100, [0, 1], jax.device_get(expected),
                                                         "reset")}
    got = {row[:-1]: float(row[-1]) for row in rows}
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-5, err_msg=str(key))
    assert {key[-1] for key in got} == {"fro_change", "cond_before", "cond_after"}
