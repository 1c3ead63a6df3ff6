"""The replay buffer both agents share (host memory, one ring per seed, checkpointable)."""

from replay.buffer import ReplayBuffer

__all__ = ["ReplayBuffer"]
