"""Layer roles read from param trees: SAC's and BRO's hidden and output layers, and the
normalization after each layer, with and without LayerNorm."""

import dataclasses

import jax
import pytest

from agents import make_agent
from interventions import get_part, layer_roles
from tests.helpers.plans import ACT, OBS, TINY


def params(agent_name, path, **changes):
    agent = make_agent(agent_name, dataclasses.replace(TINY[agent_name], **changes))
    state = jax.eval_shape(lambda key: agent.init(key, OBS, ACT), jax.random.key(0))
    return get_part(state, path)


def names(paths):
    return sorted("/".join(path) for path in paths)


@pytest.mark.parametrize("layer_norm", [True, False])
def test_sac_outputs_are_the_heads_and_the_critic_output(layer_norm):
    actor = params("sac", "actor.params", layer_norm=layer_norm)
    critic = params("sac", "critic.params", layer_norm=layer_norm)
    assert names(layer_roles.output_layers(actor)) == ["log_std", "mean"]
    assert names(layer_roles.output_layers(critic)) == ["net/Dense_0"]
    assert names(layer_roles.hidden_layers(critic)) == ["net/MLP_0/Dense_0", "net/MLP_0/Dense_1"]
    expected = {("net", "MLP_0", f"Dense_{i}"): ("net", "MLP_0", f"LayerNorm_{i}")
                for i in (0, 1)}
    assert layer_roles.norm_after(critic) == (expected if layer_norm else {})


def test_bro_outputs_are_its_heads():
    assert names(layer_roles.output_layers(params("bro", "critic.params"))) == ["net/quantiles"]
    assert names(layer_roles.output_layers(params("bro", "actor.params"))) == ["log_std", "mean"]
    optimistic = params("bro", "optimistic_actor.params")
    assert names(layer_roles.output_layers(optimistic)) == ["shift"]
    assert names(layer_roles.hidden_layers(optimistic)) == ["BroNet_0/Dense_0"]
    critic = params("bro", "critic.params")
    assert names(layer_roles.norm_after(critic)) == names(layer_roles.hidden_layers(critic)) == [
        "net/BroNet_0/Dense_0", "net/BroNet_0/block_0/Dense_0", "net/BroNet_0/block_0/Dense_1"]


def test_a_flat_network_ends_with_the_layer_no_normalization_follows():
    """Dense_0 -> LayerNorm_0 -> Dense_1 written at one level (a classifier's MLP)."""
    tree = {"Dense_0": {"kernel": jax.ShapeDtypeStruct((4, 8), "float32"),
                        "bias": jax.ShapeDtypeStruct((8,), "float32")},
            "LayerNorm_0": {"scale": jax.ShapeDtypeStruct((8,), "float32"),
                            "bias": jax.ShapeDtypeStruct((8,), "float32")},
            "Dense_1": {"kernel": jax.ShapeDtypeStruct((8, 3), "float32")}}
    assert names(layer_roles.output_layers(tree)) == ["Dense_1"]
    assert names(layer_roles.hidden_layers(tree)) == ["Dense_0"]
    assert layer_roles.top_level({"net": tree}) == ("net",)
