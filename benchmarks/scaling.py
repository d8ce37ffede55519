"""How disc's step time, compile time and memory grow with the model and the
sequence: MiniLM-L6, BERT-base and a GPT-2-small-shaped model, built from
their configurations (random weights, nothing downloaded), at lengths 128,
512 and (GPT-2) 1024.

For each (model, length), training and evaluation steps on three backends:
CPU eager, disc, and torch.compile (inductor, static shapes).  Each (backend,
mode) runs in a fresh process of its own (``--worker``), so that each one's
peak memory is its own (memory a training part freed stays resident) and no
cache is shared; a worker that fails or passes ``--timeout`` is reported in
the table, and the others still run.

* train: AdamW step of the model's own loss (sequence classification for
  BERT, next-token prediction for GPT-2), with clip_grad_norm_(1.0) and
  dropout on.
* eval: ``torch.no_grad()`` forward and ``argmax(-1).cpu()``.

The batch holds ``--tokens`` tokens (default 1024: batch 8 at length 128, 2
at 512, 1 at 1024), without padding; token ids are seeded random.  A step
is timed from the host-to-device copy of its batch to its loss (eval: its
predictions) on the host.  Reported per row: the median step over
``--steps`` timed steps after ``--warmup`` untimed ones, the first step
(which compiles), ``vs eager`` and ``vs inductor`` (the other's time / this
one's: above 1 is faster), the peak resident memory over the part (its
growth over the part's start, model already on the device: activations,
gradients, optimizer state, the compilers' own memory and code;
``benchmarks.memory``) and, on disc, the allocator's peak
(``torch.disc.max_memory_allocated``: the tensors that exist as data --
parameters, gradients, optimizer state, outputs -- not a graph's
intermediate buffers), compile
time per compiled graph, and tracing and hashing time per traced op.  Compiles
are cold on both compilers: disc's and inductor's on-disk caches are off.

    python -m benchmarks.scaling [--models minilm-l6,bert-base,gpt2-small]
                                 [--threads 2] [--results DIR]

writes ``scaling.json``, ``scaling.md`` and ``scaling.png`` (speedup against
length, one line per model; needs matplotlib) in ``results/``.  ``--quick``
is a smoke test on two tiny models.  The full study takes ~20-30 minutes on
2 cores, most of it in eager BERT-base / GPT-2 steps and inductor compiles.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.cli import add_threads, fmt, isa_line, run_worker, set_threads, write_json
from benchmarks.memory import PeakRSS

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("cpu", "disc", "compile")
MODES = ("train", "eval")
NAMES = {"cpu": "cpu eager", "disc": "disc", "compile": "cpu+inductor"}

# name: (family, config fields, lengths)
MODELS = {
    "minilm-l6": ("bert", dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                               intermediate_size=1536), (128, 512)),
    "bert-base": ("bert", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                               intermediate_size=3072), (128, 512)),
    "gpt2-small": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024),
                   (128, 512, 1024)),
    # Smoke-test sizes (--quick).
    "tiny-bert": ("bert", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=128, vocab_size=1000), (32, 64)),
    "tiny-gpt2": ("gpt2", dict(n_embd=64, n_layer=2, n_head=2, n_positions=128,
                               vocab_size=1000), (32, 64)),
}
FULL = ("minilm-l6", "bert-base", "gpt2-small")
QUICK = ("tiny-bert", "tiny-gpt2")
NUM_LABELS = 6


# ---------------------------------------------------------------- one worker

def build_model(name):
    import transformers

    family, fields, _ = MODELS[name]
    torch.manual_seed(0)
    if family == "bert":
        config = transformers.BertConfig(num_labels=NUM_LABELS, **fields)
        return transformers.BertForSequenceClassification(config), config.vocab_size
    config = transformers.GPT2Config(**fields)
    return transformers.GPT2LMHeadModel(config), config.vocab_size


def make_batches(name, length, batch, vocab, count):
    g = torch.Generator().manual_seed(length)
    batches = []
    for _ in range(count):
        ids = torch.randint(0, vocab, (batch, length), generator=g)
        labels = (torch.randint(0, NUM_LABELS, (batch,), generator=g)
                  if MODELS[name][0] == "bert" else ids)
        batches.append((ids, labels))
    return batches


class Counters:
    """Deltas of the backend's counters over a part: torch_disc.metrics on
    disc, Dynamo's compiled graphs on inductor, nothing on eager."""

    DISC = ("compiles", "compile_ns", "trace_ns", "hash_ns", "ops_traced", "syncs",
            "graphs_run", "fallbacks", "kernels_launched")

    def __init__(self, backend):
        self.backend = backend
        self.start = self.read()

    def read(self):
        if self.backend == "disc":
            import torch_disc
            return torch_disc.metrics.counters()
        if self.backend == "compile":
            from torch._dynamo.utils import counters
            return {"compiles": counters["stats"]["unique_graphs"]}
        return {}

    def delta(self):
        now = self.read()
        keys = self.DISC if self.backend == "disc" else now.keys()
        out = {k: now.get(k, 0) - self.start.get(k, 0) for k in keys}
        self.start = now
        return out


