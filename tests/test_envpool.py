"""The EnvPool backend against dm_control, the reference: from the same physics state and
action, the same reward and next observation; the same layout, bounds and episode ends; the
tasks that differ refused with one line; exact resume."""

import signal
import sys

import numpy as np
import pytest

envpool = pytest.importorskip("envpool")

from envs import make_vector_env  # noqa: E402
from envs.envpool_backend import (  # noqa: E402
    DIFFERS,
    VERIFIED_TASKS,
    EnvBackendError,
    EnvPoolVectorEnv,
    check_task,
    task_id,
)
from envs.names import check_env_name, dm_suite  # noqa: E402
from tests.helpers import forkserver  # noqa: E402
from tests.helpers.envpool_sync import control_step, sync, turn_about_z  # noqa: E402
from tests.helpers.runs import FAST_SAC, KILLSAVE, REPO, read_csv, run, script  # noqa: E402

# The agreement asked of every observation entry and reward after one step from the same
# state: |dm_control - EnvPool| <= TOL * (1 + |EnvPool|). The tasks served agree to 4e-6 or
# better (hopper's and walker's contacts; most to 1e-12); those refused differ by 1e-2 to 1.
TOL = 1e-4
STEPS = 150  # steps compared per episode (two episodes per task)


def _observation(timestep) -> dict[str, np.ndarray]:
    """EnvPool's observation of its only env, as float64 arrays by key."""
    observation = timestep.observation
    return {k: np.asarray(getattr(observation, k), np.float64)[0]
            for k in observation._fields if k not in ("env_id", "players")}


def first_difference(name: str, steps: int = STEPS, episodes: int = 2, seed: int = 7):
    """Step EnvPool and dm_control from the same states with the same uniform random actions;
    return (episode, step, what, size) of the first reward or observation entry that differs by
    more than TOL, or None. dm_control is synced to EnvPool's state after every step."""
    domain, task = check_env_name(name)
    pool = envpool.make_dm(task_id(name), num_envs=1, seed=seed)
    env = dm_suite().load(domain, task)
    low, high = env.action_spec().minimum, env.action_spec().maximum
    rng = np.random.default_rng(seed)
    for episode in range(episodes):
        obs = _observation(pool.reset())
        env.reset()
        sync(env, domain, task, obs, fresh=True)
        reset_obs = env.task.get_observation(env.physics)
        for key, value in reset_obs.items():
            size = np.max(np.abs(value - obs[key]) / (1 + np.abs(obs[key])))
            if size > TOL:
                return episode, -1, key, size
        for step in range(steps):
            action = rng.uniform(low, high)
            before = env.physics.get_state().copy()
            reward, seen = control_step(env, action)
            timestep = pool.step(action[None], np.zeros(1, np.int32))
            obs = _observation(timestep)
            if domain == "humanoid" and task != "run_pure_state" and step == 0:
                # At a reset the humanoid's heading is not observed (it is still): turn
                # dm_control's state about z to the heading EnvPool's first step reveals.
                angle = np.arctan2(*obs["velocity"][1::-1]) - np.arctan2(*seen["velocity"][1::-1])
                env.physics.set_state(before)
                turn_about_z(env.physics, angle)
                reward, seen = control_step(env, action)
            sizes = {key: np.max(np.abs(value - obs[key]) / (1 + np.abs(obs[key])))
                     for key, value in seen.items()}
            sizes["reward"] = abs(reward - float(timestep.reward[0])) / (1 + abs(reward))
            worst = max(sizes, key=sizes.get)
            if sizes[worst] > TOL:
                return episode, step, worst, sizes[worst]
            if timestep.step_type[0] == 2:
                break
            sync(env, domain, task, obs, fresh=False)
    return None


# The humanoid's stand, walk and run compare slowest (3 s each): the full suite checks them,
# the fast subset checks humanoid-run_pure_state.
SLOW_TASKS = ("humanoid-stand", "humanoid-walk", "humanoid-run")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_TASKS
                                  else n for n in VERIFIED_TASKS])
def test_served_tasks_step_like_dm_control_from_the_same_state(name):
    assert first_difference(name) is None


