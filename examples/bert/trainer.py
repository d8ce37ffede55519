"""Fine-tune the same model on the same data as finetune.py, driven by
Hugging Face's Trainer, unmodified: Trainer and accelerate find disc as
PyTorch's accelerator, so the script has no device code for it.

Usage: python -m examples.bert.trainer [--device disc|cpu] [--limit N]
       [--gradient-checkpointing] [--bf16] [--output-dir DIR] ...

``--device cpu`` runs the same Trainer on the CPU, for comparison.
``--bf16`` trains under bf16 autocast through accelerate's own setting:
transformers 5.24 accepts ``bf16=True`` only on accelerators it knows by
name. ``main(argv)`` returns the logged losses and the evaluation metrics.
"""
import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from examples.bert.data import (DEFAULT_EVAL_SIZE, DEFAULT_TOP_LABELS, DEFAULT_WORDNET_DIR,
                                DatasetError)
from examples.bert.finetune import (ModelError, accuracy_and_macro_f1, check_model_dir, encode,
                                    load_data, load_model, packaged_model_dir)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["disc", "cpu"], default="disc")
    p.add_argument("--model", metavar="DIR", default=None)
    p.add_argument("--limit", type=int, default=None, help="first N train and eval examples")
    p.add_argument("--epochs", type=float, default=1)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--gradient-accumulation", type=int, default=1, metavar="K")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (through accelerate)")
    p.add_argument("--dropout-off", action="store_true")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", default=None, help="checkpoints (default: none saved)")
    args = p.parse_args(argv)
    # finetune.load_data's other inputs: WordNet glosses, its default split.
    args.train_file = args.eval_file = args.labels = None
    args.wordnet, args.top_labels, args.eval_size = (DEFAULT_WORDNET_DIR, DEFAULT_TOP_LABELS,
                                                      DEFAULT_EVAL_SIZE)
    return args


class Encoded(torch.utils.data.Dataset):
    """Token ids and labels; Trainer's collator pads each batch."""

    def __init__(self, ids, labels):
        self.ids, self.labels = ids, labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main(argv=None):
    args = parse_args(argv)
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    if args.device == "cpu":
        # accelerate lets this variable (torch_disc sets it to disc) win over use_cpu.
        os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"
    if args.bf16:
        os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16"
    train, evaluation = load_data(args)
    torch.manual_seed(args.seed)
    tokenizer, model = load_model(check_model_dir(args.model or packaged_model_dir()),
                                  train.label_names, "sdpa", args.dropout_off)
    training_args = TrainingArguments(
        output_dir=args.output_dir or "/tmp/disc-trainer", save_strategy="epoch" if args.output_dir else "no",
        per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=32,
        gradient_accumulation_steps=args.gradient_accumulation, num_train_epochs=args.epochs,
        max_steps=args.max_steps, learning_rate=args.lr, warmup_steps=0.1, weight_decay=0.01,
        activation_checkpointing=args.gradient_checkpointing, logging_steps=10, eval_strategy="epoch",
        seed=args.seed, report_to=[], use_cpu=args.device == "cpu", disable_tqdm=True)
    trainer = Trainer(
        model=model, args=training_args, data_collator=DataCollatorWithPadding(tokenizer),
        train_dataset=Encoded(encode(tokenizer, train.texts, args.max_length), train.labels),
        eval_dataset=Encoded(encode(tokenizer, evaluation.texts, args.max_length), evaluation.labels))
    print(f"Trainer on {training_args.device}: {len(train)} train / {len(evaluation)} eval examples, "
          f"{len(train.label_names)} labels")
    trained = trainer.train()
    prediction = trainer.predict(trainer.eval_dataset)
    predicted = prediction.predictions.argmax(-1).tolist()
    accuracy, macro_f1 = accuracy_and_macro_f1(evaluation.labels, predicted, len(train.label_names))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(f"train loss {trained.training_loss:.4f}  eval loss {prediction.metrics['test_loss']:.4f}  "
          f"eval acc {accuracy:.2%}  macro-F1 {macro_f1:.4f}")
    if args.device == "disc":
        import torch_disc

        print(torch_disc.metrics.report())
    return {"losses": losses, "train_loss": trained.training_loss, "accuracy": accuracy, "macro_f1": macro_f1,
            "eval_loss": prediction.metrics["test_loss"], "device": str(training_args.device)}


if __name__ == "__main__":
    try:
        main()
    except (DatasetError, ModelError) as e:
        sys.exit(f"error: {e}")
