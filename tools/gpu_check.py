"""The CUDA target's kernels on a GPU: each kernel that cuda_sweep_dump wrote
(scripts/gpu_check.sh prepare) is compiled by NVRTC through CuPy for the
GPU at hand, launched with several launch configurations (one block,
many, block sizes from one warp to 1024 threads: the kernels are
grid-strided and their results must not depend on it) and compared with
the CPU kernels' outputs written beside it. Per-column outputs are partial
rows (one per block or chunk of rows), added up here as the launcher adds
them.

    python3 tools/gpu_check.py DIR
    python3 tools/gpu_check.py --bench DIR

Prints one line per kernel and configuration that differs and a summary;
exits 1 if any did. --bench times each kernel at [16384, 4096] instead and
prints its bandwidth against a device-to-device copy of as many bytes (the
CUDA target's memory-bound kernels are meant to reach 70% of it). Needs
CuPy and a GPU (the device machine has both).
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
    """(grid, block) pairs: block sizes are whole warps (row kernels need it);
    column kernels have a 2-D grid (x over columns, y over chunks of rows)."""
    if meta["kind"] == "loop":
        total = meta["total"]
        return [((1,), 32), (((total + 255) // 256,), 256), ((min(80, (total + 1023) // 1024),), 1024)]
    rows = meta["rows"]
    if meta["kind"] == "column":
        n = meta["sizes"][-1]
        return [((1, 1), 32), (((n + 127) // 128, min(rows, 16)), 128), ((1, 7), 1024), ((3, rows), 64)]
    return [((rows,), 32), ((min(rows, 64),), 128), ((7,), 1024), ((rows,), 96)]


def partial_rows(meta, grid):
    """How many partial rows a per-column output has in this launch: a block's
    (row kernels), a chunk's (column kernels), one per index of dim 0."""
    if meta["per_outer"]:
        return meta["sizes"][0]
    return grid[0] if meta["kind"] == "row" else grid[1]


def combined(meta, out, spec, grid):
    """An output as the launcher combines it: per-column partial rows added
    up, or their maximum (a per_outer kernel's rows are the result). A mean
    is divided after that, on both sides: the expected values are sums too."""
    if not spec["per_column"] or meta["per_outer"]:
        return out
    rows = out.reshape(partial_rows(meta, grid), -1)
    return rows.max(axis=0) if spec["max"] else rows.sum(axis=0)


def mismatches(got, want, bf16, per_column):
    """Indices where got differs from want beyond float32 rounding (bf16: its
    precision); NaN must meet NaN. A per-column sum adds its rows in another
    order than the CPU's: an error of the column's magnitude is allowed too."""
    g, w = as_float(got, bf16), as_float(want, bf16)
    tol = (1e-2 * np.abs(w)) if bf16 else (2e-6 * np.abs(w) + 1e-6)
    # GPU math functions differ from the CPU's by an ulp or two: a few ulps more.
    tol = tol * 4
    if per_column and len(w):
        tol = tol + 1e-5 * np.nanmax(np.abs(w))
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
        n = meta["sizes"][-1]
        for grid, block in launch_configs(meta):
            # NaN, not zeros: a kernel must write (or clear) all that is read back.
            outputs = [cp.full(n * partial_rows(meta, grid) if o["per_column"] else o["count"],
                               0x7FC1 if o["bf16"] else np.nan,
                               dtype=np.uint16 if o["bf16"] else np.float32)
                       for o in meta["outputs"]]
            kernel(grid, (block,), (*inputs, *outputs, sizes, strides, scalars, last))
            cp.cuda.Device().synchronize()
            runs += 1
            for k, (out, want) in enumerate(zip(outputs, expected)):
                got = combined(meta, cp.asnumpy(out), meta["outputs"][k], grid)
                bad = mismatches(got, want, meta["outputs"][k]["bf16"], meta["outputs"][k]["per_column"])
                if len(bad):
                    failures += 1
                    i = bad[0]
                    got_v = as_float(got, meta["outputs"][k]["bf16"])[i]
                    want_v = as_float(want, meta["outputs"][k]["bf16"])[i]
                    print(f"MISMATCH {path.stem} {meta['case']} ({meta['kind']}) grid {grid} block "
                          f"{block} output {k}: {len(bad)} of {len(want)} differ; first at {i}: "
                          f"{got_v} vs {want_v}")
    print(f"{len(metas)} kernels, {runs} launches, {failures} mismatching outputs, "
          f"{time.perf_counter() - start:.1f} s")
    return failures == 0


