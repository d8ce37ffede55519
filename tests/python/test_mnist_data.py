"""Tests of the MNIST IDX reader and a short CPU run of the example trainer."""

import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

# The examples are not an installed package; import them from the repo root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.mnist import data, train  # noqa: E402
from examples.mnist.data import DatasetError, load_split, read_idx  # noqa: E402


def idx_bytes(array):
    """Encode a uint8 array as IDX (magic 0x0000 08 <ndim>, big-endian dims)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    return header + array.tobytes()


def write_split(directory, split, images, labels, gz=False):
    """Write ``split``'s image and label files; returns their paths."""
    paths = []
    for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
        data = idx_bytes(array)
        path = Path(directory) / f"{split}-{kind}-ubyte{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(data) if gz else data)
        paths.append(path)
    return paths


def learnable(n, seed):
    """Images whose bright rows encode the label, plus noise: quick to learn."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    images = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
    for i, k in enumerate(labels):
        images[i, 2 * k + 4: 2 * k + 7, :] = 255
    return images, labels


@pytest.mark.parametrize("gz", [False, True])
def test_load_split_roundtrip(tmp_path, gz):
    images, labels = learnable(7, seed=1)
    write_split(tmp_path, "t10k", images, labels, gz=gz)
    x, y = load_split(tmp_path, "t10k")
    assert x.shape == (7, 1, 28, 28) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and y.tolist() == labels.tolist()
    expected = (torch.from_numpy(images).float() / 255 - data.MEAN) / data.STD
    torch.testing.assert_close(x[:, 0], expected)


def test_gzip_detected_by_content_not_name(tmp_path):
    path = tmp_path / "train-labels-idx1-ubyte"
    path.write_bytes(gzip.compress(idx_bytes(np.arange(10))))
    assert read_idx(path, 1).tolist() == list(range(10))


def test_limit_keeps_first_samples(tmp_path):
    images, labels = learnable(20, seed=2)
    write_split(tmp_path, "train", images, labels)
    x, y = load_split(tmp_path, "train", limit=5)
    assert len(x) == len(y) == 5 and y.tolist() == labels[:5].tolist()


def assert_names(exc_info, *paths):
    message = str(exc_info.value)
    assert "\n" not in message
    for path in paths:
        assert str(path) in message


def test_missing_file(tmp_path):
    with pytest.raises(DatasetError) as exc_info:
        load_split(tmp_path, "train")
    assert_names(exc_info, tmp_path / "train-images-idx3-ubyte")
    assert "not found" in str(exc_info.value)
    assert isinstance(exc_info.value, ValueError)


def test_bad_magic(tmp_path):
    images, labels = learnable(3, seed=3)
    image_path, _ = write_split(tmp_path, "train", images, labels)
    image_path.write_bytes(b"\x12\x34\x56\x78" + image_path.read_bytes()[4:])
    with pytest.raises(DatasetError, match="bad magic") as exc_info:
        load_split(tmp_path, "train")
    assert_names(exc_info, image_path)


def test_wrong_number_of_dimensions(tmp_path):
    images, labels = learnable(3, seed=4)
    _, label_path = write_split(tmp_path, "train", images, labels)
    label_path.write_bytes(idx_bytes(labels.reshape(3, 1)))
    with pytest.raises(DatasetError, match="dimensions") as exc_info:
        load_split(tmp_path, "train")
    assert_names(exc_info, label_path)


def test_wrong_image_size(tmp_path):
    images, labels = learnable(3, seed=5)
    image_path, _ = write_split(tmp_path, "train", images[:, :27, :27], labels)
    with pytest.raises(DatasetError, match="27x27") as exc_info:
        load_split(tmp_path, "train")
    assert_names(exc_info, image_path)


@pytest.mark.parametrize("gz", [False, True])
def test_truncated(tmp_path, gz):
    images, labels = learnable(3, seed=6)
    image_path, _ = write_split(tmp_path, "train", images, labels, gz=gz)
    image_path.write_bytes(image_path.read_bytes()[:-100])
    with pytest.raises(DatasetError, match="truncated|corrupt gzip") as exc_info:
        load_split(tmp_path, "train")
    assert_names(exc_info, image_path)


def test_trailing_bytes(tmp_path):
    images, labels = learnable(3, seed=7)
    _, label_path = write_split(tmp_path, "train", images, labels)
    label_path.write_bytes(label_path.read_bytes() + b"\0")
    with pytest.raises(DatasetError, match="trailing") as exc_info:
        load_split(tmp_path, "train")
    assert_names(exc_info, label_path)


def test_count_mismatch(tmp_path):
    images, labels = learnable(4, seed=8)
    paths = write_split(tmp_path, "train", images, labels[:3])
    with pytest.raises(DatasetError, match="4 images") as exc_info:
        load_split(tmp_path, "train")
    assert_names(exc_info, *paths)


def test_label_out_of_range(tmp_path):
    images, labels = learnable(2, seed=9)
    _, label_path = write_split(tmp_path, "train", images, np.array([1, 10]))
    with pytest.raises(DatasetError, match="out of range") as exc_info:
        load_split(tmp_path, "train")
    assert_names(exc_info, label_path)


def test_train_main_cpu(tmp_path):
    write_split(tmp_path, "train", *learnable(600, seed=10), gz=True)
    write_split(tmp_path, "t10k", *learnable(200, seed=11))
    log = tmp_path / "losses.json"
    start = time.perf_counter()
    result = train.main([
        "--device", "cpu", "--data", str(tmp_path), "--limit", "512",
        "--epochs", "3", "--max-steps", "20", "--no-progress",
        "--log-losses", str(log),
    ])
    elapsed = time.perf_counter() - start
    losses = result["losses"]
    # 512 samples / 64 = 8 steps per epoch: --max-steps must cut epoch 3 short.
    assert len(losses) == 20
    assert json.loads(log.read_text()) == pytest.approx(losses)
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])
    assert result["test_accuracy"] > 0.5
    assert result["samples_per_s"] > 0
    assert elapsed < 10
