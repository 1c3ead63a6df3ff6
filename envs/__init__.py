"""dm_control suite tasks by "domain-task" name: flat float32 observations, actions in [-1, 1]."""

from envs.dmc import DMCEnv, flatten_observation, make_env, rescale_action
from envs.names import UnknownEnvError, check_env_name, known_envs, suggest, unknown_env_message
from envs.vector import VectorEnv, make_vector_env

__all__ = [
    "DMCEnv",
    "UnknownEnvError",
    "VectorEnv",
    "check_env_name",
    "flatten_observation",
    "known_envs",
    "make_env",
    "make_vector_env",
    "rescale_action",
    "suggest",
    "unknown_env_message",
]
