"""Dynamic shapes on disc: training at random sequence lengths vs one length.

The model is a small BERT-style encoder with random weights (no download):
word + learned position embeddings, LayerNorm, a stack of post-LN
``nn.TransformerEncoderLayer`` (GELU, dropout 0.1, a key padding mask), a
tanh pooler on the first token and a linear classification head; trained
with cross-entropy, ``clip_grad_norm_`` and AdamW.  Default size: 4 layers,
hidden 256, 4 heads, feed-forward 1024, vocabulary 8192, 512 positions (as
in BERT, so no batch length uses the whole position table).

Runs, each on a fresh model (same seed) with the compile cache and compile
log emptied first, so every run's compiles are its own:

* ``variable``: ``--steps`` batches of ``--batch-size`` rows, each batch
  padded to its own length, a seeded draw from 16..128 -- what a
  pad-to-longest data loader produces.  Runs first, so when this module runs
  on its own its compile times are cold (JIT-compiled kernels stay cached
  in-process across runs; compiled graphs do not).
* ``fixed-N`` (``--fixed-lengths``, default ``mean,128``): the same number
  of batches, all of length N.  ``mean`` is the rounded mean length of the
  variable run's timed steps: the same total tokens, hence the fair baseline
  for the cost of dynamic shapes (goal: variable within 10% of it per
  token; attention's L^2 term makes varying lengths cost slightly more per
  token even on a perfect backend, a percent or so at these sizes).
  ``128`` pads every batch to the longest length: what one would do without
  symbolic shapes, to keep a single compiled graph; it shows what the
  variable run saves.

The same runs on CPU eager (``--no-eager`` skips them) show what varying
lengths cost without any tracing or compiling: the variable / fixed ratio
there is the reference for disc's.

Every batch has padding: row 0 is full length, the other rows random
lengths 2..N (pad id 0, masked).  A step is timed from the host-to-device
copy of the batch to the moment its loss is on the host, so it includes
tracing, hashing, any compile and running the graph.  The first
``--warmup`` (2) steps of each run are excluded from the statistics; a
compile after them counts in the step time.  Two untimed CPU eager steps at
length 128 come before all runs, so that the first measured run does not
pay for the process's own warm-up (allocator pools, BLAS).

The on-disk compile cache (``DISC_PERSISTENT_CACHE``) is turned off unless
that variable is set, since it would turn a run's compiles into loads of
graphs an earlier run or process compiled; graphs it served anyway (it is
read once per process: under ``python -m benchmarks`` the MNIST benchmark
has already switched it on) are reported as "disk hits".

Reported per run, from ``torch_disc.metrics`` deltas: compiles (cache
misses), total compile time, cache revalidations (a new size pattern of a
known structure with an identical plan: reused, not compiled), cache hits;
mean / median step time; per-token step time (sum of step times / sum of
padded tokens, in us); tracing + hashing cost per traced op (us), for the
variable run also split into steps whose length is seen for the first time
and steps that repeat a length (shape inference is memoized by concrete
sizes, so a first-seen length traces slower).  Ratios: variable / fixed
for the mean and median step time and per token.  Also per run: kernel
launches per timed step (disc) and the peak resident memory of the process
over the run (``benchmarks.memory``).  The variable run's
``torch_disc.explain()`` (why each compile happened) is printed and
summarized by reason.  ``--quick``: 8 steps per run on a 2-layer, hidden-128
model.

Run from the repository root: ``python -m benchmarks.dynamic_shapes``
(``--quick`` for a smoke test, see ``--help``); ``python -m benchmarks`` runs
it after the BERT benchmark.  ``main()`` returns the figures as a dict.
"""

import argparse
import os
import platform
import random
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

import torch
import torch.nn as nn
import torch.nn.functional as F

from benchmarks.cli import add_out, add_threads, fill_defaults, finish, fmt, set_threads, timed_run
from benchmarks.memory import PeakRSS

