"""The EnvPool backend: the seeds' envs of one suite task stepped together in EnvPool's C++
thread pool, outside the GIL, seen by the loop exactly as `envs.vector.VectorEnv` shows the
dm_control ones (the same flat float32 observations, actions in [-1, 1], action repeat).

EnvPool (https://github.com/sail-sg/envpool) ports the suite's tasks to C++ on MuJoCo 3.6.0,
which it links itself; dm_control runs on the MuJoCo this project pins. tests/test_envpool.py
puts dm_control's physics into EnvPool's state, steps both with one action and compares the
reward and next observation: the tasks in VERIFIED_TASKS agree to 1e-4 (relative, with a
floor of 1) at every step it checks, and only they are accepted. EnvPool draws its random
numbers (std::mt19937, seeded per env) only when an episode starts, so an env's RNG state is
its seed and the number of episodes started; `set_rng_state` replays those resets, which makes
a resumed run bit-identical to one never stopped.
"""

import importlib
import importlib.metadata
import os

import numpy as np

from envs.dmc import RngState, check_action_repeat, check_seed, make_env, rescale_action
from envs.names import check_env_name

ENVPOOL_VERSION = "1.2.5"  # the version the equivalence tests check; others are refused
# Every suite task whose transitions tests/test_envpool.py checks against dm_control's.
VERIFIED_TASKS = (
    "acrobot-swingup", "acrobot-swingup_sparse", "ball_in_cup-catch", "cartpole-balance",
    "cartpole-balance_sparse", "cartpole-swingup", "cartpole-swingup_sparse",
    "cartpole-three_poles", "cartpole-two_poles", "cheetah-run", "hopper-hop", "hopper-stand",
    "humanoid-run", "humanoid-run_pure_state", "humanoid-stand", "humanoid-walk",
    "pendulum-swingup", "point_mass-easy", "reacher-easy", "reacher-hard", "walker-run",
    "walker-stand", "walker-walk",
)
# Domains whose transitions differ from dm_control's (tests/test_envpool.py shows each).
DIFFERS = {
    "dog": "its contact forces, touch sensors and rewards differ from dm_control's after steps "
           "from the same state",
    "finger": "its spinner's velocity and touch sensors differ from dm_control's after steps "
              "from the same state",
    "quadruped": "its force-torque and IMU readings differ from dm_control's after steps from "
                 "the same state",
}
MAX_SEED = 2**31  # EnvPool's seeds are C++ ints


class EnvBackendError(ValueError):
    """A task, a seed or an installation the EnvPool backend cannot serve; one line."""


def task_id(name: str) -> str:
    """EnvPool's id of a suite task: "ball_in_cup-catch" -> "BallInCupCatch-v1"."""
    domain, task = check_env_name(name)
    camel = "".join(part[:1].upper() + part[1:] for part in (*domain.split("_"),
                                                               *task.split("_")))
    return f"{camel}-v1"


def check_task(name: str, largest_seed: int = 0):
    """The envpool module, once `name` is known to be a task this backend serves, with env
    seeds up to `largest_seed`; raises EnvBackendError (one line: why, and what is accepted)
    otherwise. Simulates nothing."""
    domain, _ = check_env_name(name)
    if largest_seed >= MAX_SEED:
        raise EnvBackendError(f"--env_backend=envpool takes env seeds below 2**31, got "
                              f"{largest_seed} (--seed + --num_seeds - 1 + --eval_seed_offset); "
                              "use a smaller --seed")
    if name not in VERIFIED_TASKS:
        why = DIFFERS.get(domain, "it is not among the tasks checked against dm_control")
        raise EnvBackendError(
            f"--env_backend=envpool does not run {name}: {why}; run it with "
            f"--env_backend=dm_control, or pick one of: {', '.join(VERIFIED_TASKS)}")
    try:
        version = importlib.metadata.version("envpool")
    except importlib.metadata.PackageNotFoundError:
        raise EnvBackendError("--env_backend=envpool needs the envpool package: pip install "
                              f"envpool=={ENVPOOL_VERSION} (or pip install -e '.[envpool]')"
                              ) from None
    if version != ENVPOOL_VERSION:
        raise EnvBackendError(f"--env_backend=envpool is checked against dm_control with envpool "
                              f"{ENVPOOL_VERSION}, found {version}: pip install "
                              f"envpool=={ENVPOOL_VERSION}")
    return importlib.import_module("envpool")


