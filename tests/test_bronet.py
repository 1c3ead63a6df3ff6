"""BroNet and BRO's networks: block structure for any depth against a numpy forward pass,
initialisation, heads, the optimistic actor's shift and std, recorded features."""

import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.common import sow_features
from networks import BroActor, BroNet, Ensemble, OptimisticActor, QuantileCritic
from networks.common import CHOLESKY_QR_ASPECT, CHOLESKY_QR_MIN_SIDE, gaussian_q, orthogonal, thin_q

IN, WIDTH, BATCH = 7, 12, 5


def np_dense(p, x):
    return x @ np.asarray(p["kernel"], np.float64) + np.asarray(p["bias"], np.float64)


def np_layer_norm(p, x, eps=1e-6):
    centred = x - x.mean(-1, keepdims=True)
    normed = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps)
    return normed * np.asarray(p["scale"], np.float64) + np.asarray(p["bias"], np.float64)


def np_bronet(params, x, depth):
    """The architecture of SPEC.md written out in numpy, float64."""
    relu = lambda v: np.maximum(v, 0.0)
    x = relu(np_layer_norm(params["LayerNorm_0"], np_dense(params["Dense_0"], x)))
    for i in range(depth):
        block = params[f"block_{i}"]
        h = relu(np_layer_norm(block["LayerNorm_0"], np_dense(block["Dense_0"], x)))
        x = x + np_layer_norm(block["LayerNorm_1"], np_dense(block["Dense_1"], h))
    return x


