"""envs/: names and errors, flattening order, action rescaling, truncation, action repeat, seeds."""

import collections
import logging
import time

import dm_env
import numpy as np
import pytest
from absl import logging as absl_logging
from dm_env import specs
from hypothesis import given, settings
from hypothesis import strategies as st

from envs import (
    DMCEnv,
    UnknownEnvError,
    VectorEnv,
    check_env_name,
    known_envs,
    make_env,
    make_vector_env,
    rescale_action,
    suggest,
)
from envs.names import dm_suite
from experiment.step_fns import evaluate

CHEAP = ["cartpole-swingup", "pendulum-swingup", "point_mass-easy", "cheetah-run"]


class FakeEnv(dm_env.Environment):
    """Scripted dm_env: records actions, reward = inner step index, ends after `length` steps."""

    def __init__(self, low, high, length=10, terminal=False):
        self.low, self.high = np.asarray(low, float), np.asarray(high, float)
        self.length, self.terminal = length, terminal
        self.actions, self.t = [], 0

    def _obs(self):
        return collections.OrderedDict(
            zeta=np.full((2, 2), self.t, float), alpha=float(-self.t), mid=np.array([7.0, 8.0])
        )

    def reset(self):
        self.t = 0
        return dm_env.restart(self._obs())

    def step(self, action):
        self.actions.append(np.array(action))
        self.t += 1
        if self.t < self.length:
            return dm_env.transition(float(self.t), self._obs())
        end = dm_env.termination if self.terminal else dm_env.truncation
        return end(float(self.t), self._obs())

    def observation_spec(self):
        return collections.OrderedDict(
            zeta=specs.Array((2, 2), float), alpha=specs.Array((), float),
            mid=specs.Array((2,), float),
        )

    def action_spec(self):
        return specs.BoundedArray(self.low.shape, float, self.low, self.high)


def run_episode(env, actions):
    """Step through `actions` until the episode ends; returns obs, reward, terminated, truncated."""
    rows = []
    for action in actions:
        rows.append(env.step(action))
        if rows[-1][2] or rows[-1][3]:
            break
    return [np.array(col) for col in zip(*rows, strict=True)]


# names


def test_known_envs_are_the_suite_tasks():
    names = known_envs()
    assert names == sorted(names)
    assert set(names) == {f"{d}-{t}" for d, t in dm_suite().ALL_TASKS}
    assert len(names) == len(dm_suite().ALL_TASKS)
    for name in ["humanoid-stand", "ball_in_cup-catch", "finger-turn_hard", "swimmer-swimmer15",
                 "dog-run"]:
        assert name in names


def test_check_env_name_splits_every_known_name_without_loading(monkeypatch):
    def no_load(*args, **kwargs):
        raise AssertionError("check_env_name must not load physics")

    monkeypatch.setattr(dm_suite(), "load", no_load)
    for name in known_envs():
        domain, task = check_env_name(name)
        assert f"{domain}-{task}" == name
        assert (domain, task) in dm_suite().ALL_TASKS


def test_unknown_name_message():
    with pytest.raises(UnknownEnvError) as info:
        check_env_name("humanoid-stnd")
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith("unknown env 'humanoid-stnd'; did you mean 'humanoid-stand'?")
    assert "other humanoid tasks: " in message
    assert message.endswith("known: " + ", ".join(known_envs()))
    assert "\n" not in message


@pytest.mark.parametrize(
    "typo, best",
    [("cheeta-run", "cheetah-run"), ("humanoid_stand", "humanoid-stand"),
     ("Humanoid-Stand", "humanoid-stand"), ("humanoid_cmu-stand", "humanoid_CMU-stand"),
     ("swimmer-swimer15", "swimmer-swimmer15"), ("fingr-turn_hard", "finger-turn_hard")],
)
def test_suggest_closest_match(typo, best):
    assert suggest(typo)[0] == best
    with pytest.raises(UnknownEnvError, match=f"did you mean '{best}'"):
        check_env_name(typo)


@pytest.mark.parametrize("name, domain", [("walker-jog", "walker"), ("finger-turn", "finger"),
                                          ("cartpole", "cartpole")])
