"""singular_clip against a float64 numpy SVD: bounds, formula, idempotence, projection, trees."""

import importlib
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interventions import singular_clip
from interventions.matrices import weight_matrices

TOL = 2e-5


def np_clip(w: np.ndarray, lower: float, upper: float) -> np.ndarray:
    """U clip(S) V^T per matrix of (batch..., m, n), in float64."""
    u, s, vt = np.linalg.svd(np.asarray(w, np.float64), full_matrices=False)
    return (u * np.clip(s, lower, upper)[..., None, :]) @ vt


def np_sv(w: np.ndarray) -> np.ndarray:
    return np.linalg.svd(np.asarray(w, np.float64), compute_uv=False)


def random_with_spectrum(rng, m: int, n: int, s: np.ndarray) -> np.ndarray:
    """U diag(s) V^T with random orthonormal U (m, k), V (n, k), k = len(s)."""
    u = np.linalg.qr(rng.standard_normal((m, len(s))))[0]
    v = np.linalg.qr(rng.standard_normal((n, len(s))))[0]
    return (u * s) @ v.T


# (kernel shape, module name, shape of its matrix view)
CASES = [
    ((6, 6), "Dense_0", (6, 6)),
    ((4, 9), "Dense_0", (4, 9)),
    ((9, 4), "Dense_0", (9, 4)),
    ((1, 7), "Dense_0", (1, 7)),
    ((7, 1), "Dense_0", (7, 1)),
    ((3, 3, 4, 5), "Conv_0", (36, 5)),
    ((2, 8, 5), "VmapCritic_0", (2, 8, 5)),
    ((3, 2, 8, 5), "VmapCritic_0", (3, 2, 8, 5)),
    ((3, 3, 3, 2, 4), "Conv_1", (3, 18, 4)),
]


def tree_for(kernel: np.ndarray, module: str) -> dict:
    n_out = kernel.shape[-1]
    return {
        "params": {
            module: {"kernel": jnp.asarray(kernel), "bias": jnp.linspace(-3.0, 3.0, n_out)},
            "LayerNorm_0": {"scale": jnp.full((n_out,), 7.0), "bias": jnp.zeros((n_out,))},
        },
        "log_temp": jnp.asarray(5.0),
    }


@pytest.mark.parametrize("shape, module, view", CASES)
@pytest.mark.parametrize("c", [1.0, 1.5, 4.0])
def test_matches_numpy_and_respects_bounds(shape, module, view, c):
    rng = np.random.default_rng(sum(shape))
    kernel = (3.0 * rng.standard_normal(shape)).astype(np.float32)
    params = tree_for(kernel, module)
    out = singular_clip(params, c)

    got = np.asarray(out["params"][module]["kernel"])
    assert got.shape == shape and got.dtype == np.float32
    expected = np_clip(kernel.reshape(view), 1.0 / c, c).reshape(shape)
    np.testing.assert_allclose(got, expected, atol=TOL * np.abs(expected).max())
    s = np_sv(got.reshape(view))
    assert s.min() >= 1.0 / c - 1e-5 and s.max() <= c * (1 + 1e-5)
    for path in (("params", module, "bias"), ("params", "LayerNorm_0", "scale"), ("log_temp",)):
        old, new = params, out
        for key in path:
            old, new = old[key], new[key]
        assert new is old


@pytest.mark.parametrize("shape, module, view", CASES)
def test_idempotent_and_c1_is_polar_factor(shape, module, view):
    rng = np.random.default_rng(1 + sum(shape))
    kernel = rng.standard_normal(shape).astype(np.float32)
    once = singular_clip(tree_for(kernel, module), 2.0)
    twice = singular_clip(once, 2.0)
    np.testing.assert_allclose(
        np.asarray(twice["params"][module]["kernel"]),
        np.asarray(once["params"][module]["kernel"]),
        atol=TOL,
    )
    polar = np.asarray(singular_clip(tree_for(kernel, module), 1.0)["params"][module]["kernel"])
    u, _, vt = np.linalg.svd(kernel.reshape(view).astype(np.float64), full_matrices=False)
    np.testing.assert_allclose(polar.reshape(view), u @ vt, atol=TOL)


