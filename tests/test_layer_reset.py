"""Layer reset: exactly the last k layers of each network (named here, per network) and their
Adam moments come from what a reset goes back to; every other parameter, moment and part of
the state is bit for bit as it was. Then its refusals, and layer_reset end to end."""

import dataclasses

import flax
import jax
import numpy as np
import pytest

from agents import make_agent
from agents.bro_state import BROConfig
from agents.sac import SACConfig
from interventions import EventContext, get_part, optimizer_owners, set_part
from interventions.methods import layer_reset
from tests.helpers import event_runs
from tests.helpers.batches import random_batch
from tests.helpers.toy_learner import ConvNet, ToyLearner, examples
from tests.helpers.trees import assert_bit_identical

SAC = dataclasses.replace(SACConfig(), hidden_dims=(16, 16))
BRO = dataclasses.replace(BROConfig(), critic_width=16, critic_depth=2, actor_width=8,
                          optimistic_width=8, num_quantiles=5)
LAST = {  # the modules of each network's last layers, last first
    "sac": {"actor.params": [["mean", "log_std"], ["MLP_0/Dense_1", "MLP_0/LayerNorm_1"]],
            "critic.params": [["net/Dense_0"], ["net/MLP_0/Dense_1", "net/MLP_0/LayerNorm_1"]],
            "target_critic_params": [["net/Dense_0"],
                                     ["net/MLP_0/Dense_1", "net/MLP_0/LayerNorm_1"]]},
    "bro": {"actor.params": [["mean", "log_std"],
                             ["BroNet_0/block_0/Dense_1", "BroNet_0/block_0/LayerNorm_1"]],
            "optimistic_actor.params": [["shift"], ["BroNet_0/block_0/Dense_1",
                                                    "BroNet_0/block_0/LayerNorm_1"]],
            "critic.params": [["net/quantiles"], ["net/BroNet_0/block_1/Dense_1",
                                                  "net/BroNet_0/block_1/LayerNorm_1"]],
            "target_critic_params": [["net/quantiles"], ["net/BroNet_0/block_1/Dense_1",
                                                         "net/BroNet_0/block_1/LayerNorm_1"]]},
    "cnn": {"net.params": [["Dense_1"], ["Dense_0", "LayerNorm_0"], ["Conv_1", "BatchNorm_1"]]},
}


def flat(tree) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in flax.traverse_util.flatten_dict(tree, sep="/").items()}


def check_layers_from(before, after, source, part, modules):
    """`part` and its moments: leaves in `modules` as in `source`, the rest as in `before`."""
    def inside(key):
        return any(key.startswith(f"{m}/") for m in modules)

    def compare(got, old, new, what):
        assert any(inside(k) for k in got), f"{what}: the layers exist"
        for key in got:
            want = new[key] if inside(key) else old[key]
            np.testing.assert_array_equal(got[key], want, err_msg=f"{what} {key}")
        assert any(inside(k) and np.any(old[k] != new[k]) for k in got), f"{what}: a change"

    compare(flat(get_part(after, part)), flat(get_part(before, part)),
            flat(get_part(source, part)), part)
    for owner in optimizer_owners(before, [part]):
        adam = [get_part(s, owner).opt_state[0] for s in (after, before, source)]
        np.testing.assert_array_equal(adam[0].count, adam[1].count)
        for moment in ("mu", "nu"):
            compare(*(flat(getattr(a, moment)) for a in adam), f"{part} {moment}")


def reset_and_check(learner, before, source, parts, k, modules_of):
    cfg = dataclasses.replace(layer_reset.LayerResetConfig(), layers=k)
    after = jax.jit(lambda s, c: layer_reset.apply(s, parts, cfg, c._replace(learner=learner)))(
        before, EventContext(reinit=source))
    rest = after
    for part in parts:
        modules = [m for layer in modules_of[part][:k] for m in layer]
        check_layers_from(before, after, source, part, modules)
        rest = set_part(rest, part, get_part(before, part))
        for owner in optimizer_owners(before, [part]):
            rest = set_part(rest, owner, get_part(rest, owner).replace(
                opt_state=get_part(before, owner).opt_state))
    assert_bit_identical(rest, before)


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2])
def test_sac_resets_the_last_layers_from_a_fresh_init(k):
    agent = make_agent("sac", SAC)
    state = agent.init(jax.random.key(0), 5, 2)
    state, _ = jax.jit(agent.update)(state, random_batch(jax.random.key(10), 3, 32, 5, 2))
    fresh = agent.init(jax.random.key(1), 5, 2)
    reset_and_check(agent, state, fresh, agent.param_parts, k, LAST["sac"])


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2])
def test_bro_resets_the_last_layers_to_the_first_weights(k):
    agent = make_agent("bro", BRO)
    initial = agent.init(jax.random.key(0), 5, 2)
    state, _ = jax.jit(agent.update)(initial, random_batch(jax.random.key(10), 3, 32, 5, 2))
    reset_and_check(agent, state, initial, agent.param_parts, k, LAST["bro"])


@pytest.mark.slow
def test_a_conv_net_resets_its_last_three_layers():
    learner = ToyLearner(ConvNet((4, 6), 8, 3))
    x = examples((8, 8, 2), 3, (3, 16))
    state = learner.train(learner.init(jax.random.key(0), x.x[0]), x)
    fresh = learner.init(jax.random.key(1), x.x[0])
    reset_and_check(learner, state, fresh, ("net.params",), 3, LAST["cnn"])


def test_more_layers_than_a_network_has_are_refused_naming_the_flag():
    agent = make_agent("sac", SAC)
    state = jax.eval_shape(lambda key: agent.init(key, 3, 2), jax.random.key(0))
    cfg = dataclasses.replace(layer_reset.LayerResetConfig(), layers=4)
    with pytest.raises(ValueError, match=r"--layer_reset_layers=4: actor.params has 3 layers "
                       r"\(MLP_0/Dense_0, MLP_0/Dense_1, log_std\+mean\); give at most 3"):
        layer_reset.validate(state, agent.param_parts, cfg, agent)
    with pytest.raises(ValueError, match="--layer_reset_parts=temp.params is not a network's "
                       "parameters; accepted: actor.params, critic.params, target_critic_params"):
        layer_reset.validate(state, ("temp.params",), layer_reset.LayerResetConfig(), agent)


@pytest.mark.slow
def test_layer_reset_end_to_end_in_sac_resumes_bit_identically(tmp_path):
    change = event_runs.sac_resumes_bit_identically(tmp_path, "layer_reset")
    assert min(change[(net, f"net/Dense_0[{i}]")] for net in ("critic", "target_critic")
               for i in (0, 1)) > 0
    assert change[("actor", "mean")] > 0 and change[("actor", "log_std")] > 0
    assert not any(change[key] for key in change if "MLP_0" in key[1]), "only the heads"


@pytest.mark.slow
def test_layer_reset_end_to_end_in_bro(tmp_path):
    change = event_runs.bro_events(tmp_path, "layer_reset", "--layer_reset_layers=2")
    assert change[("critic", "net/BroNet_0/block_0/Dense_1[0]")] > 0
    assert change[("optimistic_actor", "shift")] > 0
    critics = [key for key in change if "critic" in key[0]]
    assert not any(change[key] for key in critics if "Dense_0" in key[1]), "two layers of four"