def test_right_domain_wrong_task_suggests_the_domains_tasks(name, domain):
    tasks = {f"{d}-{t}" for d, t in dm_suite().ALL_TASKS if d == domain}
    assert set(suggest(name)) == tasks
    assert len(suggest(name)) == len(tasks)
    assert suggest("finger-turn")[:2] == ["finger-turn_easy", "finger-turn_hard"]


def test_no_close_match_lists_known_names_only():
    assert suggest("zzzz") == []
    message = str(pytest.raises(UnknownEnvError, check_env_name, "zzzz").value)
    assert message == "unknown env 'zzzz'; known: " + ", ".join(known_envs())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_any_unknown_text_gives_one_line(name):
    if name in known_envs():
        assert check_env_name(name) == tuple(name.split("-"))
        return
    with pytest.raises(UnknownEnvError) as info:
        check_env_name(name)
    message = str(info.value)
    assert message.startswith(f"unknown env {name!r};")
    assert "\n" not in message
    assert set(suggest(name)) <= set(known_envs())


# single env


@pytest.mark.parametrize("name, obs_dim, act_dim", [
    ("cartpole-swingup", 5, 1), ("humanoid-stand", 67, 21), ("dog-run", 223, 38),
])
def test_dims(name, obs_dim, act_dim):
    start = time.perf_counter()
    env = make_env(name, seed=0)
    load_s = time.perf_counter() - start
    obs = env.reset()
    assert (env.obs_dim, env.act_dim) == (obs_dim, act_dim)
    assert obs.shape == (obs_dim,) and obs.dtype == np.float32
    assert sum(env.obs_sizes) == obs_dim
    print(f"{name}: load {load_s:.2f} s")


@pytest.mark.parametrize("name", [*CHEAP, "humanoid-stand"])
def test_flattening_matches_dm_control_flat_observation(name):
    """dm_control's flat_observation concatenates the dict in its own order (independent)."""
    domain, task = check_env_name(name)
    flat = dm_suite().load(domain, task, task_kwargs={"random": 5},
                           environment_kwargs={"flat_observation": True})
    env = make_env(name, seed=5)
    rng = np.random.default_rng(0)
    np.testing.assert_allclose(env.reset(), flat.reset().observation["observations"], rtol=1e-6)
    for _ in range(20):
        action = rng.uniform(-1, 1, env.act_dim)
        obs = env.step(action)[0]
        np.testing.assert_allclose(obs, flat.step(action).observation["observations"],
                                   rtol=1e-5, atol=1e-6)
    assert env.obs_keys == tuple(env.env.observation_spec())


def test_flattening_order_is_the_dict_order_not_sorted():
    env = DMCEnv(FakeEnv([-1], [1]), "fake")
    env.reset()
    obs = env.step(np.zeros(1))[0]
    assert env.obs_keys == ("zeta", "alpha", "mid")
    assert env.obs_sizes == (4, 1, 2)
    np.testing.assert_array_equal(obs, np.array([1, 1, 1, 1, -1, 7, 8], np.float32))
    assert obs.dtype == np.float32


def test_flattened_entries_have_physical_meaning():
    cartpole = make_env("cartpole-swingup", seed=1)
    obs = cartpole.reset()
    assert obs[1] ** 2 + obs[2] ** 2 == pytest.approx(1.0, abs=1e-5)  # pole cos, sin
    humanoid = make_env("humanoid-stand", seed=1)
    obs = humanoid.reset()
    assert obs[21] == pytest.approx(humanoid.env.physics.head_height(), rel=1e-6)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=3, max_size=3))
def test_action_rescaling_onto_a_non_unit_spec(action):
    low, high = np.array([-2.0, 0.0, 5.0]), np.array([2.0, 10.0, 5.5])
    fake = FakeEnv(low, high)
    env = DMCEnv(fake, "fake")
    env.reset()
    env.step(np.array(action))
    expected = [np.interp(a, [-1, 1], [lo, hi]) for a, lo, hi in zip(action, low, high,
                                                                     strict=True)]
    np.testing.assert_allclose(fake.actions[-1], expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rescale_action(np.array(action), low, high), expected, atol=1e-12)


