"""numerics.linalg's extreme singular values against a float64 numpy SVD: the Gram route
for well-conditioned stacks, the SVD for any stack with an ill-conditioned matrix."""

import importlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numerics.linalg import EXTREMES_GRAM_MAX_COND, extreme_singular_values

linalg = importlib.import_module("numerics.linalg")


@pytest.fixture(autouse=True)
def gram_route_for_small_matrices(monkeypatch):
    """The tests' matrices are small; let them take the Gram route as large ones do."""
    monkeypatch.setattr(linalg, "EXTREMES_GRAM_MIN_SIDE", 1)
    jax.clear_caches()
    yield
    jax.clear_caches()


def with_spectrum(rng, m: int, n: int, s: np.ndarray) -> np.ndarray:
    u = np.linalg.qr(rng.standard_normal((m, len(s))))[0]
    v = np.linalg.qr(rng.standard_normal((n, len(s))))[0]
    return (u * s) @ v.T


def conditioned(rng, m: int, n: int, cond: float) -> np.ndarray:
    return with_spectrum(rng, m, n, rng.uniform(0.5, 3) * np.geomspace(1.0, 1 / cond, min(m, n)))


def np_extremes(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.linalg.svd(np.asarray(w, np.float64), compute_uv=False)
    return s[..., 0], s[..., -1]


def extremes_with_max_cond(monkeypatch, w, max_cond: float):
    monkeypatch.setattr(linalg, "EXTREMES_GRAM_MAX_COND", max_cond)
    jax.clear_caches()  # traced anew with the bound
    out = jax.jit(extreme_singular_values)(jnp.asarray(w))
    monkeypatch.setattr(linalg, "EXTREMES_GRAM_MAX_COND", EXTREMES_GRAM_MAX_COND)
    jax.clear_caches()
    return tuple(np.asarray(x) for x in out)


@pytest.mark.parametrize("m, n", [(300, 80), (80, 300), (96, 96), (200, 10)])
def test_well_conditioned_stacks_take_the_gram_route_within_1e_4_of_float64(monkeypatch, m, n):
    rng = np.random.default_rng(m * n)
    w = np.stack([conditioned(rng, m, n, c) for c in (1.0, 4.0, 30.0)]).astype(np.float32)
    got = jax.jit(extreme_singular_values)(jnp.asarray(w))
    by_gram = extremes_with_max_cond(monkeypatch, w, np.inf)
    by_svd = extremes_with_max_cond(monkeypatch, w, 0.0)
    s_max = np_extremes(w)[0]
    for k, expected in enumerate(np_extremes(w)):
        np.testing.assert_array_equal(got[k], by_gram[k])
        np.testing.assert_allclose(got[k], expected, rtol=1e-4)  # float32 eps * cond^2
        np.testing.assert_allclose(by_svd[k], expected, atol=2e-6 * s_max.max())  # eps
    assert not np.array_equal(by_svd[1], got[1])  # two routes, two roundings of sigma_min
    np.testing.assert_allclose(got[0] / got[1], [1.0, 4.0, 30.0], rtol=1e-4)


def test_one_ill_conditioned_matrix_sends_its_stack_through_svds(monkeypatch):
    rng = np.random.default_rng(3)
    well, ill = conditioned(rng, 200, 64, 2.0), conditioned(rng, 200, 64, 1e3)
    w = np.stack([well, ill, 2 * well]).astype(np.float32)
    got = [np.asarray(x) for x in jax.jit(extreme_singular_values)(jnp.asarray(w))]
    by_svd = extremes_with_max_cond(monkeypatch, w, 0.0)
    for k, expected in enumerate(np_extremes(w)):
        np.testing.assert_array_equal(got[k], by_svd[k])
        np.testing.assert_allclose(got[k], expected, atol=2e-6 * expected.max())
    assert EXTREMES_GRAM_MAX_COND < 1e3


def test_vmapped_and_batched_alike():
    """Under jax.vmap (every seed's matrices in one stack, linalg.stacked) and with leading
    batch axes, the same values as one matrix at a time."""
    rng = np.random.default_rng(5)
    w = np.stack([[conditioned(rng, 90, 70, c) for c in (2.0, 5.0)] for _ in range(3)])
    w = jnp.asarray(w, jnp.float32)
    batched = jax.jit(extreme_singular_values)(w)
    vmapped = jax.jit(jax.vmap(extreme_singular_values))(w)
    for k in range(2):
        assert batched[k].shape == vmapped[k].shape == (3, 2)
        np.testing.assert_array_equal(batched[k], vmapped[k])
        for i in range(3):
            for j in range(2):
                one = extreme_singular_values(w[i, j])[k]
                np.testing.assert_allclose(batched[k][i, j], one, rtol=1e-4)


@pytest.mark.parametrize("shape", [(3, 50, 1), (3, 1, 50)])
def test_a_vector_has_its_norm_as_both_extremes(shape):
    w = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    s_max, s_min = extreme_singular_values(jnp.asarray(w))
    norm = np.linalg.norm(w.astype(np.float64), axis=(-2, -1))
    np.testing.assert_allclose(s_max, norm, rtol=1e-6)
    np.testing.assert_allclose(s_min, norm, rtol=1e-6)


def test_a_zero_matrix_has_zero_extremes():
    s_max, s_min = extreme_singular_values(jnp.zeros((2, 70, 70)))
    np.testing.assert_array_equal(s_max, 0.0)
    np.testing.assert_array_equal(s_min, 0.0)


def test_the_check_skips_the_eigendecompositions_of_a_stack_past_the_bound():
    """gram_eigh's Cholesky check leaves out the eigendecompositions of a stack holding a
    matrix well past the bound, and keeps those of one just inside it."""
    rng = np.random.default_rng(9)
    well, ill = conditioned(rng, 300, 80, 2.0), conditioned(rng, 300, 80, 100.0)
    inside = conditioned(rng, 300, 80, 31.0)
    check = jax.jit(linalg.gram_eigh, static_argnums=1)
    ok, lam, v = check(jnp.asarray(np.stack([well, ill]), jnp.float32), 32.0)
    assert not ok and not np.any(lam) and not np.any(v)
    ok, lam, _ = check(jnp.asarray(np.stack([well, inside]), jnp.float32), 32.0)
    expected = np.linalg.eigvalsh(np.stack([m.T @ m for m in (well, inside)]))
    assert ok
    np.testing.assert_allclose(lam, expected, atol=1e-5 * expected.max())


@pytest.mark.parametrize("seeds", [3, 40])
def test_vmapped_extremes_call_lapack_on_one_matrix_at_a_time(seeds):
    """Batched CPU LAPACK calls can deadlock (numerics/linalg.py): the tridiagonal
    reductions and SVDs of every seed's matrices are one call per matrix (side by side, or in a
    loop past linalg.MAX_UNROLLED)."""
    w = jnp.ones((seeds, 2, 80, 64), jnp.float32)  # seeds x an ensemble of two 80 x 64 matrices
    hlo = jax.jit(jax.vmap(extreme_singular_values)).lower(w).compile().as_text()
    calls = re.findall(r'custom_call_target="lapack_(\w+)_ffi".*?num_batch_dims="(\d+)"', hlo)
    assert {batch for _, batch in calls} == {"0"}, calls
    assert {name for name, _ in calls} == {"ssytrd", "sgesdd"}, calls
    reductions = sum(name == "ssytrd" for name, _ in calls)
    assert reductions == (2 * seeds if seeds == 3 else 1), calls


def test_matrices_with_a_small_side_take_svds(monkeypatch):
    monkeypatch.setattr(linalg, "EXTREMES_GRAM_MIN_SIDE", 128)
    w = jnp.asarray(conditioned(np.random.default_rng(2), 300, 100, 4.0)[None], jnp.float32)
    s = np.asarray(linalg.singular_values(w))
    got = jax.jit(extreme_singular_values)(w)
    np.testing.assert_array_equal(got[0], s[:, 0])
    np.testing.assert_array_equal(got[1], s[:, -1])


def tridiagonals(rng) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random, clustered, split (zero off-diagonals), indefinite, and one 2 x 2 block among
    zeros; all 64 x 64."""
    n = 64
    return [
        (rng.uniform(0.5, 2.0, n), rng.uniform(-0.5, 0.5, n - 1)),
        (np.full(n, 1.0) + 1e-6 * rng.standard_normal(n), 1e-7 * rng.standard_normal(n - 1)),
        (rng.uniform(-1, 1, n), np.where(np.arange(n - 1) % 8, rng.uniform(-1, 1, n - 1), 0.0)),
        (np.r_[rng.uniform(-3, 3, 2), np.zeros(n - 2)], np.r_[2.0, np.zeros(n - 2)]),
        (1e-3 * rng.uniform(0, 1, n), 1e-3 * rng.uniform(0, 1, n - 1)),
    ]


def test_tridiagonal_extremes_within_float32_rounding_of_float64():
    rng = np.random.default_rng(5)
    cases = tridiagonals(rng)
    d = jnp.asarray(np.stack([c[0] for c in cases]), jnp.float32)
    e = jnp.asarray(np.stack([c[1] for c in cases]), jnp.float32)
    lo, hi = jax.jit(linalg._tridiagonal_extremes)(d, e)
    for i in range(len(cases)):
        t = np.diag(np.asarray(d[i], np.float64)) + np.diag(np.asarray(e[i], np.float64), 1)
        lam = np.linalg.eigvalsh(t + np.triu(t, 1).T)
        scale = np.max(np.abs(lam))
        assert abs(float(lo[i]) - lam[0]) <= 1e-6 * scale, (i, float(lo[i]), lam[0])
        assert abs(float(hi[i]) - lam[-1]) <= 1e-6 * scale, (i, float(hi[i]), lam[-1])