MIN_LENGTH = 16
MAX_LENGTH = 128
NUM_LABELS = 4
PAD_ID = 0
DEFAULT_STEPS = 50
QUICK_STEPS = 8
GOAL = 1.10  # variable / fixed-at-the-mean-length, per token
COUNTER_KEYS = ("cache_misses", "cache_hits", "cache_revalidated", "compile_ns",
                "compile_failures", "hash_ns", "trace_ns", "ops_traced", "graphs_run",
                "syncs", "fallbacks", "disk_cache.graph_hits", "kernels_launched")


# ---------------------------------------------------------------- model

class TinyBert(nn.Module):
    """BERT-style encoder classifier (post-LN, GELU), randomly initialized."""

    def __init__(self, vocab, hidden, layers, heads, intermediate, positions, dropout):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden, padding_idx=PAD_ID)
        self.position = nn.Embedding(positions, hidden)
        self.register_buffer("position_ids", torch.arange(positions), persistent=False)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(hidden, heads, intermediate, dropout,
                                           activation="gelu", batch_first=True,
                                           layer_norm_eps=1e-12)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, NUM_LABELS)

    def forward(self, ids, padding):
        """``ids`` [B, L] int64, ``padding`` [B, L] bool (True: pad) -> logits."""
        pos = self.position(self.position_ids[:ids.shape[1]])
        h = self.dropout(self.norm(self.word(ids) + pos))
        h = self.encoder(h, src_key_padding_mask=padding)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        return self.classifier(self.dropout(pooled))


def build_model(args):
    return TinyBert(args.vocab, args.hidden, args.layers, args.heads, 4 * args.hidden,
                    args.positions, args.dropout)


# ---------------------------------------------------------------- inputs

def variable_lengths(count, seed):
    rng = random.Random(f"{seed}-lengths")
    return [rng.randint(MIN_LENGTH, MAX_LENGTH) for _ in range(count)]


def make_batches(lengths, batch_size, vocab, seed):
    """CPU batches ``(ids, padding, labels)``: row 0 is ``length`` tokens,
    the others 2..length, padded with PAD_ID up to ``length``."""
    rng = random.Random(f"{seed}-rows")
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for length in lengths:
        ids = torch.randint(PAD_ID + 1, vocab, (batch_size, length), generator=gen)
        padding = torch.zeros(batch_size, length, dtype=torch.bool)
        for row in range(1, batch_size):
            padding[row, rng.randint(2, length):] = True
        ids[padding] = PAD_ID
        labels = torch.randint(0, NUM_LABELS, (batch_size,), generator=gen)
        batches.append((ids, padding, labels))
    return batches


# ---------------------------------------------------------------- measuring

def counters():
    import torch_disc

    c = torch_disc.metrics.counters()
    return {k: c.get(k, 0) for k in COUNTER_KEYS}


def minus(a, b):
    return {k: a[k] - b[k] for k in a}


def measure(name, lengths, args, backend="disc"):
    """Train on ``lengths`` (one batch each) on a fresh model; on disc with
    an empty compile cache.  Returns step times, peak memory and, on disc,
    counter deltas and the compile log."""
    with PeakRSS() as mem:
        result = _measure(name, lengths, args, backend)
    result["memory"] = mem.as_dict()
    return result


