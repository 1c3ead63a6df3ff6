"""NaP: every projected kernel (per ensemble member) and every LayerNorm's scale and offset keep
their initial norms after each gradient step; the projection changes nothing else and is
idempotent; a step with NaP is the step without it followed by the projection (to float32
rounding: the two are compiled apart, and XLA fuses their arithmetic differently)."""

import dataclasses
import re

import jax
import numpy as np
import pytest

from agents import make_agent
from experiment.config import ConfigError
from interventions import get_part, set_part
from interventions.methods import nap
from tests.helpers import batches
from tests.helpers.fixtures import shared_fixture
from tests.helpers.plans import ACT, OBS, TINY, hooked
from tests.helpers.trees import assert_bit_identical, numeric_leaves

FAST = dataclasses.replace(TINY["sac"], actor_lr=1e-2, critic_lr=1e-2)  # norms move in 5 steps
HEADS = {"mean", "log_std", "quantiles", "shift"}  # output layers, with SAC's net/Dense_0


def leaves(tree) -> dict[str, np.ndarray]:
    """{"/"-joined key path: float64 array} of a param tree."""
    return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(leaf, np.float64)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def is_head(name: str) -> bool:
    return name.split("/")[-2] in HEADS or name.startswith("net/Dense_0/")


def expected_norms(tree) -> dict[str, np.ndarray]:
    """Per-member norms, in float64, of each hidden kernel and each LayerNorm's (scale, bias)."""
    flat, norms = leaves(tree), {}
    for name, value in flat.items():
        if name.endswith("/kernel") and not is_head(name):
            norms[name] = np.sqrt((value ** 2).sum(axis=(-2, -1)))
        elif re.search(r"LayerNorm_\d+/scale$", name):
            offset = flat[name[:-len("scale")] + "bias"]
            norms[name] = np.sqrt((value ** 2).sum(-1) + (offset ** 2).sum(-1))
    return norms


def random_batch(key):
    return batches.random_batch(key, 1, 16, OBS, ACT)


@shared_fixture
def sac():
    """SAC's first state with NaP's state, its update with and without NaP (jitted), the plan."""
    agent, plan, _ = hooked("sac", "nap", config=FAST)
    first = jax.jit(lambda key: agent.init(key, OBS, ACT))(jax.random.key(0))
    return first, jax.jit(agent.update), jax.jit(make_agent("sac", FAST).update), plan.bound[0]


def project(state, bound):
    """NaP's projection of every part of a state, from its own initial norms."""
    for i, path in enumerate(bound.parts):
        aux = state.plasticity["nap"][i]
        state = set_part(state, path, nap.project(get_part(state, path), aux, bound.config))
    return state


@pytest.mark.slow
def test_every_projected_norm_stays_at_its_initial_value_after_every_step(sac):
    state, update, _, bound = sac
    initial = {path: expected_norms(get_part(state, path)) for path in bound.parts}
    assert [len(norms) for norms in initial.values()] == [4, 4]
    for step in range(6):
        state, _ = update(state, random_batch(jax.random.key(step)))
        for path in bound.parts:
            now = expected_norms(get_part(state, path))
            assert now.keys() == initial[path].keys()
            for name, norm in now.items():
                np.testing.assert_allclose(norm, initial[path][name], rtol=2e-6,
                                           err_msg=f"{path} {name} after step {step + 1}")
    assert int(state.step) == 6


@shared_fixture
def trained(sac):
    """SAC trained 5 steps without NaP (its state kept), so that norms have moved."""
    state, _, plain, _ = sac
    for step in range(5):
        state, _ = plain(state, random_batch(jax.random.key(10 + step)))
    return state


