"""What a run holds in host memory, computed before its envs and buffer are built, and what the
host has. Imports no JAX: the sweep sizes its local jobs with it too.

A run holds its replay buffer (numpy allocates the pages of its arrays as they are written, so
what counts is the slots its --max_steps fill, up to --buffer_capacity), two dm_control envs
per seed (training and evaluation; each holds a MuJoCo model and its data), and on a CPU the
agents' states, besides what its process holds with its libraries loaded.
"""

import os

from replay import ReplayBuffer


def physical_memory_bytes() -> int | None:
    """The machine's physical memory, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def cgroup_memory_limit(proc_cgroup: str = "/proc/self/cgroup",
                        root: str = "/sys/fs/cgroup") -> int | None:
    """The smallest memory limit set on this process's cgroup or an ancestor of it (cgroup v2
    `memory.max`, v1 `memory.limit_in_bytes`), or None where none is set or none can be read."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = os.path.join(root, "memory"), "memory.limit_in_bytes"
        else:
            continue
        folders = [folder for folder in path.split("/") if folder]
        for depth in range(len(folders), -1, -1):  # the cgroup, then each ancestor
            try:
                with open(os.path.join(base, *folders[:depth], name)) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text.isdigit():  # v2 writes "max" where no limit is set
                limits.append(int(text))
    return min(limits) if limits else None


def host_memory_bytes() -> int | None:
    """The host memory this process may use: the physical memory, or the cgroup's limit (a
    container's, a SLURM job's --mem) where smaller; None where neither is known."""
    physical, limit = physical_memory_bytes(), cgroup_memory_limit()
    known = [n for n in (physical, limit) if n is not None]
    return min(known) if known else None


def process_memory_bytes() -> int:
    """This process's resident memory now (0 where /proc cannot tell)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def buffer_nbytes(num_seeds: int, transitions: int, obs_dim: int, act_dim: int) -> int:
    """Bytes of the replay buffer's slots that `transitions` inserts per seed fill: a slot's
    bytes are the difference between one-seed buffers of two slots and of one (their other
    arrays are alike)."""
    slot = (ReplayBuffer(1, 2, obs_dim, act_dim).nbytes
            - ReplayBuffer(1, 1, obs_dim, act_dim).nbytes)
    return num_seeds * transitions * slot


def env_nbytes(env) -> int:
    """Bytes of the MuJoCo model and data of one dm_control env (a `DMCEnv`)."""
    physics = env.env.physics
    return int(physics.model.nbuffer + physics.data.nbuffer)


def sized(n: int) -> str:
    """Bytes for a person: GiB with one decimal from 1 GiB, else whole MiB (at least 1)."""
    if n >= 2**30:
        return f"{n / 2**30:,.1f} GiB"
    return f"{max(round(n / 2**20), 1)} MiB"
