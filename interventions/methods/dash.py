"""DASH (Shin et al. 2024, "Direction-Aware SHrinking"): shrink each unit's weights by how far
they point away from the direction the loss wants them to grow.

g is an exponential moving average (rate alpha, from zero) of the negative loss gradient over
minibatches of the learner's data, every gradient taken at the current weights. Each weight
layer's kernel is then scaled, per output unit, by clamp(cos(w_i, g_i), lambda, 1), w_i the
unit's incoming weights (a conv kernel: per input-output channel pair, over its spatial taps);
a layer's bias vector as a whole by clamp(cos(b, g_b), lambda, 1). Normalisation layers and
the optimizer state are untouched. As baekrok/DASH-Direction-Aware-SHrinking
utils/train_utils.py `dash`; cosines as torch.cosine_similarity (eps 1e-8).
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from interventions import units
from interventions.matrices import CONV_PREFIX, KERNEL_KEY
from interventions.parts import check_networks, get_part, set_part
from interventions.registry import (
    EventContext,
    Method,
    SettingError,
    Settings,
    parts_setting,
    setting,
)

PyTree = Any
EPS = 1e-8  # torch.cosine_similarity's default


@dataclasses.dataclass(frozen=True)
class DashConfig(Settings):
    min_scale: float = setting(0.3, "lambda: the smallest factor a unit's weights are shrunk by "
                               "(clamp(cos, lambda, 1)); DASH's default.")
    alpha: float = setting(0.3, "Rate of the moving average of the negative gradient over the "
                           "minibatches; DASH's default.")
    batches: int = setting(10, "Minibatches the gradient average runs over.")
    batch_size: int = setting(256, "Transitions per minibatch (SAC's batch).")
    parts: tuple[str, ...] = parts_setting("DASH (trained networks' parameters)")

    def check(self):
        for name in ("min_scale", "alpha"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value <= 1):
                raise SettingError(name, f"{name} must be in (0, 1], got {value}")
        for name in ("batches", "batch_size"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise SettingError(name, f"{name} must be a positive int, got {value}")


def _cosine(a: jax.Array, b: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """cos(a, b) over `axes` (kept as size 1), each norm floored at EPS."""
    norm = lambda x: jnp.maximum(jnp.sqrt(jnp.sum(x * x, axis=axes, keepdims=True)), EPS)
    return jnp.sum(a * b, axis=axes, keepdims=True) / (norm(a) * norm(b))


def shrink(params: PyTree, direction: PyTree, min_scale: float) -> PyTree:
    """`params` with each weight layer's kernel and bias scaled by clamp(cos(w, g), min_scale,
    1) against `direction` (same tree): per output unit over a Dense kernel's inputs, per
    channel pair over a conv kernel's taps, over a bias vector as a whole. Leading (ensemble)
    axes are kept apart; other leaves are returned as they are."""
    leaves = units.leaves_by_path(params)
    layers = {p.rpartition("/")[0] for p, x in leaves.items()
              if p.rpartition("/")[2] == KERNEL_KEY and x.ndim >= 2}
    toward = units.leaves_by_path(direction)

    def one(path, w):
        module, _, key = path.rpartition("/")
        if module not in layers or key not in (KERNEL_KEY, "bias"):
            return w
        conv = module.rpartition("/")[2].startswith(CONV_PREFIX)
        axes = (-1,) if key == "bias" else (-4, -3) if conv else (-2,)
        return w * jnp.clip(_cosine(w, toward[path], axes), min_scale, 1.0)

    return units.map_by_path(one, params)


def apply(state, parts, cfg: DashConfig, ctx: EventContext):
    """Average the negative loss gradient of each part over `ctx.data`'s minibatches (in
    order, at the current weights), then shrink the part against it."""
    def step(average, inputs):
        batch, key = inputs
        grads = ctx.learner.loss_grads(state, batch, key)
        return {part: jax.tree.map(lambda g, new: (1 - cfg.alpha) * g - cfg.alpha * new,
                                   average[part], grads[part]) for part in parts}, None

    n = jax.tree.leaves(ctx.data)[0].shape[0]
    start = {part: jax.tree.map(jnp.zeros_like, get_part(state, part)) for part in parts}
    average, _ = jax.lax.scan(step, start, (ctx.data, jax.random.split(ctx.key, n)))
    for part in parts:
        state = set_part(state, part, shrink(get_part(state, part), average[part],
                                             cfg.min_scale))
    return state


def validate(state, parts, cfg: DashConfig, learner) -> None:
    """Each part is a trained network's parameters (those have loss gradients)."""
    check_networks(parts, learner, METHOD.flag("parts"), trained=True)


METHOD = Method(
    name="dash",
    kind="event",
    config=DashConfig,
    summary="DASH: shrink each unit's incoming weights by clamp(cos(w, -grad EMA), lambda, 1).",
    default_parts="train_parts",
    apply=apply,
    needs=("key", "data"),
    data_shape=lambda cfg: (cfg.batches, cfg.batch_size),
    validate=validate,
)