def perturbed(params, key):
    """Params with every leaf moved randomly, so LayerNorm scales and biases matter too."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    moved = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(treedef, moved)


@pytest.mark.slow
@pytest.mark.parametrize("depth", [0, 1, 2, 3, 4])
def test_bronet_matches_numpy_for_any_depth(depth):
    net = BroNet(WIDTH, depth)
    x = jax.random.normal(jax.random.key(1), (BATCH, IN))
    params = perturbed(net.init(jax.random.key(0), x)["params"], jax.random.key(2))
    blocks = sorted(k for k in params if k.startswith("block_"))
    assert blocks == [f"block_{i}" for i in range(depth)]
    for b in blocks:
        assert set(params[b]) == {"Dense_0", "Dense_1", "LayerNorm_0", "LayerNorm_1"}
    out = net.apply({"params": params}, x)
    assert out.shape == (BATCH, WIDTH)
    expected = np_bronet(flax.core.unfreeze(params), np.asarray(x, np.float64), depth)
    np.testing.assert_allclose(out, expected, rtol=2e-4, atol=2e-4)


@pytest.mark.slow
@pytest.mark.parametrize("depth", [0, 2])
def test_bronet_records_every_hidden_activation(depth):
    net = BroNet(WIDTH, depth)
    x = jax.random.normal(jax.random.key(1), (BATCH, IN))
    params = net.init(jax.random.key(0), x)["params"]
    feats = sow_features(net.apply, params, x)
    expected = {"hidden_0"} | {f"block_{i}/{n}" for i in range(depth)
                               for n in ("relu", "residual")}
    assert set(feats) == expected
    assert all(f.shape == (BATCH, WIDTH) for f in feats.values())
    assert all(float(f.min()) >= 0 for k, f in feats.items() if not k.endswith("residual"))
    last = f"block_{depth - 1}/residual" if depth else "hidden_0"
    np.testing.assert_array_equal(feats[last], net.apply({"params": params}, x))


def test_bronet_rejects_negative_depth():
    with pytest.raises(ValueError, match="depth >= 0"):
        BroNet(WIDTH, -1).init(jax.random.key(0), jnp.zeros((1, IN)))


def test_kernels_are_orthogonal_with_scale_sqrt2():
    params = BroNet(WIDTH, 2).init(jax.random.key(0), jnp.zeros((1, IN)))["params"]
    for path, kernel in flax.traverse_util.flatten_dict(flax.core.unfreeze(params)).items():
        if path[-1] != "kernel":
            continue
        s = np.linalg.svd(np.asarray(kernel), compute_uv=False)
        np.testing.assert_allclose(s, np.sqrt(2.0), rtol=1e-5, err_msg=str(path))


@pytest.mark.parametrize("shape", [(7, 12), (12, 7), (300, 300), (3, 3, 4, 8)])
def test_orthogonal_init_equals_jax_orthogonal_init(shape):
    """The QR one matrix at a time gives jax's orthogonal initialiser's matrices bit for bit,
    also vmapped over seeds under jit (the way a run's init and a reset call it)."""
    ours = orthogonal(1.5)(jax.random.key(3), shape)
    lapack = jax.nn.initializers.orthogonal(1.5)(jax.random.key(3), shape)
    np.testing.assert_array_equal(ours, lapack)
    keys = jax.random.split(jax.random.key(4), 3)
    vmapped = jax.jit(jax.vmap(lambda k: orthogonal(1.5)(k, shape)))(keys)
    np.testing.assert_array_equal(
        vmapped, np.stack([jax.nn.initializers.orthogonal(1.5)(k, shape) for k in keys]))
    grid = jax.random.split(jax.random.key(5), (2, 3))  # seeds x ensemble members: nested vmaps
    nested = jax.jit(jax.vmap(jax.vmap(lambda k: orthogonal(1.5)(k, shape))))(grid)
    np.testing.assert_array_equal(
        nested, [[jax.nn.initializers.orthogonal(1.5)(k, shape) for k in row] for row in grid])


@pytest.mark.parametrize("shape", [(784, 256), (256, 784), (3, 3, 64, 128)])
def test_tall_draws_take_cholesky_qr_and_match_jax_orthogonal_init(shape):
    """Draws with n >= CHOLESKY_QR_MIN_SIDE and m >= CHOLESKY_QR_ASPECT n (784 x 256, a 3 x 3
    conv's 576 x 128) get jax's orthogonal init's matrices up to float32 rounding, as
    orthonormal, vmapped over seeds too, through LAPACK calls on one matrix at a time."""
    keys = jax.random.split(jax.random.key(6), 3)
    init = jax.jit(jax.vmap(lambda k: orthogonal(1.5)(k, shape)))
    ours = np.asarray(init(keys))
    ref = np.stack([jax.nn.initializers.orthogonal(1.5)(k, shape) for k in keys])
    np.testing.assert_allclose(ours, ref, atol=1.5e-6)
    assert not np.array_equal(ours, ref)  # not the Householder route
    for q in ours.reshape(len(keys), -1, shape[-1]) / 1.5:
        small = q.T @ q if q.shape[0] >= q.shape[1] else q @ q.T
        np.testing.assert_allclose(small, np.eye(len(small)), atol=5e-6)
    hlo = init.lower(keys).compile().as_text()
    calls = re.findall(r"custom_call_target=\"lapack_(\w+?)_ffi\".*?num_batch_dims=\"(\d+)\"", hlo)
    assert sorted(set(calls)) == [("spotrf", "0"), ("strsm", "0")], calls
    assert calls.count(("strsm", "0")) == len(keys), calls  # side by side; the factors in a loop


def test_only_tall_large_draws_take_cholesky_qr():
    """Cholesky QR's error grows with cond(z)^2: draws short of the aspect or the side, whose
    condition numbers can be large, keep the Householder QR, bit for bit."""
    z = jax.random.normal(jax.random.key(7), (2, 1000, 128))
    np.testing.assert_allclose(gaussian_q(z[0]), thin_q(z[0]), atol=1e-6)
    n = CHOLESKY_QR_MIN_SIDE
    for m, side in ((int(CHOLESKY_QR_ASPECT * n) - 1, n), (1000, n - 1), (n, n)):
        z = jax.random.normal(jax.random.key(8), (m, side))
        np.testing.assert_array_equal(gaussian_q(z), thin_q(z))


def test_a_vmapped_init_calls_lapack_on_one_matrix_at_a_time():
    """Batched CPU LAPACK calls can deadlock (numerics/linalg.py): the seeds' QRs are one
    call per matrix, side by side, and in a loop past linalg.MAX_UNROLLED matrices or below
    linalg.MIN_UNROLLED_ENTRIES entries."""
    for seeds, shape in ((3, (80, 64)), (40, (80, 64)), (3, (9, 5))):
        init = jax.vmap(jax.vmap(lambda k, shape=shape: orthogonal()(k, shape)))
        keys = jax.random.split(jax.random.key(0), (seeds, 2))
        hlo = jax.jit(init).lower(keys).compile().as_text()
        calls = re.findall(r"custom_call_target=\"lapack_\w+\".*?num_batch_dims=\"(\d+)\"", hlo)
        assert calls and set(calls) == {"0"}, calls
        side_by_side = seeds == 3 and shape[1] == 64
        assert len(calls) == (2 * seeds * 2 if side_by_side else 2), len(calls)  # geqrf + orgqr


@pytest.mark.slow
def test_quantile_critic_ensemble_shapes_and_independence():
    critic = Ensemble(QuantileCritic(WIDTH, 1, num_quantiles=9), 2)
    obs, act = jnp.ones((BATCH, IN)), jnp.ones((BATCH, 3))
    params = critic.init(jax.random.key(0), obs, act)["params"]
    assert params["net"]["BroNet_0"]["Dense_0"]["kernel"].shape == (2, IN + 3, WIDTH)
    assert params["net"]["quantiles"]["kernel"].shape == (2, WIDTH, 9)
    q = critic.apply({"params": params}, obs, act)
    assert q.shape == (2, BATCH, 9)
    assert not np.allclose(q[0], q[1])


def test_actor_heads_and_log_std_bounds():
    actor = BroActor(act_dim=4, width=WIDTH, depth=1, log_std_min=-3.0, log_std_max=1.0)
    obs = 10.0 * jax.random.normal(jax.random.key(1), (64, IN))
    params = actor.init(jax.random.key(0), obs)["params"]
    mean, log_std = actor.apply({"params": params}, obs)
    assert mean.shape == log_std.shape == (64, 4)
    assert float(log_std.min()) >= -3.0 and float(log_std.max()) <= 1.0
    # BRO reference heads: mean orthogonal scale sqrt(2), log-std orthogonal scale 1.
    for head, scale in (("mean", np.sqrt(2.0)), ("log_std", 1.0)):
        s = np.linalg.svd(np.asarray(params[head]["kernel"]), compute_uv=False)
        np.testing.assert_allclose(s, scale, rtol=1e-5)


@pytest.mark.slow
def test_optimistic_actor_shift_and_std():
    net = OptimisticActor(WIDTH, 1, std_multiplier=0.75, shift_init_scale=0.01)
    k = jax.random.split(jax.random.key(0), 4)
    obs = jax.random.normal(k[0], (BATCH, IN))
    mean_c = jax.random.normal(k[1], (BATCH, 3))
    log_std_c = jax.random.normal(k[2], (BATCH, 3))
    params = net.init(k[3], obs, mean_c, log_std_c)["params"]
    assert set(params["shift"]) == {"kernel"}  # bias-free
    np.testing.assert_allclose(
        np.linalg.svd(np.asarray(params["shift"]["kernel"]), compute_uv=False), 0.01, rtol=1e-5
    )
    mean_o, log_std_o = net.apply({"params": params}, obs, mean_c, log_std_c)
    np.testing.assert_allclose(np.exp(log_std_o), 0.75 * np.exp(log_std_c), rtol=1e-5)
    trunk = BroNet(WIDTH, 1).apply(
        {"params": params["BroNet_0"]}, jnp.concatenate([obs, mean_c], -1)
    )
    np.testing.assert_allclose(
        mean_o - mean_c, trunk @ params["shift"]["kernel"], rtol=1e-4, atol=1e-6
    )
    assert 0 < float(jnp.abs(mean_o - mean_c).max()) < 0.2  # starts near the conservative mean
