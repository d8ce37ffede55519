"""Time MiniLM-L6 (BERT) training steps and evaluation on disc vs CPU eager
vs torch.compile.

The model is the pretrained all-MiniLM-L6-v2 ``BertForSequenceClassification``
(6-way head) that ``examples/bert/finetune.py`` loads, through that example's
own helpers (checkpoint lookup, model loading, AdamW + schedule, the training
step, batch collation).  Batch 8, dropout on, SDPA attention and the usual 2D
attention mask, as in the example's defaults.

Measured, each on a fresh copy of the model with the same seed:

* ``train-fixed``: training step (forward, backward, ``clip_grad_norm_``,
  AdamW step, schedule step) with every batch padded to 128 tokens.
* ``train-variable``: the same with each batch padded to its own longest row;
  batch lengths come from a seeded list (16..128), identical for all backends.
* ``eval``: ``torch.no_grad()`` forward plus ``argmax().cpu()`` over batches of
  seeded variable lengths; reported in sequences/s.

``--autocast`` runs every backend's forward under bf16 autocast, as the
example's ``--autocast`` does; ``--autocast fp16`` under fp16, training with
the example's gradient scaler.

Each batch holds rows of different lengths, so every batch carries padding
(a batch without padding takes transformers' no-mask branch: another graph).
Token ids are seeded random word pieces; the cost does not depend on them.

A step is timed from the host-to-device copy of the batch to the moment its
loss (eval: predictions) is on the host, so on disc it includes tracing,
hashing, compiling on a cache miss, and running the graph(s).  Reported: the
median and mean over ``--steps`` timed steps after ``--warmup`` untimed ones,
the first (warm-up) step's time, which includes compilation, and the ratios
``eager time / time`` and ``inductor time / time`` (above 1: faster).

disc also reports per timed step, from ``torch_disc.metrics``: compiles
(compile-cache misses), kernel launches, graphs run, syncs, CPU fallbacks
the tracing cost per op and the graphs the on-disk compile cache served
(instead of compiling them). Then it runs the timed batches once more with
``DISC_PROFILE=1`` (not timed; ``--no-profile`` skips it) and reports where
its graphs spent a step: all graph steps, the GEMMs on oneDNN, the fused
attention ops, and the step time over the GEMMs' (the bound the step
approaches when everything but GEMMs is free).  For torch.compile, "compiles" counts the
graphs Dynamo compiled.  Every measurement also records the peak resident
memory of its process over it, model loading included (``benchmarks.memory``).

torch.compile (inductor; ``dynamic=True`` for the variable-length parts,
static for ``train-fixed``) runs in one subprocess with ``--compile-timeout``:
a slow or failing compiler is reported in the table, not fatal; results that
finished before a timeout are kept.  Its first step includes compiling,
unless inductor's on-disk cache (``/tmp/torchinductor_$USER``) already holds
the graphs from an earlier run.

Run from the repository root: ``python -m benchmarks.bert_step`` (``--quick``
for a smoke test, see ``--help``); ``python -m benchmarks`` runs it after the
MNIST benchmark.  ``main()`` returns the figures as a dict.
"""

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    # Run as a script: make the repository root importable for `examples.*`.
    sys.path.insert(0, str(ROOT))

import torch

from benchmarks.memory import PeakRSS
from benchmarks.cli import (add_out, add_threads, fill_defaults, finish, fmt, run_worker, set_threads,
                            timed_run)
from benchmarks.mnist_step import describe
from examples.bert import finetune
from examples.device import device_and_sync

PARTS = ("train-fixed", "train-variable", "eval")
DEVICES = ("cpu", "disc", "compile")
NUM_LABELS = 6  # the example's default: 6 WordNet noun categories
MIN_LENGTH = 16
MAX_LENGTH = 128
QUICK = {"steps": 2, "warmup": 2}
DEFAULT_STEPS = 8
DEFAULT_WARMUP = 2
EAGER = "cpu"


# ---------------------------------------------------------------- inputs

def batch_lengths(part, count, seed):
    """Padded length of each of ``count`` batches: 128 for train-fixed, else a
    seeded draw from MIN_LENGTH..MAX_LENGTH (a different seed per part)."""
    if part == "train-fixed":
        return [MAX_LENGTH] * count
    rng = random.Random(f"{seed}-{part}")
    return [rng.randint(MIN_LENGTH, MAX_LENGTH) for _ in range(count)]


