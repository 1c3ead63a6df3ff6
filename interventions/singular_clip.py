"""SingularClip: clip every weight matrix's singular values into [1/c, c] (docs/algorithms.md).

sc(W) = U clip(S, 1/c, c) V^T is the Frobenius-norm projection of W onto the matrices whose
singular values all lie in [1/c, c]; c = 1 gives U V^T. Which leaves are weight matrices, and
how conv kernels and leading ensemble / seed axes are handled, is defined in matrices.py.
"""

from typing import Any, Literal

import jax
import jax.numpy as jnp

from interventions.matrices import map_weight_matrices
from interventions.newton_schulz import DEFAULT_NS_STEPS, ns_clip_matrices
from numerics.linalg import gram_eigh, stacked

PyTree = Any
Sides = Literal["both", "upper", "lower"]
Method = Literal["svd", "newton_schulz"]
SIDES = ("both", "upper", "lower")
METHODS = ("svd", "newton_schulz")


def clip_bounds(c: float | jax.Array, sides: Sides) -> tuple[Any, Any]:
    """(lower, upper) bounds for a clip factor c >= 1; None where `sides` leaves no bound."""
    if sides not in SIDES:
        raise ValueError(f"unknown sides {sides!r}; accepted: {', '.join(SIDES)}")
    if isinstance(c, int | float) and not c >= 1:
        raise ValueError(f"clip factor c must be >= 1 (bounds [1/c, c]), got {c}")
    lower = None if sides == "upper" else 1.0 / c
    upper = None if sides == "lower" else c
    return lower, upper


# Matrices whose condition numbers are at most this are clipped through the eigendecompositions
# of their Gram matrices, whose float32 error grows as cond^2: up to 8 it stays within a few
# times the SVD's (tests/test_singular_clip.py) in less time than the SVD takes (`python
# benchmarks/clip.py` times both routes: "clip of one ... matrix", with condition number 4 or not).
GRAM_MAX_COND = 8.0
_HIGHEST = jax.lax.Precision.HIGHEST


def _svd_clip(a: jax.Array, lower: jax.Array, upper: jax.Array) -> jax.Array:
    """U clip(S, lower, upper) V^T of one float32 matrix from its SVD; a matrix the clip leaves
    fixed is returned as it was, without round-off."""
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    clipped = jnp.clip(s, lower, upper)
    return jnp.where(jnp.all(clipped == s), a, jnp.matmul(u * clipped, vt, precision=_HIGHEST))


@stacked
def _clip_stack(a: jax.Array, lower: jax.Array, upper: jax.Array) -> jax.Array:
    """U clip(S, lower, upper) V^T of each matrix of a float32 stack (B, m, n), m >= n, bounds
    (B,); under jax.vmap the stack holds every vmapped seed's matrices (linalg.stacked).

    A^T A = V S^2 V^T: its eigenvectors are A's right singular vectors, and A V diag(clip(s)/s)
    V^T is the clipped matrix. The stack goes this way, its eigendecompositions side by side
    (linalg.unrolled), when every matrix's condition number is at most GRAM_MAX_COND; otherwise
    past it the squared spectrum loses the small singular values in float32, and each matrix is
    clipped through its SVD (linalg.gram_eigh says how the stack is checked).
    """
    conditioned, lam, v = gram_eigh(a, GRAM_MAX_COND)

    def by_gram(a):
        s = jnp.sqrt(lam)
        clipped = jnp.clip(s, lower[:, None], upper[:, None])
        scale = jnp.matmul(v * (clipped / s)[:, None, :], jnp.swapaxes(v, -1, -2),
                           precision=_HIGHEST)  # V diag(clip(s)/s) V^T
        inside = jnp.all(clipped == s, axis=-1)  # a matrix the clip leaves fixed: no round-off
        return jnp.where(inside[:, None, None], a, jnp.matmul(a, scale, precision=_HIGHEST))

    def by_svd(a):
        return jax.lax.map(lambda x: _svd_clip(*x), (a, lower, upper))

    return jax.lax.cond(conditioned, by_gram, by_svd, a)


def svd_clip_matrices(w: jax.Array, lower: Any, upper: Any) -> jax.Array:
    """U clip(S, lower, upper) V^T for each (batch..., m, n) matrix, in float32, one LAPACK call
    per matrix (linalg.py); `lower` or `upper` None is no bound.

    A matrix whose singular values already lie in the bounds is returned as it was (the projection
    leaves it fixed), so no round-off is added to it.
    """
    lower = jnp.float32(0.0) if lower is None else jnp.asarray(lower, jnp.float32)
    upper = jnp.float32(jnp.inf) if upper is None else jnp.asarray(upper, jnp.float32)
    a = jnp.asarray(w, jnp.float32)
    wide = a.shape[-2] < a.shape[-1]
    a = jnp.swapaxes(a, -1, -2) if wide else a
    flat = a.reshape(-1, *a.shape[-2:])
    bounds = [jnp.broadcast_to(x, flat.shape[:1]) for x in (lower, upper)]
    out = _clip_stack(flat, *bounds).reshape(a.shape)
    return (jnp.swapaxes(out, -1, -2) if wide else out).astype(w.dtype)


def singular_clip(
    params: PyTree,
    c: float | jax.Array,
    *,
    sides: Sides = "both",
    method: Method = "svd",
    ns_steps: int = DEFAULT_NS_STEPS,
    conv_spatial_ndim: int = 2,
) -> PyTree:
    """Clip the singular values of every weight matrix of `params` into [1/c, c].

    sides: "both", "upper" ([0, c]) or "lower" ([1/c, inf)). method: "svd" (exact in float32:
    singular vectors from the Gram matrix's eigendecomposition, or from an SVD past
    GRAM_MAX_COND) or "newton_schulz" (Polar Express, `ns_steps` iterations per matrix sign).
    conv_spatial_ndim: the number of spatial kernel axes of "Conv*" modules. Biases, norms and
    scalars are returned as they are. Jittable with the keyword options static; works under
    jax.vmap.
    """
    lower, upper = clip_bounds(c, sides)
    if method == "svd":
        clip = lambda w: svd_clip_matrices(w, lower, upper)
    elif method == "newton_schulz":
        clip = lambda w: ns_clip_matrices(w, lower, upper, ns_steps).astype(w.dtype)
    else:
        raise ValueError(f"unknown method {method!r}; accepted: {', '.join(METHODS)}")
    return map_weight_matrices(clip, params, conv_spatial_ndim)