class EnvPoolVectorEnv:
    """One EnvPool pool with an env per seed (EnvPool seed = the seed), stepped in lockstep by
    `num_threads` threads (default: one per core this process may run on, at most one per
    env); every array has a leading (N,) seed axis, as `VectorEnv`'s.

    The observation layout, action bounds and episode ends are dm_control's, taken from a
    dm_control env of the task. No auto-reset: reset() restarts every env. The suite's tasks
    this backend serves never terminate early, so the envs always end their episodes together.
    """

    def __init__(self, name: str, seeds, action_repeat: int = 1, num_threads: int | None = None):
        seeds = [check_seed(s) for s in seeds]
        self._envpool = check_task(name, max(seeds, default=0))
        if not seeds:
            raise ValueError("EnvPoolVectorEnv needs at least one seed, got none")
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct (one independent env each), got {seeds}")
        self.name, self.seeds = name, seeds
        self.action_repeat = check_action_repeat(action_repeat)
        # EnvPool's default is a thread per env, however few cores there are to run them.
        self.num_envs = len(seeds)
        self.num_threads = num_threads or min(self.num_envs, len(os.sched_getaffinity(0)))
        reference = make_env(name, seeds[0], action_repeat)
        self.obs_keys, self.obs_sizes = reference.obs_keys, reference.obs_sizes
        self.obs_dim, self.act_dim = reference.obs_dim, reference.act_dim
        self.low, self.high = reference.low, reference.high
        self._episodes = 0  # episodes started in every env: the RNG state
        self._open()
        self._check_layout()

    def _open(self) -> None:
        """A new pool: each env's RNG as at its seed, no episode started."""
        self._pool = self._envpool.make_dm(
            task_id(self.name), num_envs=self.num_envs, batch_size=self.num_envs,
            env_seed=self.seeds, num_threads=self.num_threads)
        self._ids = np.arange(self.num_envs, dtype=np.int32)
        self._running = False

    def _check_layout(self) -> None:
        spec = self._pool.observation_spec()
        for key, size in zip(self.obs_keys, self.obs_sizes, strict=True):
            got = int(np.prod(getattr(spec, key).shape)) if hasattr(spec, key) else None
            if got != size:
                raise EnvBackendError(f"envpool's {task_id(self.name)} observes {key!r} with "
                                      f"{got} entries, dm_control's {self.name} with {size}")
        action = self._pool.action_spec()
        bounds = (np.broadcast_to(action.minimum, action.shape),
                  np.broadcast_to(action.maximum, action.shape))
        if action.shape != (self.act_dim,) or not (np.array_equal(bounds[0], self.low)
                                                   and np.array_equal(bounds[1], self.high)):
            raise EnvBackendError(f"envpool's {task_id(self.name)} actions ({action}) differ "
                                  f"from dm_control's {self.name} ({self.low}, {self.high})")

    def _flat(self, timestep) -> np.ndarray:
        """(N, obs_dim) float32 in dm_control's key order, rows in env order."""
        observation = timestep.observation
        order = np.argsort(np.asarray(observation.env_id))
        return np.concatenate([
            np.asarray(getattr(observation, k), dtype=np.float32).reshape(self.num_envs, -1)
            for k in self.obs_keys], axis=1)[order]

    def reset(self) -> np.ndarray:
        """Start an episode in every env; returns (N, obs_dim) float32."""
        timestep = self._pool.reset(self._ids)
        self._episodes += 1
        self._running = True
        return self._flat(timestep)

    def step(
        self, actions: np.ndarray, active: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step env i with actions[i] ((N, act_dim) in [-1, 1]) `action_repeat` times or until
        the episodes end. `active` (N,) must be all true: these tasks' episodes end together.

        Returns obs (N, obs_dim) float32, summed rewards (N,) float32, terminated (N,),
        truncated (N,).
        """
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs, self.act_dim):
            raise ValueError(f"{self.name}: actions shape {actions.shape} is wrong; "
                             f"expected ({self.num_envs}, {self.act_dim})")
        if active is not None and not np.all(active):
            raise ValueError(f"{self.name}: the envpool backend steps every env together; "
                             f"active={np.asarray(active)} leaves some out")
        if not self._running:
            raise RuntimeError(f"{self.name}: step() needs running episodes; call reset() first")
        if not np.all(np.isfinite(actions)):
            raise ValueError(f"{self.name}: actions have non-finite entries {actions}; "
                             "finite values are accepted (clipped to [-1, 1])")
        scaled = rescale_action(actions, self.low, self.high)
        rewards = np.zeros(self.num_envs)
        for _ in range(self.action_repeat):
            timestep = self._pool.step(scaled, self._ids)
            order = np.argsort(np.asarray(timestep.observation.env_id))
            rewards += np.asarray(timestep.reward, dtype=np.float64)[order]
            ended = np.asarray(timestep.step_type)[order] == 2  # dm_env.StepType.LAST
            if ended.any():
                break
        if ended.any() and not ended.all():
            raise RuntimeError(f"{self.name}: envs {np.flatnonzero(ended)} ended their episodes "
                               "before the others")
        discounts = np.asarray(timestep.discount)[order]
        self._running = not ended.any()
        return (self._flat(timestep), rewards.astype(np.float32), ended & (discounts == 0),
                ended & (discounts != 0))

    def get_rng_state(self) -> RngState:
        """Episodes started so far, per env ((N,) int64): with the seeds, the RNG state."""
        return {"episodes": np.full(self.num_envs, self._episodes, dtype=np.int64)}

    def set_rng_state(self, state: RngState) -> None:
        """Restore a get_rng_state() result: a new pool whose envs start as many episodes as
        the state counts, so the next reset() starts the episode that followed it."""
        if set(state) != {"episodes"}:
            raise ValueError(f"an envpool rng state holds 'episodes', got {sorted(state)} (a "
                             "dm_control env's state?)")
        episodes = np.asarray(state["episodes"])
        if episodes.shape != (self.num_envs,) or len(set(episodes.tolist())) != 1:
            raise ValueError(f"rng state 'episodes' must be one count for each of the "
                             f"{self.num_envs} envs, got {episodes}")
        self._pool.close()
        self._open()
        for _ in range(int(episodes[0])):
            self._pool.reset(self._ids)
        self._episodes = int(episodes[0])
