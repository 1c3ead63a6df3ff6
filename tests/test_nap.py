"""NaP: every projected kernel (per ensemble member) and every LayerNorm's scale and offset keep
their initial norms after each gradient step; the projection changes nothing else and is
idempotent; a step with NaP is the step without it followed by the projection."""

import dataclasses
import re

import jax
import numpy as np
import pytest

from agents import make_agent
from interventions import get_part, set_part
from interventions.methods import nap
from launch.config import ConfigError
from tests import batches
from tests.plans import ACT, OBS, TINY, hooked
from tests.trees import assert_bit_identical, numeric_leaves

FAST = dataclasses.replace(TINY["sac"], actor_lr=1e-2, critic_lr=1e-2)  # norms move in 5 steps
HEADS = {"mean", "log_std", "quantiles", "shift"}  # output layers, with SAC's net/Dense_0


def leaves(tree) -> dict[str, np.ndarray]:
    """{"/"-joined key path: float64 array} of a param tree."""
    return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(leaf, np.float64)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def is_head(name: str) -> bool:
    module = name.split("/")[-2]
    return module in HEADS or name.startswith("net/Dense_0/")


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


def random_batch(key, utd=1):
    return batches.random_batch(key, utd, 16, OBS, ACT)


@pytest.mark.parametrize("agent_name", ["sac", "bro"])
def test_every_projected_norm_stays_at_its_initial_value_after_every_step(agent_name):
    agent, _, _ = hooked(agent_name, "nap")
    state = jax.jit(lambda key: agent.init(key, OBS, ACT))(jax.random.key(0))
    update = jax.jit(agent.update)
    initial = {path: expected_norms(get_part(state, path)) for path in agent.train_parts}
    assert all(len(norms) >= 2 for norms in initial.values())
    for step in range(6):
        state, _ = update(state, random_batch(jax.random.key(step)))
        for path in agent.train_parts:
            now = expected_norms(get_part(state, path))
            assert now.keys() == initial[path].keys()
            for name, norm in now.items():
                np.testing.assert_allclose(norm, initial[path][name], rtol=2e-6,
                                           err_msg=f"{path} {name} after step {step + 1}")
    assert int(state.step) == 6


@pytest.fixture(scope="module")
def trained():
    """A SAC state with NaP's per-step state, trained without NaP so that norms have moved."""
    agent, plan, _ = hooked("sac", "nap", config=FAST)
    plain = make_agent("sac", FAST)
    state = jax.jit(lambda key: agent.init(key, OBS, ACT))(jax.random.key(0))
    trained, _ = jax.jit(plain.update)(state, random_batch(jax.random.key(1), utd=5))
    return plan.bound[0], trained


def project(state, bound):
    for i, path in enumerate(bound.parts):
        aux = state.plasticity["nap"][i]
        state = set_part(state, path, nap.project(get_part(state, path), aux, bound.config))
    return state


def test_the_projection_changes_only_hidden_kernels_and_layernorms_and_is_idempotent(trained):
    bound, state = trained
    projected = project(state, bound)
    for path in bound.parts:
        before, after = leaves(get_part(state, path)), leaves(get_part(projected, path))
        changed = {name for name in before if not np.array_equal(before[name], after[name])}
        assert changed == {n for n in before if (n.endswith("/kernel") and not is_head(n))
                           or "LayerNorm" in n}, path
        moved, now = expected_norms(get_part(state, path)), expected_norms(get_part(projected,
                                                                                   path))
        for name in now:
            initial = np.asarray(state.plasticity["nap"][bound.parts.index(path)][
                _group(name, path)])
            assert not np.allclose(moved[name], initial, rtol=1e-4), "training moved it"
            np.testing.assert_allclose(now[name], initial, rtol=2e-6)
    twice = project(projected, bound)
    for a, b in zip(numeric_leaves(twice), numeric_leaves(projected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    for part in ("temp", "target_critic_params", "rng", "step"):
        assert_bit_identical(getattr(projected, part), getattr(state, part))
    assert_bit_identical(projected.actor.opt_state, state.actor.opt_state)


def _group(name: str, path: str) -> int:
    """Index of a kernel's or LayerNorm's group in NaP's state: kernels in leaf order, then
    normalization layers in leaf order (SAC's trees)."""
    prefix = "net/MLP_0/" if path == "critic.params" else "MLP_0/"
    order = [f"{prefix}Dense_0/kernel", f"{prefix}Dense_1/kernel", f"{prefix}LayerNorm_0/scale",
             f"{prefix}LayerNorm_1/scale"]
    return order.index(name)


def test_a_step_with_nap_is_the_step_without_it_then_the_projection(trained):
    bound, state = trained
    agent, _, _ = hooked("sac", "nap", config=FAST)
    plain = make_agent("sac", FAST)
    batch = random_batch(jax.random.key(2))
    with_nap, _ = jax.jit(agent.update)(state, batch)
    without, _ = jax.jit(plain.update)(state, batch)
    expected = project(without, bound)
    for a, b in zip(numeric_leaves(with_nap), numeric_leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert_bit_identical(with_nap.plasticity, state.plasticity)  # the initial norms stay


def test_layers_all_projects_the_output_layers_too():
    agent, plan, _ = hooked("sac", "nap", nap_layers="all")
    state = jax.jit(lambda key: agent.init(key, OBS, ACT))(jax.random.key(0))
    head = lambda s: np.asarray(s.actor.params["mean"]["kernel"], np.float64)
    norm0 = np.linalg.norm(head(state))
    state, _ = jax.jit(agent.update)(state, random_batch(jax.random.key(3), utd=3))
    np.testing.assert_allclose(np.linalg.norm(head(state)), norm0, rtol=2e-6)
    assert len(state.plasticity["nap"][0]) == 6  # 4 kernels and 2 LayerNorms


def test_without_layernorm_nap_is_refused_unless_every_layer_is_projected():
    config = dataclasses.replace(TINY["sac"], layer_norm=False)
    with pytest.raises(ConfigError, match="nap cannot act on actor.params.*--nap_layers=all"):
        hooked("sac", "nap", config=config)
    hooked("sac", "nap", config=config, nap_layers="all")
