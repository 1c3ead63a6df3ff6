"""Tiny data sets written in the real on-disk formats (MNIST IDX and npz, CIFAR-10's pickled
batches, downsampled ImageNet's npz), for the loader and end-to-end tests."""

import gzip
import os
import pickle
import struct

import numpy as np


def write_idx(path: str, array: np.ndarray, magic: int, compress: bool = False) -> None:
    """An IDX file: big-endian magic and dimensions, then the uint8 data."""
    header = struct.pack(f">{1 + array.ndim}I", magic, *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    opener = gzip.open if compress else open
    with opener(path + (".gz" if compress else ""), "wb") as f:
        f.write(data)


def write_mnist(data_dir: str, n: int = 64, seed: int = 0, compress: bool = False):
    """MNIST IDX files of n random images; returns (images (n, 28, 28), labels (n,))."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    folder = os.path.join(data_dir, "mnist")
    os.makedirs(folder, exist_ok=True)
    write_idx(os.path.join(folder, "train-images-idx3-ubyte"), images, 2051, compress)
    write_idx(os.path.join(folder, "train-labels-idx1-ubyte"), labels, 2049, compress)
    return images, labels


def write_cifar(data_dir: str, per_batch: int = 16, seed: int = 0):
    """cifar-10-batches-py/data_batch_1..5 of random images; returns (data (n, 3072)
    channel-major as stored, labels (n,))."""
    rng = np.random.default_rng(seed)
    folder = os.path.join(data_dir, "cifar-10-batches-py")
    os.makedirs(folder, exist_ok=True)
    datas, labels = [], []
    for i in range(1, 6):
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        batch_labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        with open(os.path.join(folder, f"data_batch_{i}"), "wb") as f:
            pickle.dump({b"data": data, b"labels": batch_labels, b"batch_label": b"x"}, f)
        datas.append(data)
        labels += batch_labels
    return np.concatenate(datas), np.array(labels)


def write_imagenet32(data_dir: str, per_class: int = 2, batches: int = 10, seed: int = 0):
    """imagenet32/train_data_batch_1..`batches`.npz holding `per_class` images of every one of
    the 1,000 classes (labels 1..1000, as the files count them) spread over the batches;
    returns (data (n, 3072), labels from 1)."""
    rng = np.random.default_rng(seed)
    folder = os.path.join(data_dir, "imagenet32")
    os.makedirs(folder, exist_ok=True)
    labels = rng.permutation(np.repeat(np.arange(1, 1001), per_class))
    data = rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)
    for i, rows in enumerate(np.array_split(np.arange(len(labels)), batches)):
        np.savez(os.path.join(folder, f"train_data_batch_{i + 1}.npz"), data=data[rows],
                 labels=labels[rows], mean=np.zeros(3072))
    return data, labels
