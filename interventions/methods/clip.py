"""SingularClip (algorithms.md): every weight matrix's singular values clipped into [1/c, c]."""

import dataclasses
import functools
import math

import jax.numpy as jnp

from interventions.newton_schulz import DEFAULT_NS_STEPS
from interventions.parts import map_parts, optimizer_owners
from interventions.registry import (
    EventContext,
    Method,
    SettingError,
    Settings,
    parts_setting,
    setting,
)
from interventions.singular_clip import METHODS, SIDES, clip_bounds, singular_clip


def initial_opt_state(train_state):
    """A flax TrainState with its optimizer state as `tx.init` gives it."""
    return train_state.replace(opt_state=train_state.tx.init(train_state.params))


OPT_STATES = ("keep", "reset")


@dataclasses.dataclass(frozen=True)
class ClipConfig(Settings):
    c: float = setting(4.0, "SingularClip bound c >= 1: singular values go into [1/c, c].",
                       label="c")
    method: str = setting("svd", "How the clip is computed: svd, exact in float32 (the "
                          "singular vectors from the eigendecompositions of the Gram matrices "
                          "when a layer's matrices, all seeds', have condition numbers up to 8, "
                          "from their SVDs otherwise), or newton_schulz (Polar Express).",
                          METHODS)
    sides: str = setting("both", "Clip both ends ([1/c, c]), only the top ([0, c]) or only the "
                         "bottom ([1/c, inf)).", SIDES)
    parts: tuple[str, ...] = parts_setting("SingularClip")
    opt_state: str = setting("keep", "What a clip does with the optimizer state (Adam's moments "
                             "and step count) of each network it clips: keep it, or "
                             "reset it to its initial value, as a reset does.", OPT_STATES)
    ns_steps: int = setting(DEFAULT_NS_STEPS, "Polar Express iterations per matrix sign with "
                            "method newton_schulz (the Polar Express coefficients are for 8; "
                            "steps past 8 repeat the last; see benchmarks/clip.py).",
                            read_when=("method", "newton_schulz"))

    def check(self):
        if not (isinstance(self.c, int | float) and 1 <= self.c < math.inf):
            raise SettingError("c", f"c must be a finite number >= 1 (singular values go into "
                               f"[1/c, c]), got {self.c}")
        if not (isinstance(self.ns_steps, int) and self.ns_steps > 0):
            raise SettingError("ns_steps", f"ns_steps must be a positive int, got {self.ns_steps}")


def apply(state, parts, cfg: ClipConfig, ctx: EventContext):
    """Clip the parts' weight matrices; with opt_state "reset", the optimizer state of each
    network a clipped part lies in goes back to its initial value."""
    clip = functools.partial(singular_clip, c=cfg.c, sides=cfg.sides, method=cfg.method,
                             ns_steps=cfg.ns_steps)
    state = map_parts(state, parts, clip)
    if cfg.opt_state == "reset":
        state = map_parts(state, optimizer_owners(state, parts), initial_opt_state)
    return state


def spectral_map(cfg: ClipConfig):
    """s -> clip(s) into the bounds: what the SVD clip does to each matrix's singular values
    (up to float32 rounding); None for Newton-Schulz, whose clip is approximate."""
    if cfg.method != "svd":
        return None
    lower, upper = clip_bounds(cfg.c, cfg.sides)
    return lambda s: jnp.clip(s, lower, upper)


METHOD = Method(
    name="clip",
    kind="event",
    config=ClipConfig,
    summary="SingularClip: clip every weight matrix's singular values into [1/c, c].",
    default_parts="param_parts",
    apply=apply,
    spectral_map=spectral_map,
)
