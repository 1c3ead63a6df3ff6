"""Task sequences: what changes from task to task (a permutation, the labels, the class pair) and
what does not, per seed, drawn the same whenever drawn."""

import numpy as np
import pytest

from continual.tasks import (
    BENCHMARKS,
    Protocol,
    Source,
    class_pair_source,
    draw_task,
)
from tests.helpers.continual_reference import task_images


def source(n=60, shape=(4, 4), classes=10, seed=0) -> Source:
    rng = np.random.default_rng(seed)
    return Source(rng.integers(0, 256, (n, *shape), dtype=np.uint8),
                  rng.integers(0, classes, n).astype(np.int32), classes, 1 / 255)


def protocol(name, examples, epochs, batch):
    return Protocol(BENCHMARKS[name], examples, epochs, batch)


def test_random_labels_are_redrawn_each_task_on_the_same_examples():
    p, src = protocol("random_label_mnist", 40, 3, 8), source()
    t0, t1 = draw_task(p, src, [0, 1], 0), draw_task(p, src, [0, 1], 1)
    np.testing.assert_array_equal(t0.index, t1.index)  # the seed's fixed subset
    assert not np.array_equal(t0.labels, t1.labels)
    assert not np.array_equal(t0.index[0], t0.index[1])  # seeds draw their own
    assert len(set(t0.index[0].tolist())) == 40 and t0.labels.min() >= 0 and t0.labels.max() < 10
    np.testing.assert_array_equal(t0.perm, np.broadcast_to(np.arange(16), (2, 16)))
    again = draw_task(p, src, [0, 1], 1)
    for a, b in zip(again, t1, strict=True):
        np.testing.assert_array_equal(a, b)


def test_permuted_tasks_keep_the_labels_and_permute_the_pixels():
    p, src = protocol("permuted_mnist", 30, 2, 10), source()
    t0, t1 = draw_task(p, src, [5], 0), draw_task(p, src, [5], 1)
    for t in (t0, t1):
        assert sorted(t.perm[0].tolist()) == list(range(16))
        np.testing.assert_array_equal(t.labels[0], src.labels[t.index[0]])
    assert not np.array_equal(t0.perm, t1.perm)
    positions = np.array([[3, 0], [29, 7]])
    x = task_images(src, t1, 0, positions)
    assert x.shape == (2, 2, 4, 4) and x.dtype == np.float32
    row = t1.index[0][29]
    expected = src.images[row].reshape(-1)[t1.perm[0]].reshape(4, 4) / 255.0
    np.testing.assert_allclose(x[1, 0], expected, rtol=1e-6)


def test_each_epoch_is_a_new_shuffle_of_every_example():
    p = protocol("random_label_mnist", 32, 3, 8)
    task = draw_task(p, source(), [0], 0)
    assert task.order.shape == (1, 12, 8) and p.steps == 12
    epochs = task.order[0].reshape(3, 32)
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(32))
    assert not np.array_equal(epochs[0], epochs[1])


def test_class_pairs_take_two_new_classes_per_task():
    src = source(n=400, classes=10, seed=1)
    images, labels = class_pair_source(src.images, src.labels, 10, per_class=5)
    pairs = Source(images, labels, 10, src.scale)
    p = protocol("continual_imagenet", 5, 1, 5)
    seen = set()
    for number in range(5):
        task = draw_task(p, pairs, [0], number)
        classes = labels[task.index[0]]
        first, second = classes[:5], classes[5:]
        assert len(set(first)) == 1 and len(set(second)) == 1 and first[0] != second[0]
        np.testing.assert_array_equal(task.labels[0], [0] * 5 + [1] * 5)
        seen |= {int(first[0]), int(second[0])}
    assert seen == set(range(10))  # five tasks use each class once
    with pytest.raises(ValueError, match="fewer than"):
        class_pair_source(src.images, src.labels, 10, per_class=1000)
