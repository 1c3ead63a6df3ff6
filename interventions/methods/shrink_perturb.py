"""Shrink & Perturb (Ash & Adams 2020): at scheduled steps theta <- shrink * theta + perturb *
noise, the noise a fresh initialisation of the same networks (the RL form: an interpolation
towards new weights) or Gaussian N(0, sigma^2) per parameter (the supervised form)."""

import dataclasses
import math

import jax
import jax.numpy as jnp

from interventions import layer_roles
from interventions.methods.clip import OPT_STATES, initial_opt_state
from interventions.parts import get_part, optimizer_owners, set_part
from interventions.registry import (
    EventContext,
    Method,
    SettingError,
    Settings,
    parts_setting,
    setting,
)
from numerics import rng

NOISES = ("fresh", "gaussian")
LEAVES = ("all", "layers")


@dataclasses.dataclass(frozen=True)
class ShrinkPerturbConfig(Settings):
    shrink: float = setting(0.2, "Factor on the current parameters (FIRE's SAC code: 0.2).")
    perturb: float = setting(0.8, "Factor on the noise (FIRE's SAC code: 0.8 of a fresh "
                             "initialisation).")
    noise: str = setting("fresh", "The noise: a fresh initialisation of the networks (fresh), "
                         "or N(0, sigma^2) per parameter (gaussian).", NOISES)
    sigma: float = setting(0.01, "Standard deviation of the Gaussian noise (DASH's S&P: 0.01).",
                           read_when=("noise", "gaussian"))
    leaves: str = setting("all", "What is shrunk and perturbed: every parameter of the parts "
                          "(all), or the kernels and biases of Dense and Conv layers, "
                          "normalization layers untouched (layers, as DASH's S&P).", LEAVES)
    opt_state: str = setting("reset", "What happens to the optimizer state of each network "
                             "changed: reset to its initial value (FIRE's SAC code), or keep.",
                             OPT_STATES)
    parts: tuple[str, ...] = parts_setting("Shrink & Perturb")

    def check(self):
        for name in ("shrink", "perturb"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 <= value < math.inf):
                raise SettingError(name, f"{name} must be a finite number >= 0, got {value}")
        self.positive("sigma")


def _mix(theta: jax.Array, noise: jax.Array, cfg: ShrinkPerturbConfig) -> jax.Array:
    """shrink * theta + perturb * noise, with factors of 0 and 1 left out of the arithmetic
    (shrink 1, perturb 0 gives theta bit for bit; shrink 0, perturb 1 the noise)."""
    terms = [x if factor == 1 else factor * x
             for factor, x in ((cfg.shrink, theta), (cfg.perturb, noise)) if factor != 0]
    if not terms:
        return jnp.zeros_like(theta)
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _chosen(path: tuple[str, ...], cfg: ShrinkPerturbConfig, layers: set) -> bool:
    return cfg.leaves == "all" or path[:-1] in layers


def shrink_perturb(params, noise_of, cfg: ShrinkPerturbConfig):
    """One part's parameters shrunk and perturbed; `noise_of(i, leaf)` is the noise of leaf i
    (in `jax.tree.leaves` order)."""
    flat = layer_roles.flatten(params)
    layers = set(layer_roles.layers(params))
    leaves = [_mix(leaf, noise_of(i, leaf), cfg) if _chosen(path, cfg, layers) else leaf
              for i, (path, leaf) in enumerate(zip(flat.paths, flat.leaves, strict=True))]
    return flat.rebuild(leaves)


def apply(state, parts, cfg: ShrinkPerturbConfig, ctx: EventContext):
    """Each part shrunk and perturbed; with opt_state "reset", the optimizer state of each
    network changed goes back to its initial value (a target network has none)."""
    keys = jax.random.split(ctx.key, len(parts))
    for path, key in zip(parts, keys, strict=True):
        if cfg.noise == "fresh":
            fresh = jax.tree.leaves(get_part(ctx.fresh, path))
            noise_of = lambda i, leaf, fresh=fresh: fresh[i]
        else:
            leaf_keys = jax.random.split(key, len(jax.tree.leaves(get_part(state, path))))
            noise_of = lambda i, leaf, leaf_keys=leaf_keys: cfg.sigma * rng.normal(
                leaf_keys[i], leaf.shape, leaf.dtype)
        state = set_part(state, path, shrink_perturb(get_part(state, path), noise_of, cfg))
    if cfg.opt_state == "reset":
        for owner in optimizer_owners(state, parts):
            state = set_part(state, owner, initial_opt_state(get_part(state, owner)))
    return state


METHOD = Method(
    name="shrink_perturb",
    prefix="sp",
    kind="event",
    config=ShrinkPerturbConfig,
    summary="Shrink & Perturb: parameters <- shrink * parameters + perturb * noise (a fresh "
            "initialisation or Gaussian) at scheduled steps (Ash & Adams 2020).",
    default_parts="param_parts",
    apply=apply,
    needs=("key", "fresh"),
    needs_for=lambda cfg: ("key", "fresh") if cfg.noise == "fresh" else ("key",),
)
