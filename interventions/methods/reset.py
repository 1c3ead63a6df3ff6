"""Resets (algorithms.md, Reset): the chosen parts go back to initial values, as the learner resets
(SAC: a fresh initialisation with a new key; BRO: the weights the run started from)."""

import dataclasses

from interventions.registry import EventContext, Method, Settings, parts_setting
from interventions.reset import initial_reset


@dataclasses.dataclass(frozen=True)
class ResetConfig(Settings):
    parts: tuple[str, ...] = parts_setting("a reset (parameters, optimizer states, scalars)")


def apply(state, parts, cfg: ResetConfig, ctx: EventContext):
    """The parts from `ctx.reinit`; every other part is kept bit for bit. The learners' default
    parts include `plasticity`, the per-step methods' state, which belongs to the weights."""
    return initial_reset(state, ctx.reinit, parts)


METHOD = Method(
    name="reset",
    kind="event",
    config=ResetConfig,
    summary="Reset: re-initialise the networks, their optimizers and scalars (SAC: fresh weights; "
            "BRO: the run's first weights); the replay buffer is kept.",
    default_parts="reset_parts",
    apply=apply,
    needs=("reinit",),
    params_only=False,
)
