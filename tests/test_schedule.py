"""Schedules fire exactly once at each scheduled env step."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interventions import make_schedule


def fired_by_loop(schedule, max_steps: int) -> list[int]:
    """The env steps at which a loop that checks due() after every env step fires."""
    return [step for step in range(1, max_steps + 1) if schedule.due(step)]


@pytest.mark.parametrize("every, max_steps", [(7, 50), (10, 100), (200_000, 1_000_000), (3, 2)])
def test_every_k_fires_at_multiples(every, max_steps):
    schedule = make_schedule(every=every)
    expected = list(range(every, max_steps + 1, every))
    assert schedule.steps_upto(max_steps) == expected
    if max_steps <= 1000:
        assert fired_by_loop(schedule, max_steps) == expected
    assert not schedule.due(0)
    assert schedule.due(every) and not schedule.due(every + 1) and not schedule.due(every - 1)


def test_listed_steps_fire_exactly_there():
    schedule = make_schedule(steps=[3, 8, 21])
    assert fired_by_loop(schedule, 30) == [3, 8, 21]
    assert schedule.steps_upto(20) == [3, 8]
    assert schedule.steps_upto(21) == [3, 8, 21]
    assert make_schedule(steps=np.array([5, 9])).steps_upto(10) == [5, 9]
    assert make_schedule(steps=[]).steps_upto(100) == []


@settings(max_examples=60, deadline=None)
@given(
    every=st.one_of(st.none(), st.integers(1, 40)),
    listed=st.lists(st.integers(1, 300), unique=True, max_size=12),
    chunks=st.lists(st.integers(1, 37), min_size=1, max_size=30),
)
def test_loops_that_skip_ahead_fire_each_step_once(every, listed, chunks):
    """With env steps advancing by several at a time (vectorised envs, action repeat), collecting
    steps_between(previous, current) hits every scheduled step exactly once."""
    schedule = make_schedule(every=every) if every else make_schedule(steps=sorted(listed))
    fired, step = [], 0
    for chunk in chunks:
        fired += schedule.steps_between(step, step + chunk)
        step += chunk
    assert fired == schedule.steps_upto(step)
    assert fired == fired_by_loop(schedule, step)
    assert len(set(fired)) == len(fired)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "exactly one of every"),
        ({"every": 5, "steps": [5]}, "exactly one of every"),
        ({"every": 0}, "every must be a positive int"),
        ({"every": -3}, "every must be a positive int"),
        ({"every": 2.5}, "every must be a positive int"),
        ({"every": True}, "every must be a positive int"),
        ({"steps": [5, 5]}, "strictly increasing"),
        ({"steps": [9, 4]}, "strictly increasing"),
        ({"steps": [0, 4]}, "each scheduled step must be a positive int"),
        ({"steps": [1.5]}, "each scheduled step must be a positive int"),
        ({"steps": "15001"}, "sequence of ints"),
    ],
)
def test_invalid_schedules_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_schedule(**kwargs)