def test_matrix_inside_is_returned_unchanged():
    rng = np.random.default_rng(2)
    w = random_with_spectrum(rng, 10, 7, rng.uniform(0.26, 3.9, 7)).astype(np.float32)
    out = singular_clip({"kernel": jnp.asarray(w)}, 4.0)["kernel"]
    np.testing.assert_array_equal(np.asarray(out), w)


@pytest.mark.parametrize(
    "sides, lower, upper", [("both", 0.5, 2.0), ("upper", 0.0, 2.0), ("lower", 0.5, np.inf)]
)
def test_one_sided_variants(sides, lower, upper):
    rng = np.random.default_rng(3)
    w = random_with_spectrum(rng, 9, 6, np.array([8.0, 3.0, 1.5, 0.7, 0.2, 0.01]))
    out = singular_clip({"kernel": jnp.asarray(w, jnp.float32)}, 2.0, sides=sides)["kernel"]
    np.testing.assert_allclose(np.asarray(out), np_clip(w, lower, upper), atol=TOL * 8)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 9),
    n=st.integers(1, 9),
    c=st.floats(1.0, 6.0),
    scale=st.floats(0.05, 20.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_is_the_frobenius_projection(m, n, c, scale, seed):
    """No matrix with singular values in [1/c, c] is closer to W than singular_clip(W)."""
    rng = np.random.default_rng(seed)
    w = (scale * rng.standard_normal((m, n))).astype(np.float32)
    clipped = np.asarray(singular_clip({"kernel": jnp.asarray(w)}, c)["kernel"], np.float64)
    s = np_sv(clipped)
    assert s.min() >= 1.0 / c * (1 - 1e-5) and s.max() <= c * (1 + 1e-5)
    best = np.linalg.norm(w - clipped)
    u, _, vt = np.linalg.svd(w.astype(np.float64), full_matrices=False)
    k = min(m, n)
    for _ in range(20):
        same_vectors = (u * rng.uniform(1.0 / c, c, k)) @ vt
        any_vectors = random_with_spectrum(rng, m, n, rng.uniform(1.0 / c, c, k))
        for candidate in (same_vectors, any_vectors):
            assert best <= np.linalg.norm(w - candidate) + 1e-4 * (1 + best)


class Critic(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.LayerNorm()(nn.Dense(8)(x)))
        return nn.Dense(1)(x)


class Model(nn.Module):
    @nn.compact
    def __call__(self, image, x):
        h = nn.Conv(4, (3, 3))(image).mean(axis=(1, 2))
        ensemble = nn.vmap(
            Critic,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=2,
        )
        return ensemble()(jnp.concatenate([h, x], axis=-1))


def seeded_flax_params(seeds: int = 3):
    model = Model()
    init = lambda key: model.init(key, jnp.ones((1, 5, 5, 2)), jnp.ones((1, 3)))
    return jax.vmap(init)(jax.random.split(jax.random.key(0), seeds))


@pytest.mark.slow
def test_flax_tree_with_ensemble_and_seed_axes():
    params = seeded_flax_params()
    scaled = jax.tree.map(lambda x: 5.0 * x, params)
    out = jax.jit(lambda p: singular_clip(p, 1.5))(scaled)
    views = {
        ("Conv_0",): (3, 18, 4),
        ("VmapCritic_0", "Dense_0"): (3, 2, 7, 8),
        ("VmapCritic_0", "Dense_1"): (3, 2, 8, 1),
    }
    for path, view in views.items():
        old, new = scaled["params"], out["params"]
        for key in path:
            old, new = old[key], new[key]
        expected = np_clip(np.asarray(old["kernel"]).reshape(view), 1 / 1.5, 1.5)
        np.testing.assert_allclose(
            np.asarray(new["kernel"]).reshape(view), expected, atol=TOL * np.abs(expected).max()
        )
        np.testing.assert_array_equal(np.asarray(new["bias"]), np.asarray(old["bias"]))
    ln_old = scaled["params"]["VmapCritic_0"]["LayerNorm_0"]
    ln_new = out["params"]["VmapCritic_0"]["LayerNorm_0"]
    jax.tree.map(np.testing.assert_array_equal, ln_new, ln_old)


@pytest.mark.slow
def test_vmap_over_seeds_equals_leading_axis():
    params = jax.tree.map(lambda x: 5.0 * x, seeded_flax_params())
    direct = jax.jit(lambda p: singular_clip(p, 2.0))(params)
    mapped = jax.jit(jax.vmap(lambda p: singular_clip(p, 2.0)))(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=TOL * 10), mapped, direct)