def run_part(model, mode, batches, device, sync, args):
    """Times one part; returns its dict (times, memory, counters)."""
    training = mode == "train"
    model.train(training)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if training else None
    backend = args.worker[2]
    if backend == "disc":
        torch.disc.reset_peak_memory_stats()
    counters = Counters(backend)
    times, warm = [], None
    with PeakRSS() as mem:
        for i, (ids, labels) in enumerate(batches):
            if i == args.warmup:
                warm = counters.delta()
            start = time.perf_counter()
            if training:
                loss = model(input_ids=ids.to(device), labels=labels.to(device)).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                sync()
                loss.item()
            else:
                with torch.no_grad():
                    model(input_ids=ids.to(device)).logits.argmax(-1).cpu()
            times.append((time.perf_counter() - start) * 1e3)
    part = {"first_ms": times[0], "times_ms": times[args.warmup:], "memory": mem.as_dict(),
            "warmup_counters": warm, "counters": counters.delta()}
    if backend == "disc":
        part["allocator_peak_mib"] = torch.disc.max_memory_allocated() / 2**20
    del opt
    return part


def worker(args):
    """One (model, length, backend) and its --modes: prints ``RESULT {json}``."""
    name, length, backend = args.worker[0], int(args.worker[1]), args.worker[2]
    device = torch.device("disc" if backend == "disc" else "cpu")
    sync = lambda: None  # noqa: E731
    if backend == "disc":
        import torch_disc
        sync = torch_disc.sync
    model, vocab = build_model(name)
    result = {"params": sum(p.numel() for p in model.parameters())}
    model.to(device)
    sync()  # the parameters are data on the device before any part's memory is measured
    if backend == "compile":
        model = torch.compile(model, dynamic=False)
    batch = max(1, args.tokens // length)
    for mode in args.modes:
        batches = make_batches(name, length, batch, vocab, args.warmup + args.steps)
        result[mode] = run_part(model, mode, batches, device, sync, args)
    print("RESULT " + json.dumps(result), flush=True)


def spawn(name, length, backend, mode, args):
    """Runs one worker; returns its result dict, or {"error": why}."""
    cmd = [sys.executable, "-m", "benchmarks.scaling", "--worker", name, str(length), backend,
           "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--tokens", str(args.tokens), "--modes", mode]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    # Compiles are measured cold: no on-disk cache of an earlier run serves them.
    env = dict(os.environ, DISC_PERSISTENT_CACHE="0")
    with tempfile.TemporaryDirectory() as inductor_cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache
        out, failure = run_worker(cmd, ROOT, args.timeout, env)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": failure or "the worker printed no result"}


# ---------------------------------------------------------------- rows

def summarize(name, length, backend, mode, raw, tokens):
    row = {"model": name, "length": length, "batch": max(1, tokens // length),
           "mode": mode, "backend": NAMES[backend]}
    part = raw.get(mode)
    if "error" in raw or part is None:
        row["error"] = raw.get("error", "no result")
        return row
    row.update(params_m=raw["params"] / 1e6, ms=statistics.median(part["times_ms"]),
               first_s=part["first_ms"] / 1e3,
               rss_delta_mib=part["memory"].get("peak_rss_delta_mib"),
               rss_peak_mib=part["memory"].get("peak_rss_mib"))
    c, w = part["counters"], part["warmup_counters"]
    if backend == "compile":
        row["compiles"] = c["compiles"] + w["compiles"]
    if backend == "disc":
        compiles = c["compiles"] + w["compiles"]
        ops = c["ops_traced"] + w["ops_traced"]
        row.update(
            compiles=compiles, compiles_timed=c["compiles"],
            compile_s_per_graph=(c["compile_ns"] + w["compile_ns"]) / 1e9 / compiles
            if compiles else None,
            trace_us_per_op=(c["trace_ns"] + w["trace_ns"]) / 1e3 / ops if ops else None,
            hash_us_per_op=(c["hash_ns"] + w["hash_ns"]) / 1e3 / ops if ops else None,
            launches_per_step=c["kernels_launched"] / len(part["times_ms"]),
            fallbacks=c["fallbacks"] + w["fallbacks"],
            allocator_peak_mib=part["allocator_peak_mib"])
    return row


def add_ratios(rows):
    """vs_eager / vs_inductor within each (model, length, mode); above 1: faster."""
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["length"], r["mode"]), []).append(r)
    for group in groups.values():
        ms = {r["backend"]: r.get("ms") for r in group}
        rss = {r["backend"]: r.get("rss_delta_mib") for r in group}
        for r in group:
            for key, other in (("vs_eager", "cpu eager"), ("vs_inductor", "cpu+inductor")):
                r[key] = ms[other] / r["ms"] if r.get("ms") and ms.get(other) else None
            r["rss_vs_eager"] = (r["rss_delta_mib"] / rss["cpu eager"]
                                 if r.get("rss_delta_mib") and rss.get("cpu eager") else None)


