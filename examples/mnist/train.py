"""Train a small MLP or CNN on (Fashion-)MNIST on the disc lazy device or CPU.

Usage: python examples/mnist/train.py [--device disc|cpu] [--model mlp|cnn] ...

Data-parallel on several processes (DistributedDataParallel, each rank a
shard of every epoch through DistributedSampler, ``--batch-size`` per rank):
``torchrun --nproc-per-node 2 examples/mnist/train.py --device disc``.

``main(argv)`` runs in-process and returns the test accuracy, the per-step
losses and the training throughput, so tests can compare devices.
"""

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script: make the repository root importable for `examples.*`.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.nn.functional as F
from torch import nn

from examples.device import device_and_sync
from examples import distributed as ddp
from examples.progress import Progress
from examples.mnist.data import DEFAULT_DIR, DatasetError, load_split

EVAL_BATCH_SIZE = 1000
DEFAULT_LR = {"sgd": 0.05, "adam": 1e-3, "adamw": 1e-3}


def build_model(name, dropout=0.0):
    """Return the ``mlp`` (784-256-128-10) or ``cnn`` model.

    Dropout layers are only added for ``dropout > 0`` so that the default
    models contain no random ops (keeps disc/CPU runs bit-comparable).
    """
    def drop():
        return [nn.Dropout(dropout)] if dropout > 0 else []

    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 256), nn.ReLU(), *drop(),
            nn.Linear(256, 128), nn.ReLU(), *drop(),
            nn.Linear(128, 10),
        )
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(1600, 128), nn.ReLU(), *drop(),
            nn.Linear(128, 10),
        )
    raise ValueError(f"unknown model {name!r}")


def build_optimizer(name, params, lr):
    """SGD (momentum 0.9), Adam or AdamW with learning rate ``lr``."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}")



def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["disc", "cpu"], default="disc")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--optimizer", choices=sorted(DEFAULT_LR), default="adam")
    p.add_argument("--lr", type=float, default=None,
                   help="default: 0.05 for sgd, 1e-3 for adam/adamw")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="dropout after hidden layers (0 = no dropout layer)")
    p.add_argument("--data", default=DEFAULT_DIR, help="directory with IDX files")
    p.add_argument("--limit", type=int, default=None,
                   help="use the first N train and first min(N, 10000) test samples")
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop after N training steps in total")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--autocast", choices=["off", "bf16", "fp16"], default="off",
                   help="mixed precision: the forward under torch.autocast in this dtype "
                        "(fp16 with a GradScaler)")
    p.add_argument("--log-losses", metavar="FILE", default=None,
                   help="write per-step training losses as a JSON list")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (terminal) or progress lines (log)")
    p.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                   help="when stdout is not a terminal: a progress line this often")
    args = p.parse_args(argv)
    if args.lr is None:
        args.lr = DEFAULT_LR[args.optimizer]
    return args


AUTOCAST_DTYPES = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def train_epoch(model, opt, order, x, y, args, device, sync, max_steps, desc):
    """Run one shuffled epoch, stopping early after ``max_steps`` (None: no cap).

    Returns ``(losses, samples, seconds)``.  Losses are kept as detached device
    tensors during the loop and read back afterwards: on disc the values are
    already materialized by the sync at the end of each optimizer.step(), so
    reading them later costs no extra graph execution.
    """
    model.train()
    batches = order.split(args.batch_size)  # keeps the last partial batch
    if max_steps is not None:
        batches = batches[:max_steps]
    pending, samples = [], 0
    start = time.perf_counter()
    progress = Progress(len(batches), desc, enabled=not args.no_progress and ddp.is_main(),
                        interval=args.progress_every)
    dtype = AUTOCAST_DTYPES[args.autocast]
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    for idx in batches:
        xb, yb = x[idx].to(device), y[idx].to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        pending.append(ddp.mean_over_ranks(loss.detach()))
        samples += len(idx)
        progress.update(len(idx), loss)
    progress.close()
    sync()  # stop the clock only once all queued device work has run
    seconds = time.perf_counter() - start
    return [t.item() for t in pending], samples, seconds


@torch.no_grad()
def evaluate(model, x, y, device):
    """Top-1 accuracy over (x, y) in batches of EVAL_BATCH_SIZE."""
    model.eval()
    correct = 0
    for xb, yb in zip(x.split(EVAL_BATCH_SIZE), y.split(EVAL_BATCH_SIZE)):
        pred = model(xb.to(device)).argmax(dim=1)
        # .item() syncs each batch, so every graph stays one batch in size.
        correct += (pred == yb.to(device)).sum().item()
    return correct / max(len(x), 1)


def main(argv=None):
    """Train and evaluate; returns {'test_accuracy', 'losses', 'samples_per_s'}."""
    args = parse_args(argv)
    device, sync = device_and_sync(args.device)
    world = ddp.init(args.device)  # 1 unless started by torchrun
    x_train, y_train = load_split(args.data, "train", limit=args.limit)
    test_limit = None if args.limit is None else min(10000, args.limit)
    x_test, y_test = load_split(args.data, "t10k", limit=test_limit)

    torch.manual_seed(args.seed)  # same initial weights on every device
    model = ddp.wrap(build_model(args.model, args.dropout).to(device))
    opt = build_optimizer(args.optimizer, model.parameters(), args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    sampler = ddp.sampler(len(x_train), args.seed)

    losses, samples, seconds, accuracy = [], 0, 0.0, 0.0
    for epoch in range(1, args.epochs + 1):
        steps_left = None if args.max_steps is None else args.max_steps - len(losses)
        if steps_left is not None and steps_left <= 0:
            break
        order = ddp.epoch_order(len(x_train), epoch, generator, sampler)
        epoch_losses, n, secs = train_epoch(
            model, opt, order, x_train, y_train, args, device, sync,
            steps_left, desc=f"epoch {epoch}/{args.epochs}",
        )
        n *= world  # samples of all ranks
        losses += epoch_losses
        samples, seconds = samples + n, seconds + secs
        accuracy = evaluate(model, x_test, y_test, device)
        mean_loss = sum(epoch_losses) / max(len(epoch_losses), 1)
        ddp.print_once(f"epoch {epoch}: train loss {mean_loss:.4f}  test acc {accuracy:.2%}  "
                       f"{n / secs:.0f} samples/s ({len(epoch_losses)} steps, {secs:.1f}s)")

    if args.log_losses and ddp.is_main():  # the mean over ranks: the same on every rank
        Path(args.log_losses).write_text(json.dumps(losses))
    if args.device == "disc":
        import torch_disc

        ddp.print_once(torch_disc.metrics.report())
    ddp.finish()
    return {
        "test_accuracy": accuracy,
        "losses": losses,
        "samples_per_s": samples / seconds if seconds else 0.0,
    }


if __name__ == "__main__":
    try:
        main()
    except DatasetError as e:  # one line naming the file, not a traceback
        sys.exit(f"error: {e}")
