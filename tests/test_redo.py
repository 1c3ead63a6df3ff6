"""ReDo recycles exactly the units built dead (zeroed incoming weights): their incoming weights
from the fresh initialisation (biases zero), outgoing weights zero, their Adam moments zero, and
every other parameter, moment and part of the state bit for bit as it was. The expected trees
are built here in numpy from the networks' layouts, for an MLP, SAC's ensemble critic, BRO's
residual blocks and a conv net; then the rule's refusals, and ReDo end to end."""

import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import make_agent
from agents.bro_state import BROConfig
from agents.sac import SACConfig
from interventions import EventContext, get_part, set_part, units
from interventions.methods import redo
from tests.helpers import event_runs
from tests.helpers.batches import random_batch
from tests.helpers.runs import FAST_SAC, run
from tests.helpers.toy_learner import Classifier, ConvNet, ToyLearner, examples
from tests.helpers.trees import assert_bit_identical

TAU = redo.RedoConfig().tau
CFG = redo.RedoConfig()


def flat(tree) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in flax.traverse_util.flatten_dict(tree, sep="/").items()}


def unflat(leaves: dict) -> dict:
    return flax.traverse_util.unflatten_dict({k: jnp.asarray(v) for k, v in leaves.items()},
                                             sep="/")


def dead_mask(shape: tuple[int, ...], which: dict) -> np.ndarray:
    """A bool (lead..., units) mask, True at `which`: {ensemble member index (() without an
    ensemble): [units]}."""
    mask = np.zeros(shape, bool)
    for member, indices in which.items():
        mask[(*member, indices)] = True
    return mask


def columns(dead: np.ndarray, shape) -> np.ndarray:
    """A kernel's entries (lead..., [kh, kw,] in, out) in the columns of the dead units."""
    return np.broadcast_to(np.expand_dims(dead, -2), shape)


