"""When interventions fire, in env steps: every K steps (SAC) or at listed steps (BRO).

env_step counts the env steps taken so far (1 after the first step). A training loop that calls
`due(env_step)` once per env step fires each scheduled step exactly once, for every UTD ratio
and number of seeds (all seeds step together); `steps_between` serves loops that skip ahead.
"""

import dataclasses
import numbers
from collections.abc import Sequence

SAC_RESET_EVERY = 200_000
BRO_RESET_STEPS = (15001, 50001, 250001, 500001, 750001, 1000001, 1500001, 2000001)
BRO_FAST_UTD = 2


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Scheduled env steps: multiples of `every`, or exactly the strictly increasing `steps`."""

    every: int | None = None
    steps: tuple[int, ...] | None = None

    def __post_init__(self):
        if (self.every is None) == (self.steps is None):
            raise ValueError(
                "give exactly one of every (a period in env steps) or steps (a list of env "
                f"steps); got every={self.every!r}, steps={self.steps!r}"
            )
        if self.every is not None:
            object.__setattr__(self, "every", _positive_int(self.every, "every"))
            return
        steps = tuple(_positive_int(s, "each scheduled step") for s in self.steps)
        if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
            raise ValueError(f"scheduled steps must be strictly increasing, got {list(steps)}")
        object.__setattr__(self, "steps", steps)

    def due(self, env_step: int) -> bool:
        """True exactly at a scheduled env step."""
        if self.every is not None:
            return env_step > 0 and env_step % self.every == 0
        return env_step in self.steps

    def steps_between(self, start: int, stop: int) -> list[int]:
        """Scheduled steps s with start < s <= stop."""
        if self.every is not None:
            first = (max(start, 0) // self.every + 1) * self.every
            return list(range(first, stop + 1, self.every))
        return [s for s in self.steps if start < s <= stop]

    def steps_upto(self, max_steps: int) -> list[int]:
        """Scheduled steps s with 1 <= s <= max_steps (those a run of max_steps env steps hits)."""
        return self.steps_between(0, max_steps)


def make_schedule(every: int | None = None, steps: Sequence[int] | None = None) -> Schedule:
    """A schedule from exactly one of: a period `every` (> 0) or increasing `steps` (each > 0)."""
    if isinstance(steps, str | bytes):
        raise ValueError(f"steps must be a sequence of ints, got the string {steps!r}")
    return Schedule(every=every, steps=None if steps is None else tuple(steps))


def bro_reset_steps(max_steps: int, utd: int) -> list[int]:
    """BRO's reset steps below max_steps; BRO Fast (UTD 2) resets only at the first one."""
    _positive_int(max_steps, "max_steps")
    _positive_int(utd, "utd")
    steps = BRO_RESET_STEPS[:1] if utd == BRO_FAST_UTD else BRO_RESET_STEPS
    return [s for s in steps if s < max_steps]