def test_dtype_is_kept():
    w = jnp.asarray(np.random.default_rng(4).standard_normal((6, 5)) * 4, jnp.bfloat16)
    out = singular_clip({"kernel": w}, 2.0)["kernel"]
    assert out.dtype == jnp.bfloat16
    assert np_sv(np.asarray(out, np.float32)).max() <= 2.0 * 1.02


def test_newton_schulz_method_agrees_with_svd():
    rng = np.random.default_rng(5)
    params = tree_for(rng.standard_normal((2, 24, 16)).astype(np.float32) * 2, "VmapCritic_0")
    svd = singular_clip(params, 2.0)["params"]["VmapCritic_0"]["kernel"]
    ns = singular_clip(params, 2.0, method="newton_schulz")["params"]["VmapCritic_0"]["kernel"]
    np.testing.assert_allclose(np.asarray(ns), np.asarray(svd), atol=1e-3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"c": 0.5}, "c must be >= 1"),
        ({"c": 2.0, "sides": "two"}, "accepted: both, upper, lower"),
        ({"c": 2.0, "method": "qr"}, "accepted: svd, newton_schulz"),
        ({"c": 2.0, "conv_spatial_ndim": 3}, "conv_spatial_ndim"),
    ],
)
def test_errors_name_what_is_accepted(kwargs, match):
    params = {"Conv_0": {"kernel": jnp.ones((3, 3, 2, 4))}}
    with pytest.raises(ValueError, match=match):
        singular_clip(params, **kwargs)


def test_a_dense_inside_a_conv_named_module_keeps_its_batch_axes():
    params = {"params": {"ConvEncoder_0": {"Dense_0": {"kernel": jnp.ones((4, 2, 5, 3))},
                                           "Conv_0": {"kernel": jnp.ones((3, 3, 2, 4))}}}}
    views = {name: m.shape for name, m in weight_matrices(params).items()}
    assert views == {"ConvEncoder_0/Dense_0": (4, 2, 5, 3), "ConvEncoder_0/Conv_0": (18, 4)}


def clip_with_gram_max_cond(monkeypatch, w: np.ndarray, max_cond: float) -> np.ndarray:
    module = importlib.import_module("interventions.singular_clip")  # not the function of that name
    monkeypatch.setattr(module, "GRAM_MAX_COND", max_cond)
    return np.asarray(singular_clip({"kernel": jnp.asarray(w)}, 2.0)["kernel"])


@pytest.mark.parametrize("m, n", [(200, 64), (64, 200), (64, 64), (64, 1)])
@pytest.mark.parametrize("cond", [1.5, 7.5])
def test_a_well_conditioned_matrix_is_clipped_through_its_gram_matrix(monkeypatch, m, n, cond):
    """Up to GRAM_MAX_COND the Gram matrix's eigenvectors give the clip, as exactly as the SVD."""
    assert cond <= importlib.import_module("interventions.singular_clip").GRAM_MAX_COND
    rng = np.random.default_rng(m + n)
    k = min(m, n)
    w = random_with_spectrum(rng, m, n, 3.0 * np.geomspace(1.0, 1.0 / cond, k)).astype(np.float32)
    by_gram = clip_with_gram_max_cond(monkeypatch, w, np.inf)
    by_svd = clip_with_gram_max_cond(monkeypatch, w, 0.0)
    monkeypatch.undo()
    default = np.asarray(singular_clip({"kernel": jnp.asarray(w)}, 2.0)["kernel"])
    np.testing.assert_array_equal(default, by_gram)
    assert not np.array_equal(by_gram, by_svd)  # else the first check could not tell them apart
    expected = np_clip(w, 0.5, 2.0)
    for got in (by_gram, by_svd):
        np.testing.assert_allclose(got, expected, atol=5e-6 * np.abs(expected).max())