def rows(dead: np.ndarray, shape) -> np.ndarray:
    """A consumer kernel's entries in the input rows of the dead units; a Dense after a conv
    reads the (h, w, channels) map flattened, so each row belongs to one channel."""
    n, channels = shape[-2], dead.shape[-1]
    channel_of_row = np.broadcast_to(np.arange(channels), (n // channels, channels)).reshape(-1)
    return np.broadcast_to(dead[..., channel_of_row][..., None], shape)


def kill(params, units_: list) -> dict:
    """`params` with each listed unit dead: its kernel column and normalisation scale zero."""
    p = flat(params)
    for kernel, norm, _, dead in units_:
        k = f"{kernel}/kernel"
        p[k] = np.where(columns(dead, p[k].shape), 0.0, p[k]).astype(p[k].dtype)
        if norm:
            p[f"{norm}/scale"] = np.where(dead, 0.0, p[f"{norm}/scale"]).astype(np.float32)
    return unflat(p)


def expected(old: dict, fresh: dict, units_: list) -> tuple[dict, dict]:
    """The recycled parameters and the mask of changed entries, per leaf."""
    new = {k: v.copy() for k, v in old.items()}
    changed = {k: np.zeros(v.shape, bool) for k, v in old.items()}
    for kernel, norm, _, dead in units_:
        k = f"{kernel}/kernel"
        mask = columns(dead, old[k].shape)
        new[k] = np.where(mask, fresh[k], new[k])
        changed[k] |= mask
        for module in (kernel, norm):
            if module and f"{module}/bias" in old:
                new[f"{module}/bias"] = np.where(dead, 0.0, new[f"{module}/bias"])
                changed[f"{module}/bias"] |= dead
        if norm:
            new[f"{norm}/scale"] = np.where(dead, fresh[f"{norm}/scale"], new[f"{norm}/scale"])
            changed[f"{norm}/scale"] |= dead
    for _, _, consumers, dead in units_:
        for consumer in consumers:
            k = f"{consumer}/kernel"
            mask = rows(dead, old[k].shape)
            new[k] = np.where(mask, 0.0, new[k]).astype(old[k].dtype)
            changed[k] |= mask
    return new, changed


def dormant(learner, state, data, network, lead=0, skip=()) -> dict[str, np.ndarray]:
    """{feature: bool mask of its dormant units at TAU}, scored here in numpy (float64) from
    the learner's features on `data`'s first minibatch (`lead` ensemble axes)."""
    feats = learner.features(state, jax.tree.map(lambda x: x[0], data))[network]
    out = {}
    for path, h in feats.items():
        if path not in skip:
            h = np.abs(np.asarray(h, np.float64))
            score = h.mean(axis=tuple(range(lead, h.ndim - 1)))
            out[path] = score / (score.mean(axis=-1, keepdims=True) + 1e-9) <= TAU
    return out


def kill_and_recycle(learner, state, fresh, data, network, layers, built, lead=0, skip=()):
    """Build the units `built` ({feature: mask}) dead in a trained state, then check that
    ReDo recycles exactly the dormant units: those, and any the network had of itself (each
    feature's producer, normalisation and consumers from `layers`: {feature: (kernel, norm,
    consumers)}). Returns (the state after, {feature: units recycled besides `built`})."""
    part = learner.networks[network]
    owner = part.rsplit(".", 1)[0]
    killed = [(*layers[f], mask) for f, mask in built.items()]
    state = set_part(state, part, kill(get_part(state, part), killed))
    found = dormant(learner, state, data, network, lead, skip)
    assert set(found) == set(layers), "the test names every feature's layers"
    for feature, mask in built.items():
        assert np.all(found[feature][mask]), f"{feature}: the units built dead are dormant"
    units_ = [(*layers[f], found[f]) for f in layers]
    after = recycle_and_check(learner, state, fresh, data, part, owner, units_)
    return after, {f: found[f] & ~built.get(f, False) for f in found}


def recycle_and_check(learner, before, fresh, data, part, owner, units_):
    """Run redo on `part` and compare every leaf with the numpy expectation."""
    cfg = dataclasses.replace(CFG, parts=(part,))
    ctx = EventContext(fresh=fresh, data=data)
    after = jax.jit(lambda s, c: redo.apply(s, (part,), cfg, c._replace(learner=learner)))(
        before, ctx)
    old, got = flat(get_part(before, part)), flat(get_part(after, part))
    want, changed = expected(old, flat(get_part(fresh, part)), units_)
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    adam_before = get_part(before, owner).opt_state[0]
    adam_after = get_part(after, owner).opt_state[0]
    np.testing.assert_array_equal(adam_after.count, adam_before.count)
    for moment in ("mu", "nu"):
        old_m, new_m = flat(getattr(adam_before, moment)), flat(getattr(adam_after, moment))
        assert any(np.any(old_m[k][changed[k]] != 0) for k in changed), "moments to zero"
        for key in old_m:
            np.testing.assert_array_equal(new_m[key], np.where(changed[key], 0.0, old_m[key]),
                                          err_msg=f"{moment} {key}")
    # Everything else in the state is as it was, bit for bit.
    restored = set_part(after, part, get_part(before, part))
    restored = set_part(restored, owner, get_part(restored, owner).replace(
        opt_state=get_part(before, owner).opt_state))
    assert_bit_identical(restored, before)
    return after


@pytest.mark.slow
def test_an_mlp_recycles_exactly_its_dormant_units():
    learner = ToyLearner(Classifier((16, 16), 5))
    data = examples((12,), 5, (1, 64))
    state = learner.train(learner.init(jax.random.key(0), data.x[0]), examples((12,), 5, (5, 32)))
    fresh = learner.init(jax.random.key(1), data.x[0])
    layers = {"MLP_0/hidden_0": ("MLP_0/Dense_0", "MLP_0/LayerNorm_0", ["MLP_0/Dense_1"]),
              "MLP_0/hidden_1": ("MLP_0/Dense_1", "MLP_0/LayerNorm_1", ["Dense_0"])}
    built = {"MLP_0/hidden_0": dead_mask((16,), {(): [1, 5]}),
             "MLP_0/hidden_1": dead_mask((16,), {(): [2]})}
    kill_and_recycle(learner, state, fresh, data, "net", layers, built)


@pytest.mark.slow
def test_sac_recycles_the_dormant_units_of_each_critic_of_the_ensemble():
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(16, 16)))
    state = agent.init(jax.random.key(0), 5, 2)
    state, _ = jax.jit(agent.update)(state, random_batch(jax.random.key(10), 4, 32, 5, 2))
    fresh = agent.init(jax.random.key(1), 5, 2)
    layers = {"net/MLP_0/hidden_0": ("net/MLP_0/Dense_0", "net/MLP_0/LayerNorm_0",
                                     ["net/MLP_0/Dense_1"]),
              "net/MLP_0/hidden_1": ("net/MLP_0/Dense_1", "net/MLP_0/LayerNorm_1",
                                     ["net/Dense_0"])}
    built = {"net/MLP_0/hidden_0": dead_mask((2, 16), {(0,): [0, 3]}),
             "net/MLP_0/hidden_1": dead_mask((2, 16), {(1,): [4]})}
    data = random_batch(jax.random.key(11), 1, 64, 5, 2)
    kill_and_recycle(agent, state, fresh, data, "critic", layers, built, lead=1)