def test_unbounded_action_dimensions_take_the_agents_action_as_it_is():
    """dm_control's lqr marks its actions unbounded with +-1e10: a linear map would turn the
    agent's [-1, 1] into forces of 1e10 (observations of 1e5 after one step)."""
    fake = FakeEnv([-1e10, -2.0], [1e10, 2.0])
    env = DMCEnv(fake, "fake")
    env.reset()
    env.step(np.array([0.5, 0.5]))
    env.step(np.array([-3.0, 3.0]))  # clipped to [-1, 1] first, as every action is
    np.testing.assert_allclose(fake.actions, [[0.5, 1.0], [-1.0, 2.0]])
    lqr = make_env("lqr-lqr_2_1", seed=0)
    lqr.reset()
    for _ in range(10):
        obs, rewards, _, _ = lqr.step(np.ones(lqr.act_dim))
    assert np.abs(obs).max() < 100 and abs(rewards) < 10


def test_action_and_argument_validation():
    env = make_env("cheetah-run", seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(6))
    env.reset()
    with pytest.raises(ValueError, match=r"action shape \(5,\) is wrong; expected \(6,\)"):
        env.step(np.zeros(5))
    with pytest.raises(ValueError, match="non-finite"):
        env.step(np.full(6, np.nan))
    for bad in [0, -1, 1.5, True, 1001]:
        with pytest.raises(ValueError, match="action_repeat must be an integer from 1 to 1000"):
            make_env("cheetah-run", seed=0, action_repeat=bad)
    for bad in [-1, 2**32, 0.5]:
        with pytest.raises(ValueError, match="seed must be an integer"):
            make_env("cheetah-run", seed=bad)
    with pytest.raises(UnknownEnvError):
        make_env("cheetah-walk", seed=0)


def test_time_limit_is_a_truncation_and_action_repeat_sums_rewards():
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (340, 1))
    base = make_env("pendulum-swingup", seed=3)
    base.reset()
    obs1, rew1, term1, trunc1 = run_episode(base, np.repeat(actions, 3, axis=0))
    assert len(rew1) == 1000 and not term1.any()
    assert trunc1[-1] and not trunc1[:-1].any()
    with pytest.raises(RuntimeError, match="reset"):
        base.step(actions[0])

    env = make_env("pendulum-swingup", seed=3, action_repeat=3)
    env.reset()
    obs3, rew3, term3, trunc3 = run_episode(env, actions)
    assert len(rew3) == 334 == int(np.ceil(1000 / 3)) and rew3.dtype == np.float32
    assert not term3.any() and trunc3[-1] and not trunc3[:-1].any()
    sums = np.add.reduceat(rew1.astype(np.float64), np.arange(0, 1000, 3))
    np.testing.assert_allclose(rew3, sums, rtol=1e-6)
    np.testing.assert_array_equal(obs3, obs1[np.r_[2:1000:3, 999]])


@pytest.mark.parametrize("terminal", [True, False])
def test_discount_zero_end_is_termination(terminal):
    env = DMCEnv(FakeEnv([-1], [1], length=5, terminal=terminal), "fake", action_repeat=4)
    env.reset()
    _, rewards, terminated, truncated = run_episode(env, np.zeros((2, 1)))
    np.testing.assert_array_equal(rewards, [1 + 2 + 3 + 4, 5])  # the repeat stops at the end
    np.testing.assert_array_equal(terminated, [False, terminal])
    np.testing.assert_array_equal(truncated, [False, not terminal])


def test_same_seed_same_episodes_other_seed_differs():
    rng = np.random.default_rng(1)
    actions = rng.uniform(-1, 1, (50, 1))

    def trajectory(seed):
        env = make_env("cartpole-swingup", seed=seed)
        first = [env.reset(), *(env.step(a)[0] for a in actions)]
        return np.array(first), env.reset()

    (traj_a, second_a), (traj_b, second_b) = trajectory(7), trajectory(7)
    np.testing.assert_array_equal(traj_a, traj_b)
    np.testing.assert_array_equal(second_a, second_b)
    assert not np.array_equal(traj_a[0], second_a)
    assert not np.array_equal(traj_a[0], trajectory(8)[0][0])


