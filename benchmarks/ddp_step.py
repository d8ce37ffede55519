"""Data-parallel MNIST MLP training: samples/s of 1 vs N processes, disc and
CPU eager, in one run.

Each process trains the example MLP (examples/mnist/train.py's) with SGD on
fixed random batches of ``--batch-size`` per process, wrapped in
DistributedDataParallel when there are several (the ``"disc"`` backend for
disc, Gloo for CPU; over 127.0.0.1), one intra-op thread each, so N
processes use N cores for their kernels. Every step ends with the loss on
the host (``loss.item()``). Reported: samples per second over all processes
(the slowest rank's time for ``--steps`` steps after ``--warmup``), and the
scaling from one process. disc runs its graphs on the graph worker, a thread
more per process; ``disc-sync`` runs them on the syncing thread
(``DISC_ASYNC=0``): the figure at equal threads.

Run from the repository root: ``python -m benchmarks.ddp_step``.
"""
import argparse
import json
import time

from benchmarks import cli

BACKENDS = {"cpu": ("cpu", {}), "disc": ("disc", {"DISC_ASYNC": "1"}),
            "disc-sync": ("disc", {"DISC_ASYNC": "0"})}


def worker(rank, world, port, device, args, out):
    """One process: train, time, write {"seconds": ...} to ``out``."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    if device == "disc":
        import torch_disc  # noqa: F401
    from examples.mnist.train import build_model

    torch.manual_seed(0)
    model = build_model("mlp").to(device)
    if world > 1:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("disc" if device == "disc" else "gloo",
                                init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        model = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch_size, 1, 28, 28, generator=g).to(device)
    y = torch.randint(0, 10, (args.batch_size,), generator=g).to(device)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - start
    with open(out, "w") as f:
        json.dump({"seconds": seconds}, f)
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()


def measure(backend, world, args):
    """Samples/s of ``world`` processes on ``backend``."""
    device, env = BACKENDS[backend]
    ranks = cli.run_ranks("benchmarks.ddp_step", world, device,
                          ["--steps", str(args.steps), "--warmup", str(args.warmup),
                           "--batch-size", str(args.batch_size)], timeout=600, env=env)
    if ranks is None:
        return None
    return world * args.batch_size * args.steps / max(r["seconds"] for r in ranks)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=2, help="N (compared with 1)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--backends", default="cpu,disc,disc-sync")
    p.add_argument("--worker", nargs=5, metavar=("RANK", "WORLD", "PORT", "DEVICE", "OUT"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        rank, world, port, device, out = args.worker
        worker(int(rank), int(world), int(port), device, args, out)
        return
    print(f"MNIST MLP, batch {args.batch_size} per process, {args.steps} steps after "
          f"{args.warmup}, one intra-op thread per process\n")
    print(f"| backend | samples/s, 1 process | {args.processes} processes | scaling |")
    print("|---|---:|---:|---:|")
    for backend in args.backends.split(","):
        one = measure(backend, 1, args)
        many = measure(backend, args.processes, args)
        scaling = f"{many / one:.2f}x" if one and many else "n/a"
        fmt = lambda v: f"{v:,.0f}" if v else "failed"  # noqa: E731
        print(f"| {backend} | {fmt(one)} | {fmt(many)} | {scaling} |", flush=True)


if __name__ == "__main__":
    main()
