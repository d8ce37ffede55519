"""Inference on disc vs CPU eager vs torch.compile (inductor), in one run,
at one thread count for every backend.

Workloads (random weights from configs: speed does not depend on them):

* ``minilm``: MiniLM-L6 (BERT, hidden 384, 6 layers, 12 heads) sentence
  classification, batch 8, each batch padded to its own seeded length in
  16..128 (``--lengths``), the last rows masked.
* ``resnet18-b1`` / ``resnet18-b8``: torchvision's ResNet-18 at 224x224,
  batch 1 and 8.
* ``gpt2-decode``: greedy decoding of a 6-layer GPT-2 (hidden 768, as
  distilgpt2), batch 1, prompt 16 tokens, ``--tokens`` new tokens, the
  full sequence run at each token (no KV cache): the length grows by one at
  every call. Reported per generated token.

Backends: ``eager`` (CPU), ``inductor`` (``torch.compile``, dynamic),
``disc-lazy`` (the model on the disc device, inputs moved there, outputs
read back), ``disc-compiled`` (``torch_disc.compile(model, freeze=True,
dynamic=True)``: traced once, no tracing per call) and ``disc-exported``
(``torch_disc.export`` to a file, ``torch_disc.load``; not for decoding).
The on-disk compile cache is off unless ``DISC_PERSISTENT_CACHE`` is set.
Per backend: the median time of a call over the timed calls, the first
call (compiling included), compiles (disc: compile-cache misses; inductor:
graphs Dynamo compiled), calls traced (disc-compiled / -exported) and the
largest difference from eager relative to the output's largest magnitude
(decoding: generated tokens that differ). Ratios: ``eager / backend`` and
``inductor / backend`` (above 1: faster).

Run from the repository root: ``python -m benchmarks.infer`` (``--quick``,
``--only minilm,resnet18-b1``, ``--no-inductor``, see ``--help``).
"""
import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks import cli  # noqa: E402
from examples.bert.infer import Classifier  # noqa: E402

WORKLOADS = ("minilm", "resnet18-b1", "resnet18-b8", "gpt2-decode")
BACKENDS = ("eager", "inductor", "disc-lazy", "disc-compiled", "disc-exported")
DEFAULTS = {"calls": 12, "tokens": 24, "lengths": "16,128"}
QUICK = {"calls": 3, "tokens": 4, "lengths": "16,48"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke test: few calls, short lengths")
    p.add_argument("--only", default=",".join(WORKLOADS), help="workloads, comma-separated")
    p.add_argument("--calls", type=int, default=None, help="timed calls per backend (after one untimed)")
    p.add_argument("--tokens", type=int, default=None, help="tokens generated in gpt2-decode")
    p.add_argument("--lengths", default=None, help="MiniLM length range lo,hi")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile (inductor)")
    cli.add_threads(p, default=2)
    cli.add_out(p)
    return p.parse_args(argv)


# ---------------------------------------------------------------- workloads

def minilm(args):
    import transformers
    config = transformers.BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                                     num_attention_heads=12, intermediate_size=1536, num_labels=6)
    torch.manual_seed(0)
    model = Classifier(transformers.BertForSequenceClassification(config)).eval()
    lo, hi = map(int, args.lengths.split(","))
    rng = random.Random(0)
    batches = []
    for _ in range(args.calls + 1):
        length = rng.randint(lo, hi)
        ids = torch.randint(0, 30522, (8, length), generator=torch.Generator().manual_seed(length))
        mask = torch.ones(8, length, dtype=torch.long)
        mask[1:, length // 2:] = 0
        batches.append((ids, mask))
    from torch.export import Dim
    spec = {0: Dim("batch", min=1, max=64), 1: Dim("length", min=2, max=512)}
    return model, batches, (spec, spec)


def resnet18(batch):
    def make(args):
        import torchvision
        torch.manual_seed(0)
        model = torchvision.models.resnet18(weights=None).eval()
        inputs = [(torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(k)),)
                  for k in range(args.calls + 1)]
        return model, inputs, None
    return make


def gpt2(args):
    import transformers
    config = transformers.GPT2Config(n_layer=6, n_embd=768, n_head=12, vocab_size=50257, n_positions=512)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, 50257, (1, 16), generator=torch.Generator().manual_seed(0))
    return model, prompt, None


MAKERS = {"minilm": minilm, "resnet18-b1": resnet18(1), "resnet18-b8": resnet18(8), "gpt2-decode": gpt2}


# ---------------------------------------------------------------- backends

def backend_model(name, model, example, dynamic_shapes, tmp):
    """(callable taking CPU inputs and returning CPU outputs) for a backend."""
    import torch_disc
    if name == "eager":
        return model
    if name == "inductor":
        return torch.compile(model, dynamic=True)
    if name == "disc-compiled":
        return torch_disc.compile(model, freeze=True, dynamic=True)
    if name == "disc-exported":
        path = os.path.join(tmp, "model.disc")
        torch_disc.export(model, example, path, dynamic_shapes=dynamic_shapes)
        return torch_disc.load(path)
    on_disc = model.to("disc")

    def lazy(*inputs):
        out = on_disc(*[x.to("disc") for x in inputs])
        out = getattr(out, "logits", out)
        return out.cpu()
    return lazy


