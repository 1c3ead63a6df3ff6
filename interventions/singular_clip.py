"""SingularClip: clip every weight matrix's singular values into [1/c, c] (SPEC.md).

sc(W) = U clip(S, 1/c, c) V^T is the Frobenius-norm projection of W onto the matrices whose
singular values all lie in [1/c, c]; c = 1 gives U V^T. Which leaves are weight matrices, and
how conv kernels and leading ensemble / seed axes are handled, is defined in matrices.py.
"""

from typing import Any, Literal

import jax
import jax.numpy as jnp

from interventions.linalg import svd
from interventions.matrices import map_weight_matrices
from interventions.newton_schulz import DEFAULT_NS_STEPS, ns_clip_matrices

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


def svd_clip_matrices(w: jax.Array, lower: Any, upper: Any) -> jax.Array:
    """U clip(S, lower, upper) V^T for each (batch..., m, n) matrix, via a float32 SVD (linalg.py).

    A matrix whose singular values already lie in the bounds is returned as it was (the projection
    leaves it fixed), so no SVD round-off is added to it.
    """
    w32 = jnp.asarray(w, jnp.float32)
    u, s, vt = svd(w32)
    clipped = jnp.clip(s, lower, upper)
    rebuilt = jnp.matmul(u * clipped[..., None, :], vt, precision=jax.lax.Precision.HIGHEST)
    inside = jnp.all(clipped == s, axis=-1)[..., None, None]
    return jnp.where(inside, w32, rebuilt).astype(w.dtype)


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

    sides: "both", "upper" ([0, c]) or "lower" ([1/c, inf)). method: "svd" (exact, float32) or
    "newton_schulz" (Polar Express, `ns_steps` iterations per matrix sign). conv_spatial_ndim: the
    number of spatial kernel axes of "Conv*" modules. Biases, norms and scalars are returned as
    they are. Jittable with the keyword options static; works under jax.vmap.
    """
    lower, upper = clip_bounds(c, sides)
    if method == "svd":
        clip = lambda w: svd_clip_matrices(w, lower, upper)
    elif method == "newton_schulz":
        clip = lambda w: ns_clip_matrices(w, lower, upper, ns_steps).astype(w.dtype)
    else:
        raise ValueError(f"unknown method {method!r}; accepted: {', '.join(METHODS)}")
    return map_weight_matrices(clip, params, conv_spatial_ndim)
