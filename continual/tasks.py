"""The benchmarks' task sequences (docs/algorithms.md, "Continual supervised benchmarks").

A benchmark names its data set, how each task differs from the last (a new pixel permutation,
labels redrawn at random, or the next pair of classes) and its protocol (examples, epochs and
minibatch size per task, the network). A task is described, per seed, by host arrays:

    index   (examples,)        rows of the data set the task trains on
    perm    (features,)        the pixel permutation applied to each flattened image
    labels  (examples,)        the task's label of each of those rows
    order   (steps, batch)     positions in `index` of each step's minibatch (every epoch a
                               new shuffle; steps = epochs x (examples // batch))

All of it comes from numpy generators seeded by (seed, task, purpose), so a task is the same
whenever it is drawn: a resumed run redraws it as the first run did, with no generator state
to store.
"""

import dataclasses
import math
from typing import NamedTuple

import numpy as np

KINDS = ("permuted", "random_label", "class_pairs")
# Generator streams (the last word of each generator's seed).
SUBSET, PERMUTATION, LABELS, ORDER, CLASSES, EVENT_DATA, DIAGNOSTICS = range(7)


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """A benchmark's protocol: every number is the default of a run_continual.py flag."""

    name: str
    dataset: str  # a key of continual.data.LOADERS
    kind: str  # permuted, random_label or class_pairs
    examples: int  # per task (class_pairs: per class)
    epochs: int
    batch_size: int
    network: str  # mlp or conv
    hidden_dim: int
    channels: tuple[int, ...] = ()
    num_tasks: int = 100
    source: str = ""


BENCHMARKS = {b.name: b for b in (
    Benchmark("permuted_mnist", "mnist", "permuted", 10_000, 10, 500, "mlp", 256,
              source="docs/algorithms.md: 10,000 images, 10 epochs, batch 500 (200 steps)"),
    Benchmark("random_label_mnist", "mnist", "random_label", 2_048, 10, 512, "mlp", 256,
              source="docs/algorithms.md: 2,048 images, 10 epochs, batch 512 (40 steps)"),
    Benchmark("random_label_cifar", "cifar10", "random_label", 2_048, 10, 512, "conv", 256,
              (32, 64), source="algorithms.md: 2 conv blocks, 4096 -> 256 (8 x 8 x 64 after two "
              "pools of 32 x 32 images)"),
    Benchmark("random_label_imagenet", "imagenet32", "random_label", 16_384, 20, 4_096, "conv",
              512, (64, 128, 256), source="algorithms.md: 3 conv blocks, 4096 -> 512, 1000 labels"),
    Benchmark("continual_imagenet", "imagenet32", "class_pairs", 600, 10, 100, "conv", 512,
              (64, 128, 256), num_tasks=500, source="Dohare et al. 2024: 500 binary "
              "tasks, 600 images per class"),
    Benchmark("permuted_digits", "digits", "permuted", 1_500, 10, 100, "mlp", 256,
              source="permuted_mnist's protocol on 1,500 of the 1,797 digits (150 steps)"),
    Benchmark("random_label_digits", "digits", "random_label", 256, 10, 32, "mlp", 256,
              source="random labels on 256 of the 1,797 digits, 10 epochs of batch 32 (80 "
              "steps): few enough that a fresh network fits them well above chance in a task"),
)}


class Protocol(NamedTuple):
    """A benchmark with its numbers as the run sets them."""

    benchmark: Benchmark
    examples: int
    epochs: int
    batch_size: int

    @property
    def task_examples(self) -> int:
        """Examples of one task (class_pairs: two classes' worth)."""
        return 2 * self.examples if self.benchmark.kind == "class_pairs" else self.examples

    @property
    def steps_per_epoch(self) -> int:
        return self.task_examples // self.batch_size

    @property
    def steps(self) -> int:
        return self.epochs * self.steps_per_epoch


class Source(NamedTuple):
    """What tasks are drawn from: the data set's images and labels (those of class_pairs
    tasks already cut to `examples` per class, classes in order)."""

    images: np.ndarray  # uint8 (n, *shape)
    labels: np.ndarray  # int32 (n,)
    num_classes: int  # of the data set
    scale: float


class Task(NamedTuple):
    """One task of every seed: leaves (seeds, ...) as the module docstring says."""

    index: np.ndarray
    perm: np.ndarray
    labels: np.ndarray
    order: np.ndarray


def generator(seed: int, *words: int) -> np.random.Generator:
    return np.random.default_rng([seed, *words])


def output_classes(benchmark: Benchmark, dataset_classes: int) -> int:
    """The network's outputs: 2 for class pairs, else the data set's classes."""
    return 2 if benchmark.kind == "class_pairs" else dataset_classes


def class_pair_source(images: np.ndarray, labels: np.ndarray, num_classes: int,
                      per_class: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `per_class` images of each class, class by class; ValueError naming a class
    with fewer."""
    rows = []
    for c in range(num_classes):
        found = np.flatnonzero(labels == c)[:per_class]
        if len(found) < per_class:
            raise ValueError(f"class {c} has {len(found)} images, fewer than the {per_class} "
                             "per class a task takes (--examples)")
        rows.append(found)
    rows = np.concatenate(rows)
    return images[rows], labels[rows]


def draw_task(protocol: Protocol, source: Source, seeds: list[int], task: int) -> Task:
    """Task number `task` (from 0) of each seed."""
    b = protocol.benchmark
    features = math.prod(source.images.shape[1:])
    out = []
    for seed in seeds:
        perm = np.arange(features, dtype=np.int32)
        if b.kind == "class_pairs":
            classes = generator(seed, CLASSES).permutation(source.num_classes)[2 * task:
                                                                               2 * task + 2]
            index = np.concatenate([np.arange(c * protocol.examples, (c + 1) * protocol.examples)
                                    for c in classes])
            labels = np.repeat(np.arange(2), protocol.examples)
        else:
            index = np.sort(generator(seed, SUBSET).choice(len(source.labels), protocol.examples,
                                                           replace=False))
            if b.kind == "permuted":
                perm = generator(seed, task, PERMUTATION).permutation(features)
                labels = source.labels[index]
            else:
                labels = generator(seed, task, LABELS).integers(0, source.num_classes,
                                                                protocol.examples)
        rng = generator(seed, task, ORDER)
        used = protocol.steps_per_epoch * protocol.batch_size
        order = np.concatenate([rng.permutation(protocol.task_examples)[:used]
                                for _ in range(protocol.epochs)])
        out.append((index, perm, labels, order.reshape(protocol.steps, protocol.batch_size)))
    return Task(*(np.stack(column).astype(np.int32) for column in zip(*out, strict=True)))


def sample_positions(seed: int, task: int, stream: int, count: int, examples: int) -> np.ndarray:
    """`count` positions among a task's examples (without replacement while they last)."""
    rng = generator(seed, task, stream)
    whole, rest = divmod(count, examples)
    return np.concatenate([rng.permutation(examples) for _ in range(whole)]
                          + [rng.permutation(examples)[:rest]]).astype(np.int32)
