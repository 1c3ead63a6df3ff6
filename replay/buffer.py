"""Host-memory replay buffer shared by all agents: one ring per seed, observations stored once."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

_U64 = (1 << 64) - 1
_FIXED_ARRAYS = (
    "observations",
    "actions",
    "rewards",
    "terminated",
    "episode_ends",
    "final_ordinals",
    "pending_next_observations",
    "finals_written",
    "finals_live",
)
# Arrays with a slot axis (axis 1): only their first `size` slots hold transitions.
_SLOT_ARRAYS = ("observations", "actions", "rewards", "terminated", "episode_ends",
                "final_ordinals")
_STATE_KEYS = frozenset(_FIXED_ARRAYS + ("finals", "pointer", "size", "capacity", "rng"))


def _next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _rng_to_array(rng: np.random.Generator) -> np.ndarray:
    """PCG64 state as uint64[6] (128-bit state and inc in halves): checkpointable as one array."""
    state = rng.bit_generator.state
    s, inc = state["state"]["state"], state["state"]["inc"]
    words = [s >> 64, s & _U64, inc >> 64, inc & _U64, state["has_uint32"], state["uinteger"]]
    return np.array(words, dtype=np.uint64)


def _rng_from_array(words: np.ndarray) -> np.random.Generator:
    """Inverse of `_rng_to_array`."""
    w = [int(x) for x in np.asarray(words, dtype=np.uint64)]
    bit_generator = np.random.PCG64()
    bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (w[0] << 64) | w[1], "inc": (w[2] << 64) | w[3]},
        "has_uint32": w[4],
        "uinteger": w[5],
    }
    return np.random.Generator(bit_generator)


MAX_CAPACITY = 2**31  # transitions per seed: final ordinals are uint32


class ReplayBuffer:
    """`num_seeds` rings of `capacity` transitions in host memory, written in lockstep.

    Slot j holds obs, action, reward, terminated and whether the episode ended there. Its next
    observation is obs[j + 1] (the following insert of the same episode), or, for the newest slot,
    the last next_obs given (`pending`). Where an episode ended, the final next observation is kept
    apart in `finals`, a per-seed FIFO addressed by a uint32 ordinal stored in the slot; an entry
    is released when its slot is overwritten. The FIFO starts at the power of two above
    capacity / episode_length_hint + 1 and doubles whenever a seed fills it, so episodes of any
    length are stored exactly and it stays within 2 * capacity entries. Hence every stored
    transition can be sampled: len(buffer) == min(inserts, capacity).
    """

    def __init__(
        self,
        num_seeds: int,
        capacity: int,
        obs_dim: int,
        act_dim: int,
        seed: int = 0,
        episode_length_hint: int = 1000,
    ):
        sizes = dict(num_seeds=num_seeds, capacity=capacity, obs_dim=obs_dim, act_dim=act_dim)
        for name, value in {**sizes, "episode_length_hint": episode_length_hint}.items():
            if not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
        if capacity > MAX_CAPACITY:
            raise ValueError(f"capacity must be <= 2**31 (uint32 final ordinals); got {capacity}")
        self.num_seeds, self.capacity = int(num_seeds), int(capacity)
        self.obs_dim, self.act_dim = int(obs_dim), int(act_dim)
        n, c = self.num_seeds, self.capacity
        num_finals = _next_power_of_two(-(-c // episode_length_hint) + 1)
        self._arrays = {
            "observations": np.zeros((n, c, obs_dim), np.float32),
            "actions": np.zeros((n, c, act_dim), np.float32),
            "rewards": np.zeros((n, c), np.float32),
            "terminated": np.zeros((n, c), bool),
            "episode_ends": np.zeros((n, c), bool),
            "final_ordinals": np.zeros((n, c), np.uint32),
            "finals": np.zeros((n, num_finals, obs_dim), np.float32),
            "pending_next_observations": np.zeros((n, obs_dim), np.float32),
            "finals_written": np.zeros((n,), np.uint32),
            "finals_live": np.zeros((n,), np.int64),
        }
        self._pointer = 0
        self._size = 0
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self.changes = 0  # inserts and restores so far (not state: what was drawn ahead for)

    def __len__(self) -> int:
        """Number of valid (sampleable) transitions, the same for every seed."""
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffer's arrays."""
        return sum(a.nbytes for a in self._arrays.values())

    def insert(
        self,
        obs: ArrayLike,
        action: ArrayLike,
        reward: ArrayLike,
        next_obs: ArrayLike,
        terminated: ArrayLike,
        truncated: ArrayLike,
    ) -> None:
        """Add one env step per seed: obs/next_obs (N, obs_dim), action (N, act_dim), rest (N,).

        An episode ends where terminated or truncated; the next insert for that seed starts a new
        episode. Elsewhere obs must equal the previous next_obs (it is stored only once).
        """
        n, c = self.num_seeds, self.capacity
        obs = self._checked("obs", obs, (n, self.obs_dim), np.float32)
        action = self._checked("action", action, (n, self.act_dim), np.float32)
        reward = self._checked("reward", reward, (n,), np.float32)
        next_obs = self._checked("next_obs", next_obs, (n, self.obs_dim), np.float32)
        terminated = self._checked("terminated", terminated, (n,), bool)
        ended = terminated | self._checked("truncated", truncated, (n,), bool)
        a, p = self._arrays, self._pointer
        if self._size:
            pending = a["pending_next_observations"]
            same = ((obs == pending) | (np.isnan(obs) & np.isnan(pending))).all(axis=1)
            broken = ~same & ~a["episode_ends"][:, (p - 1) % c]
            if broken.any():
                raise ValueError(
                    f"obs differs from the previous next_obs for seeds {np.flatnonzero(broken)}"
                    " whose episode did not end; an episode continues until a step is marked"
                    " terminated or truncated"
                )
        if self._size == c:
            a["finals_live"] -= a["episode_ends"][:, p]
        a["observations"][:, p] = obs
        a["actions"][:, p] = action
        a["rewards"][:, p] = reward
        a["terminated"][:, p] = terminated
        a["episode_ends"][:, p] = ended
        if ended.any():
            self._store_finals(np.flatnonzero(ended), next_obs)
        a["pending_next_observations"][:] = next_obs
        self._pointer = (p + 1) % c
        self._size = min(self._size + 1, c)
        self.changes += 1

    @property
    def next_slot(self) -> int:
        """The slot the next insert writes (of every seed's ring)."""
        return self._pointer

    def generator_copy(self) -> np.random.Generator:
        """A copy of the buffer's own generator: `draw(..., rng=copy)` leaves the buffer's as it
        is, until `adopt_generator(copy)` makes the copy's state the buffer's."""
        return _rng_from_array(_rng_to_array(self._rng))

    def adopt_generator(self, rng: np.random.Generator) -> None:
        """Continue the buffer's draws from `rng`'s state (a `generator_copy` drawn from)."""
        self._rng = rng

    def sample(self, batch_size: int, utd: int = 1,
               rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Uniform transitions, drawn independently per seed: arrays shaped (N, utd, B, ...).

        Keys observations, actions, rewards, next_observations, masks (1 - terminated), float32.
        Draws from the buffer's own generator (part of its state) unless given `rng`.
        """
        return self.gather(self.draw(batch_size, utd, rng))

    def draw(self, batch_size: int, utd: int = 1, rng: np.random.Generator | None = None,
             ahead: bool = False) -> np.ndarray:
        """The slots (N, utd, B) that `sample` gathers: uniform over the stored transitions, or
        with `ahead`, over those the buffer will hold after the next insert. Such slots other
        than `next_slot` can be gathered before that insert, with the rows they give after it."""
        size = min(self._size + 1, self.capacity) if ahead else self._size
        if size == 0:
            raise ValueError("cannot sample from an empty buffer; insert transitions first")
        if batch_size < 1 or utd < 1:
            raise ValueError(f"batch_size and utd must be >= 1; got {batch_size} and {utd}")
        return (self._rng if rng is None else rng).integers(
            0, size, size=(self.num_seeds, utd, batch_size))

    def gather(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions at `slots` (N, ...) of the stored ones, per seed, as `sample` gives
        them. The newest slot's next observation is the pending one, which the next insert
        repeats as its observation (where the episode goes on), so gathering a slot before
        that insert gives what gathering it after does, except at the slot it writes."""
        n, c = self.num_seeds, self.capacity
        a = self._arrays
        seeds = np.broadcast_to(np.arange(n).reshape((n,) + (1,) * (slots.ndim - 1)),
                                slots.shape)
        rows = seeds * c + slots
        next_rows = seeds * c + (slots + 1) % c
        observations = a["observations"].reshape(n * c, self.obs_dim)
        next_observations = np.take(observations, next_rows, axis=0)
        ends = a["episode_ends"].reshape(-1)[rows]
        newest = ~ends & (slots == (self._pointer - 1) % c)
        next_observations[newest] = a["pending_next_observations"][seeds[newest]]
        finals = a["finals"]
        positions = a["final_ordinals"].reshape(-1)[rows[ends]] & (finals.shape[1] - 1)
        next_observations[ends] = finals[seeds[ends], positions]
        return {
            "observations": np.take(observations, rows, axis=0),
            "actions": np.take(a["actions"].reshape(n * c, self.act_dim), rows, axis=0),
            "rewards": a["rewards"].reshape(-1)[rows],
            "next_observations": next_observations,
            "masks": 1.0 - a["terminated"].reshape(-1)[rows].astype(np.float32),
        }

    def state_dict(self) -> dict[str, np.ndarray | int]:
        """Everything needed for an exact restore. Arrays are views of the buffer's own, not
        copies; the per-slot ones only of the `size` slots that hold transitions (before the
        ring first wraps, the rest are empty), so a checkpoint early in a run is small."""
        return {
            **self._arrays,
            **{key: self._arrays[key][:, :self._size] for key in _SLOT_ARRAYS},
            "pointer": self._pointer,
            "size": self._size,
            "capacity": self.capacity,
            "rng": _rng_to_array(self._rng),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore (copying) a `state_dict` of a buffer with the same seeds, capacity and dims."""
        if "capacity" not in state and "observations" in state:  # saved before it was a key
            state = {**state, "capacity": np.shape(state["observations"])[1]}
        if set(state) != _STATE_KEYS:
            raise ValueError(f"state keys {sorted(state)} differ from {sorted(_STATE_KEYS)}")
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"state of a buffer with capacity {int(state['capacity'])}; this "
                             f"one has capacity {self.capacity}")
        pointer, size = int(state["pointer"]), int(state["size"])
        if not (0 <= pointer < self.capacity and 0 <= size <= self.capacity):
            raise ValueError(
                f"pointer {pointer} and size {size} must lie in [0, {self.capacity})"
                f" and [0, {self.capacity}]"
            )
        arrays = {}
        for key in _FIXED_ARRAYS:
            own = self._arrays[key]
            value = np.asarray(state[key])
            if key in _SLOT_ARRAYS and value.shape == own.shape:
                value = value[:, :size]  # every slot, as states were saved before
            expected = (own.shape[0], size, *own.shape[2:]) if key in _SLOT_ARRAYS else own.shape
            if value.shape != expected:
                raise ValueError(f"state[{key!r}] has shape {value.shape}; expected {expected}")
            if key in _SLOT_ARRAYS:  # zeros are allocated lazily: only the copied slots count
                arrays[key] = np.zeros(own.shape, own.dtype)
                arrays[key][:, :size] = value
            else:
                arrays[key] = np.array(value, dtype=own.dtype)
        finals = np.asarray(state["finals"])
        f = finals.shape[1] if finals.ndim == 3 else 0
        if finals.shape != (self.num_seeds, f, self.obs_dim) or f < 1 or f & (f - 1):
            raise ValueError(
                f"state['finals'] has shape {finals.shape}; expected "
                f"({self.num_seeds}, power of two, {self.obs_dim})"
            )
        arrays["finals"] = np.array(finals, dtype=np.float32)
        self._arrays, self._pointer, self._size = arrays, pointer, size
        self._rng = _rng_from_array(state["rng"])
        self.changes += 1

    def _store_finals(self, seeds: np.ndarray, next_obs: np.ndarray) -> None:
        """Append the final next observations of `seeds` (episodes ending at the write pointer)."""
        a = self._arrays
        if np.any(a["finals_live"][seeds] >= a["finals"].shape[1]):
            self._grow_finals()
        ordinals = a["finals_written"][seeds]
        a["finals"][seeds, ordinals & (a["finals"].shape[1] - 1)] = next_obs[seeds]
        a["final_ordinals"][seeds, self._pointer] = ordinals
        a["finals_written"][seeds] += np.uint32(1)
        a["finals_live"][seeds] += 1

    def _grow_finals(self) -> None:
        """Double the finals FIFO, moving each entry to its ordinal's position in the new size."""
        old = self._arrays["finals"]
        size = old.shape[1]
        new = np.zeros((self.num_seeds, 2 * size, self.obs_dim), np.float32)
        back = np.arange(1, size + 1, dtype=np.uint32)
        ordinals = self._arrays["finals_written"][:, None] - back
        seeds = np.arange(self.num_seeds)[:, None]
        new[seeds, ordinals & (2 * size - 1)] = old[seeds, ordinals & (size - 1)]
        self._arrays["finals"] = new

    def _checked(self, name: str, value: ArrayLike, shape: tuple, dtype: type) -> np.ndarray:
        array = np.asarray(value, dtype=dtype)
        if array.shape != shape:
            raise ValueError(
                f"{name} has shape {array.shape}; expected {shape} (num_seeds={self.num_seeds}, "
                f"obs_dim={self.obs_dim}, act_dim={self.act_dim})"
            )
        return array
