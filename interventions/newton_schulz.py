"""SingularClip without an SVD: the matrix sign by Polar Express iterations, then the clip formula.

msign(W) = U V^T for W = U S V^T. With O = msign(W), a wide W (m <= n) and
P(t) = (tO - W) msign(tO - W)^T = U |t - S| U^T:

    clip_[a,b](W) = 1/2 [ (a+b) I + P(a) - P(b) ] O          (two-sided, as in docs/algorithms.md)
    clip_[0,b](W) = 1/2 [ b I + W O^T - P(b) ] O             (upper only: min(S, b))
    clip_[a,inf)(W) = 1/2 [ a I + W O^T + P(a) ] O           (lower only: max(S, a))

P(b) is about b in size, so the smaller singular values it gives back carry a rounding error
of about b times float32's epsilon: with a large c (0.5 relative error at c = 1e6 on a 256 x 256
layer, 7e-3 at c = 1e4) the formulas above lose the matrix. A bound on the largest singular
value, (sum of S^8)^(1/8) (from two matmuls, and never below it), decides for each matrix
whether b can bind; where it cannot, the lower-only formula (or, with no lower bound, W itself)
is the clip, and the error stays at float32's rounding whatever c is.

Tall matrices are transposed first. Matmuls run in float32 at the highest precision. Directions
with a tiny singular value (below about 1e-4 of ||W||_F, as in large square Gaussian matrices) need
more iterations than Polar Express's 8; benchmarks/clip.py measures the error per step count
against a float64 SVD, and DEFAULT_NS_STEPS is the count that met the paper's error there.
"""

import jax
import jax.numpy as jnp
import numpy as np

POLAR_EXPRESS = (
    (8.28721, -23.59589, 17.30039),
    (4.10706, -2.94785, 0.54484),
    (3.94869, -2.90890, 0.55182),
    (3.31842, -2.48849, 0.51005),
    (2.30065, -1.66890, 0.41881),
    (1.89130, -1.26800, 0.37680),
    (1.87500, -1.25000, 0.37500),
    (1.875, -1.25, 0.375),
)
SAFETY = 1.01
NORM_EPS = 1e-7
DEFAULT_NS_STEPS = 20
HIGHEST = jax.lax.Precision.HIGHEST


def polar_express_coefficients(steps: int) -> np.ndarray:
    """(steps, 3) odd-polynomial coefficients: all but the 8th divided by (1.01, 1.01^3, 1.01^5)
    for stability; steps past 8 repeat the last, fixed-point polynomial (1.875, -1.25, 0.375)."""
    if steps < 1:
        raise ValueError(f"ns_steps must be a positive int, got {steps}")
    stable = [(a / SAFETY, b / SAFETY**3, c / SAFETY**5) for a, b, c in POLAR_EXPRESS[:-1]]
    table = stable + [POLAR_EXPRESS[-1]] * max(1, steps - len(stable))
    return np.asarray(table[:steps], dtype=np.float32)


def _mT(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(x, -1, -2)


def _mm(x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.matmul(x, y, precision=HIGHEST)


def _frobenius(x: jax.Array) -> jax.Array:
    """(batch..., 1, 1) Frobenius norms of (batch..., m, n) matrices, taken on x / max|x| so
    that the squares neither overflow (||x||_F up to float32's largest) nor vanish."""
    peak = jnp.max(jnp.abs(x), axis=(-2, -1), keepdims=True)
    peak = jnp.where(peak > 0, peak, 1.0)
    return peak * jnp.sqrt(jnp.sum(jnp.square(x / peak), axis=(-2, -1), keepdims=True))


def _msign_wide(x: jax.Array, steps: int) -> jax.Array:
    """msign of (batch..., m, n) with m <= n: scale into the unit ball, then iterate
    X <- a X + (b A + c A^2) X with A = X X^T."""
    x = x / (SAFETY * _frobenius(x) + NORM_EPS)

    def step(x, abc):
        a, b, c = abc[0], abc[1], abc[2]
        gram = _mm(x, _mT(x))
        return a * x + _mm(b * gram + c * _mm(gram, gram), x), None

    x, _ = jax.lax.scan(step, x, jnp.asarray(polar_express_coefficients(steps)))
    return x


def msign(w: jax.Array, steps: int = DEFAULT_NS_STEPS) -> jax.Array:
    """Orthogonal polar factor U V^T of (batch..., m, n) matrices, in float32."""
    w = jnp.asarray(w, jnp.float32)
    if w.shape[-2] > w.shape[-1]:
        return _mT(_msign_wide(_mT(w), steps))
    return _msign_wide(w, steps)


def _largest_singular_value_bound(w: jax.Array) -> jax.Array:
    """(batch..., 1, 1) bounds (sum of S^8)^(1/8) on the largest singular value of each wide
    (m <= n) matrix: never below it, and at most m^(1/8) times it (2.2 for 512 rows). Computed
    on w / ||w||_F, so that S^8 neither overflows nor vanishes."""
    norm = _frobenius(w)
    x = w / jnp.where(norm > 0, norm, 1.0)
    gram = _mm(x, _mT(x))
    fourth = jnp.sqrt(jnp.sum(jnp.square(_mm(gram, gram)), axis=(-2, -1), keepdims=True))
    return norm * jnp.sqrt(jnp.sqrt(fourth))


def ns_clip_matrices(
    w: jax.Array, lower: float | None, upper: float | None, steps: int = DEFAULT_NS_STEPS
) -> jax.Array:
    """Singular values of each (batch..., m, n) matrix clipped into [lower, upper]; None = no bound.

    Returned in float32; the caller casts back.
    """
    if lower is None and upper is None:
        raise ValueError("ns_clip_matrices needs at least one of lower, upper")
    w = jnp.asarray(w, jnp.float32)
    if w.shape[-2] > w.shape[-1]:
        return _mT(ns_clip_matrices(_mT(w), lower, upper, steps))
    o = _msign_wide(w, steps)
    eye = jnp.eye(w.shape[-2], dtype=w.dtype)

    def abs_gap(t):
        gap = t * o - w
        return _mm(gap, _mT(_msign_wide(gap, steps)))

    if upper is None:
        return 0.5 * _mm(lower * eye + _mm(w, _mT(o)) + abs_gap(lower), o)
    # Where no singular value can exceed `upper` (the bound, with room for its own rounding),
    # the formula without it; see the module notes. A NaN bound counts as binding.
    upper_binds = ~(_largest_singular_value_bound(w) * 1.001 <= upper)
    if lower is None:
        clipped = 0.5 * _mm(upper * eye + _mm(w, _mT(o)) - abs_gap(upper), o)
        return jnp.where(upper_binds, clipped, w)
    inner = jnp.where(upper_binds, (lower + upper) * eye + abs_gap(lower) - abs_gap(upper),
                      lower * eye + _mm(w, _mT(o)) + abs_gap(lower))
    return 0.5 * _mm(inner, o)