@pytest.mark.slow
def test_bro_recycles_block_units_and_leaves_the_residual_stream():
    config = dataclasses.replace(BROConfig(), critic_width=16, critic_depth=2, actor_width=8,
                                 optimistic_width=8, num_quantiles=5)
    agent = make_agent("bro", config)
    state = agent.init(jax.random.key(0), 5, 2)
    state, _ = jax.jit(agent.update)(state, random_batch(jax.random.key(10), 4, 32, 5, 2))
    fresh = agent.init(jax.random.key(1), 5, 2)
    block = "net/BroNet_0/block_{}/{}"
    layers = {block.format(i, "relu"): (block.format(i, "Dense_0"), block.format(i, "LayerNorm_0"),
                                        [block.format(i, "Dense_1")]) for i in (0, 1)}
    built = {block.format(0, "relu"): dead_mask((2, 16), {(0,): [1]}),
             block.format(1, "relu"): dead_mask((2, 16), {(1,): [2, 6]})}
    # A dead unit of the stem lies on the residual stream: ReDo leaves it as it is.
    stem = ("net/BroNet_0/Dense_0", "net/BroNet_0/LayerNorm_0", [],
            dead_mask((2, 16), {(0,): [3]}))
    state = set_part(state, "critic.params", kill(state.critic.params, [stem]))
    data = random_batch(jax.random.key(11), 1, 64, 5, 2)
    stream = {"net/BroNet_0/hidden_0", *(block.format(i, "residual") for i in (0, 1))}
    assert dormant(agent, state, data, "critic", lead=1)["net/BroNet_0/hidden_0"][0, 3]
    kill_and_recycle(agent, state, fresh, data, "critic", layers, built, lead=1, skip=stream)


@pytest.mark.slow
def test_a_conv_net_recycles_channels_and_their_flattened_rows():
    learner = ToyLearner(ConvNet((4, 6), 8, 3))
    data = examples((8, 8, 2), 3, (1, 64))
    state = learner.train(learner.init(jax.random.key(0), data.x[0]),
                          examples((8, 8, 2), 3, (5, 16)))
    fresh = learner.init(jax.random.key(1), data.x[0])
    layers = {"hidden_0": ("Conv_0", "BatchNorm_0", ["Conv_1"]),
              "hidden_1": ("Conv_1", "BatchNorm_1", ["Dense_0"]),
              "hidden_2": ("Dense_0", "LayerNorm_0", ["Dense_1"])}
    built = {"hidden_0": dead_mask((4,), {(): [1]}), "hidden_1": dead_mask((6,), {(): [2]}),
             "hidden_2": dead_mask((8,), {(): [3]})}
    after, others = kill_and_recycle(learner, state, fresh, data, "net", layers, built)
    # Each dead channel of the last conv map feeds 4 of Dense_0's 24 inputs (2 x 2 positions).
    channels = int(built["hidden_1"].sum() + others["hidden_1"].sum())
    zero_rows = np.all(np.asarray(after.net.params["Dense_0"]["kernel"]) == 0, axis=1)
    assert int(zero_rows.sum()) == 4 * channels


