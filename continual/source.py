"""A continual run's data: its benchmark's data set loaded and checked against the protocol
(`load_source`), and described in config.json and on the run's first line of stderr."""

import os

import numpy as np

from continual.config import ContinualConfig
from continual.data import LOADERS, MNIST_SAMPLE, MNIST_URL, Dataset
from continual.tasks import Protocol, Source, class_pair_source
from experiment.config import ConfigError

IMAGENET_BATCHES_RANDOM_LABEL = 1  # train_data_batch_1.npz alone holds 128,116 images


def protocol_of(cfg: ContinualConfig) -> Protocol:
    return Protocol(cfg.benchmark, cfg.examples, cfg.epochs, cfg.batch_size)


def load_data(cfg: ContinualConfig) -> Dataset:
    """The data set of the run's benchmark as its loader reads it; DataError for missing or
    malformed files."""
    b = cfg.benchmark
    if b.dataset == "imagenet32" and b.kind == "random_label":
        return LOADERS[b.dataset](cfg.data_dir, IMAGENET_BATCHES_RANDOM_LABEL)
    return LOADERS[b.dataset](cfg.data_dir)


def load_source(cfg: ContinualConfig, data: Dataset | None = None) -> Source:
    """The data set the run's tasks come from (`data`, else `load_data(cfg)`); DataError for
    missing files, ConfigError when it is too small for the protocol."""
    b = cfg.benchmark
    data = load_data(cfg) if data is None else data
    images, labels = data.images, data.labels
    if b.kind == "class_pairs":
        if 2 * cfg.num_tasks > data.num_classes:
            raise ConfigError(f"--num_tasks={cfg.num_tasks} class pairs need "
                              f"{2 * cfg.num_tasks} classes; the data set has "
                              f"{data.num_classes}: at most {data.num_classes // 2} tasks")
        try:
            images, labels = class_pair_source(images, labels, data.num_classes, cfg.examples)
        except ValueError as e:
            raise ConfigError(f"--examples={cfg.examples}: {e}") from None
    elif cfg.examples > len(labels):
        files = os.path.abspath(os.path.join(cfg.data_dir, "mnist"))
        raise ConfigError(f"--examples={cfg.examples} is more than the {len(labels):,} images "
                          f"of {data.source or b.dataset}" + (
                              f"; MNIST's files in {files} give 60,000: get them from "
                              f"{MNIST_URL}" if data.source == MNIST_SAMPLE else ""))
    return Source(images, labels, data.num_classes, data.scale)


def data_record(cfg: ContinualConfig, data: Dataset) -> dict:
    """config.json's `data`: where the images came from, how many there are, and how many a
    task takes (continual_imagenet: its two classes' worth)."""
    return {"source": data.source, "images": len(data.labels),
            "examples_per_task": protocol_of(cfg).task_examples}


def data_line(cfg: ContinualConfig, data: Dataset) -> str:
    """The line a run starts with on stderr: which images it uses, and how many per task."""
    counts = np.bincount(data.labels, minlength=data.num_classes)
    each = f", {counts[0]:,} per class" if counts.size and counts.min() == counts.max() else ""
    examples, b = protocol_of(cfg).task_examples, cfg.benchmark
    line = (f"data: {data.source} ({len(data.labels):,} images{each}); {cfg.task} takes "
            f"{examples:,} of them per task")
    if cfg.examples < b.examples:
        line += f", not the protocol's {b.examples:,}"
        if data.source == MNIST_SAMPLE:
            line += " (docs/deviations.md)"
    return line
