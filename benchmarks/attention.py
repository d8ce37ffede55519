"""Scaled dot-product attention alone, forward + backward (with dropout by
default): eager, disc with the kernel the CPU would take
(``DISC_ATTENTION=cpu``: SDPA's math composite with dropout, ATen's flash
kernel without) and disc's fused kernel, in one run.

Each (shape, dtype, mode) runs in a child process of its own, so that its
peak memory is its own: the process's peak RSS growth over what it held
before the first step (disc keeps no [B, H, Lq, Lk] scores in the fused
kernel; the composite writes them and keeps the probabilities and mask for
the backward). Time: the median of ``--steps`` steps after ``--warmup``
(the first compiles). A step is SDPA, its backward from a fixed cotangent,
and a read of the gradients (eager's is the same work, done at once).

Run from the repository root: ``python -m benchmarks.attention``
(``--quick`` for a smoke test). ``main()`` returns the figures as a dict.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from benchmarks import cli

SHAPES = {  # name: ([B, H, Hk, Lq, Lk, D], causal); Hk < H: grouped heads
    "8x12x512x64": ([8, 12, 12, 512, 512, 64], False),
    "2x12x1024x64": ([2, 12, 12, 1024, 1024, 64], False),
    "2x12x1024x64-causal": ([2, 12, 12, 1024, 1024, 64], True),
    "4x16/4x512x64-causal-gqa": ([4, 16, 4, 512, 512, 64], True),
}
QUICK_SHAPES = {"2x4x128x32": ([2, 4, 4, 128, 128, 32], False)}
MODES = ("eager", "disc-cpu", "disc-fused")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.attention",
                                description=__doc__.split("\n")[0])
    cli.add_threads(p, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--dtype", choices=sorted(DTYPES), action="append",
                   help="repeatable (default: both)")
    p.add_argument("--shape", choices=list(SHAPES), action="append",
                   help="repeatable (default: all)")
    p.add_argument("--quick", action="store_true", help="one small shape, few steps")
    p.add_argument("--child", help=argparse.SUPPRESS)
    cli.add_out(p)
    args = p.parse_args(argv)
    cli.fill_defaults(args, {"steps": 2, "warmup": 1} if args.quick else {"steps": 5, "warmup": 2})
    args.dtype = args.dtype or sorted(DTYPES)
    args.shapes = QUICK_SHAPES if args.quick else {k: SHAPES[k] for k in args.shape or SHAPES}
    return args


def rss_mb():
    """This process's peak resident set, MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(shape, causal, dtype, mode, args):
    """In the child: (median ms per step, peak RSS growth in MB)."""
    b, h, hk, lq, lk, d = shape
    device = "cpu" if mode == "eager" else "disc"
    if device == "disc":
        import torch_disc
        torch_disc.options.set("DISC_ATTENTION", "fused" if mode == "disc-fused" else "cpu")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, heads, n, d, generator=g, dtype=dtype).to(device).requires_grad_()
               for heads, n in ((h, lq), (hk, lk), (hk, lk)))
    cot = torch.randn(b, h, lq, d, generator=g, dtype=dtype).to(device)

    def step():
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=args.dropout, is_causal=causal,
                                             enable_gqa=hk != h)
        out.backward(cot)
        grads = [t.grad for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        return [x.sum().item() for x in grads]

    before = current_rss_mb()
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), max(0.0, rss_mb() - before)


def run_child(spec, args):
    shape, causal = args.shapes[spec["shape"]]
    ms, mb = measure(shape, causal, DTYPES[spec["dtype"]], spec["mode"], args)
    print(json.dumps({"ms": ms, "rss_mb": mb}))


def run(args):
    rows = []
    base = [f"--threads={args.threads}", f"--steps={args.steps}", f"--warmup={args.warmup}",
            f"--dropout={args.dropout}"] + (["--quick"] if args.quick else [])
    env = dict(os.environ, DISC_PERSISTENT_CACHE="0")
    for name in args.shapes:
        for dtype in args.dtype:
            row = {"shape": name, "dtype": dtype}
            for mode in MODES:
                spec = json.dumps({"shape": name, "dtype": dtype, "mode": mode})
                done = subprocess.run([sys.executable, "-m", "benchmarks.attention", *base,
                                       "--child", spec], capture_output=True, text=True, env=env)
                if done.returncode != 0:
                    raise RuntimeError(f"{name} {dtype} {mode} failed:\n{done.stderr[-2000:]}")
                row[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
    return {"dropout": args.dropout, "threads": args.threads, "rows": rows}


def table(result):
    lines = ["| q, k, v | dtype | " + " | ".join(MODES) + " | eager / fused |",
             "|---|---|" + "---:|" * (len(MODES) + 1)]
    for r in result["rows"]:
        cells = [f"{r[m]['ms']:.1f} ({r[m]['rss_mb']:.0f} MB)" for m in MODES]
        ratio = r["eager"]["ms"] / r["disc-fused"]["ms"]
        lines.append(f"| {r['shape']} | {r['dtype']} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    return "\n".join(lines)


def main(argv=()):
    args = parse_args(list(argv))
    cli.set_threads(args.threads)
    if args.child:
        return run_child(json.loads(args.child), args)
    result = cli.timed_run(run, args)
    header = (f"SDPA forward + backward, dropout {args.dropout}, {args.threads} threads: "
              "ms per step (peak RSS growth); disc-cpu: the kernel the CPU would take")
    return cli.finish(result, args, header, table(result))


if __name__ == "__main__":
    main(sys.argv[1:])