@pytest.mark.parametrize("name,seed", [pytest.param("dog-run", 7, marks=pytest.mark.slow),
                                       ("finger-spin", 2),
                                       ("finger-turn_hard", 1), ("quadruped-run", 7)])
def test_refused_domains_differ_from_dm_control(name, seed):
    assert check_env_name(name)[0] in DIFFERS
    found = first_difference(name, steps=200, seed=seed)
    assert found is not None, f"{name} now agrees with dm_control: serve it"
    assert found[3] > 10 * TOL


def test_every_suite_task_is_served_or_refused():
    names = {f"{d}-{t}" for d, t in dm_suite().ALL_TASKS}
    assert set(VERIFIED_TASKS) <= names
    assert not {check_env_name(n)[0] for n in VERIFIED_TASKS} & set(DIFFERS)


@pytest.mark.parametrize("name", VERIFIED_TASKS)
def test_layout_bounds_and_episode_length_are_dm_control_s(name):
    pool = make_vector_env(name, [3, 4], backend="envpool")
    reference = make_vector_env(name, [3, 4])
    dm = reference.envs[0]
    assert (pool.obs_dim, pool.act_dim) == (reference.obs_dim, reference.act_dim)
    assert (pool.obs_keys, pool.obs_sizes) == (dm.obs_keys, dm.obs_sizes)
    np.testing.assert_array_equal(pool.low, dm.low)
    np.testing.assert_array_equal(pool.high, dm.high)
    limit = envpool.make_spec(task_id(name)).config.max_episode_steps
    assert limit == dm.env._step_limit == 1000
    obs = pool.reset()
    assert obs.shape == (2, pool.obs_dim) and obs.dtype == np.float32


@pytest.mark.parametrize("name,action_repeat", [("cartpole-swingup", 3), ("cheetah-run", 1)])
def test_episodes_end_as_dm_control_s_truncated_not_terminated(name, action_repeat):
    lengths = []
    for backend in ("envpool", "dm_control"):
        env = make_vector_env(name, [0, 1], action_repeat, backend=backend)
        env.reset()
        rng = np.random.default_rng(0)
        step, terminated, truncated = 0, np.zeros(2, bool), np.zeros(2, bool)
        while not (terminated.any() or truncated.any()) and step < 2000:
            obs, rewards, terminated, truncated = env.step(rng.uniform(-1, 1, (2, env.act_dim)))
            step += 1
        assert truncated.all() and not terminated.any()
        assert obs.dtype == np.float32 and rewards.dtype == np.float32
        with pytest.raises(RuntimeError, match="reset"):
            env.step(np.zeros((2, env.act_dim)))
        lengths.append(step)
    assert lengths[0] == lengths[1] == -(-1000 // action_repeat)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cheetah-run", "humanoid-stand", "walker-walk",
                                  "reacher-hard", "cartpole-swingup"])
def test_rng_state_replays_the_episodes_started(name):
    """An env's RNG moves only when an episode starts: after set_rng_state with the count of
    episodes started, the next reset gives what the env gave, steps in between or not."""
    env = make_vector_env(name, [5, 6], backend="envpool")
    env.reset()
    rng = np.random.default_rng(1)
    for _ in range(40):
        env.step(rng.uniform(-1, 1, (2, env.act_dim)))
    state = env.get_rng_state()
    expected = env.reset()
    assert not np.array_equal(expected, make_vector_env(name, [5, 6], backend="envpool").reset())
    restored = make_vector_env(name, [5, 6], backend="envpool")
    restored.set_rng_state(state)
    np.testing.assert_array_equal(restored.reset(), expected)
    with pytest.raises(ValueError, match="episodes"):
        restored.set_rng_state(make_vector_env(name, [5, 6]).get_rng_state())


def test_seeds_are_envpool_seeds_one_env_each():
    both = make_vector_env("cheetah-run", [5, 9], backend="envpool").reset()
    for row, seed in zip(both, (5, 9), strict=True):
        np.testing.assert_array_equal(
            row, make_vector_env("cheetah-run", [seed], backend="envpool").reset()[0])