def scaled(meta, rows, n):
    """The kernel's space made [rows, n] (leading dims folded into rows), and
    each input's strides and element count for it: dense, broadcast where
    the dumped strides are 0."""
    rank = len(meta["sizes"])
    sizes = [1] * (rank - 2) + [rows, n] if rank >= 2 else [rows * n]
    strides, counts = [], []
    for k in range(len(meta["inputs"])):
        dumped = meta["strides"][k * rank:(k + 1) * rank]
        own, step = [0] * rank, 1
        for a in reversed(range(rank)):
            if dumped[a] != 0 and sizes[a] != 1:
                own[a], step = step, step * sizes[a]
        strides += own
        counts.append(step)
    return sizes, strides, counts


def launch_shape(meta, rows, n, sms):
    """(grid, block) as lowering/codegen/cuda/launch.h picks them (its
    rules, kept in step by hand; sizes here are [rows, n])."""
    if meta["kind"] == "loop":
        return (max(1, min((rows * n + 255) // 256, sms * 8)),), 256
    if meta["kind"] == "row":
        threads = min(max(((n + 3) // 4 + 31) // 32 * 32, 32), 1024)
        return (max(1, min(rows, sms * (2048 // threads))),), threads
    columns = max((n + 127) // 128, 1)
    chunks = 1 if meta["per_outer"] else max(1, min(sms * 4 // columns, rows))
    return (columns, min(chunks, 65535)), 128


def bench(directory, rows=16384, n=4096, repeats=20):
    """Each kernel at [rows, n] (the leading dims folded into rows): its
    bytes moved (inputs read once, outputs written once) per second, against
    a device-to-device copy of as many bytes. Prints one line per kernel."""
    import cupy as cp

    directory = Path(directory)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]

    def timed(launch):
        launch()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(repeats):
            launch()
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / 1e3 / repeats

    print(f"kernels at [{rows}, {n}] (seconds per launch, GB/s, share of a same-size D2D copy)")
    for path in sorted(directory.glob("k*.json"), key=lambda p: int(p.stem[1:])):
        meta = json.loads(path.read_text())
        source = (directory / meta["source"]).read_text()
        kernel = cp.RawModule(code=source, options=("--std=c++17",)).get_function(meta["name"])
        sizes, strides, counts = scaled(meta, rows, n)
        inputs = [cp.random.random(c).astype(DTYPES[i["dtype"]]) if i["dtype"] != "bfloat16"
                  else cp.full(c, 0x3F80, dtype=np.uint16) for c, i in zip(counts, meta["inputs"])]
        kind, total = meta["kind"], rows * n
        grid, block = launch_shape(meta, rows, n, sms)
        last = total if kind == "loop" else rows
        partial = sizes[0] if meta["per_outer"] else (grid[0] if kind == "row" else grid[-1])
        outputs = [cp.empty(n * partial if o["per_column"] else rows if o["per_row"] else total,
                            dtype=np.uint16 if o["bf16"] else np.float32) for o in meta["outputs"]]
        args = (*inputs, *outputs, cp.asarray(np.array(sizes, dtype=np.int64)),
                cp.asarray(np.array(strides, dtype=np.int64)),
                cp.asarray(np.array(meta["scalars"] or [0.0], dtype=np.float64)), np.int64(last))
        seconds = timed(lambda: kernel(grid, (block,), args))
        moved = sum(x.nbytes for x in inputs) + sum(o.nbytes for o in outputs)
        src, dst = cp.empty(moved // 2, dtype=np.uint8), cp.empty(moved // 2, dtype=np.uint8)
        copy = timed(lambda: dst.__setitem__(slice(None), src))  # reads and writes `moved` bytes
        print(f"{path.stem:>4} {meta['case'][:44]:<44} {kind:<6} {seconds:.2e} s "
              f"{moved / seconds / 1e9:7.1f} GB/s  {copy / seconds:5.0%} of copy")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--bench"]
    if len(args) != 1:
        sys.exit(__doc__)
    if "--bench" in sys.argv:
        bench(args[0])
        sys.exit(0)
    sys.exit(0 if check(args[0]) else 1)
