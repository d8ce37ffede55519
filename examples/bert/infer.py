"""Serve a BERT-family model on disc: classify sentences or embed them, at
whatever length each batch has, from one compile.

    python -m examples.bert.infer --task embed                      # packaged MiniLM
    python -m examples.bert.infer --model ckpt/ --task classify     # finetune.py --save ckpt/
    python -m examples.bert.infer --export model.disc               # write the artifact ...
    python -m examples.bert.infer --load model.disc --task embed    # ... and serve from it

Sentences come from ``--input FILE`` (one per line; default: WordNet noun
glosses). They are sorted by length and batched (``--batch-size``), each
batch padded to its own longest sentence, so lengths vary from batch to
batch. ``--backend``: ``compiled`` (``torch_disc.compile(model, freeze=True)``,
the default), ``lazy`` (the model on the disc device) or ``eager`` (CPU);
``--load`` serves an artifact of ``torch_disc.export`` instead, which holds
the model's graph and weights (the tokenizer still comes from ``--model``).
``--check`` also runs CPU eager and reports the largest difference.

``--task embed``: mean-pooled, L2-normalised sentence embeddings (what
all-MiniLM-L6-v2 was trained for); printed as each sentence's nearest
neighbour among the others. ``--task classify``: the label of each sentence.
"""
import argparse
import os
import sys
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from examples.bert.data import DEFAULT_WORDNET_DIR, load_wordnet  # noqa: E402
from examples.bert.finetune import ModelError, check_model_dir, collate, packaged_model_dir  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint directory (default: the packaged MiniLM)")
    p.add_argument("--task", choices=("embed", "classify"), default="embed")
    p.add_argument("--input", default=None, help="a file of sentences, one per line")
    p.add_argument("--limit", type=int, default=64, help="sentences taken from the input")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--backend", choices=("compiled", "lazy", "eager"), default="compiled")
    p.add_argument("--export", default=None, help="write the model as a torch_disc artifact here and stop")
    p.add_argument("--load", default=None, help="serve the torch_disc artifact at this path")
    p.add_argument("--check", action="store_true", help="compare with CPU eager")
    p.add_argument("--threads", type=int, default=None)
    return p.parse_args(argv)


class Embedder(torch.nn.Module):
    """BertModel -> mean over the real tokens -> L2 normalised."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)


class Classifier(torch.nn.Module):
    """Sequence classification logits, as a plain tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


def load(args):
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    path = check_model_dir(args.model or packaged_model_dir())
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if args.task == "embed":
        model = Embedder(AutoModel.from_pretrained(str(path), attn_implementation="sdpa"))
        labels = None
    else:
        hf = AutoModelForSequenceClassification.from_pretrained(str(path), attn_implementation="sdpa")
        model, labels = Classifier(hf), hf.config.id2label
    return tokenizer, model.eval(), labels


def sentences(args):
    if args.input:
        with open(args.input, encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip()]
    else:
        lines = list(load_wordnet(DEFAULT_WORDNET_DIR).texts)
    return lines[: args.limit]


def batches(tokenizer, texts, args):
    """(indices, input_ids, attention_mask) per batch, shortest first."""
    encoded = tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"]
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    for start in range(0, len(order), args.batch_size):
        idx = order[start:start + args.batch_size]
        batch = collate([encoded[i] for i in idx], [0] * len(idx), tokenizer.pad_token_id)
        yield idx, batch["input_ids"], batch["attention_mask"]


def serving_model(model, args):
    """The callable that serves: (ids, mask) -> CPU output."""
    import torch_disc

    if args.load:
        return torch_disc.load(args.load)
    if args.backend == "compiled":
        return torch_disc.compile(model, freeze=True, dynamic=True)
    if args.backend == "lazy":
        on_disc = model.to("disc")
        return lambda ids, mask: on_disc(ids.to("disc"), mask.to("disc")).cpu()
    return model


def export(model, tokenizer, args):
    import torch_disc
    from torch.export import Dim

    _, ids, mask = next(batches(tokenizer, ["an example sentence to trace the model with"] * 2, args))
    batch, length = Dim("batch", min=1, max=1024), Dim("length", min=2, max=args.max_length)
    spec = {0: batch, 1: length}
    torch_disc.export(model, (ids, mask), args.export, dynamic_shapes=(spec, spec))
    print(f"wrote {args.export} ({os.path.getsize(args.export) / 1e6:.1f} MB)")


def report(outputs, texts, labels, args):
    if args.task == "classify":
        for text, logits in zip(texts, outputs):
            print(f"{labels[int(logits.argmax())]:>24}  {text[:70]}")
        return
    embeddings = torch.stack(outputs)
    similarity = embeddings @ embeddings.T
    similarity.fill_diagonal_(-2)
    for k in range(min(len(texts), 8)):
        j = int(similarity[k].argmax())
        print(f"{float(similarity[k, j]):.3f}  {texts[k][:50]!r} ~ {texts[j][:50]!r}")


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import torch_disc

    try:
        tokenizer, model, labels = load(args)
    except ModelError as e:
        sys.exit(f"error: {e}")
    if args.export:
        return export(model, tokenizer, args)
    texts = sentences(args)
    serve = serving_model(model, args)
    outputs, worst = [None] * len(texts), 0.0
    torch_disc.metrics.reset()
    start = time.perf_counter()
    first = None
    lengths = set()
    with torch.no_grad():
        for idx, ids, mask in batches(tokenizer, texts, args):
            out = serve(ids, mask)
            first = first or time.perf_counter() - start
            lengths.add(ids.shape[1])
            if args.check:
                worst = max(worst, float((out - model(ids, mask)).abs().max()))
            for row, i in enumerate(idx):
                outputs[i] = out[row]
    total = time.perf_counter() - start
    report(outputs, texts, labels, args)
    c = torch_disc.metrics.counters()
    how = f"artifact {args.load}" if args.load else args.backend
    print(f"{len(texts)} sentences, {len(lengths)} lengths ({min(lengths)}..{max(lengths)}), {how}: "
          f"{total:.2f} s (first batch {first:.2f} s); compiles {c['cache_misses']}, "
          f"traced calls {c.get('compiled.traced_calls', 0)}, fallbacks {c.get('fallbacks', 0)}")
    if args.check:
        print(f"largest difference from CPU eager: {worst:.2e}")
    return {"outputs": outputs, "counters": c, "worst": worst}


if __name__ == "__main__":
    main()