def test_rng_state_resumes_the_episode_sequence():
    env = make_env("point_mass-easy", seed=0)
    env.reset()
    state = env.get_rng_state()
    assert state["key"].shape == (624,) and state["key"].dtype == np.uint32
    assert all(isinstance(v, np.ndarray) for v in state.values())
    upcoming = [env.reset() for _ in range(3)]
    resumed = make_env("point_mass-easy", seed=99)
    resumed.set_rng_state({k: v.copy() for k, v in state.items()})
    np.testing.assert_array_equal([resumed.reset() for _ in range(3)], upcoming)
    with pytest.raises(ValueError, match=r"shape \(624,\)"):
        resumed.set_rng_state({**state, "key": state["key"][:10]})


# vector env


def test_vector_env_rows_are_the_single_envs():
    seeds = [0, 1, 2]
    vec = make_vector_env("pendulum-swingup", seeds, action_repeat=8)
    singles = [make_env("pendulum-swingup", s, action_repeat=8) for s in seeds]
    assert (vec.num_envs, vec.obs_dim, vec.act_dim) == (3, 3, 1)
    obs = vec.reset()
    assert obs.shape == (3, 3) and obs.dtype == np.float32
    np.testing.assert_array_equal(obs, [env.reset() for env in singles])
    assert len({tuple(row) for row in obs}) == 3
    actions = np.random.default_rng(2).uniform(-1, 1, (125, 3, 1))
    for t, action in enumerate(actions):
        obs, rewards, terminated, truncated = vec.step(action)
        rows = [env.step(a) for env, a in zip(singles, action, strict=True)]
        np.testing.assert_array_equal(obs, [r[0] for r in rows])
        np.testing.assert_array_equal(rewards, [r[1] for r in rows])
        assert rewards.dtype == np.float32 and terminated.dtype == bool
        assert not terminated.any()
        assert truncated.all() == (t == 124) and truncated.any() == (t == 124)
    with pytest.raises(RuntimeError, match="reset"):
        vec.step(actions[0])
    assert vec.reset().shape == (3, 3)


def test_vector_env_validation_and_rng_state():
    vec = make_vector_env("point_mass-easy", [3, 4])
    vec.reset()
    with pytest.raises(ValueError, match=r"actions shape \(2,\) is wrong; expected \(2, 2\)"):
        vec.step(np.zeros(2))
    state = vec.get_rng_state()
    assert state["key"].shape == (2, 624) and state["pos"].shape == (2,)
    upcoming = vec.reset()
    other = make_vector_env("point_mass-easy", [10, 11])
    other.set_rng_state(state)
    np.testing.assert_array_equal(other.reset(), upcoming)
    with pytest.raises(ValueError, match="must lead with 2 envs"):
        other.set_rng_state({k: v[:1] for k, v in state.items()})
    with pytest.raises(ValueError, match="distinct"):
        make_vector_env("point_mass-easy", [1, 1])
    with pytest.raises(ValueError, match="at least one env"):
        make_vector_env("point_mass-easy", [])


def test_lqr_episodes_are_cut_at_1000_steps_like_every_other_task():
    env = make_env("lqr-lqr_2_1", seed=0, action_repeat=8)
    env.reset()
    _, rewards, terminated, truncated = run_episode(env, np.zeros((200, env.act_dim)))
    assert len(rewards) == 125 and truncated[-1] and not terminated.any()


def test_evaluation_steps_only_the_envs_whose_episodes_go_on():
    envs = VectorEnv([DMCEnv(FakeEnv([-1], [1], length=n, terminal=True), "fake")
                      for n in (2, 4)])
    zeros = lambda states, obs: np.zeros((2, 1))
    np.testing.assert_array_equal(evaluate(zeros, None, envs, episodes=2), [1 + 2, 1 + 2 + 3 + 4])
    for env, n in zip(envs.envs, (2, 4), strict=True):
        assert len(env.env.actions) == 2 * n, "an ended episode is not stepped again"


def test_mujoco_warnings_about_the_suites_own_models_are_left_out(caplog):
    with caplog.at_level(logging.WARNING):
        make_env("cheetah-run", 0)  # MuJoCo 3.17 warns of settotalmass in dm_control's XML
        absl_logging.warning("compiler attribute 'other' is deprecated")  # any other stays
    messages = [record.getMessage() for record in caplog.records]
    assert [m for m in messages if "deprecated" in m] == [
        "compiler attribute 'other' is deprecated"]