def table(rows):
    lines = ["| model | length x batch | mode | backend | ms/step | first step | vs eager "
             "| vs inductor | peak RSS growth (MiB) | vs eager's | disc allocator peak (MiB) "
             "| compile s/graph | trace / hash us per op |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for r in rows:
        head = f"| {r['model']} | {r['length']} x {r['batch']} | {r['mode']} | {r['backend']} "
        if "error" in r:
            lines.append(head + "| n/a |" + " |" * 8)
            notes.append(f"{r['model']} {r['length']} {r['mode']} / {r['backend']}: {r['error']}")
            continue
        disc = r["backend"] == "disc"
        lines.append(
            head + f"| {r['ms']:.0f} | {r['first_s']:.2f} s | {fmt(r['vs_eager'], '.2f')} "
            f"| {fmt(r['vs_inductor'], '.2f')} | {fmt(r['rss_delta_mib'], '.0f')} "
            f"| {fmt(r['rss_vs_eager'], '.2f')} "
            f"| {fmt(r.get('allocator_peak_mib'), '.0f') if disc else ''} "
            f"| {fmt(r.get('compile_s_per_graph'), '.2f') if disc else ''} "
            f"| {fmt(r.get('trace_us_per_op'), '.1f') + ' / ' + fmt(r.get('hash_us_per_op'), '.2f') if disc else ''} |")
        if disc and (r["fallbacks"] or r["compiles_timed"]):
            notes.append(f"{r['model']} {r['length']} {r['mode']} / disc: {r['fallbacks']} "
                         f"fallbacks, {r['compiles_timed']} compiles in the timed steps")
    return "\n".join(lines + ([""] + notes if notes else []))


def plot(rows, path):
    """Speedup of disc over eager (solid) and inductor (dashed) against the
    length, one colour per model, train and eval side by side."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # report it; the JSON and the table still get written
        return {"error": f"matplotlib unavailable ({type(exc).__name__}: {exc})"}
    disc = [r for r in rows if r["backend"] == "disc" and "error" not in r]
    fig, axes = plt.subplots(1, len(MODES), figsize=(11, 4.2), sharey=True)
    for ax, mode in zip(axes, MODES):
        for k, model in enumerate(dict.fromkeys(r["model"] for r in disc)):
            mine = sorted((r for r in disc if r["model"] == model and r["mode"] == mode),
                          key=lambda r: r["length"])
            colour = f"C{k}"
            for key, style, label in (("vs_eager", "-o", "vs eager"),
                                      ("vs_inductor", "--s", "vs inductor")):
                points = [(r["length"], r[key]) for r in mine if r[key]]
                if points:
                    ax.plot(*zip(*points), style, color=colour, label=f"{model} {label}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length")
        ax.set_title(f"{mode} step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("disc speedup (above 1: faster)")
    axes[-1].legend(fontsize=7)
    fig.suptitle(isa_line(), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"path": str(path)}


# ---------------------------------------------------------------- main

def run(args):
    rows = []
    for name in args.models:
        for length in args.lengths or MODELS[name][2]:
            for backend in args.backends:
                for mode in args.modes:
                    if args.verbose:
                        print(f"  {name} {length} {backend} {mode}", file=sys.stderr, flush=True)
                    raw = spawn(name, length, backend, mode, args)
                    rows.append(summarize(name, length, backend, mode, raw, args.tokens))
    add_ratios(rows)
    return {"config": {k: getattr(args, k) for k in
                       ("models", "backends", "modes", "steps", "warmup", "tokens")},
            "machine": platform.machine(), "isa": isa_line(), "torch": torch.__version__,
            "threads": args.threads or torch.get_num_threads(), "rows": rows}


def comma_list(choices):
    def parse(text):
        items = text.split(",")
        unknown = [i for i in items if i not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(unknown)}")
        return items
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="disc vs eager vs inductor as the model and the "
                                            "sequence grow")
    p.add_argument("--models", type=comma_list(MODELS), default=None,
                   help=f"comma list of {', '.join(MODELS)} (default: {', '.join(FULL)})")
    p.add_argument("--backends", type=comma_list(BACKENDS), default=list(BACKENDS))
    p.add_argument("--modes", type=comma_list(MODES), default=list(MODES))
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 3)")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed steps (default 2: a training step's second graph, with "
                        "the optimizer's state, differs from its first)")
    p.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="comma list of sequence lengths (default: each model's own)")
    p.add_argument("--tokens", type=int, default=1024, help="tokens per batch")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per worker")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: the tiny models, 1 timed step")
    p.add_argument("--results", type=Path, default=ROOT / "results")
    p.add_argument("--verbose", action="store_true", help="progress on stderr")
    p.add_argument("--worker", nargs=3, metavar=("MODEL", "LENGTH", "BACKEND"),
                   help=argparse.SUPPRESS)
    add_threads(p)
    args = p.parse_args(argv)
    if args.models is None:
        args.models = list(QUICK if args.quick else FULL)
    if args.steps is None:
        args.steps = 1 if args.quick else 3
    return args


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    if args.worker:
        return worker(args)
    start = time.perf_counter()
    result = run(args)
    result["seconds"] = time.perf_counter() - start
    text = table(result["rows"])
    print(result["isa"])
    print(f"{result['threads']} threads, {args.tokens} tokens per batch, {args.steps} timed "
          f"steps after {args.warmup} warm-up")
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    result["plot"] = plot(result["rows"], args.results / "scaling.png")
    write_json(args.results / "scaling.json", result)
    (args.results / "scaling.md").write_text(f"{result['isa']}\n\n{text}\n")
    print(f"({result['seconds']:.0f} s in all)")
    return result


if __name__ == "__main__":
    main()
