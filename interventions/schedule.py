"""When interventions fire, in env steps: every K steps (SAC's resets) or at listed steps (BRO's;
the agents' own reset schedules are theirs, agents.Registered).

env_step counts the env steps taken so far (1 after the first step). A training loop that calls
`due(env_step)` once per env step fires each scheduled step exactly once, for every UTD ratio
and number of seeds (all seeds step together); `steps_between` serves loops that skip ahead.

A period may also count gradient steps (`GradStepSchedule`, as the SingularClip paper's
appendix counts its "every 200,000 gradient steps"): with `utd` gradient steps per env step from
`start_steps` on, it fires after the env step whose update completes each multiple of K. At
UTD 8 and K = 200,000 that is every 25,000 env steps, 8 times as often as K env steps.
"""

import dataclasses
import numbers
from collections.abc import Sequence

SCHEDULE_UNITS = ("env_steps", "grad_steps")


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


@dataclasses.dataclass(frozen=True)
class GradStepSchedule:
    """Every `every` gradient steps, in env steps: `utd` gradient steps follow each env step
    from `start_steps` on (the first update comes after env step max(start_steps, 1))."""

    every: int
    utd: int
    start_steps: int

    def __post_init__(self):
        object.__setattr__(self, "every", _positive_int(self.every, "every"))
        object.__setattr__(self, "utd", _positive_int(self.utd, "utd"))
        if self.start_steps < 0:
            raise ValueError(f"start_steps must be >= 0, got {self.start_steps}")

    @property
    def first_update(self) -> int:
        return max(self.start_steps, 1)

    def grad_steps(self, env_step: int) -> int:
        """Gradient steps taken once env step `env_step` and its update are done."""
        return self.utd * max(0, env_step - self.first_update + 1)

    def due(self, env_step: int) -> bool:
        """True at the env step whose update completes a multiple of `every` gradient steps."""
        return self.grad_steps(env_step) // self.every > self.grad_steps(env_step - 1) // self.every

    def steps_between(self, start: int, stop: int) -> list[int]:
        """Scheduled env steps s with start < s <= stop."""
        first = self.grad_steps(max(start, 0)) // self.every + 1
        last = self.grad_steps(stop) // self.every
        steps = (self.first_update - 1 + -(-m * self.every // self.utd)
                 for m in range(first, last + 1))
        return list(dict.fromkeys(steps))

    def steps_upto(self, max_steps: int) -> list[int]:
        return self.steps_between(0, max_steps)


def make_schedule(every: int | None = None, steps: Sequence[int] | None = None,
                  unit: str = "env_steps", utd: int = 1,
                  start_steps: int = 0) -> "Schedule | GradStepSchedule":
    """A schedule from exactly one of: a period `every` (> 0; in env steps, or in gradient steps
    with unit "grad_steps", `utd` and `start_steps`) or increasing env `steps` (each > 0)."""
    if isinstance(steps, str | bytes):
        raise ValueError(f"steps must be a sequence of ints, got the string {steps!r}")
    if unit not in SCHEDULE_UNITS:
        raise ValueError(f"unknown unit {unit!r}; accepted: {', '.join(SCHEDULE_UNITS)}")
    if unit == "grad_steps" and steps is None:
        return GradStepSchedule(every, utd, start_steps)
    return Schedule(every=every, steps=None if steps is None else tuple(steps))