def make_batches(tokenizer, lengths, batch_size, seed, mask):
    """CPU batches (``finetune.collate``) padded to ``lengths``.  Row 0 has the
    full length, the others random lengths from 2 up to it, so each batch has
    padding.  Ids: [CLS] + random word pieces + [SEP]."""
    rng = random.Random(seed)
    first = 1000  # past [PAD], [unused*], [UNK], [CLS], [SEP], [MASK]
    batches = []
    for length in lengths:
        ids_list = []
        for row in range(batch_size):
            n = length if row == 0 else rng.randint(2, length)
            ids_list.append([tokenizer.cls_token_id]
                            + [rng.randrange(first, tokenizer.vocab_size) for _ in range(n - 2)]
                            + [tokenizer.sep_token_id])
        labels = [rng.randrange(NUM_LABELS) for _ in range(batch_size)]
        batches.append(finetune.collate(ids_list, labels, tokenizer.pad_token_id,
                                        max_length=MAX_LENGTH, mask=mask))
    return batches


# ---------------------------------------------------------------- counters

class DiscCounters:
    """Deltas of torch_disc.metrics counters (nothing is reset)."""

    KEYS = ("compiles", "kernels_launched", "graphs_run", "syncs", "fallbacks",
            "compile_ns", "compile_failures", "trace_ns", "ops_traced",
            "disk_cache.graph_hits")

    def __init__(self):
        import torch_disc

        self._counters = torch_disc.metrics.counters
        self._start = self._counters()

    def delta(self):
        now = self._counters()
        out = {k: now.get(k, 0) - self._start.get(k, 0) for k in self.KEYS}
        for prefix, key in (("fallback.", "fallback_ops"), ("sync.", "sync_causes")):
            out[key] = {k[len(prefix):]: v - self._start.get(k, 0) for k, v in now.items()
                        if k.startswith(prefix) and v != self._start.get(k, 0)}
        self._start = now
        return out


class DynamoCounters:
    """Deltas of the graphs Dynamo compiled and its graph breaks."""

    def __init__(self):
        from torch._dynamo.utils import counters

        self._counters = counters
        self._start = self._snapshot()

    def _snapshot(self):
        return (self._counters["stats"]["unique_graphs"],
                sum(self._counters["graph_break"].values()))

    def delta(self):
        now = self._snapshot()
        out = {"compiles": now[0] - self._start[0], "graph_breaks": now[1] - self._start[1]}
        self._start = now
        return out


# ---------------------------------------------------------------- measuring

def measure(part, backend, args):
    """Run one part on one backend ("cpu", "disc" or "compile"); returns a dict
    with per-step times (ms), peak memory and, for disc / compile, counter
    deltas."""
    with PeakRSS() as mem:
        result = _measure(part, backend, args)
    result["memory"] = mem.as_dict()
    return result


def _measure(part, backend, args):
    device, sync = device_and_sync("disc" if backend == "disc" else "cpu")
    fargs = finetune.parse_args([])  # the example's defaults (lr, decay, clipping...)
    training = part != "eval"
    count = args.warmup + args.steps
    torch.manual_seed(args.seed)  # same classifier head on every backend
    tokenizer, model = finetune.load_model(
        finetune.check_model_dir(args.model or finetune.packaged_model_dir()),
        [f"label{i}" for i in range(NUM_LABELS)], args.attn, dropout_off=False)
    model.to(device)
    model.train(training)
    lengths = batch_lengths(part, count, args.seed)
    batches = make_batches(tokenizer, lengths, args.batch_size, args.seed, args.mask)
    if training:
        opt, scheduler = finetune.build_optimizer(model, fargs, count)
        scaler = finetune.grad_scaler(device, args.autocast)
    else:
        for b in batches:
            b.pop("labels")
    if backend == "compile":
        model = torch.compile(model, backend=args.compile_backend,
                              dynamic=part != "train-fixed")
    sync()
    counters = (DiscCounters() if backend == "disc" else
                DynamoCounters() if backend == "compile" else None)

    losses = []

    def run_batch(batch):
        if training:
            loss = finetune.train_step(model, opt, scheduler, batch, device,
                                       fargs.max_grad_norm, args.autocast, scaler)
            sync()
            losses.append(loss.item())  # waits for the step's graph(s) on disc
        else:
            dtype = finetune.AUTOCAST_DTYPES.get(args.autocast, torch.bfloat16)
            with torch.no_grad(), torch.autocast(torch.device(device).type, dtype=dtype,
                                                 enabled=args.autocast is not None):
                logits = model(**{k: v.to(device) for k, v in batch.items()}).logits
                logits.argmax(dim=-1).cpu()

    times, warmup_counts = [], None
    for i, batch in enumerate(batches):
        if i == args.warmup and counters:
            warmup_counts = counters.delta()
        start = time.perf_counter()
        run_batch(batch)
        times.append((time.perf_counter() - start) * 1e3)
    result = {
        "part": part, "backend": backend, "lengths": lengths,
        "first_ms": times[0], "times_ms": times[args.warmup:],
        "losses": list(losses),
    }
    if counters:
        result["warmup_counters"] = warmup_counts
        result["counters"] = counters.delta()
    if backend == "disc" and args.profile:
        result["profile"] = profile_steps(run_batch, batches[:args.warmup], batches[args.warmup:])
    del model, batches
    if training:
        del opt, scheduler
    gc.collect()
    return result


