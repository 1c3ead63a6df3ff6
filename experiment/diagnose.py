"""Plasticity diagnostics of a batched agent state, and their long-format CSV rows."""

import functools
from collections.abc import Callable, Iterator, Sequence

import jax
import numpy as np

from agents import Agent
from interventions import feature_metrics, weight_extremes, weight_metrics
from interventions.diagnostics import DORMANT_TAUS, SRANK_THRESHOLD, shared_layers


def make_diagnostics(agent: Agent, taus: Sequence[float] = DORMANT_TAUS,
                     srank_threshold: float = SRANK_THRESHOLD) -> Callable:
    """`(states, batch) -> {network: {layer: {metric: (seeds, ...)}}}` for a seed-batched state.

    Weight-matrix spectra of every network in `agent.weights`, plus srank (at
    `srank_threshold`) and dormant ratios (one per tau in `taus`) of every hidden layer's
    features on `batch` (leaves `(seeds, batch, ...)`; None: the spectra alone). Call it as it
    is, not under jax.jit: the extreme singular values of the large matrices go through
    `weight_extremes`' compiled programs, which the run's event reports share
    (`interventions.diagnostics.shared_layers`); the rest is one compiled call, made once per
    agent's functions and settings in a process (a later run's diagnostics call its program).
    """
    key = (agent.weights, agent.features, tuple(taus), srank_threshold)
    try:
        hash(key)
    except TypeError:  # settings that cannot be a key: functions of their own
        return _make(*key)
    return _shared(*key)


def _make(weights: Callable, features: Callable, taus: tuple[float, ...],
          srank_threshold: float) -> Callable:
    @jax.jit
    def rest(states, batch, extremes):
        out = {net: weight_metrics(params, extremes=extremes[net])
               for net, params in weights(states).items()}
        if batch is None:
            return out
        feats = jax.vmap(features)(states, batch)
        for net, layers in feats.items():
            metrics = feature_metrics(layers, taus, srank_threshold)
            out.setdefault(net, {}).update({f"{layer}/features": m for layer, m in metrics.items()})
        return out

    def extremes(states):
        return {net: weight_extremes(params, layers=shared_layers(params))
                for net, params in weights(states).items()}

    def diagnose(states, batch=None):
        return rest(states, batch, extremes(states))

    diagnose.rest = rest  # the jitted call, for a look at its compilations
    # Its program as it would compile for these arguments (jax.stages.Lowered).
    diagnose.lower = lambda states, batch=None: rest.lower(states, batch, extremes(states))
    return diagnose


_shared = functools.lru_cache(maxsize=8)(_make)


def rows(env_step: int, seeds: Sequence[int], values: dict, *prefix) -> Iterator[tuple]:
    """`(env_step, seed, *prefix, network, layer, metric, value)` rows.

    Values carry the seed axis first; further axes (an ensemble) are spelled out in the layer
    name as `layer[i]`.
    """
    for network, layers in values.items():
        for layer, metrics in layers.items():
            for metric, value in metrics.items():
                value = np.asarray(value).reshape(len(seeds), -1)
                for s, seed in enumerate(seeds):
                    for i, v in enumerate(value[s]):
                        name = layer if value.shape[1] == 1 else f"{layer}[{i}]"
                        yield (env_step, seed, *prefix, network, name, metric, f"{v:.6g}")
