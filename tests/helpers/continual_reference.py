"""The continual tasks' inputs computed on the host in numpy: the reference that
`continual.loop.make_inputs`, which gathers them on the device, is tested against."""

import numpy as np

from continual.tasks import Source, Task


def task_images(source: Source, task: Task, seed_index: int, positions: np.ndarray) -> np.ndarray:
    """Float32 inputs of the task's examples at `positions` (any shape) for one seed, with the
    task's permutation, pixels in [0, 1]: (*positions.shape, *image shape)."""
    rows = task.index[seed_index][positions]
    flat = source.images[rows].reshape(*positions.shape, -1)[..., task.perm[seed_index]]
    return (flat.astype(np.float32) * source.scale).reshape(*positions.shape,
                                                            *source.images.shape[1:])