def _measure(name, lengths, args, backend):
    import torch_disc

    disc = backend == "disc"
    device = torch.device(backend)
    sync = torch_disc.sync if disc else (lambda: None)
    torch.manual_seed(args.seed)
    model = build_model(args).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    batches = make_batches(lengths, args.batch_size, args.vocab, args.seed)
    if disc:
        torch_disc.sync()
        torch_disc._C.clear_compile_cache()
        torch_disc._C.clear_compile_log()

    start_counts = counters() if disc else None
    times, losses, per_step = [], [], []
    before = start_counts
    warm = None
    for i, (ids, padding, labels) in enumerate(batches):
        if i == args.warmup:
            warm = before
        start = time.perf_counter()
        logits = model(ids.to(device), padding.to(device))
        loss = F.cross_entropy(logits, labels.to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()  # the step's graph runs here
        opt.zero_grad(set_to_none=True)
        sync()
        losses.append(loss.item())  # waits for the graph
        times.append((time.perf_counter() - start) * 1e3)
        if not disc:
            continue
        after = counters()
        d = minus(after, before)
        per_step.append({"compiles": d["cache_misses"], "revalidated": d["cache_revalidated"],
                         "disk_hits": d["disk_cache.graph_hits"], "ops": d["ops_traced"],
                         "trace_hash_ns": d["trace_ns"] + d["hash_ns"],
                         "new_length": lengths[i] not in lengths[:i]})
        before = after
        if args.verbose:
            print(f"  {name} step {i}: length {lengths[i]}, {times[-1]:.1f} ms, "
                  f"{d['cache_misses']} compiles, {d['cache_revalidated']} revalidated",
                  file=sys.stderr, flush=True)
    if not disc:
        return {"name": name, "backend": backend, "lengths": lengths, "times_ms": times,
                "losses": losses}
    end_counts = counters()
    log = torch_disc.compile_log()
    explain = torch_disc.explain()
    return {
        "name": name, "backend": backend, "lengths": lengths, "times_ms": times,
        "losses": losses, "per_step": per_step,
        "total": minus(end_counts, start_counts),
        "timed": minus(end_counts, warm if warm is not None else end_counts),
        "compile_log": [{k: (f"{v:016x}" if k == "hash" else v) for k, v in r.items()}
                        for r in log],
        "explain": explain,
    }


def warm_up_process(args):
    """Two untimed CPU eager steps at the longest length: the allocator's
    pools and BLAS reach their steady state before the first measured run,
    which would otherwise pay for it (disc's compile cache is not touched)."""
    measure("process warm-up", [MAX_LENGTH] * 2, args, "cpu")


def reason_kind(reason):
    """A compile reason without hashes, node numbers and sizes: groups like
    'first graph', 'new structure', 'same structure ..., other sizes'."""
    head = re.split(r"[;:]", reason, maxsplit=1)[0]
    head = re.sub(r"\b[0-9a-f]{16}\b", "<graph>", head)
    return re.sub(r"\d+", "N", head).strip()


def summarize(raw, args):
    """One result row from a measure() dict."""
    w = args.warmup
    times, lengths = raw["times_ms"][w:], raw["lengths"][w:]
    tokens = [args.batch_size * n for n in lengths]
    row = {
        "run": raw["name"],
        "backend": raw["backend"],
        "steps": len(raw["times_ms"]),
        "timed_steps": len(times),
        "distinct_lengths": len(set(raw["lengths"])),
        "mean_length": statistics.fmean(lengths),
        "tokens_per_step": statistics.fmean(tokens),
        "mean_ms": statistics.fmean(times),
        "median_ms": statistics.median(times),
        "first_ms": raw["times_ms"][0],
        "us_per_token": sum(times) * 1e3 / sum(tokens),
        "last_loss": raw["losses"][-1],
        "losses_finite": all(x == x and abs(x) != float("inf") for x in raw["losses"]),
        "memory": raw.get("memory", {}),
    }
    if raw["backend"] != "disc":
        return row
    total, timed = raw["total"], raw["timed"]
    ops = max(timed["ops_traced"], 1)
    compile_steps = [{"step": i, "length": raw["lengths"][i], **s}
                     for i, s in enumerate(raw["per_step"])
                     if s["compiles"] or s["revalidated"] or s["disk_hits"]]

    seen = [t for t, s in zip(times, raw["per_step"][w:]) if not s["new_length"]]

    def us_per_op(new):
        steps = [s for s in raw["per_step"][w:] if s["new_length"] == new]
        ops = sum(s["ops"] for s in steps)
        return sum(s["trace_hash_ns"] for s in steps) / 1e3 / ops if ops else None

    row.update({
        "compiles": total["cache_misses"],
        "compiles_timed": timed["cache_misses"],
        "compile_ms": total["compile_ns"] / 1e6,
        "compile_ms_timed": timed["compile_ns"] / 1e6,
        "revalidated": total["cache_revalidated"],
        "disk_hits": total["disk_cache.graph_hits"],
        "cache_hits": total["cache_hits"],
        "compile_failures": total["compile_failures"],
        "fallbacks": total["fallbacks"],
        "graphs_per_step": timed["graphs_run"] / len(times),
        "launches_per_step": timed["kernels_launched"] / len(times),
        "syncs_per_step": timed["syncs"] / len(times),
        "ops_per_step": timed["ops_traced"] / len(times),
        "trace_us_per_op": timed["trace_ns"] / 1e3 / ops,
        "hash_us_per_op": timed["hash_ns"] / 1e3 / ops,
        "trace_hash_us_per_op": (timed["trace_ns"] + timed["hash_ns"]) / 1e3 / ops,
        "new_length_steps": sum(s["new_length"] for s in raw["per_step"][w:]),
        "mean_ms_seen_length": (statistics.fmean(seen) if seen else None),
        "trace_hash_us_per_op_new_length": us_per_op(True),
        "trace_hash_us_per_op_seen_length": us_per_op(False),
        "compile_steps": compile_steps,
        "compile_reasons": dict(Counter(reason_kind(r["reason"]) for r in raw["compile_log"])),
    })
    return row


def fixed_length(spec, variable, warmup):
    if spec == "mean":
        timed = variable[warmup:] or variable
        return round(statistics.fmean(timed))
    n = int(spec)
    if not MIN_LENGTH <= n <= MAX_LENGTH:
        raise ValueError(f"fixed length {n} outside {MIN_LENGTH}..{MAX_LENGTH}")
    return n


def run(args):
    """Run the variable and fixed runs; returns the JSON-ready result dict."""
    import torch_disc

    # Compiles are what this measures: none may come from an earlier run's
    # disk cache, unless the caller's environment asks for it.
    if "DISC_PERSISTENT_CACHE" not in os.environ:
        torch_disc.options.set("DISC_PERSISTENT_CACHE", False)

    lengths = variable_lengths(args.steps, args.seed)
    plan = [("variable", lengths)]
    for spec in args.fixed_lengths:
        n = fixed_length(spec, lengths, args.warmup)
        name = f"fixed-{n}"
        if name not in {p[0] for p in plan}:
            plan.append((name, [n] * args.steps))
    warm_up_process(args)
    backends = ["disc"] + (["cpu"] if args.eager else [])
    rows, raw_variable = [], None
    for backend in backends:
        for name, ls in plan:
            if args.verbose:
                print(f"  run: {name} on {backend}", file=sys.stderr, flush=True)
            raw = measure(name, ls, args, backend)
            if backend == "disc" and name == "variable":
                raw_variable = raw
            rows.append(summarize(raw, args))
    comparisons = []
    for backend in backends:
        var, *fixed = [r for r in rows if r["backend"] == backend]
        for r in fixed:
            comparisons.append({
                "backend": backend,
                "fixed": r["run"],
                "same_tokens": abs(r["mean_length"] - var["mean_length"]) < 1,
                "mean_ratio": var["mean_ms"] / r["mean_ms"],
                "median_ratio": var["median_ms"] / r["median_ms"],
                "per_token_ratio": var["us_per_token"] / r["us_per_token"],
            })
    baseline = next((c for c in comparisons if c["same_tokens"] and c["backend"] == "disc"),
                    None)
    return {
        "config": {k: getattr(args, k) for k in
                   ("steps", "warmup", "batch_size", "seed", "fixed_lengths", "eager", "layers",
                    "hidden", "heads", "vocab", "positions", "dropout", "lr")},
        "model": (f"BERT-style encoder, {args.layers} layers, hidden {args.hidden}, "
                  f"{args.heads} heads, ff {4 * args.hidden}, vocab {args.vocab}, "
                  f"random init, {NUM_LABELS}-way head, AdamW"),
        "lengths": lengths,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "rows": rows,
        "comparisons": comparisons,
        "goal": {"per_token_ratio_max": GOAL,
                 "met": None if baseline is None else baseline["per_token_ratio"] <= GOAL},
        "explain": raw_variable["explain"],
        "compile_log": raw_variable["compile_log"],
    }


# ---------------------------------------------------------------- output

def table(result, explain_lines):
    rows = result["rows"]
    disc_rows = [r for r in rows if r["backend"] == "disc"]
    disk = any(r["disk_hits"] for r in disc_rows)
    lines = ["| run | backend | mean len | compiles (after warm-up) | compile ms | revalidated "
             "| hits | mean ms | median ms | us/token | trace+hash us/op |"
             + (" disk hits |" if disk else ""),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if disk else "")]
    for r in rows:
        if r["backend"] == "disc":
            counts = (f"{r['compiles']} ({r['compiles_timed']}) | {r['compile_ms']:.0f} "
                      f"| {r['revalidated']} | {r['cache_hits']}")
        else:
            counts = " | | |"
        lines.append(
            f"| {r['run']} | {r['backend']} | {r['mean_length']:.1f} | {counts} "
            f"| {r['mean_ms']:.1f} | {r['median_ms']:.1f} | {r['us_per_token']:.1f} "
            f"| {fmt(r.get('trace_hash_us_per_op'), '.2f')} |"
            + (f" {r.get('disk_hits', '')} |" if disk else ""))
    lines.append("")
    for c in result["comparisons"]:
        tag = " (same tokens)" if c["same_tokens"] else ""
        lines.append(f"{c['backend']}: variable / {c['fixed']}{tag}: mean step "
                     f"{c['mean_ratio']:.2f}x, median {c['median_ratio']:.2f}x, "
                     f"per token {c['per_token_ratio']:.2f}x")
    goal = result["goal"]
    if goal["met"] is not None:
        lines.append(f"goal (disc, per token within {100 * (GOAL - 1):.0f}% of the same-tokens "
                     "run): " + ("met" if goal["met"] else "NOT met"))
    lines.append("")
    for r in disc_rows:
        notes = [f"{r['ops_per_step']:.0f} ops/step (trace {r['trace_us_per_op']:.2f} + hash "
                 f"{r['hash_us_per_op']:.2f} us/op)",
                 f"{r['graphs_per_step']:.2f} graphs/step, {r['syncs_per_step']:.2f} syncs/step",
                 f"first step {r['first_ms']:.0f} ms", f"{r['distinct_lengths']} distinct lengths"]
        if r["fallbacks"]:
            notes.append(f"{r['fallbacks']} fallbacks")
        if r["compile_failures"]:
            notes.append(f"{r['compile_failures']} compile failures")
        lines.append(f"disc {r['run']}: " + ", ".join(notes))
    for r in rows:
        if not r["losses_finite"]:
            lines.append(f"{r['backend']} {r['run']}: non-finite loss")
    var = disc_rows[0]
    new, seen = (var["trace_hash_us_per_op_new_length"], var["trace_hash_us_per_op_seen_length"])
    lines.append(f"disc variable: trace+hash {fmt(new, '.2f')} us/op on the "
                 f"{var['new_length_steps']} timed steps with a first-seen length, "
                 f"{fmt(seen, '.2f')} us/op on the "
                 f"{var['timed_steps'] - var['new_length_steps']} that repeat one (mean step "
                 f"{fmt(var['mean_ms_seen_length'], '.1f')} ms on those)")
    late = [s for s in var["compile_steps"] if s["step"] >= result["config"]["warmup"]]
    if late:
        lines.append("disc variable: compiles / revalidations after warm-up at "
                     + ", ".join(f"step {s['step']} (length {s['length']}: {s['compiles']} "
                                 f"compiled, {s['revalidated']} revalidated)" for s in late))
    if disk:
        lines.append("disk hits: graphs the on-disk cache served (compiled by an earlier run "
                     "or process; DISC_PERSISTENT_CACHE=0 turns it off)")
    lines.append("disc variable: compile reasons: " + (", ".join(
        f"{k} x{v}" for k, v in sorted(var["compile_reasons"].items(), key=lambda kv: -kv[1]))
        or "none"))
    text = result["explain"].splitlines()
    lines += ["", "torch_disc.explain() of the disc variable run"
              + (f" (first {explain_lines} of {len(text)} lines)" if len(text) > explain_lines
                 else "") + ":"]
    lines += ["  " + line[:200] for line in text[:explain_lines]]
    return "\n".join(lines)