def test_an_ill_conditioned_matrix_is_clipped_through_its_svd(monkeypatch):
    """Past GRAM_MAX_COND the squared spectrum loses the small singular values the clip raises."""
    rng = np.random.default_rng(6)
    s = np.concatenate([[3.0], np.full(62, 1.0), [1e-2]])  # cond 300
    w = random_with_spectrum(rng, 200, 64, s).astype(np.float32)
    by_svd = clip_with_gram_max_cond(monkeypatch, w, 0.0)
    by_gram = clip_with_gram_max_cond(monkeypatch, w, np.inf)
    monkeypatch.undo()
    default = np.asarray(singular_clip({"kernel": jnp.asarray(w)}, 2.0)["kernel"])
    np.testing.assert_array_equal(default, by_svd)
    expected = np_clip(w, 0.5, 2.0)
    np.testing.assert_allclose(by_svd, expected, atol=TOL * np.abs(expected).max())
    assert np.abs(by_gram - expected).max() > 10 * TOL * np.abs(expected).max()


def test_a_vmapped_clip_takes_the_gram_route_only_when_every_seed_is_well_conditioned(
        monkeypatch):
    """The seeds' matrices are clipped together through their Gram matrices only when every one
    of them is well conditioned; one ill-conditioned seed sends them all through their SVDs."""
    rng = np.random.default_rng(7)
    well = random_with_spectrum(rng, 200, 64, 3.0 * np.geomspace(1.0, 1 / 4, 64))
    ill = random_with_spectrum(rng, 200, 64, np.concatenate([[3.0], np.full(62, 1.0), [1e-2]]))
    clip = jax.jit(jax.vmap(lambda w: singular_clip({"kernel": w}, 2.0)["kernel"]))
    for stack, max_cond in (([well, 0.5 * well], np.inf), ([well, ill, 2.0 * well], 0.0)):
        w = np.stack(stack).astype(np.float32)
        got = np.asarray(clip(jnp.asarray(w)))
        for k, one in enumerate(w):  # each alone, sent the stack's way
            np.testing.assert_array_equal(got[k], clip_with_gram_max_cond(monkeypatch, one,
                                                                          max_cond))
            expected = np_clip(one, 0.5, 2.0)
            np.testing.assert_allclose(got[k], expected, atol=TOL * np.abs(expected).max())
        monkeypatch.undo()


@pytest.mark.parametrize("seeds", [3, 40])
def test_a_vmapped_clip_calls_lapack_on_one_matrix_at_a_time(seeds):
    """Batched CPU LAPACK calls can deadlock (numerics/linalg.py): the seeds' Cholesky
    factors and eigendecompositions are one call per matrix, side by side (or in a loop past
    linalg.MAX_UNROLLED)."""
    w = jnp.ones((seeds, 2, 80, 64), jnp.float32)  # seeds x an ensemble of two 80 x 64 matrices
    clip = jax.vmap(lambda w: singular_clip({"VmapCritic_0": {"kernel": w}}, 2.0))
    hlo = jax.jit(clip).lower(w).compile().as_text()
    calls = re.findall(r'custom_call_target="lapack_(\w+)_ffi".*?num_batch_dims="(\d+)"', hlo)
    assert calls and {batch for _, batch in calls} == {"0"}, calls
    eighs = sum(name == "ssyevd" for name, _ in calls)
    assert eighs == (2 * seeds if seeds == 3 else 1), calls


def test_a_clip_factor_per_seed_under_vmap():
    rng = np.random.default_rng(8)
    w = np.stack([random_with_spectrum(rng, 90, 70, np.geomspace(3.0, 0.3, 70))
                  for _ in range(3)]).astype(np.float32)
    cs = np.array([1.0, 1.5, 2.5], np.float32)
    got = jax.jit(jax.vmap(lambda w, c: singular_clip({"kernel": w}, c)["kernel"]))(w, cs)
    for k in range(3):
        expected = np_clip(w[k], 1 / cs[k], cs[k])
        np.testing.assert_allclose(got[k], expected, atol=TOL * np.abs(expected).max())
