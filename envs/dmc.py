"""One dm_control task with flat float32 observations, actions in [-1, 1] and action repeat."""

from collections.abc import Mapping

import dm_env
import numpy as np

from envs.names import check_env_name, dm_suite

RngState = dict[str, np.ndarray]
_MT_KEY_SIZE = 624
EPISODE_STEPS = 1000  # the suite's time limit in control steps (lqr's is infinite otherwise)


def flatten_observation(observation: Mapping[str, np.ndarray], keys: tuple[str, ...]) -> np.ndarray:
    """Concatenate `observation[k]` for k in `keys`, each raveled (a scalar gives one entry).

    Returns (sum of sizes,) float32.
    """
    return np.concatenate(
        [np.asarray(observation[k], dtype=np.float32).ravel() for k in keys]
    )


# dm_control marks an unbounded action (lqr's) with bounds of +-1e10: the agent's [-1, 1] is
# applied as it is there, where a linear map onto the bounds would ask for forces of 1e10.
UNBOUNDED_ACTION = 1e10


def rescale_action(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Map (act_dim,) actions from [-1, 1] linearly onto [low, high], then clip to the bounds."""
    scaled = low + (np.asarray(action, dtype=np.float64) + 1.0) * 0.5 * (high - low)
    return np.clip(scaled, low, high)


def check_action_repeat(action_repeat: int) -> int:
    """`action_repeat` as an int; raises ValueError unless it is an integer from 1 to an
    episode's EPISODE_STEPS control steps (more would make every agent step a whole episode)."""
    if isinstance(action_repeat, bool) or not isinstance(action_repeat, int | np.integer):
        raise ValueError(f"action_repeat must be an integer from 1 to {EPISODE_STEPS}, got "
                         f"{action_repeat!r}")
    if not 1 <= action_repeat <= EPISODE_STEPS:
        raise ValueError(f"action_repeat must be an integer from 1 to {EPISODE_STEPS} (an "
                         f"episode's control steps), got {action_repeat}")
    return int(action_repeat)


def check_seed(seed: int) -> int:
    """`seed` as an int; raises ValueError unless 0 <= seed < 2**32 (numpy RandomState's range)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed}")
    return int(seed)


class DMCEnv:
    """A dm_env environment seen by the agent: flat float32 observations, actions in [-1, 1].

    Observation order: the task's own observation keys in its spec's order (`obs_keys`, sizes in
    `obs_sizes`), e.g. cartpole: position (3), velocity (2). Actions in [-1, 1] map linearly onto
    the spec's bounds (`low`, `high`), except on unbounded dimensions (UNBOUNDED_ACTION), which
    take them as they are (their `low`, `high` are -1, 1). A time-limit end (discount 1) is a
    truncation; an end with discount 0 is a termination. No auto-reset: call reset() after
    either.
    """

    def __init__(self, env: dm_env.Environment, name: str, action_repeat: int = 1):
        self.env = env
        self.name = name
        self.action_repeat = check_action_repeat(action_repeat)
        spec = env.action_spec()
        low = np.asarray(getattr(spec, "minimum", -np.inf), dtype=np.float64)
        high = np.asarray(getattr(spec, "maximum", np.inf), dtype=np.float64)
        if len(spec.shape) != 1:
            raise ValueError(f"{name}: action spec must be 1-D, got shape {spec.shape}")
        self.act_dim = int(spec.shape[0])
        self.low = np.broadcast_to(low, spec.shape).copy()
        self.high = np.broadcast_to(high, spec.shape).copy()
        if not (np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high))):
            raise ValueError(f"{name}: action spec needs finite bounds, got {spec}")
        if np.any(self.low > self.high):
            raise ValueError(f"{name}: action spec has minimum > maximum: {spec}")
        unbounded = (self.low <= -UNBOUNDED_ACTION) & (self.high >= UNBOUNDED_ACTION)
        self.low[unbounded], self.high[unbounded] = -1.0, 1.0  # the map onto them: identity
        obs_spec = env.observation_spec()
        self.obs_keys = tuple(obs_spec)
        self.obs_sizes = tuple(int(np.prod(obs_spec[k].shape)) for k in self.obs_keys)
        self.obs_dim = sum(self.obs_sizes)
        self._episode_over = True

    def reset(self) -> np.ndarray:
        """Start an episode; returns the first observation, (obs_dim,) float32."""
        self._episode_over = False
        return flatten_observation(self.env.reset().observation, self.obs_keys)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.float32, bool, bool]:
        """Apply a (act_dim,) action in [-1, 1] `action_repeat` times (or until the episode ends).

        Returns (obs (obs_dim,) float32, summed reward float32, terminated, truncated).
        """
        if self._episode_over:
            raise RuntimeError(f"{self.name}: step() needs a running episode; call reset() first")
        action = np.asarray(action)
        if action.shape != (self.act_dim,):
            raise ValueError(
                f"{self.name}: action shape {action.shape} is wrong; expected ({self.act_dim},)"
            )
        if not np.all(np.isfinite(action)):
            raise ValueError(f"{self.name}: action has non-finite entries {action}; "
                             "finite values are accepted (clipped to [-1, 1])")
        scaled = rescale_action(action, self.low, self.high)
        reward = 0.0
        for _ in range(self.action_repeat):
            timestep = self.env.step(scaled)
            reward += float(timestep.reward)
            if timestep.last():
                break
        ended = timestep.last()
        terminated = bool(ended and float(timestep.discount) == 0.0)
        self._episode_over = ended
        obs = flatten_observation(timestep.observation, self.obs_keys)
        return obs, np.float32(reward), terminated, bool(ended and not terminated)

    def _random(self) -> np.random.RandomState:
        task = getattr(self.env, "task", None)
        if not isinstance(getattr(task, "random", None), np.random.RandomState):
            raise TypeError(f"{self.name}: rng state needs a dm_control env with task.random")
        return task.random

    def get_rng_state(self) -> RngState:
        """The task's MT19937 state as arrays: key (624,) uint32, pos, has_gauss, gauss."""
        _, key, pos, has_gauss, gauss = self._random().get_state(legacy=True)
        return {
            "key": np.array(key, dtype=np.uint32),
            "pos": np.array(pos, dtype=np.int64),
            "has_gauss": np.array(has_gauss, dtype=np.int64),
            "gauss": np.array(gauss, dtype=np.float64),
        }

    def set_rng_state(self, state: RngState) -> None:
        """Restore a get_rng_state() result; episodes started next replay the saved sequence."""
        key = np.asarray(state["key"])
        if key.shape != (_MT_KEY_SIZE,):
            raise ValueError(f"rng state key must have shape ({_MT_KEY_SIZE},), got {key.shape}")
        self._random().set_state((
            "MT19937",
            key.astype(np.uint32),
            int(state["pos"]),
            int(state["has_gauss"]),
            float(state["gauss"]),
        ))


def make_env(name: str, seed: int, action_repeat: int = 1) -> DMCEnv:
    """Load the suite task `name` ("domain-task"), seeded via task_kwargs={'random': seed}.

    Every suite task but lqr's ends its episodes after 1,000 control steps; lqr's has no time
    limit (an episode would run until the state is almost exactly zero), so it gets that one.
    """
    domain, task = check_env_name(name)
    seed = check_seed(seed)
    action_repeat = check_action_repeat(action_repeat)
    env = dm_suite().load(domain, task, task_kwargs={"random": seed})
    if domain == "lqr":
        limit = EPISODE_STEPS * env.control_timestep()
        env = dm_suite().load(domain, task, task_kwargs={"random": seed, "time_limit": limit})
    return DMCEnv(env, name, action_repeat)