# ---------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Dynamic shapes on disc: a BERT-style encoder "
                                            "trained at random sequence lengths vs one length")
    p.add_argument("--steps", type=int, default=None,
                   help=f"training steps per run, warm-up included (default {DEFAULT_STEPS})")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke test: {QUICK_STEPS} steps per run, 2 layers, hidden 128")
    p.add_argument("--warmup", type=int, default=2,
                   help="first steps of each run left out of the statistics (default 2)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixed-lengths", type=lambda s: s.split(","), default=["mean", "128"],
                   help="comma list of fixed-length runs: 'mean' (the variable run's rounded "
                        f"mean length: same tokens) or a length {MIN_LENGTH}..{MAX_LENGTH} "
                        "(default mean,128)")
    p.add_argument("--no-eager", dest="eager", action="store_false",
                   help="skip the CPU eager reference runs (same runs, same model)")
    p.add_argument("--layers", type=int, default=None, help="encoder layers (default 4)")
    p.add_argument("--hidden", type=int, default=None,
                   help="hidden size (default 256); feed-forward is 4x")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--positions", type=int, default=512,
                   help="position table size (default 512, as BERT)")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=1e-4)
    add_threads(p)
    p.add_argument("--explain-lines", type=int, default=12,
                   help="lines of the variable run's explain() to print (default 12)")
    add_out(p)
    p.add_argument("--verbose", action="store_true", help="per-step progress on stderr")
    args = p.parse_args(argv)
    defaults = {"steps": DEFAULT_STEPS, "layers": 4, "hidden": 256}
    if args.quick:
        defaults = {"steps": QUICK_STEPS, "layers": 2, "hidden": 128}
    fill_defaults(args, defaults)
    if args.warmup < 0 or args.steps <= args.warmup:
        p.error("need --warmup >= 0 and --steps > --warmup")
    if args.positions < MAX_LENGTH:
        p.error(f"--positions must be >= {MAX_LENGTH}")
    if args.hidden % args.heads:
        p.error("--hidden must be a multiple of --heads")
    for spec in args.fixed_lengths:
        if spec != "mean" and not (spec.isdigit() and MIN_LENGTH <= int(spec) <= MAX_LENGTH):
            p.error(f"--fixed-lengths: {spec!r} is neither 'mean' nor a length "
                    f"{MIN_LENGTH}..{MAX_LENGTH}")
    return args


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    result = timed_run(run, args)
    return finish(result, args,
                  f"Dynamic shapes: {result['model']}; batch {args.batch_size}, {args.steps} "
                  f"steps per run (first {args.warmup} not timed), {result['threads']} threads; "
                  f"variable lengths {MIN_LENGTH}..{MAX_LENGTH} (seed {args.seed})",
                  table(result, args.explain_lines))


if __name__ == "__main__":
    main()
