"""Pieces the agents share: their config checks, the temperature module, Polyak averaging, the
sown features of a network."""

import dataclasses
import math
from collections.abc import Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

FLOAT32_LOG_RANGE = 80.0  # exp(+-80) is still a finite, normal float32
# A tanh-squashed policy's entropy is at most |A| ln 2 (uniform on [-1, 1]^|A|): a target entropy
# -scale * |A| above it could never be reached, and the temperature would grow without bound.
MIN_TARGET_ENTROPY_SCALE = -math.log(2.0)


def check_finite_numbers(config) -> None:
    """ValueError naming the first float field of a config dataclass that is NaN or infinite
    (comparisons with NaN are all false, so range checks alone let it through)."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{field.name} must be a finite number, got {value}")


MAX_SIZE = 2**31 - 1  # XLA's array dimensions (and JAX's shape arithmetic) are int32


def check_size(name: str, value) -> None:
    """ValueError for an integer setting that sizes an array (a width, a count) past int32."""
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_SIZE:
        raise ValueError(f"{name} must be at most 2**31 - 1 ({MAX_SIZE:,}), the largest array "
                         f"dimension, got {value:,}")


def check_ranges(config, positive: tuple[str, ...], unit_b1: tuple[str, ...] = (),
                 non_negative: tuple[str, ...] = ()) -> None:
    """ValueError naming the first setting of an agent's config outside its range: the
    `positive` ones, Adam's `unit_b1` decay rates in [0, 1), the `non_negative` ones, and every
    agent's discount in [0, 1], Polyak tau in (0, 1], an initial temperature and log-std bounds
    whose exponentials are float32 numbers, and a target entropy a tanh policy can reach."""
    check_finite_numbers(config)
    for name in positive:
        if getattr(config, name) <= 0:
            raise ValueError(f"{name} must be positive, got {getattr(config, name)}")
        check_size(name, getattr(config, name))
    for name in non_negative:
        if getattr(config, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(config, name)}")
    for name in unit_b1:
        if not 0.0 <= getattr(config, name) < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {getattr(config, name)}")
    if not 0.0 <= config.discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {config.discount}")
    if not 0.0 < config.tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {config.tau}")
    if not -FLOAT32_LOG_RANGE <= config.log_std_min < config.log_std_max <= FLOAT32_LOG_RANGE:
        raise ValueError(f"log_std_min and log_std_max must satisfy -{FLOAT32_LOG_RANGE:g} <= min "
                         f"< max <= {FLOAT32_LOG_RANGE:g} (exp of them is a float32), got "
                         f"{config.log_std_min} and {config.log_std_max}")
    if not (config.init_temperature > 0
            and abs(math.log(config.init_temperature)) < FLOAT32_LOG_RANGE):
        raise ValueError(f"init_temperature must lie strictly inside (e^-{FLOAT32_LOG_RANGE:g}, "
                         f"e^{FLOAT32_LOG_RANGE:g}) (its log is learned as a float32), got "
                         f"{config.init_temperature}")
    if not config.target_entropy_scale > MIN_TARGET_ENTROPY_SCALE:
        raise ValueError(f"target_entropy_scale must be above -ln 2 = "
                         f"{MIN_TARGET_ENTROPY_SCALE:.4f} (the target entropy is -scale * |A|, and "
                         f"a tanh policy's entropy is at most |A| ln 2), got "
                         f"{config.target_entropy_scale}")


class Temperature(nn.Module):
    """A learned positive scalar stored as its logarithm."""

    init_value: float = 1.0

    @nn.compact
    def __call__(self) -> jax.Array:
        log_value = self.param("log_value", nn.initializers.constant(jnp.log(self.init_value)), ())
        return jnp.exp(log_value)


def polyak(online, target, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


def sow_features(apply_fn: Callable, params, *inputs: jax.Array) -> dict[str, jax.Array]:
    """Hidden activations recorded by `sow(...)`, keyed by their '/'-joined module path."""
    _, state = apply_fn({"params": params}, *inputs, mutable=["intermediates"])
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(state["intermediates"]), sep="/")
    return {path: value[0] for path, value in flat.items()}