def test_nothing_dormant_changes_nothing():
    learner = ToyLearner(Classifier((16,), 3))
    data = examples((4,), 3, (1, 64))
    state = learner.init(jax.random.key(0), data.x[0])
    assert not any(mask.any() for mask in dormant(learner, state, data, "net").values())
    after = redo.apply(state, ("net.params",), CFG,
                       EventContext(fresh=learner.init(jax.random.key(1), data.x[0]), data=data,
                                    learner=learner))
    assert_bit_identical(after, state)


def dense(n_in, n_out):
    return {"kernel": jnp.zeros((n_in, n_out)), "bias": jnp.zeros(n_out)}


@pytest.mark.parametrize("params, match", [
    ({"A_0": {"Dense_0": dense(3, 4)}, "B_0": {"Dense_0": dense(4, 2)}}, "order"),
    ({"Dense_0": dense(3, 4), "LayerNorm_1": {"scale": jnp.ones(4), "bias": jnp.zeros(4)}},
     "LayerNorm_1 normalises no layer"),
    ({"Dense_0": dense(3, 4), "Dense_1": dense(5, 2)}, "Dense_1 reads 5 inputs"),
    ({"Dense_0": dense(3, 4), "Dense_2": dense(4, 2)}, "numbered 0, 1"),
    ({"Dense_0": dense(3, 4), "embed": {"table": jnp.zeros((3, 4))}}, "no Dense_i"),
    ({"Dense_0": dense(3, 4), "gain": jnp.ones(())}, "outside any layer"),
])
def test_networks_the_rule_does_not_cover_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        units.topology(params)


def test_features_the_rule_does_not_cover_are_refused():
    params = {"Dense_0": dense(3, 4), "Dense_1": dense(4, 2)}
    with pytest.raises(ValueError, match="'embedding'"):
        units.unit_layers(params, ["embedding"])
    with pytest.raises(ValueError, match="network's output"):
        units.unit_layers(params, ["hidden_1"])


def test_redo_refuses_target_networks_naming_the_flag():
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(8,)))
    state = jax.eval_shape(lambda k: agent.init(k, 3, 2), jax.random.key(0))
    with pytest.raises(ValueError, match="--redo_parts=target_critic_params is not the "
                       "parameters of a trained network; accepted: actor.params, critic.params"):
        redo.validate(state, ("target_critic_params",), CFG, agent)


@pytest.mark.parametrize("flag, match", [
    ("--redo_parts=target_critic_params", "--redo_parts=target_critic_params"),
    ("--redo_tau=-1", "--redo_tau"),
])
def test_run_sac_refuses_bad_redo_settings_with_one_line(tmp_path, flag, match):
    proc = run("run_sac.py", *FAST_SAC, "--intervention=redo", flag, f"--logdir={tmp_path}",
               check=False, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and match in lines[0], proc.stderr


@pytest.mark.slow
def test_redo_end_to_end_in_sac_resumes_bit_identically(tmp_path):
    change = event_runs.sac_resumes_bit_identically(tmp_path, "redo", "--redo_tau=0.5")
    assert max(change[("critic", "net/MLP_0/Dense_0[0]")], change[("actor", "MLP_0/Dense_0")]) > 0
    assert not any(change[key] for key in change if key[0] == "target_critic")


@pytest.mark.slow
def test_redo_end_to_end_in_bro(tmp_path):
    change = event_runs.bro_events(tmp_path, "redo", "--redo_tau=0.5")
    assert change[("critic", "net/BroNet_0/block_0/Dense_1[0]")] > 0
    assert change[("actor", "mean")] > 0, "a BroNet without blocks recycles its stem's units"
    stem = [key for key in change if key[0] == "critic" and "/Dense_0" in key[1]
            and "block" not in key[1]]
    assert stem and not any(change[key] for key in stem), "the critic's stem feeds its stream"
