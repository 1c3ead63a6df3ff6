"""Plasticity diagnostics (docs/algorithms.md): weight-matrix spectra, srank and dormant units of
features.

All functions are jittable and keep leading batch axes (seeds, ensemble members): a metric of a
kernel of shape (seeds, ensemble, m, n) has shape (seeds, ensemble).
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from interventions.matrices import weight_matrices
from learners.features import RESIDUAL
from numerics.linalg import (
    EXTREMES_GRAM_MIN_SIDE,
    extreme_singular_values,
    singular_values,
)

PyTree = Any
Metrics = dict[str, dict[str, jax.Array]]
Extremes = Mapping[str, tuple[jax.Array, jax.Array]]  # {layer: (sigma_max, sigma_min)}
SRANK_THRESHOLD = 0.99
DORMANT_TAUS = (0.0, 0.025)


def _zero_extremes(w: jax.Array) -> tuple[jax.Array, jax.Array]:
    zero = jnp.zeros(w.shape[:-2], jnp.float32)
    return zero, zero


@jax.jit
def _extremes_unless(w: jax.Array, skip: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jax.lax.cond(skip, _zero_extremes, extreme_singular_values, w)


def weight_extremes(params: PyTree, conv_spatial_ndim: int = 2,
                    skip: Mapping[str, jax.Array] | None = None,
                    layers: Collection[str] | None = None) -> Extremes:
    """(sigma_max, sigma_min) of each weight matrix (of those named in `layers`, if given),
    keyed by layer path; zeros for a layer whose `skip` flag (one bool for its whole stack) is
    set. Called outside jit, each matrix shape compiles one program that the diagnostics and
    the event reports of a run share (a call under jit inlines it)."""
    skip = skip or {}
    return {name: _extremes_unless(w, skip.get(name, False))
            for name, w in weight_matrices(params, conv_spatial_ndim).items()
            if layers is None or name in layers}


def shared_layers(params: PyTree, conv_spatial_ndim: int = 2) -> set[str]:
    """The layers whose extreme singular values the diagnostics and the event reports take from
    `weight_extremes`' shared programs: those whose both sides reach EXTREMES_GRAM_MIN_SIDE, which
    take the Gram route, slow to compile, so compiled once per shape. A smaller matrix's SVDs
    compile quickly inline, which costs less than calling a program of their own at every event
    (`python benchmarks/compile_times.py --parts=bisection` times both compilations)."""
    return {name for name, w in weight_matrices(params, conv_spatial_ndim).items()
            if min(w.shape[-2:]) >= EXTREMES_GRAM_MIN_SIDE}


def weight_metrics(params: PyTree, conv_spatial_ndim: int = 2, *,
                   extremes: Extremes | None = None) -> Metrics:
    """cond, stable_rank, sigma_max, sigma_min and fro of each weight matrix, keyed by layer path
    (e.g. "VmapCritic_0/Dense_1"). They need only the extreme singular values
    (linalg.extreme_singular_values; `extremes`, where already known, e.g. `weight_extremes`')
    and the Frobenius norm."""
    extremes = extremes or {}
    out = {}
    for name, w in weight_matrices(params, conv_spatial_ndim).items():
        sigma_max, sigma_min = extremes.get(name) or extreme_singular_values(w)
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


def weight_changes(before: PyTree, after: PyTree, conv_spatial_ndim: int = 2) -> dict:
    """{layer: ||after - before||_F} of each weight matrix (batch...); ValueError where the two
    trees have different layers."""
    old = weight_matrices(before, conv_spatial_ndim)
    new = weight_matrices(after, conv_spatial_ndim)
    if old.keys() != new.keys():
        raise ValueError(
            f"before and after have different layers: {sorted(old)} vs {sorted(new)}; "
            "pass the same part of the state before and after the event"
        )
    return {name: jnp.sqrt(jnp.sum(jnp.square(jnp.asarray(new[name], jnp.float32)
                                              - jnp.asarray(w, jnp.float32)), axis=(-2, -1)))
            for name, w in old.items()}


def event_report(changes: Mapping[str, jax.Array], extremes: Extremes,
                 after_extremes: Extremes | None = None,
                 spectral_map: Callable | None = None) -> Metrics:
    """Per weight matrix: fro_change (`changes`, from `weight_changes`), cond_before (from
    `extremes` before the event) and cond_after: cond_before where the matrix did not change,
    else from `after_extremes` (none for a layer it lacks) or, where the event applied a
    non-decreasing s -> s' (`spectral_map`) to every singular value, from the extremes before
    it."""
    report = {}
    for name, fro_change in changes.items():
        s_max, s_min = extremes[name]
        cond_before = s_max / s_min
        report[name] = {"fro_change": fro_change, "cond_before": cond_before}
        if spectral_map is not None:
            changed = spectral_map(s_max) / spectral_map(s_min)
        elif name in after_extremes:
            a_max, a_min = after_extremes[name]
            changed = a_max / jnp.where(fro_change == 0, 1.0, a_min)
        else:
            continue
        report[name]["cond_after"] = jnp.where(fro_change == 0, cond_before, changed)
    return report


def clip_event_report(before: PyTree, after: PyTree, conv_spatial_ndim: int = 2, *,
                      extremes: Extremes | None = None,
                      spectral_map: Callable | None = None,
                      defer: Collection[str] = ()) -> Metrics:
    """Per weight matrix: fro_change ||after - before||_F, cond_before and cond_after, in one
    jittable call (`event_report` of `weight_changes`).

    `extremes` {layer: (sigma_max, sigma_min)} of `before`, where already known (the
    diagnostics of the same state), saves computing them. `spectral_map`, a non-decreasing
    s -> s' that the event applied to the singular values of each matrix it changed, gives
    cond_after from sigma_max and sigma_min before it instead of those of `after`. A layer the
    event left unchanged in every matrix keeps its cond without computing anything. Layers in
    `defer` get no cond_after (it is computed later, outside jit: `event_report` with
    `weight_extremes` of `after`).
    """
    changes = weight_changes(before, after, conv_spatial_ndim)
    old = weight_matrices(before, conv_spatial_ndim)
    known = dict(extremes or {})
    extremes = {name: known.get(name) or extreme_singular_values(w) for name, w in old.items()}
    after_extremes = None
    if spectral_map is None:
        new = weight_matrices(after, conv_spatial_ndim)
        after_extremes = {name: _extremes_unless(new[name], jnp.all(changes[name] == 0))
                          for name in new if name not in defer}
    return event_report(changes, extremes, after_extremes, spectral_map)
