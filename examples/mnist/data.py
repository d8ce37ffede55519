"""IDX reader for MNIST and Fashion-MNIST.

The IDX format is a big-endian header ``0x00 0x00 <dtype> <ndim>`` followed by
``ndim`` uint32 dimensions and the raw data.  Files may be gzipped; that is
detected from the content (magic bytes ``1f 8b``), not the file name.

Normalization: pixels are scaled to [0, 1] and then standardized with fixed
constants, the Fashion-MNIST training set's mean and std (0.2860, 0.3530).
Fixed constants let the train and test splits load independently; they are
close enough for MNIST too (0.1307, 0.3081) to train well.
"""

import gzip
import zlib
from pathlib import Path

import numpy as np
import torch

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
SPLITS = ("train", "t10k")
MEAN, STD = 0.2860, 0.3530

_UBYTE = 0x08
_ROWS = _COLS = 28
_NUM_CLASSES = 10


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message names the file."""


def _resolve(directory, stem):
    """Return the existing path for ``stem`` (plain preferred, then ``.gz``)."""
    plain = Path(directory) / stem
    for path in (plain, plain.with_name(stem + ".gz")):
        if path.is_file():
            return path
    raise DatasetError(f"{plain}: file not found (also tried {plain.name}.gz)")


def _read_bytes(path):
    """Read ``path``, transparently decompressing gzip content."""
    raw = path.read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path}: corrupt gzip data ({exc})") from None


def read_idx(path, ndim):
    """Parse an unsigned-byte IDX file with ``ndim`` dimensions.

    Returns a uint8 numpy array.  Raises DatasetError on a wrong magic number,
    an unexpected number of dimensions, or a size that does not match the
    header (truncated or trailing bytes).
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4:
        raise DatasetError(f"{path}: too short for an IDX header ({len(data)} bytes)")
    zero, dtype, got_ndim = data[:2], data[2], data[3]
    if zero != b"\x00\x00" or dtype != _UBYTE:
        raise DatasetError(
            f"{path}: bad magic number 0x{data[:4].hex()} "
            f"(expected 0x0000{_UBYTE:02x}{ndim:02x}, unsigned-byte IDX)"
        )
    if got_ndim != ndim:
        raise DatasetError(f"{path}: expected {ndim} dimensions, header says {got_ndim}")
    header_len = 4 + 4 * ndim
    if len(data) < header_len:
        raise DatasetError(f"{path}: truncated header ({len(data)} of {header_len} bytes)")
    dims = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    expected = header_len + int(np.prod(dims, dtype=np.int64))
    if len(data) < expected:
        raise DatasetError(
            f"{path}: truncated, {len(data)} of {expected} bytes for shape {dims}"
        )
    if len(data) > expected:
        raise DatasetError(
            f"{path}: {len(data) - expected} trailing bytes after shape {dims}"
        )
    return np.frombuffer(data, np.uint8, offset=header_len).reshape(dims)


def load_split(directory=DEFAULT_DIR, split="train", limit=None):
    """Load ``split`` ("train" or "t10k") from ``directory``.

    Returns ``(images, labels)``: float32 ``[N, 1, 28, 28]`` normalized as
    described in the module docstring, and int64 ``[N]``.  ``limit`` keeps the
    first ``limit`` samples; the whole files are still validated.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    image_path = _resolve(directory, f"{split}-images-idx3-ubyte")
    label_path = _resolve(directory, f"{split}-labels-idx1-ubyte")
    images = read_idx(image_path, 3)
    labels = read_idx(label_path, 1)
    if images.shape[1:] != (_ROWS, _COLS):
        raise DatasetError(
            f"{image_path}: images are {images.shape[1]}x{images.shape[2]}, "
            f"expected {_ROWS}x{_COLS}"
        )
    if len(images) != len(labels):
        raise DatasetError(
            f"{image_path}: {len(images)} images but {label_path} has {len(labels)} labels"
        )
    if labels.size and labels.max() >= _NUM_CLASSES:
        raise DatasetError(f"{label_path}: label {labels.max()} out of range 0..9")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    # Convert only the kept samples: the float copy is 4x the uint8 size.
    x = torch.from_numpy(images.astype(np.float32)).div_(255.0).sub_(MEAN).div_(STD)
    return x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64))