def profile_steps(run_batch, warmup, timed):
    """Where disc's graphs spent a step: the timed batches again with
    DISC_PROFILE=1, after the warm-up batches (the profiled graphs compile
    again). Per step, ms: every graph step, the GEMMs on the library (oneDNN
    calls and merged GEMM groups), and the fused attention ops, from SDPA
    or written by hand (whose GEMMs are inside them)."""
    import torch_disc

    torch_disc.options.set("DISC_PROFILE", "1")
    try:
        for batch in warmup:
            run_batch(batch)
        before = torch_disc.metrics.counters()
        for batch in timed:
            run_batch(batch)
        after = torch_disc.metrics.counters()
    finally:
        torch_disc.options.set("DISC_PROFILE", "0")
    spent = {k[len("profile."):-len("_ns")]: v - before.get(k, 0) for k, v in after.items()
             if k.startswith("profile.") and k.endswith("_ns")}

    def ms(labels):
        return sum(v for k, v in spent.items() if k.startswith(labels)) / 1e6 / len(timed)

    attention = ("aten.disc::attention", "library.attention")
    return {"graph_ms": ms(""), "gemm_ms": ms(("library.", "gemm_group.")) - ms(attention[1]),
            "attention_ms": ms(attention)}


def run_compiled(parts, args):
    """All torch.compile parts in one subprocess; returns ``{part: result}``,
    with an ``error`` entry for parts that failed or did not finish in time."""
    cmd = [sys.executable, "-m", "benchmarks.bert_step", "--compile-worker",
           "--parts", ",".join(parts), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--batch-size", str(args.batch_size), "--seed", str(args.seed),
           "--attn", args.attn, "--mask", args.mask, "--compile-backend", args.compile_backend]
    if args.autocast:
        cmd += ["--autocast", args.autocast]
    if args.model:
        cmd += ["--model", args.model]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    out, failure = run_worker(cmd, ROOT, args.compile_timeout)
    results = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            results[r["part"]] = r
    reason = failure or "the worker printed no result"
    for part in parts:
        results.setdefault(part, {"part": part, "backend": "compile", "error": reason})
    return results


def compile_worker(args):
    """Subprocess side of run_compiled: one ``RESULT {json}`` line per part."""
    for part in args.parts:
        try:
            r = measure(part, "compile", args)
        except Exception as exc:
            r = {"part": part, "backend": "compile", "error": describe(exc)}
        print("RESULT " + json.dumps(r), flush=True)
        torch._dynamo.reset()


# ---------------------------------------------------------------- summary