def logits(out):
    return getattr(out, "logits", out)


def greedy(call, prompt, tokens):
    """Token ids and per-token times of greedy decoding (full sequence each step)."""
    ids, times = prompt, []
    for _ in range(tokens):
        start = time.perf_counter()
        out = logits(call(ids))
        nxt = out[:, -1].argmax(-1, keepdim=True)
        times.append(time.perf_counter() - start)
        ids = torch.cat([ids, nxt], dim=1)
    return ids, times


def counts():
    import torch_disc
    c = torch_disc.metrics.counters()
    dynamo = torch._dynamo.utils.counters["stats"].get("unique_graphs", 0)
    return c.get("cache_misses", 0), c.get("compiled.traced_calls", 0), dynamo


def measure(workload, backend, args, reference):
    import torch_disc
    model, inputs, dynamic_shapes = MAKERS[workload](args)
    torch._dynamo.reset()
    torch_disc._C.clear_compile_cache()
    misses0, traced0, _ = counts()
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        call = backend_model(backend, model, inputs[0] if workload != "gpt2-decode" else (inputs,),
                             dynamic_shapes, tmp)
        if workload == "gpt2-decode":
            first = time.perf_counter()
            logits(call(inputs))
            first = time.perf_counter() - first
            ids, times = greedy(call, inputs, args.tokens)
            outputs = [ids]
        else:
            times, outputs = [], []
            for k, x in enumerate(inputs):
                start = time.perf_counter()
                out = logits(call(*x))
                elapsed = time.perf_counter() - start
                outputs.append(out)
                if k == 0:
                    first = elapsed
                else:
                    times.append(elapsed)
    misses, traced, dynamo = counts()
    diff = 0.0
    if reference is not None:  # relative to the output's scale; tokens: how many differ
        for got, want in zip(outputs, reference):
            if got.dtype.is_floating_point:
                diff = max(diff, float((got - want).abs().max() / want.abs().max().clamp(min=1e-30)))
            else:
                diff = max(diff, float((got != want).sum()))
    return {"workload": workload, "backend": backend, "median_ms": 1e3 * statistics.median(times),
            "first_ms": 1e3 * first,
            "compiles": dynamo if backend == "inductor" else misses - misses0 if backend.startswith("disc") else 0,
            "traced_calls": traced - traced0, "max_rel_diff": diff, "outputs": outputs}


def run(args):
    import torch_disc
    if "DISC_PERSISTENT_CACHE" not in os.environ:  # each run's compiles are its own
        torch_disc.options.set("DISC_PERSISTENT_CACHE", False)
    rows = []
    backends = [b for b in BACKENDS if not (b == "inductor" and args.no_inductor)]
    for workload in args.only.split(","):
        reference = None
        for backend in backends:
            if workload == "gpt2-decode" and backend == "disc-exported":
                continue
            try:
                row = measure(workload, backend, args, reference)
            except Exception as e:  # noqa: BLE001 - a failing backend is a row, not the end
                rows.append({"workload": workload, "backend": backend, "error": f"{type(e).__name__}: {e}"[:200]})
                print(f"{workload} {backend}: {rows[-1]['error']}", flush=True)
                continue
            if backend == "eager":
                reference = row["outputs"]
            row.pop("outputs")
            rows.append(row)
            print(f"{workload} {backend}: {row['median_ms']:.2f} ms", flush=True)
    by = {(r["workload"], r["backend"]): r for r in rows if "error" not in r}
    for r in rows:
        if "error" in r:
            continue
        eager, inductor = by.get((r["workload"], "eager")), by.get((r["workload"], "inductor"))
        r["vs_eager"] = eager["median_ms"] / r["median_ms"] if eager else None
        r["vs_inductor"] = inductor["median_ms"] / r["median_ms"] if inductor else None
    return {"threads": torch.get_num_threads(), "rows": rows, "torch": torch.__version__}


def table(result):
    lines = ["| workload | backend | ms / call | first call ms | compiles | traced calls | vs eager | "
             "vs inductor | max rel diff |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['backend']} | error: {r['error']} | | | | | | |")
            continue
        lines.append(f"| {r['workload']} | {r['backend']} | {r['median_ms']:.2f} | {r['first_ms']:.0f} | "
                     f"{r['compiles']} | {r['traced_calls']} | {cli.fmt(r['vs_eager'], '.2f')} | "
                     f"{cli.fmt(r['vs_inductor'], '.2f')} | {r['max_rel_diff']:.1e} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    cli.fill_defaults(args, QUICK if args.quick else DEFAULTS)
    cli.set_threads(args.threads)
    result = cli.timed_run(run, args)
    header = (f"\nInference, {result['threads']} threads (gpt2-decode: per generated token; "
              f"ratios above 1: faster)")
    return cli.finish(result, args, header, table(result))


if __name__ == "__main__":
    main()
