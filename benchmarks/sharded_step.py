"""DDP vs FSDP2 on disc: per-rank peak memory and step time of a GPT-2-shaped
model at 1, 2 and 4 processes.

The model is transformers' GPT2LMHeadModel from a GPT2Config (random
weights, nothing downloaded; ``--layers``, ``--width``, ``--vocab``), trained
with AdamW on random token ids, ``--batch-size`` sequences of ``--seq-len``
per process, one intra-op thread each, over the ``"disc"`` c10d backend on
127.0.0.1. DDP keeps the whole model, its gradients and AdamW's two moments
on every rank; FSDP2 (``fully_shard`` on each block and the root) keeps
1/N of each and all-gathers a block's parameters just before it runs.

Reported per mode and process count, from the allocator's statistics
(``torch.get_device_module("disc")``), the largest over the ranks:
parameter bytes a rank holds, its memory allocated after the optimizer's
state exists (``memory_allocated``: parameters, gradients, moments), and
the peak over the timed steps (``max_memory_allocated``: that plus the
activations and, for FSDP2, the all-gathered blocks); and the slowest
rank's mean step time (``loss.item()`` each step). On a machine with fewer
cores than processes the step times share cores; the memory figures do not
depend on it.

Run from the repository root: ``python -m benchmarks.sharded_step``.
"""
import argparse
import json
import os
import time

MIB = 1 << 20


def build_model(args):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()  # a config of our own: no notes on its token ids
    torch.manual_seed(0)
    config = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=args.width // 64,
                        vocab_size=args.vocab, n_positions=args.seq_len, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def worker(rank, world, port, mode, args, out):
    """One process: build, wrap, train; write its figures to ``out``."""
    import torch
    import torch.distributed as dist

    import torch_disc  # the disc device and c10d backend

    torch.set_num_threads(1)
    memory = torch.get_device_module("disc")
    model = build_model(args).to("disc")
    if world > 1:
        dist.init_process_group("disc", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import fully_shard

            for block in model.transformer.h:
                fully_shard(block)
            fully_shard(model)
    from torch.distributed.tensor import DTensor

    params = sum((p.to_local() if isinstance(p, DTensor) else p).numel() * p.element_size()
                 for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    ids = torch.randint(0, args.vocab, (args.batch_size, args.seq_len), generator=g).to("disc")

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(args.warmup):  # compiles; creates AdamW's state
        step()
    torch_disc.wait()
    resident = memory.memory_allocated()
    memory.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    # The loss arrives before the rest of its graph (the update, DDP's
    # all-reduces): wait for all of it, for the time.
    torch_disc.wait()
    seconds = (time.perf_counter() - start) / args.steps
    with open(out, "w") as f:
        json.dump({"params": params, "resident": resident, "peak": memory.max_memory_allocated(),
                   "step_s": seconds}, f)
    if world > 1:
        dist.destroy_process_group()


def measure(mode, world, args):
    """The figures of ``world`` processes in ``mode``: the largest over the
    ranks, or None if a rank failed."""
    from benchmarks import cli

    options = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
               ("layers", "width", "vocab", "seq_len", "batch_size", "steps", "warmup")]
    ranks = cli.run_ranks("benchmarks.sharded_step", world, mode, options, timeout=args.timeout)
    if ranks is None:
        return None
    return {key: max(r[key] for r in ranks) for key in ranks[0]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", default="2,4", help="process counts, beside 1")
    p.add_argument("--modes", default="ddp,fsdp")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256, help="a multiple of 64 (64-wide heads)")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=4, help="per process")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    p.add_argument("--out", default=None, help="also write the rows as JSON")
    p.add_argument("--worker", nargs=5, metavar=("RANK", "WORLD", "PORT", "MODE", "OUT"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        rank, world, port, mode, out = args.worker
        worker(int(rank), int(world), int(port), mode, args, out)
        return None
    from benchmarks import cli

    n_params = sum(t.numel() for t in build_model(args).parameters())
    print(cli.isa_line())
    print(f"GPT-2-shaped: {args.layers} layers, width {args.width}, vocab {args.vocab}, "
          f"{n_params / 1e6:.1f} M parameters; AdamW; batch {args.batch_size} x {args.seq_len} "
          f"tokens per process; {args.steps} steps after {args.warmup}; one intra-op thread "
          f"per process, {os.cpu_count()} CPUs\n")
    print("| mode | processes | params MiB/rank | between steps MiB/rank | peak MiB/rank | step ms |")
    print("|---|---:|---:|---:|---:|---:|")
    runs = [("one process", 1)] + [(mode, int(n)) for n in args.processes.split(",")
                                   for mode in args.modes.split(",")]
    rows = []
    for mode, world in runs:
        r = measure("ddp" if world == 1 else mode, world, args)
        rows.append({"mode": mode, "processes": world, **(r or {"failed": True})})
        if r is None:
            print(f"| {mode} | {world} | failed | | | |", flush=True)
            continue
        print(f"| {mode} | {world} | {r['params'] / MIB:.1f} | {r['resident'] / MIB:.1f} | "
              f"{r['peak'] / MIB:.1f} | {r['step_s'] * 1e3:.0f} |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cpu": cli.isa_line(), "args": vars(args), "rows": rows}, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