def test_actions_are_rescaled_and_checked_as_dm_control_s():
    env = EnvPoolVectorEnv("cartpole-swingup", [0])
    env.reset()
    with pytest.raises(ValueError, match=r"expected \(1, 1\)"):
        env.step(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="non-finite"):
        env.step(np.full((1, 1), np.nan))
    with pytest.raises(ValueError, match="every env together"):
        env.step(np.zeros((1, 1)), active=np.array([False]))


@pytest.mark.parametrize("name", ["dog-run", "fish-swim", "quadruped-walk"])
def test_refused_tasks_name_why_and_what_is_accepted(name):
    with pytest.raises(EnvBackendError) as error:
        check_task(name)
    message = str(error.value)
    assert "\n" not in message and name in message
    assert "--env_backend=dm_control" in message and "cheetah-run" in message


@pytest.mark.slow
def test_run_script_refuses_a_task_that_differs_before_compiling(tmp_path):
    proc = run("run_sac.py", *FAST_SAC, "--env=dog-run", "--env_backend=envpool",
               f"--logdir={tmp_path}", check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "dog-run" in lines[0] and "--env_backend=dm_control" in lines[0]
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_run_script_refuses_seeds_envpool_cannot_take(tmp_path):
    proc = run("run_sac.py", *FAST_SAC, "--env_backend=envpool", f"--seed={2**31 - 42}",
               f"--logdir={tmp_path}", check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "2**31" in lines[0] and "--seed" in lines[0]


@pytest.mark.slow
def test_unknown_backend_is_refused_with_the_accepted_ones(tmp_path):
    proc = run("run_sac.py", *FAST_SAC, "--env_backend=mjx", f"--logdir={tmp_path}",
               check=False)
    assert proc.returncode == 2
    assert "env_backend" in proc.stderr and "dm_control" in proc.stderr \
        and "envpool" in proc.stderr


ARGS = [*(a for a in FAST_SAC if not a.startswith("--eval_episodes")), "--eval_episodes=2",
        "--env_backend=envpool", "--num_seeds=2", "--utd=2", "--action_repeat=8", "--batch_size=32",
        "--max_steps=500", "--start_steps=100", "--eval_every=125", "--log_every=125",
        "--checkpoint_every=125"]


def _returns(logdir):
    rows = read_csv(logdir / "sac" / "cartpole-swingup" / "none-utd2-seed0" / "eval.csv")
    return [(r["env_step"], r["seed"], r["return"]) for r in rows]


@pytest.mark.slow
def test_a_run_killed_and_resumed_matches_one_never_stopped(tmp_path):
    """Train and eval envs both in EnvPool; SIGKILL while writing the 3rd checkpoint (env
    step 375), then the same command: eval.csv's returns are bit-identical."""
    run("run_sac.py", *ARGS, f"--logdir={tmp_path / 'full'}")
    args = [*ARGS, f"--logdir={tmp_path / 'killed'}"]
    killed = forkserver.run([sys.executable, KILLSAVE, "3",
                             script("run_sac.py"), *args], cwd=REPO, capture_output=True,
                            text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = run("run_sac.py", *args)
    assert "resumed from the checkpoint at env step 250" in resumed.stderr
    expected = _returns(tmp_path / "full")
    assert len(expected) == 8 and len({r[2] for r in expected}) > 4
    assert _returns(tmp_path / "killed") == expected


def test_trainer_evaluates_in_envpool_too(tmp_path):
    from agents import make_agent
    from experiment.config import TrainConfig
    from experiment.train import make_trainer

    cfg = TrainConfig(env="cartpole-swingup", env_backend="envpool", num_seeds=2,
                      logdir=str(tmp_path), progress=False)
    trainer = make_trainer(make_agent("sac"), cfg)
    assert isinstance(trainer.env, EnvPoolVectorEnv)
    assert isinstance(trainer.eval_env, EnvPoolVectorEnv)
    assert trainer.eval_env.seeds == [42, 43]



@pytest.mark.parametrize("installed", [None, "1.2.4"])
def test_a_missing_or_unchecked_envpool_is_refused_naming_the_version(monkeypatch, installed):
    import importlib.metadata

    def version(name):
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(EnvBackendError, match="pip install envpool==1.2.5") as error:
        check_task("cheetah-run")
    assert "\n" not in str(error.value)