def summarize(raw, batch_size):
    """One table row from a measure() result."""
    name = {"compile": "cpu+inductor"}.get(raw["backend"], raw["backend"])
    row = {"part": raw["part"], "backend": name}
    if "error" in raw:
        row["error"] = raw["error"]
        return row
    times = raw["times_ms"]
    row.update(ms=statistics.median(times), mean_ms=statistics.fmean(times),
               first_ms=raw["first_ms"], steps=len(times), memory=raw.get("memory", {}))
    if raw["part"] == "eval":
        row["seq_per_s"] = batch_size * len(times) / (sum(times) / 1e3)
    if raw["losses"]:
        row["last_loss"] = raw["losses"][-1]
        row["losses_finite"] = all(x == x and abs(x) != float("inf") for x in raw["losses"])
    if "counters" in raw:
        c, w = raw["counters"], raw["warmup_counters"]
        row["compiles"] = c["compiles"]
        row["warmup_compiles"] = w["compiles"]
        if raw["backend"] == "disc":
            n = len(times)
            row.update(
                launches_per_step=c["kernels_launched"] / n,
                graphs_per_step=c["graphs_run"] / n,
                syncs_per_step=c["syncs"] / n,
                compile_ms=c["compile_ns"] / 1e6,
                disk_hits=c["disk_cache.graph_hits"] + w["disk_cache.graph_hits"],
                trace_us_per_op=(c["trace_ns"] / 1e3 / c["ops_traced"]
                                 if c["ops_traced"] else None),
                fallbacks=c["fallbacks"] + w["fallbacks"],
                fallback_ops={k: w["fallback_ops"].get(k, 0) + c["fallback_ops"].get(k, 0)
                              for k in {**w["fallback_ops"], **c["fallback_ops"]}},
                sync_causes={k: v / n for k, v in c["sync_causes"].items()},
                compile_failures=c["compile_failures"] + w["compile_failures"])
        else:
            row["graph_breaks"] = c["graph_breaks"] + w["graph_breaks"]
    if "profile" in raw:
        row["profile"] = raw["profile"]
        row["vs_gemms"] = row["ms"] / raw["profile"]["gemm_ms"] if raw["profile"]["gemm_ms"] else None
    return row


def add_ratios(rows):
    """Speedups over eager and inductor within each part (above 1: faster).
    Time-based for training, throughput-based for eval (the same thing)."""
    for part in PARTS:
        group = [r for r in rows if r["part"] == part]
        ref = {r["backend"]: r.get("mean_ms" if part == "eval" else "ms") for r in group}
        for r in group:
            mine = r.get("mean_ms" if part == "eval" else "ms")
            for key, other in (("vs_eager", ref.get("cpu")), ("vs_inductor", ref.get("cpu+inductor"))):
                r[key] = other / mine if mine and other else None


def table(rows):
    """Markdown table; disc details and errors follow as notes."""
    lines = ["| part | backend | ms/step (median) | mean | first step | seq/s "
             "| vs eager | vs inductor | compiles (warm-up + timed) | launches/step |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['part']} | {r['backend']} | n/a | | | | | | | |")
            notes.append(f"{r['part']} / {r['backend']}: {r['error']}")
            continue
        compiles = (f"{r['warmup_compiles']} + {r['compiles']}" if "compiles" in r else "")
        launches = fmt(r.get("launches_per_step"), ".0f") if "launches_per_step" in r else ""
        lines.append(
            f"| {r['part']} | {r['backend']} | {r['ms']:.1f} | {r['mean_ms']:.1f} "
            f"| {r['first_ms'] / 1e3:.2f} s | {fmt(r.get('seq_per_s'), '.1f') if 'seq_per_s' in r else ''} "
            f"| {fmt(r['vs_eager'], '.2f')} | {fmt(r['vs_inductor'], '.2f')} "
            f"| {compiles} | {launches} |")
        if r["backend"] == "disc":
            note = (f"{r['part']} / disc: {r['graphs_per_step']:.2f} graphs/step, "
                    f"{r['syncs_per_step']:.2f} syncs/step ("
                    + ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["sync_causes"].items()))
                    + f"), compiling {r['compile_ms']:.0f} ms "
                    f"in the timed steps, {r['fallbacks']} fallbacks")
            if r["fallback_ops"]:
                note += " (" + ", ".join(f"{k} x{v}" for k, v in sorted(r["fallback_ops"].items())) + ")"
            if r["compile_failures"]:
                note += f", {r['compile_failures']} compile failures"
            if "profile" in r:
                p = r["profile"]
                note += (f"; profiled: graphs {p['graph_ms']:.1f} ms/step, GEMMs {p['gemm_ms']:.1f}"
                         f" (step / GEMMs {fmt(r['vs_gemms'], '.2f')}), fused attention"
                         f" {p['attention_ms']:.1f}")
            notes.append(note)
        elif r.get("graph_breaks"):
            notes.append(f"{r['part']} / {r['backend']}: {r['graph_breaks']} graph breaks")
        if r.get("losses_finite") is False:
            notes.append(f"{r['part']} / {r['backend']}: non-finite loss")
    return "\n".join(lines + ([""] + notes if notes else []))


# ---------------------------------------------------------------- main

