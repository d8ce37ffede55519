"""The CUDA target's kernels on a GPU: each kernel that cuda_sweep_dump wrote
(scripts/gpu_check.sh prepare) is compiled by NVRTC through CuPy for the
GPU at hand, launched with several launch configurations (one block,
many, block sizes from one warp to 1024 threads: the kernels are
grid-strided and their results must not depend on it) and compared with
the CPU kernels' outputs written beside it.

    python3 tools/gpu_check.py DIR

Prints one line per kernel and configuration that differs and a summary;
exits 1 if any did. Needs CuPy and a GPU (the device machine has both).
"""
import json
import sys
import time
from pathlib import Path

import numpy as np

DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
          "bool": np.uint8, "bfloat16": np.uint16}


def as_float(raw, bf16):
    """Output values as float32 (bf16: its bits widened)."""
    if not bf16:
        return raw.astype(np.float32)
    return (raw.astype(np.uint32) << 16).view(np.float32)


def launch_configs(meta):
    """(grid, block) pairs: block sizes are whole warps (row kernels need it)."""
    if meta["kind"] == "loop":
        total = meta["total"]
        return [(1, 32), ((total + 255) // 256, 256), (min(80, (total + 1023) // 1024), 1024)]
    rows = meta["rows"]
    return [(rows, 32), (min(rows, 64), 128), (7, 1024), (rows, 96)]


def mismatches(got, want, bf16):
    """Indices where got differs from want beyond float32 rounding (bf16: its
    precision); NaN must meet NaN."""
    g, w = as_float(got, bf16), as_float(want, bf16)
    tol = (1e-2 * np.abs(w)) if bf16 else (2e-6 * np.abs(w) + 1e-6)
    # GPU math functions differ from the CPU's by an ulp or two: a few ulps more.
    tol = tol * 4
    nan = np.isnan(w)
    bad = np.where(nan, ~np.isnan(g), ~(np.abs(g - w) <= tol))
    return np.flatnonzero(bad)


def check(directory):
    import cupy as cp

    directory = Path(directory)
    metas = sorted(directory.glob("k*.json"), key=lambda p: int(p.stem[1:]))
    if not metas:
        sys.exit(f"no kernels in {directory}: run scripts/gpu_check.sh prepare first")
    device = cp.cuda.Device()
    print(f"GPU: {cp.cuda.runtime.getDeviceProperties(device.id)['name'].decode()}, "
          f"compute capability {device.compute_capability}")
    failures = runs = 0
    start = time.perf_counter()
    for path in metas:
        meta = json.loads(path.read_text())
        source = (directory / meta["source"]).read_text()
        kernel = cp.RawModule(code=source, options=("--std=c++17",)).get_function(meta["name"])
        inputs = [cp.asarray(np.fromfile(directory / i["file"], dtype=DTYPES[i["dtype"]]))
                  for i in meta["inputs"]]
        expected = [np.fromfile(directory / o["file"], dtype=np.uint16 if o["bf16"] else np.float32)
                    for o in meta["outputs"]]
        sizes = cp.asarray(np.array(meta["sizes"], dtype=np.int64))
        strides = cp.asarray(np.array(meta["strides"], dtype=np.int64))
        scalars = cp.asarray(np.array(meta["scalars"] or [0.0], dtype=np.float64))
        last = np.int64(meta["total"] if meta["kind"] == "loop" else meta["rows"])
        for grid, block in launch_configs(meta):
            outputs = [cp.zeros(o["count"], dtype=np.uint16 if o["bf16"] else np.float32)
                       for o in meta["outputs"]]
            kernel((grid,), (block,), (*inputs, *outputs, sizes, strides, scalars, last))
            cp.cuda.Device().synchronize()
            runs += 1
            for k, (out, want) in enumerate(zip(outputs, expected)):
                bad = mismatches(cp.asnumpy(out), want, meta["outputs"][k]["bf16"])
                if len(bad):
                    failures += 1
                    i = bad[0]
                    got_v = as_float(cp.asnumpy(out), meta["outputs"][k]["bf16"])[i]
                    want_v = as_float(want, meta["outputs"][k]["bf16"])[i]
                    print(f"MISMATCH {path.stem} {meta['case']} ({meta['kind']}) grid {grid} block "
                          f"{block} output {k}: {len(bad)} of {len(want)} differ; first at {i}: "
                          f"{got_v} vs {want_v}")
    print(f"{len(metas)} kernels, {runs} launches, {failures} mismatching outputs, "
          f"{time.perf_counter() - start:.1f} s")
    return failures == 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(0 if check(sys.argv[1]) else 1)
