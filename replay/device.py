"""Replay in the accelerator's memory: one ring of transitions per seed, as JAX arrays.

A training step moves one transition per seed to the device (`DeviceReplayBuffer.insert`, a
jitted in-place write) and draws and gathers its minibatches there (`draw`, `gather`, called
inside the compiled update), so no minibatch crosses from the host. Each slot stores its
observation and its next observation (twice the observation memory of the host buffer,
`replay.buffer.ReplayBuffer`, which stores each observation once, for a ring the device writes
without any host bookkeeping). Draws are uniform over the filled slots of each seed's ring,
with a key per seed folded with the number of transitions inserted so far: a function of the
buffer's state alone, so a buffer restored from a checkpoint draws what the original would.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from learners.batch import Batch

MAX_DEVICE_CAPACITY = 2**31 - 1  # transitions per seed: the ring's counters are int32
_SLOT_ARRAYS = ("observations", "actions", "rewards", "next_observations", "terminated")
_STATE_KEYS = frozenset(_SLOT_ARRAYS + ("rng", "pointer", "size", "inserts", "capacity"))


class DeviceReplay(NamedTuple):
    """The rings of N seeds with C slots each (a pytree of device arrays)."""

    observations: jax.Array  # (N, C, obs_dim) float32
    actions: jax.Array  # (N, C, act_dim) float32
    rewards: jax.Array  # (N, C) float32
    next_observations: jax.Array  # (N, C, obs_dim) float32
    terminated: jax.Array  # (N, C) bool
    rng: jax.Array  # (N, 2) uint32: each seed's draw key data
    pointer: jax.Array  # () int32: the slot the next insert writes
    size: jax.Array  # () int32: filled slots
    inserts: jax.Array  # () int32: transitions inserted so far


def replay_nbytes(num_seeds: int, capacity: int, obs_dim: int, act_dim: int) -> int:
    """Bytes of the rings of `num_seeds` seeds with `capacity` slots each."""
    per_slot = 4 * (2 * obs_dim + act_dim + 1) + 1
    return num_seeds * (capacity * per_slot + 8) + 12


def empty(num_seeds: int, capacity: int, obs_dim: int, act_dim: int,
          seeds) -> DeviceReplay:
    """Empty rings; seed i draws with a key from seeds[i] (apart from its agent's keys)."""
    n, c = num_seeds, capacity
    keys = jnp.stack([jax.random.key_data(jax.random.fold_in(jax.random.key(s), 2))
                      for s in seeds])
    return DeviceReplay(
        observations=jnp.zeros((n, c, obs_dim), jnp.float32),
        actions=jnp.zeros((n, c, act_dim), jnp.float32),
        rewards=jnp.zeros((n, c), jnp.float32),
        next_observations=jnp.zeros((n, c, obs_dim), jnp.float32),
        terminated=jnp.zeros((n, c), bool),
        rng=keys,
        pointer=jnp.zeros((), jnp.int32),
        size=jnp.zeros((), jnp.int32),
        inserts=jnp.zeros((), jnp.int32),
    )


def insert(replay: DeviceReplay, obs, action, reward, next_obs, terminated) -> DeviceReplay:
    """`replay` with one transition per seed written at `pointer`: obs, next_obs (N, obs_dim),
    action (N, act_dim), reward, terminated (N,)."""
    p = replay.pointer
    capacity = replay.rewards.shape[1]
    return replay._replace(
        observations=replay.observations.at[:, p].set(obs),
        actions=replay.actions.at[:, p].set(action),
        rewards=replay.rewards.at[:, p].set(reward),
        next_observations=replay.next_observations.at[:, p].set(next_obs),
        terminated=replay.terminated.at[:, p].set(terminated),
        pointer=(p + 1) % capacity,
        size=jnp.minimum(replay.size + 1, capacity),
        inserts=replay.inserts + 1,
    )


def draw(replay: DeviceReplay, batch_size: int, utd: int, ahead: bool = False) -> jax.Array:
    """Slots (N, utd, batch_size) int32, uniform over each seed's filled slots, or with `ahead`
    over those the ring holds after its next insert (of which only `pointer` changes)."""
    capacity = replay.rewards.shape[1]
    limit = jnp.minimum(replay.size + 1, capacity) if ahead else replay.size

    def one(key_data):
        key = jax.random.fold_in(jax.random.wrap_key_data(key_data), replay.inserts)
        return jax.random.randint(key, (utd, batch_size), 0, limit, dtype=jnp.int32)

    return jax.vmap(one)(replay.rng)


def gather(replay: DeviceReplay, slots: jax.Array) -> Batch:
    """The transitions at `slots` (N, ...) of each seed's ring, as float32 `Batch` leaves."""

    def take(array):
        return jax.vmap(lambda ring, s: ring[s])(array, slots)

    return Batch(
        observations=take(replay.observations),
        actions=take(replay.actions),
        rewards=take(replay.rewards),
        next_observations=take(replay.next_observations),
        masks=1.0 - take(replay.terminated).astype(jnp.float32),
    )


def _write_front(ring: jax.Array, values: jax.Array) -> jax.Array:
    """`ring` (N, C, ...) with its first slots set to `values` (N, size, ...), in place."""
    return ring.at[:, :values.shape[1]].set(values)


_filled = jax.jit(_write_front, donate_argnums=0)


class DeviceReplayBuffer:
    """The trainer's handle on a `DeviceReplay`: the host buffer's interface (insert, len,
    sample, state_dict, load_state_dict), with the rings on the default device.

    Arrays given to `insert` whose device copy the handle already holds (`remember`: the
    observation the last insert gave as next_obs, actions computed on the device) are not sent
    again, so a training step sends the next observations, rewards and terminations alone.
    """

    def __init__(self, num_seeds: int, capacity: int, obs_dim: int, act_dim: int, seeds):
        if not 1 <= capacity <= MAX_DEVICE_CAPACITY:
            raise ValueError(f"capacity must be from 1 to 2**31 - 1 on the device (int32 "
                             f"counters); got {capacity}")
        self.num_seeds, self.capacity = int(num_seeds), int(capacity)
        self.obs_dim, self.act_dim = int(obs_dim), int(act_dim)
        self.replay = empty(num_seeds, capacity, obs_dim, act_dim, seeds)
        self._pointer = self._size = self._inserts = 0
        self.changes = 0  # inserts and restores so far
        self._insert = jax.jit(insert, donate_argnums=0)
        self._gather = jax.jit(gather)
        self._copies: list[tuple[np.ndarray, jax.Array]] = []

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return replay_nbytes(self.num_seeds, self.capacity, self.obs_dim, self.act_dim)

    @property
    def next_slot(self) -> int:
        return self._pointer

    def remember(self, host: np.ndarray, device: jax.Array) -> None:
        """Note that `device` holds `host`'s values (the handle keeps the last six pairs)."""
        self._copies = [(host, device), *self._copies[:5]]

    def to_device(self, array: np.ndarray) -> jax.Array:
        """`array` on the device: a remembered copy, else a new one (remembered)."""
        for host, device in self._copies:
            if host is array:
                return device
        device = jax.device_put(np.asarray(array))
        self.remember(array, device)
        return device

    def insert(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        """Add one env step per seed (as `ReplayBuffer.insert`; `truncated` is not stored: the
        next observation is kept in the slot, and only a termination stops bootstrapping)."""
        del truncated
        args = [self.to_device(x) for x in (obs, action, reward, next_obs, terminated)]
        self.replay = self._insert(self.replay, *args)
        self._pointer = (self._pointer + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)
        self._inserts += 1
        self.changes += 1

    def sample(self, batch_size: int, utd: int = 1,
               rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Uniform transitions drawn on the host with `rng` (diagnostics), as numpy arrays
        shaped (N, utd, B, ...) under `ReplayBuffer.sample`'s keys."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty buffer; insert transitions first")
        rng = np.random.default_rng() if rng is None else rng
        slots = rng.integers(0, self._size, size=(self.num_seeds, utd, batch_size))
        batch = jax.device_get(self._gather(self.replay, jnp.asarray(slots, jnp.int32)))
        return batch._asdict()

    def state_dict(self) -> dict[str, np.ndarray | int]:
        """The filled slots and the counters, copied to the host, for an exact restore (a seed
        at a time: the device holds one seed's slots twice while copying, not the buffer)."""
        filled = {}
        for key in _SLOT_ARRAYS:
            array = getattr(self.replay, key)
            host = np.empty((self.num_seeds, self._size, *array.shape[2:]), array.dtype)
            for seed in range(self.num_seeds):
                host[seed] = jax.device_get(array[seed, :self._size])
            filled[key] = host
        return {**filled, "rng": np.asarray(jax.device_get(self.replay.rng)),
                "pointer": self._pointer, "size": self._size, "inserts": self._inserts,
                "capacity": self.capacity}

    def load_state_dict(self, state: dict) -> None:
        """Restore a `state_dict` of a buffer with the same seeds, capacity and dims."""
        if set(state) != _STATE_KEYS:
            raise ValueError(f"state keys {sorted(state)} differ from {sorted(_STATE_KEYS)} "
                             "(a checkpoint of the host replay buffer?)")
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"state of a buffer with capacity {int(state['capacity'])}; this "
                             f"one has capacity {self.capacity}")
        pointer, size, inserts = (int(state[k]) for k in ("pointer", "size", "inserts"))
        if not (0 <= pointer < self.capacity and 0 <= size <= self.capacity):
            raise ValueError(f"pointer {pointer} and size {size} must lie in "
                             f"[0, {self.capacity}) and [0, {self.capacity}]")
        arrays = {}
        for key in _SLOT_ARRAYS:
            own = getattr(self.replay, key)
            value = np.asarray(state[key])
            expected = (own.shape[0], size, *own.shape[2:])
            if value.shape != expected:
                raise ValueError(f"state[{key!r}] has shape {value.shape}; expected {expected}")
            arrays[key] = _filled(jnp.zeros(own.shape, own.dtype), value.astype(own.dtype))
        rng = np.asarray(state["rng"])
        if rng.shape != self.replay.rng.shape:
            raise ValueError(f"state['rng'] has shape {rng.shape}; expected "
                             f"{self.replay.rng.shape}")
        self.replay = DeviceReplay(**arrays, rng=jnp.asarray(rng, jnp.uint32),
                                   pointer=jnp.asarray(pointer, jnp.int32),
                                   size=jnp.asarray(size, jnp.int32),
                                   inserts=jnp.asarray(inserts, jnp.int32))
        self._pointer, self._size, self._inserts = pointer, size, inserts
        self._copies = []
        self.changes += 1
