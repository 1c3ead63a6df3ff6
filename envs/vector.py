"""N independent dm_control envs (one per seed) stepped in lockstep on the host."""

from collections.abc import Sequence

import numpy as np

from envs.dmc import DMCEnv, RngState, check_action_repeat, check_seed, make_env


class VectorEnv:
    """Steps N DMCEnvs one after another; every array has a leading (N,) seed axis.

    No auto-reset: an ended episode returns its final observation and reset() restarts all envs.
    Suite episodes share one time limit, so all envs end together (lqr can terminate earlier).
    """

    def __init__(self, envs: Sequence[DMCEnv]):
        if not envs:
            raise ValueError("VectorEnv needs at least one env, got none")
        dims = {(env.obs_dim, env.act_dim) for env in envs}
        if len(dims) != 1:
            raise ValueError(f"all envs must share (obs_dim, act_dim), got {sorted(dims)}")
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.name = self.envs[0].name
        self.obs_dim, self.act_dim = dims.pop()

    def reset(self) -> np.ndarray:
        """Start an episode in every env; returns (N, obs_dim) float32."""
        return np.stack([env.reset() for env in self.envs])

    def step(
        self, actions: np.ndarray, active: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step env i with actions[i] ((N, act_dim) in [-1, 1]); with `active` (N,) bools, only
        those envs (an env whose episode ended gives zeros, reward 0, not ended).

        Returns obs (N, obs_dim) float32, rewards (N,) float32, terminated (N,), truncated (N,).
        """
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs, self.act_dim):
            raise ValueError(f"{self.name}: actions shape {actions.shape} is wrong; "
                             f"expected ({self.num_envs}, {self.act_dim})")
        idle = (np.zeros(self.obs_dim, np.float32), 0.0, False, False)
        active = np.ones(self.num_envs, bool) if active is None else np.asarray(active, bool)
        obs, rewards, terminated, truncated = zip(
            *(env.step(a) if on else idle
              for env, a, on in zip(self.envs, actions, active, strict=True)), strict=True
        )
        return (
            np.stack(obs),
            np.array(rewards, dtype=np.float32),
            np.array(terminated, dtype=bool),
            np.array(truncated, dtype=bool),
        )

    def get_rng_state(self) -> RngState:
        """Every env's task rng state, stacked: key (N, 624), pos / has_gauss / gauss (N,)."""
        states = [env.get_rng_state() for env in self.envs]
        return {k: np.stack([s[k] for s in states]) for k in states[0]}

    def set_rng_state(self, state: RngState) -> None:
        """Restore a get_rng_state() result (leading axis N, one row per env)."""
        for k, v in state.items():
            if np.shape(v)[:1] != (self.num_envs,):
                raise ValueError(f"rng state {k!r} must lead with {self.num_envs} envs, "
                                 f"got shape {np.shape(v)}")
        for i, env in enumerate(self.envs):
            env.set_rng_state({k: np.asarray(v)[i] for k, v in state.items()})


ENV_BACKENDS = ("dm_control", "envpool")


def make_vector_env(name: str, seeds: Sequence[int], action_repeat: int = 1,
                    backend: str = "dm_control"):
    """One `make_env(name, seed, action_repeat)` per seed (seeds must be distinct), stepped one
    after another; or, with backend "envpool", an `EnvPoolVectorEnv` (imported only then)."""
    if backend == "envpool":
        from envs.envpool_backend import EnvPoolVectorEnv

        return EnvPoolVectorEnv(name, seeds, action_repeat)
    if backend != "dm_control":
        raise ValueError(f"unknown env backend {backend!r}; known: {', '.join(ENV_BACKENDS)}")
    seeds = [check_seed(s) for s in seeds]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct (one independent env each), got {seeds}")
    check_action_repeat(action_repeat)
    return VectorEnv([make_env(name, seed, action_repeat) for seed in seeds])
