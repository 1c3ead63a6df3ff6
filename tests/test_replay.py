"""ReplayBuffer: every sampled transition is checked against a fake env that encodes its own step.

The fake env's observation is (seed, episode, t, global step), so the true next observation of
any stored transition is that observation plus (0, 0, 1, 1), including the final observation at
an episode end and the next observation of the newest transition.
"""

import ctypes
import os
import tracemalloc

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from replay import ReplayBuffer

OBS_DIM, ACT_DIM = 4, 3


class CountingEnv:
    """N seeds whose episodes cycle through `lengths[s]`, ending terminated where `terminal[s]`."""

    def __init__(self, lengths: list[list[int]], terminal: list[list[bool]]):
        self.lengths, self.terminal = lengths, terminal
        self.num_seeds = len(lengths)
        self.episode = np.zeros(self.num_seeds, int)
        self.t = np.zeros(self.num_seeds, int)
        self.steps = 0

    def step(self) -> tuple[np.ndarray, ...]:
        seeds = np.arange(self.num_seeds)
        obs = np.stack([seeds, self.episode, self.t, np.full_like(seeds, self.steps)], -1)
        ends = self.t + 1 == self.episode_lengths(seeds, self.episode)
        terminated = ends & self.episode_terminal(seeds, self.episode)
        step = (
            obs.astype(np.float32),
            obs[:, :3].astype(np.float32),
            reward(obs),
            (obs + [0, 0, 1, 1]).astype(np.float32),
            terminated,
            ends & ~terminated,
        )
        self.episode = np.where(ends, self.episode + 1, self.episode)
        self.t = np.where(ends, 0, self.t + 1)
        self.steps += 1
        return step

    def episode_lengths(self, seeds: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        return np.array(
            [
                self.lengths[s][e % len(self.lengths[s])]
                for s, e in zip(seeds, episodes, strict=True)
            ]
        )

    def episode_terminal(self, seeds: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        return np.array(
            [
                self.terminal[s][e % len(self.terminal[s])]
                for s, e in zip(seeds, episodes, strict=True)
            ],
            bool,
        )


def reward(obs: np.ndarray) -> np.ndarray:
    """An exact float32 function of (seed, episode, t): a reward from another step differs."""
    return (obs[..., 0] + 0.5 * obs[..., 1] + 0.25 * obs[..., 2]).astype(np.float32)


def fill(buffer: ReplayBuffer, env: CountingEnv, steps: int) -> None:
    for _ in range(steps):
        buffer.insert(*env.step())


def check_batch(batch: dict, env: CountingEnv, capacity: int, batch_shape: tuple) -> np.ndarray:
    """Assert every sampled transition is a real, still-stored step; return their global steps."""
    n = env.num_seeds
    expected = {
        "observations": (OBS_DIM,),
        "actions": (ACT_DIM,),
        "next_observations": (OBS_DIM,),
        "rewards": (),
        "masks": (),
    }
    assert set(batch) == set(expected)
    for key, tail in expected.items():
        assert batch[key].shape == (n, *batch_shape, *tail), key
        assert batch[key].dtype == np.float32, key
    obs = batch["observations"].astype(int)
    seed, episode, t, step = np.moveaxis(obs, -1, 0)
    assert np.all(seed == np.arange(n).reshape((n,) + (1,) * len(batch_shape)))
    np.testing.assert_array_equal(batch["next_observations"], obs + [0, 0, 1, 1])
    np.testing.assert_array_equal(batch["actions"], obs[..., :3])
    np.testing.assert_array_equal(batch["rewards"], reward(obs))
    lengths = env.episode_lengths(seed.ravel(), episode.ravel()).reshape(t.shape)
    assert np.all(t < lengths)
    terminal = env.episode_terminal(seed.ravel(), episode.ravel()).reshape(t.shape)
    np.testing.assert_array_equal(batch["masks"], 1.0 - (terminal & (t + 1 == lengths)))
    assert np.all((step >= env.steps - capacity) & (step < env.steps))
    return step


def test_wraparound_with_different_episode_ends_per_seed():
    lengths = [[3, 5], [1, 4, 2], [10]]
    env = CountingEnv(lengths, [[True, False], [False, True, True], [False]])
    capacity = 7
    buffer = ReplayBuffer(3, capacity, OBS_DIM, ACT_DIM, seed=1)
    for steps in range(1, 61):
        buffer.insert(*env.step())
        assert len(buffer) == min(steps, capacity)
        check_batch(buffer.sample(16, utd=2), env, capacity, (2, 16))


def test_samples_exactly_the_valid_window_uniformly():
    capacity = 11
    env = CountingEnv([[4], [3, 6]], [[True], [False, True]])
    buffer = ReplayBuffer(2, capacity, OBS_DIM, ACT_DIM, seed=2)
    fill(buffer, env, 40)
    steps = check_batch(buffer.sample(2200, utd=5), env, capacity, (5, 2200))
    for seed_steps in steps:
        counts = np.bincount(seed_steps.ravel() - (env.steps - capacity), minlength=capacity)
        assert counts.size == capacity and counts.min() > 0
        assert stats.chisquare(counts).pvalue > 1e-4


# 1 to 3 seeds, each cycling through 1 to 5 episodes of (length, ends terminated).
EPISODES = st.lists(
    st.lists(st.tuples(st.integers(1, 8), st.booleans()), min_size=1, max_size=5),
    min_size=1,
    max_size=3,
)


def episodes_env(episodes: list[list[tuple[int, bool]]]) -> CountingEnv:
    return CountingEnv([[n for n, _ in e] for e in episodes], [[d for _, d in e] for e in episodes])


@settings(max_examples=60, deadline=None)
@given(
    episodes=EPISODES,
    capacity=st.integers(1, 12),
    steps=st.integers(1, 45),
    hint=st.integers(1, 20),
)
def test_next_obs_never_crosses_an_episode_end_or_the_write_pointer(
    episodes, capacity, steps, hint
):
    env = episodes_env(episodes)
    buffer = ReplayBuffer(len(episodes), capacity, OBS_DIM, ACT_DIM, episode_length_hint=hint)
    fill(buffer, env, steps)
    assert len(buffer) == min(steps, capacity)
    sampled = check_batch(buffer.sample(256, utd=2), env, capacity, (2, 256))
    assert np.all(np.any(sampled.reshape(len(episodes), -1) == steps - 1, axis=1))


@settings(max_examples=60, deadline=None)
@given(episodes=EPISODES, capacity=st.integers(1, 12), steps=st.integers(0, 45))
@example(episodes=[[(4, True), (3, False)]], capacity=12, steps=9)  # not yet full
@example(episodes=[[(4, True)], [(5, False)]], capacity=6, steps=20)  # wrapped
def test_slots_drawn_ahead_gather_before_the_insert_as_after_it(episodes, capacity, steps):
    """What the loop relies on to update during an env step: slots drawn for the buffer as the
    next insert leaves it are the ones a draw after that insert gives, and every one of them but
    `next_slot`, where that insert goes, gathers the same transition before the insert."""
    env = episodes_env(episodes)
    buffer = ReplayBuffer(len(episodes), capacity, OBS_DIM, ACT_DIM, episode_length_hint=3)
    fill(buffer, env, steps)
    slots = buffer.draw(64, utd=2, rng=np.random.default_rng(steps), ahead=True)
    written = slots == buffer.next_slot
    before = buffer.gather(np.where(written, 0, slots)) if steps else None
    buffer.insert(*env.step())
    np.testing.assert_array_equal(buffer.draw(64, 2, rng=np.random.default_rng(steps)), slots)
    after = buffer.gather(slots)
    newest = check_batch(after, env, capacity, (2, 64)) == env.steps - 1
    np.testing.assert_array_equal(newest, written)
    for key in after if steps else ():
        np.testing.assert_array_equal(before[key][~written], after[key][~written], key)


def test_newest_and_episode_end_transitions_are_sampled_with_their_true_next_obs():
    env = CountingEnv([[5]], [[False]])
    buffer = ReplayBuffer(1, 6, OBS_DIM, ACT_DIM)
    fill(buffer, env, 14)
    batch = buffer.sample(512)
    check_batch(batch, env, 6, (1, 512))
    obs = batch["observations"].astype(int)
    newest = obs[..., 3] == env.steps - 1
    episode_end = obs[..., 2] == 4
    assert newest.any() and episode_end.any()
    assert np.all(batch["next_observations"][newest] == [0, 2, 4, 14])
    assert np.all(batch["next_observations"][episode_end][:, 2] == 5)


@pytest.mark.parametrize("first_ordinal", [0, 2**32 - 5])
def test_finals_grow_for_episodes_shorter_than_the_hint(first_ordinal):
    """Long episodes first wrap the finals FIFO; short ones then force it to grow.

    Starting the uint32 episode-end counter just below 2**32 checks that its overflow is harmless.
    """
    capacity = 8
    lengths = [[4] * 10 + [1] * 20, [5] * 8 + [1, 2] * 10]
    env = CountingEnv(lengths, [[False] * 30, [True] * 28])
    buffer = ReplayBuffer(2, capacity, OBS_DIM, ACT_DIM, episode_length_hint=4)
    state = buffer.state_dict()
    state["finals_written"][:] = first_ordinal
    buffer.load_state_dict(state)
    initial = buffer.state_dict()["finals"].shape[1]
    for _ in range(150):
        buffer.insert(*env.step())
        check_batch(buffer.sample(64), env, capacity, (1, 64))
    grown = buffer.state_dict()["finals"].shape[1]
    assert initial < capacity <= grown <= 2 * capacity


def test_seeds_and_minibatches_sample_independently():
    capacity = 1000
    env = CountingEnv([[37]] * 4, [[False]] * 4)
    buffer = ReplayBuffer(4, capacity, OBS_DIM, ACT_DIM, seed=3)
    fill(buffer, env, 1500)
    steps = check_batch(buffer.sample(256, utd=8), env, capacity, (8, 256))
    flat = steps.reshape(4, -1)
    for i in range(4):
        for j in range(i + 1, 4):
            assert np.mean(flat[i] == flat[j]) < 0.01
            assert abs(np.corrcoef(flat[i], flat[j])[0, 1]) < 0.1
    assert np.mean(steps[:, 0] == steps[:, 1]) < 0.01


def test_state_dict_restores_exactly_and_is_checkpointable():
    env = CountingEnv([[2, 9], [1]], [[True, False], [False]])
    original = ReplayBuffer(2, 16, OBS_DIM, ACT_DIM, seed=4, episode_length_hint=8)
    fill(original, env, 37)
    original.sample(8)
    state = original.state_dict()
    for key, value in state.items():
        assert isinstance(value, int) or (
            isinstance(value, np.ndarray) and value.dtype.kind in "biuf"
        ), key
    restored = ReplayBuffer(2, 16, OBS_DIM, ACT_DIM, seed=99, episode_length_hint=8)
    restored.load_state_dict(state)
    partial = ReplayBuffer(2, 64, OBS_DIM, ACT_DIM, seed=4, episode_length_hint=8)
    fill(partial, CountingEnv([[2, 9], [1]], [[True, False], [False]]), 20)
    # Before the ring first wraps, only the filled slots are saved.
    assert partial.state_dict()["observations"].shape == (2, 20, OBS_DIM)
    again = ReplayBuffer(2, 64, OBS_DIM, ACT_DIM, episode_length_hint=8)
    again.load_state_dict(partial.state_dict())
    for key, value in partial.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[key], value)
    np.testing.assert_array_equal(again.sample(16)["observations"].shape, (2, 1, 16, OBS_DIM))
    # A state saved before the filled-slot form (every slot, no capacity key) still loads.
    old_form = {**partial.state_dict(), **{k: v for k, v in partial._arrays.items()}}
    del old_form["capacity"]
    older = ReplayBuffer(2, 64, OBS_DIM, ACT_DIM, episode_length_hint=8)
    older.load_state_dict(old_form)
    for key, value in partial.state_dict().items():
        np.testing.assert_array_equal(older.state_dict()[key], value)
    assert restored.nbytes == original.nbytes and len(restored) == len(original)
    assert not np.shares_memory(restored.state_dict()["observations"], state["observations"])
    for _ in range(4):
        a, b = original.sample(32, utd=3), restored.sample(32, utd=3)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
        for _ in range(7):
            step = env.step()
            original.insert(*step)
            restored.insert(*step)
    check_batch(restored.sample(64), env, 16, (1, 64))


@pytest.mark.parametrize("obs_dim, act_dim, bound", [(67, 21, 0.58), (223, 38, 0.55)])
def test_memory_ratio_at_one_million_against_the_naive_layout(obs_dim, act_dim, bound):
    capacity = 1_000_000
    naive = capacity * (2 * obs_dim + act_dim + 2) * 4
    tracemalloc.start()
    try:
        buffer = ReplayBuffer(1, capacity, obs_dim, act_dim)
        allocated = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert buffer.nbytes <= allocated <= buffer.nbytes + 2**16
    assert allocated / naive <= bound
    assert _resident_bytes(buffer._arrays.values()) < 0.1 * allocated  # untouched: lazy


def test_invalid_inputs_are_rejected_with_their_names():
    buffer = ReplayBuffer(2, 8, OBS_DIM, ACT_DIM)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(4)
    env = CountingEnv([[5], [5]], [[False], [False]])
    obs, action, rew, next_obs, terminated, truncated = env.step()
    with pytest.raises(ValueError, match="action has shape"):
        buffer.insert(obs, action[:1], rew, next_obs, terminated, truncated)
    buffer.insert(obs, action, rew, next_obs, terminated, truncated)
    obs, action, rew, next_obs, terminated, truncated = env.step()
    with pytest.raises(ValueError, match=r"seeds \[1\]"):
        buffer.insert(
            obs + [[0, 0, 0, 0], [0, 0, 0, 1]], action, rew, next_obs, terminated, truncated
        )
    state = buffer.state_dict()
    with pytest.raises(ValueError, match="capacity 8; this one has capacity 9"):
        ReplayBuffer(2, 9, OBS_DIM, ACT_DIM).load_state_dict(state)
    with pytest.raises(ValueError, match="observations"):
        ReplayBuffer(2, 8, OBS_DIM, ACT_DIM).load_state_dict(
            {**state, "observations": np.zeros((2, 1, OBS_DIM + 1), np.float32)})
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(2, 0, OBS_DIM, ACT_DIM)


def _resident_bytes(arrays) -> int:
    """The bytes of the arrays' memory in RAM, page by page (mincore), so that what other
    threads of the process allocate meanwhile does not count."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for array in arrays:
        start = array.ctypes.data // page * page
        length = array.ctypes.data + array.nbytes - start
        pages = np.zeros(-(-length // page), np.uint8)
        if libc.mincore(start, length, pages.ctypes.data) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        total += int((pages & 1).sum()) * page
    return total