def run(args):
    """Run all measurements; returns the JSON-ready result dict."""
    raws, disc_error = {}, None
    if "disc" in args.devices:
        # Before any CPU backward: autograd sizes its per-device queues on the
        # first backward, and a device registered later fails there.
        try:
            import torch_disc  # noqa: F401
        except Exception as exc:  # not built yet, or broken: report, don't abort
            disc_error = describe(exc)
    for backend in ("cpu", "disc"):
        if backend not in args.devices:
            continue
        for part in args.parts:
            if backend == "disc" and disc_error:
                raws[(part, backend)] = {"part": part, "backend": backend, "error": disc_error}
                continue
            try:
                raws[(part, backend)] = measure(part, backend, args)
            except Exception as exc:  # disc not built, model missing...: report it
                raws[(part, backend)] = {"part": part, "backend": backend,
                                         "error": describe(exc)}
            if args.verbose:
                print(f"  done: {part} / {backend}", file=sys.stderr, flush=True)
    if "compile" in args.devices:
        for part, r in run_compiled(args.parts, args).items():
            raws[(part, "compile")] = r
    rows = [summarize(raws[(part, b)], args.batch_size)
            for part in args.parts for b in DEVICES if (part, b) in raws]
    add_ratios(rows)
    lengths = {part: batch_lengths(part, args.warmup + args.steps, args.seed)
               for part in args.parts}
    return {
        "config": {k: getattr(args, k) for k in
                   ("steps", "warmup", "batch_size", "parts", "devices", "seed", "attn",
                    "mask", "compile_backend", "autocast")},
        "model": "all-MiniLM-L6-v2 (BertForSequenceClassification, 6 labels)",
        "lengths": lengths,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "rows": rows,
    }


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="MiniLM-L6 (BERT) step-time benchmark: "
                                            "disc vs CPU eager vs torch.compile")
    p.add_argument("--steps", type=int, default=None,
                   help=f"timed steps per measurement, median reported (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=int, default=None,
                   help=f"untimed steps first (default {DEFAULT_WARMUP})")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: {steps} timed steps after {warmup} warm-up".format(**QUICK))
    p.add_argument("--parts", type=lambda s: s.split(","), default=list(PARTS),
                   help="comma list of " + ", ".join(PARTS) + " (default: all)")
    p.add_argument("--devices", type=lambda s: s.split(","), default=list(DEVICES),
                   help="comma list of cpu, disc, compile (default: all)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", metavar="DIR", default=None,
                   help="checkpoint directory (default: the packaged all-MiniLM-L6-v2)")
    p.add_argument("--attn", choices=["eager", "sdpa"], default="sdpa")
    p.add_argument("--mask", choices=["2d", "4d"], default="2d",
                   help="attention mask form, as in finetune.py (2d: one extra sync per "
                        "forward on disc)")
    p.add_argument("--autocast", nargs="?", const="bf16", choices=list(finetune.AUTOCAST_DTYPES),
                   help="every backend's forward under bf16 (or fp16) autocast, as the "
                        "example's --autocast")
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--compile-timeout", type=float, default=300,
                   help="seconds for all torch.compile parts together")
    add_threads(p)
    add_out(p)
    p.add_argument("--verbose", action="store_true", help="progress on stderr")
    p.add_argument("--no-profile", dest="profile", action="store_false",
                   help="skip disc's profiled rerun of the timed steps (GEMM time per step)")
    p.add_argument("--compile-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name, choices in (("parts", PARTS), ("devices", DEVICES)):
        unknown = set(getattr(args, name)) - set(choices)
        if unknown:
            p.error(f"unknown {name}: {', '.join(sorted(unknown))}")
    fill_defaults(args, QUICK if args.quick
                  else {"steps": DEFAULT_STEPS, "warmup": DEFAULT_WARMUP})
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    if args.compile_worker:
        compile_worker(args)
        return None
    result = timed_run(run, args)
    return finish(result, args,
                  f"MiniLM-L6 (BERT){f', {args.autocast} autocast' if args.autocast else ''}, "
                  f"batch {args.batch_size}, {args.steps} timed steps after "
                  f"{args.warmup} warm-up, {result['threads']} threads; train-fixed: length "
                  f"{MAX_LENGTH}; variable lengths {MIN_LENGTH}..{MAX_LENGTH} "
                  f"(seed {args.seed}), the same for every backend",
                  table(result["rows"]))


if __name__ == "__main__":
    main()
