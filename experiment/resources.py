"""Whether a run fits its machine, checked before anything is compiled or built: the agents'
states (traced, not allocated) against the device's memory, and the replay buffer, envs and
states against the host's. The sizes themselves come from `experiment.memory` (no JAX)."""

import functools

import jax
import numpy as np

from experiment.config import TrainConfig
from experiment.memory import (
    buffer_nbytes,
    cgroup_memory_limit,
    env_nbytes,
    host_memory_bytes,
    physical_memory_bytes,
    process_memory_bytes,
    sized,
)
from replay.device import replay_nbytes


class TooLargeForMemory(RuntimeError):
    """The agent's state alone (every seed's parameters, target networks and optimizer
    moments) is larger than the memory of the device it trains on (found by tracing the
    initialisation, before anything is compiled or allocated), or the run's replay buffer,
    envs and states are larger than the host's memory. `advice`: the flags that set it."""

    def __init__(self, message: str,
                 advice: str = "the networks' sizes and --num_seeds set it: lower them"):
        super().__init__(message)
        self.advice = advice


def device_memory_bytes(device: jax.Device) -> int | None:
    """The bytes JAX may allocate on `device`: an accelerator's limit, for a CPU the host's
    physical memory or the process's cgroup limit where smaller, or None where neither is
    known."""
    try:
        stats = device.memory_stats()
    except Exception:  # not every backend implements it
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if device.platform == "cpu":
        physical = physical_memory_bytes()
        if physical is None:
            return None
        limit = cgroup_memory_limit()  # a container's or a SLURM job's (--mem), if smaller
        return physical if limit is None else min(physical, limit)
    return None


@functools.lru_cache
def _key_nbytes(dtype) -> int:
    """Bytes of one key's data for a PRNG key dtype (its impl's)."""
    data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), dtype))
    return data.size * np.dtype(data.dtype).itemsize


def tree_nbytes(tree) -> int:
    """Bytes of a pytree of arrays or shapes (a PRNG key counts as its key data)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        dtype = leaf.dtype
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):  # its own impl's key data
            total += leaf.size * _key_nbytes(dtype)
        else:
            total += leaf.size * np.dtype(dtype).itemsize
    return total


def _told_apart(need: int, have: int) -> tuple[str, str]:
    """Two byte counts in GiB with as few decimals as tell them apart, else in bytes."""
    for digits in (1, 3):
        pair = (f"{need / 2**30:,.{digits}f} GiB", f"{have / 2**30:,.{digits}f} GiB")
        if pair[0] != pair[1]:
            return pair
    return f"{need:,} bytes", f"{have:,} bytes"


def check_state_fits(init_fn, init_keys: jax.Array, replay_bytes: int = 0) -> int:
    """Raise TooLargeForMemory where the seeds' agent states `init_fn(init_keys)` would make,
    with `replay_bytes` of replay buffer on the device, cannot fit on the default device. Only
    traces `init_fn` (the trace is the one its first call uses): XLA can compile networks far
    too large for a GPU's memory for over a minute before failing, so they are refused here.
    What an update holds beyond the state is left to the allocation that fails. Returns the
    states' bytes."""
    state = tree_nbytes(jax.eval_shape(init_fn, init_keys))
    need = state + replay_bytes
    device = jax.devices()[0]
    have = device_memory_bytes(device)
    if have is not None and need > have:
        sizes = _told_apart(need, have)
        what = (f"the agent's state (parameters, target networks and optimizer moments) of "
                f"{init_keys.shape[0]} seed(s) takes")
        if replay_bytes:
            parts = _told_apart(state, replay_bytes)
            what = f"{what} {parts[0]} and their replay buffer on the device {parts[1]}: together"
        raise TooLargeForMemory(
            f"{what} {sizes[0]}, more than the {device.platform.upper()}'s {sizes[1]}",
            advice=("the networks' sizes, --num_seeds and --buffer_capacity (--replay_on_device) "
                    "set it: lower them") if replay_bytes else
            "the networks' sizes and --num_seeds set it: lower them")
    return state


def check_fits(init_fn, init_keys: jax.Array, cfg: TrainConfig, env) -> None:
    """Refuse (TooLargeForMemory) a run whose agent states `init_fn(init_keys)` do not fit its
    device (`check_state_fits`) or whose replay buffer, envs (two per seed) and, on a CPU,
    states do not fit the host's memory with what this process holds already. Takes the
    dimensions and sizes from `env`, one env of the run's task, so it runs before the run's
    envs are built (minutes for a thousand seeds) and before anything compiles."""
    on_device = (replay_nbytes(cfg.num_seeds, cfg.buffer_capacity, env.obs_dim, env.act_dim)
                 if cfg.replay_on_device else 0)
    states = check_state_fits(init_fn, init_keys, on_device)
    device = jax.devices()[0]
    # On a CPU the device's memory is the host's (device_memory_bytes says so, or nothing).
    have = device_memory_bytes(device) if device.platform == "cpu" else host_memory_bytes()
    transitions = min(cfg.buffer_capacity, cfg.max_steps)
    parts = {
        f"the replay buffer ({cfg.num_seeds:,} seed(s) x {transitions:,} transitions, the "
        "smaller of --buffer_capacity and --max_steps)":
            0 if cfg.replay_on_device else
            buffer_nbytes(cfg.num_seeds, transitions, env.obs_dim, env.act_dim),
        f"{2 * cfg.num_seeds:,} envs (training and evaluation)":
            2 * cfg.num_seeds * env_nbytes(env),
        "the agents' states": states if device.platform == "cpu" else 0,
        "this process so far": process_memory_bytes(),
    }
    need = sum(parts.values())
    if have is not None and need > have:
        shown = ", ".join(f"{what} {sized(n)}" for what, n in parts.items() if n)
        sizes = _told_apart(need, have)
        raise TooLargeForMemory(
            f"the run needs about {sizes[0]} of host memory, more than the host's {sizes[1]}: "
            f"{shown}",
            advice="lower --num_seeds, --buffer_capacity or --max_steps")
