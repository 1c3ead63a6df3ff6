"""Newton-Schulz / Polar Express SingularClip against a float64 SVD (SPEC.md formula and table)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from interventions.newton_schulz import (
    DEFAULT_NS_STEPS,
    POLAR_EXPRESS,
    _largest_singular_value_bound,
    msign,
    ns_clip_matrices,
    polar_express_coefficients,
)

PAPER_ERROR = 1.1e-4  # 0.011 %, the upper end of the paper's measured error at c = 2

SPEC_TABLE = [
    (8.28721, -23.59589, 17.30039),
    (4.10706, -2.94785, 0.54484),
    (3.94869, -2.90890, 0.55182),
    (3.31842, -2.48849, 0.51005),
    (2.30065, -1.66890, 0.41881),
    (1.89130, -1.26800, 0.37680),
    (1.87500, -1.25000, 0.37500),
    (1.875, -1.25, 0.375),
]


def np_clip(w, lower, upper):
    u, s, vt = np.linalg.svd(np.asarray(w, np.float64), full_matrices=False)
    return (u * np.clip(s, lower, upper)[..., None, :]) @ vt


def anisotropic(rng, shape):
    """Bulk with input scales over two decades plus three spikes, like a trained layer."""
    m, n = shape
    w = rng.standard_normal(shape) * np.exp(rng.uniform(np.log(0.1), np.log(10.0), n)) / m**0.5
    for strength in (10.0, 20.0, 30.0):
        u, v = rng.standard_normal(m), rng.standard_normal(n)
        w += strength * np.outer(u / np.linalg.norm(u), v / np.linalg.norm(v))
    return w.astype(np.float32)


def test_coefficients_follow_spec():
    assert [tuple(abc) for abc in POLAR_EXPRESS] == SPEC_TABLE
    table = polar_express_coefficients(8)
    safety = np.array([1.01, 1.01**3, 1.01**5])
    np.testing.assert_allclose(table[:7], np.array(SPEC_TABLE[:7]) / safety, rtol=1e-6)
    np.testing.assert_allclose(table[7], SPEC_TABLE[7])
    longer = polar_express_coefficients(12)
    np.testing.assert_allclose(longer[:8], table)
    np.testing.assert_allclose(longer[8:], np.tile(SPEC_TABLE[7], (4, 1)))
    np.testing.assert_allclose(polar_express_coefficients(3), table[:3])
    with pytest.raises(ValueError, match="positive"):
        polar_express_coefficients(0)


@pytest.mark.parametrize("shape", [(16, 16), (12, 30), (30, 12), (2, 3, 20, 8)])
def test_msign_is_the_polar_factor(shape):
    rng = np.random.default_rng(len(shape) + shape[-1])
    u = np.linalg.qr(rng.standard_normal(shape[:-2] + (shape[-2], min(shape[-2:]))))[0]
    v = np.linalg.qr(rng.standard_normal(shape[:-2] + (shape[-1], min(shape[-2:]))))[0]
    s = rng.uniform(0.05, 3.0, shape[:-2] + (min(shape[-2:]),))
    w = (u * s[..., None, :]) @ np.swapaxes(v, -1, -2)
    got = np.asarray(msign(jnp.asarray(w, jnp.float32)))
    np.testing.assert_allclose(got, u @ np.swapaxes(v, -1, -2), atol=1e-4)


@pytest.mark.parametrize("kind", ["gaussian", "anisotropic"])
@pytest.mark.parametrize("shape", [(128, 128), (256, 256), (256, 512)])
def test_default_steps_meet_paper_error(kind, shape):
    rng = np.random.default_rng(shape[0] + shape[1])
    w = (
        rng.standard_normal(shape).astype(np.float32)
        if kind == "gaussian"
        else anisotropic(rng, shape)
    )
    ref = np_clip(w, 0.5, 2.0)
    got = np.asarray(jax.jit(lambda x: ns_clip_matrices(x, 0.5, 2.0))(w), np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= PAPER_ERROR


def test_small_singular_values_need_more_than_eight_steps():
    """sigma_min / ||W||_F ~ 6e-6: 8 Polar Express steps are far off, the default is not."""
    rng = np.random.default_rng(7)
    u = np.linalg.qr(rng.standard_normal((64, 64)))[0]
    v = np.linalg.qr(rng.standard_normal((64, 64)))[0]
    w = ((u * np.geomspace(30.0, 3e-4, 64)) @ v.T).astype(np.float32)
    ref = np_clip(w, 0.5, 2.0)
    errors = [
        np.linalg.norm(np.asarray(ns_clip_matrices(w, 0.5, 2.0, k), np.float64) - ref)
        / np.linalg.norm(ref)
        for k in (8, 12, DEFAULT_NS_STEPS)
    ]
    assert errors[0] > errors[1] > errors[2]
    assert errors[0] > 100 * PAPER_ERROR
    assert errors[2] <= PAPER_ERROR


@pytest.mark.parametrize(
    "lower, upper, np_lower, np_upper",
    [(0.5, 2.0, 0.5, 2.0), (None, 2.0, 0.0, 2.0), (0.5, None, 0.5, np.inf), (1.0, 1.0, 1.0, 1.0)],
)
def test_sides_and_batches_and_tall_matrices(lower, upper, np_lower, np_upper):
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((2, 3, 40, 24)) * np.array([0.05, 0.3, 1.0])[:, None, None]).astype(
        np.float32
    )
    for x in (w, np.swapaxes(w, -1, -2)):
        got = np.asarray(ns_clip_matrices(x, lower, upper, DEFAULT_NS_STEPS))
        np.testing.assert_allclose(got, np_clip(x, np_lower, np_upper), atol=2e-4)


def test_needs_a_bound():
    with pytest.raises(ValueError, match="at least one"):
        ns_clip_matrices(jnp.ones((3, 3)), None, None)


@pytest.mark.parametrize("c", [100.0, 1e4, 1e6])
def test_a_large_c_keeps_the_matrix(c):
    """P(c) is about c in size: used where c cannot bind, it rounded the smaller singular values
    away (0.5 relative error at c = 1e6 on this layer). Two-sided, the error stays the paper's;
    upper only, a matrix with no singular value above c comes back as it was."""
    w = anisotropic(np.random.default_rng(3), (256, 256))
    # The bound is per matrix: the second, scaled to a top singular value of 2c, binds.
    top = np.linalg.norm(w.astype(np.float64), 2)
    batch = np.stack([w, w * np.float32(2 * c / top)])
    both = np.asarray(jax.jit(lambda x: ns_clip_matrices(x, 1 / c, c))(batch), np.float64)
    upper = np.asarray(jax.jit(lambda x: ns_clip_matrices(x, None, c))(batch), np.float64)
    for i in range(2):
        ref = np_clip(batch[i], 1 / c, c)
        assert np.linalg.norm(both[i] - ref) / np.linalg.norm(ref) <= PAPER_ERROR / 10
    np.testing.assert_array_equal(upper[0], w)
    ref = np_clip(batch[1], 0.0, c)
    assert np.linalg.norm(upper[1] - ref) / np.linalg.norm(ref) <= PAPER_ERROR


@pytest.mark.parametrize("scale", [1e-20, 1e-3, 1.0, 1e20, 1e30])
@pytest.mark.parametrize("shape", [(1, 7), (16, 16), (12, 300), (300, 12)])
def test_the_bound_on_the_largest_singular_value(scale, shape):
    """Never below it (a bound below would skip a clip that binds), at most m^(1/8) above it,
    at any scale: squares of 1e20 overflow float32, those of 1e-20 vanish."""
    rng = np.random.default_rng(shape[0])
    w = rng.standard_normal((3, *shape)) * np.array([1.0, 1e-2, 1e2])[:, None, None] * scale
    w = w.astype(np.float32)
    wide = w if shape[0] <= shape[1] else np.swapaxes(w, -1, -2)
    bound = np.asarray(_largest_singular_value_bound(jnp.asarray(wide)), np.float64).ravel()
    top = np.linalg.norm(w.astype(np.float64), 2, axis=(-2, -1))
    assert np.all(bound >= top * (1 - 1e-5))
    assert np.all(bound <= top * min(shape) ** (1 / 8) * (1 + 1e-5))


@pytest.mark.parametrize("side", ["both", "upper"])
def test_an_upper_bound_just_below_the_largest_singular_value_binds(side):
    """The bound that decides whether the upper clip can bind must not skip one that does: here
    one matrix of a batch has its top singular value 0.1 % above c, the other has none above,
    and the rest are small, so that the bound is within 0.1 % of the top one."""
    rng = np.random.default_rng(4)
    u = np.linalg.qr(rng.standard_normal((2, 48, 48)))[0]
    v = np.linalg.qr(rng.standard_normal((2, 96, 48)))[0]
    s = np.stack([np.r_[3.003, np.geomspace(1.0, 0.2, 47)], np.r_[2.9, np.geomspace(1.0, 0.2, 47)]])
    w = ((u * s[:, None, :]) @ np.swapaxes(v, -1, -2)).astype(np.float32)
    lower = 1 / 3.0 if side == "both" else None
    got = np.asarray(ns_clip_matrices(w, lower, 3.0), np.float64)
    want = np_clip(w, lower or 0.0, 3.0)
    np.testing.assert_allclose(np.linalg.svd(got, compute_uv=False)[:, 0], [3.0, 2.9], rtol=2e-5)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) <= PAPER_ERROR