@pytest.mark.slow
def test_the_projection_changes_only_hidden_kernels_and_layernorms_and_is_idempotent(
        sac, trained):
    bound, state = sac[3], trained
    projected = project(state, bound)
    for i, path in enumerate(bound.parts):
        before, after = leaves(get_part(state, path)), leaves(get_part(projected, path))
        changed = {name for name in before if not np.array_equal(before[name], after[name])}
        assert changed == {n for n in before if (n.endswith("/kernel") and not is_head(n))
                           or "LayerNorm" in n}, path
        moved, now = (expected_norms(get_part(s, path)) for s in (state, projected))
        # NaP's state: the kernels' initial norms in leaf order, then the LayerNorms'
        for name, initial in zip(sorted(now, key=lambda n: ("LayerNorm" in n, n)),
                                 state.plasticity["nap"][i], strict=True):
            assert not np.allclose(moved[name], initial, rtol=1e-4), "training moved it"
            np.testing.assert_allclose(now[name], initial, rtol=2e-6)
    twice = project(projected, bound)
    for a, b in zip(numeric_leaves(twice), numeric_leaves(projected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for part in ("temp", "target_critic_params", "rng", "step"):
        assert_bit_identical(getattr(projected, part), getattr(state, part))
    for part in ("actor", "critic"):
        assert_bit_identical(getattr(projected, part).opt_state, getattr(state, part).opt_state)


def test_a_step_with_nap_is_the_step_without_it_then_the_projection(sac, trained):
    _, update, plain, bound = sac
    batch = random_batch(jax.random.key(2))
    with_nap, _ = update(trained, batch)
    expected = project(plain(trained, batch)[0], bound)
    for a, b in zip(numeric_leaves(with_nap), numeric_leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert_bit_identical(with_nap.plasticity, trained.plasticity)  # the initial norms stay


def test_layers_all_projects_the_output_layers_too(trained):
    _, plan, _ = hooked("sac", "nap", config=FAST, nap_layers="all")
    bound = plan.bound[0]
    initial = nap.init(trained.actor.params, bound.config)  # 4 kernels, then 2 LayerNorms
    projected = nap.project(trained.actor.params, jax.tree.map(lambda x: x * 2, initial),
                            bound.config)
    kernels = ["MLP_0.Dense_0", "MLP_0.Dense_1", "log_std", "mean"]
    assert len(initial) == len(kernels) + 2
    for kernel, norm in zip(kernels, initial[:4], strict=True):
        value = np.asarray(get_part(projected, kernel)["kernel"])
        np.testing.assert_allclose(np.linalg.norm(value), 2 * float(norm), rtol=2e-6)


@pytest.mark.slow
def test_bro_projects_its_blocks_and_stem_not_its_heads():
    """BRO's trees (blocks, a stem, the optimistic actor), projected from moved weights."""
    agent, plan, _ = hooked("bro", "nap")
    state = jax.jit(lambda key: agent.init(key, OBS, ACT))(jax.random.key(0))
    bound = plan.bound[0]
    for i, path in enumerate(bound.parts):
        params = get_part(state, path)
        moved = jax.tree.map(lambda x: x * 1.5 + 0.1, params)
        projected = nap.project(moved, state.plasticity["nap"][i], bound.config)
        initial, now = expected_norms(params), expected_norms(projected)
        assert len(initial) == {"actor.params": 6, "optimistic_actor.params": 2,
                                "critic.params": 6}[path]
        for name in initial:
            np.testing.assert_allclose(now[name], initial[name], rtol=2e-6, err_msg=name)
        for name, value in leaves(projected).items():
            if is_head(name) or name.endswith("Dense_0/bias") or name.endswith("Dense_1/bias"):
                np.testing.assert_array_equal(value, leaves(moved)[name])


def test_without_layernorm_nap_is_refused_unless_every_layer_is_projected():
    config = dataclasses.replace(TINY["sac"], layer_norm=False)
    with pytest.raises(ConfigError, match="nap cannot act on actor.params.*--nap_layers=all"):
        hooked("sac", "nap", config=config)
    hooked("sac", "nap", config=config, nap_layers="all")
