"""GEMM merge and weight pre-packing on disc, each on vs off, in one run.

* ``encoder-train``: a BERT-style encoder layer (separate q / k / v
  nn.Linear, as in tests/python/test_gemm_merge.py) training step: forward,
  loss, backward (the input needs a gradient, as inside a stack), SGD step,
  ``loss.item()``. GEMM merge off / on / on with
  batched merging of independent equal-shape GEMMs.
* ``encoder-infer``: the same layer under ``torch.no_grad()``, forward plus
  ``.cpu()``; pre-packing off / on (GEMM merge on: q / k / v run as one
  packed, concatenated weight).
* ``mlp-infer``: the MNIST MLP (examples/mnist) inference, pre-packing off / on.

* ``independent``: three independent equal-shape GEMMs (tokens x hidden x
  hidden), separate vs batched into one bmm (``DISC_GEMM_MERGE_BATCHED``).

Each variant runs on its own model with the same seed; the variants of a
workload take turns over ``--rounds`` rounds (a shared machine's noise falls
on all alike), ``--warmup`` untimed steps each turn (the first compiles);
the step time is the median over ``--steps`` timed steps.
Reported per variant: ms per step, GEMM library calls per step
(``library.gemm_calls``), and the ratio ``baseline / variant`` (above 1:
faster). ``--threads 1`` (the default) pins torch and oneDNN to one thread.

Run from the repository root: ``python -m benchmarks.gemm_merge``
(``--quick`` for a smoke test). ``main()`` returns the figures as a dict.
"""

import argparse
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_disc
from benchmarks.cli import add_out, add_threads, set_threads, write_json
from examples.mnist.train import build_model


class Attention(nn.Module):
    """BERT-style self-attention with separate q / k / v projections
    (nn.MultiheadAttention packs them into one in_proj already)."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.o = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        split = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-1, -2) / (h // self.heads) ** 0.5
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        return self.o(ctx)


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.attn = Attention(hidden, heads)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.ff1, self.ff2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.gemm_merge", description=__doc__.split("\n")[0])
    add_threads(p, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per variant and round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--infer-batch", type=int, default=1, help="sequences per inference step")
    p.add_argument("--mlp-batch", type=int, default=16)
    p.add_argument("--only", choices=sorted({v[0] for v in VARIANTS}), action="append",
                   help="run only this workload (repeatable)")
    p.add_argument("--quick", action="store_true", help="few steps: a smoke test")
    add_out(p, help="write the figures as JSON here")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds = 3, 1, 1
    return args


def configure(merge, batched, prepack):
    """Sets the switches; a change clears the compile cache (the next step
    recompiles, in its warm-up) and the packed weights."""
    if torch_disc._C.gemm_merge() != (merge, batched):
        torch_disc._C.set_gemm_merge(merge, batched=batched)
    torch_disc._C.set_prepack(prepack)


def timed(variants, args):
    """Per variant (step, merge, batched, prepack): (median ms, GEMM calls per
    step). Variants take turns in --rounds rounds, so a noisy neighbour on a
    shared machine weighs on all of them alike."""
    times = [[] for _ in variants]
    calls = [0] * len(variants)
    per_round = max(1, args.steps // args.rounds)
    for _ in range(args.rounds):
        for v, (step, merge, batched, prepack) in enumerate(variants):
            configure(merge, batched, prepack)
            for _ in range(args.warmup):
                step()
            for _ in range(per_round):
                torch_disc.metrics.reset()
                start = time.perf_counter()
                step()
                times[v].append((time.perf_counter() - start) * 1e3)
                calls[v] = torch_disc.metrics.counters().get("library.gemm_calls", 0)
    return [(statistics.median(t), c) for t, c in zip(times, calls)]


def encoder_train(args):
    torch.manual_seed(0)
    model = EncoderLayer(args.hidden, args.heads, args.ffn).to("disc")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    # The layer's input needs a gradient, as in a stack of layers: q / k / v
    # then have input grads too (independent equal-shape GEMMs).
    x = torch.randn(args.batch, args.seq, args.hidden).to("disc").requires_grad_()

    def step():
        x.grad = None
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
    return step


def encoder_infer(args):
    torch.manual_seed(0)
    model = EncoderLayer(args.hidden, args.heads, args.ffn).to("disc").eval()
    x = torch.randn(args.infer_batch, args.seq, args.hidden)

    def step():
        with torch.no_grad():
            model(x.to("disc")).cpu()
    return step


def independent_gemms(args):
    """Three independent equal-shape GEMMs, X[i] @ W[i] (selects of one
    tensor each, so m, k, n are the same symbols): what batched merging
    takes. Tokens x hidden by hidden."""
    torch.manual_seed(0)
    tokens = args.batch * args.seq
    x = torch.randn(3, tokens, args.hidden).to("disc")
    w = torch.randn(3, args.hidden, args.hidden).to("disc")
    torch_disc.sync()

    def step():
        outs = [x[i] @ w[i] for i in range(3)]
        torch_disc.sync()
        return outs
    return step


def mlp_infer(args):
    torch.manual_seed(0)
    model = build_model("mlp").to("disc").eval()
    x = torch.randn(args.mlp_batch, 1, 28, 28)

    def step():
        with torch.no_grad():
            model(x.to("disc")).cpu()
    return step


# (workload, variant, make step, gemm merge, batched, prepack); the first
# variant of a workload is its baseline.
VARIANTS = [
    ("encoder-train", "merge off", encoder_train, False, False, True),
    ("encoder-train", "merge on", encoder_train, True, False, True),
    ("independent", "separate", independent_gemms, True, False, True),
    ("independent", "batched", independent_gemms, True, True, True),
    ("encoder-infer", "prepack off", encoder_infer, True, False, False),
    ("encoder-infer", "prepack on", encoder_infer, True, False, True),
    ("mlp-infer", "prepack off", mlp_infer, True, False, False),
    ("mlp-infer", "prepack on", mlp_infer, True, False, True),
]


def main(argv=()):
    args = parse_args(list(argv))
    set_threads(args.threads)
    saved = torch_disc._C.gemm_merge()
    rows = []
    try:
        workloads = [w for w in dict.fromkeys(v[0] for v in VARIANTS) if not args.only or w in args.only]
        for workload in workloads:
            mine = [v for v in VARIANTS if v[0] == workload]
            figures = timed([(make(args), merge, batched, prepack)
                             for _, _, make, merge, batched, prepack in mine], args)
            base = figures[0][0]
            for (_, variant, *_), (ms, calls) in zip(mine, figures):
                rows.append({"workload": workload, "variant": variant, "ms": ms, "gemm_calls": calls,
                             "ratio": base / ms})
                print(f"{workload:14} {variant:16} {ms:9.2f} ms  {calls:4.0f} GEMM calls  x{base / ms:.2f}",
                      flush=True)
    finally:
        torch_disc._C.set_gemm_merge(*saved)
        torch_disc._C.set_prepack(True)
    result = {"threads": args.threads, "shape": {k: getattr(args, k) for k in
                                                ("hidden", "heads", "ffn", "batch", "seq", "infer_batch",
                                                 "mlp_batch")},
              "rows": rows}
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
