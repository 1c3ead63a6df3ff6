"""Plasticity diagnostics (SPEC.md): weight-matrix spectra, srank and dormant units of features.

All functions are jittable and keep leading batch axes (seeds, ensemble members): a metric of a
kernel of shape (seeds, ensemble, m, n) has shape (seeds, ensemble).
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from interventions.linalg import extreme_singular_values, singular_values
from interventions.matrices import weight_matrices

PyTree = Any
Metrics = dict[str, dict[str, jax.Array]]
SRANK_THRESHOLD = 0.99
DORMANT_TAUS = (0.0, 0.025)
# The name a network records a residual stream under (BRO's block outputs, `x + LN(...)`, with
# no activation after the sum): srank applies to it, dormant ratios, defined on activations
# (Sokar et al. 2023: a unit's mean |output| after its activation), do not.
RESIDUAL = "residual"


def weight_metrics(params: PyTree, conv_spatial_ndim: int = 2) -> Metrics:
    """cond, stable_rank, sigma_max, sigma_min and fro of each weight matrix, keyed by layer path
    (e.g. "VmapCritic_0/Dense_1"). They need only the extreme singular values
    (linalg.extreme_singular_values) and the Frobenius norm."""
    out = {}
    for name, w in weight_matrices(params, conv_spatial_ndim).items():
        sigma_max, sigma_min = extreme_singular_values(w)
        fro = jnp.sqrt(jnp.sum(jnp.square(jnp.asarray(w, jnp.float32)), axis=(-2, -1)))
        out[name] = {"cond": sigma_max / sigma_min, "stable_rank": jnp.square(fro / sigma_max),
                     "sigma_max": sigma_max, "sigma_min": sigma_min, "fro": fro}
    return out


def srank(features: jax.Array, threshold: float = SRANK_THRESHOLD) -> jax.Array:
    """Smallest k with sum_{i<=k} sigma_i >= threshold * sum(sigma), for (..., batch, units).

    0 for an all-zero feature matrix.
    """
    s = singular_values(features)
    total = jnp.sum(s, axis=-1, keepdims=True)
    short = jnp.cumsum(s, axis=-1) < threshold * total
    k = jnp.sum(short, axis=-1) + 1
    return jnp.where(total[..., 0] > 0, k, 0)


def dormant_ratio(features: jax.Array, tau: float) -> jax.Array:
    """Fraction of units whose mean |activation| over the batch, divided by the layer's mean over
    units, is <= tau; features (..., batch, units). An all-zero layer is fully dormant."""
    unit = jnp.mean(jnp.abs(features), axis=-2)
    layer = jnp.mean(unit, axis=-1, keepdims=True)
    score = jnp.where(layer > 0, unit / jnp.where(layer > 0, layer, 1.0), 0.0)
    return jnp.mean(score <= tau, axis=-1)


def dormant_key(tau: float) -> str:
    """Metric name for a dormant threshold: 0 -> "dormant_tau0", 0.025 -> "dormant_tau0.025"."""
    return f"dormant_tau{tau:g}"


def feature_metrics(
    features: Mapping[str, jax.Array],
    taus: Sequence[float] = DORMANT_TAUS,
    srank_threshold: float = SRANK_THRESHOLD,
) -> Metrics:
    """Per hidden layer (features (..., batch, units)), its srank and dormant ratios; a
    residual stream (a name ending in `RESIDUAL`) gets srank only."""
    out = {}
    for name, h in features.items():
        metrics = {"srank": srank(h, srank_threshold)}
        if name.rsplit("/", 1)[-1] != RESIDUAL:
            metrics.update({dormant_key(tau): dormant_ratio(h, tau) for tau in taus})
        out[name] = metrics
    return out


def _cond(w: jax.Array, _) -> jax.Array:
    s_max, s_min = extreme_singular_values(w)
    return s_max / s_min


def clip_event_report(before: PyTree, after: PyTree, conv_spatial_ndim: int = 2, *,
                      extremes: Mapping[str, tuple[jax.Array, jax.Array]] | None = None,
                      spectral_map: Callable | None = None) -> Metrics:
    """Per weight matrix: fro_change ||after - before||_F, cond_before and cond_after.

    `extremes` {layer: (sigma_max, sigma_min)} of `before`, where already known (the
    diagnostics of the same state), saves computing them. `spectral_map`, a non-decreasing
    s -> s' that the event applied to the singular values of each matrix it changed, gives
    cond_after from sigma_max and sigma_min before it instead of those of `after`. A layer the
    event left unchanged in every matrix keeps its cond without computing anything.
    """
    old = weight_matrices(before, conv_spatial_ndim)
    new = weight_matrices(after, conv_spatial_ndim)
    if old.keys() != new.keys():
        raise ValueError(
            f"before and after have different layers: {sorted(old)} vs {sorted(new)}; "
            "pass the same part of the state before and after the event"
        )
    report = {}
    for name, w in old.items():
        if extremes is not None and name in extremes:
            s_max, s_min = extremes[name]
        else:
            s_max, s_min = extreme_singular_values(w)
        change = jnp.asarray(new[name], jnp.float32) - jnp.asarray(w, jnp.float32)
        fro_change = jnp.sqrt(jnp.sum(jnp.square(change), axis=(-2, -1)))
        cond_before = s_max / s_min
        if spectral_map is None:
            cond_after = jax.lax.cond(jnp.all(fro_change == 0), lambda _, c: c, _cond,
                                      new[name], cond_before)
            cond_after = jnp.where(fro_change == 0, cond_before, cond_after)
        else:
            cond_after = jnp.where(fro_change == 0, cond_before,
                                   spectral_map(s_max) / spectral_map(s_min))
        report[name] = {"fro_change": fro_change, "cond_before": cond_before,
                        "cond_after": cond_after}
    return report
