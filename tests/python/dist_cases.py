"""What each rank runs in test_distributed.py: one process per rank, started by
:func:`launch` as ``python -m tests.python.dist_cases CASE RANK WORLD PORT OUT
ARGS_JSON``; each writes its result (or its error) to OUT as JSON.

The process group is ``"disc"`` over Gloo on 127.0.0.1, one thread per rank
(``args["backend"]`` names another, e.g. plain ``"gloo"`` for a CPU run).
"""
import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

from tests.python.dist_models import (batches, build_model, loss_of, optimizer, shard, tp_losses,
                                      tp_model, train)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(case, world, args=None, timeout=240, env=None, module="tests.python.dist_cases"):
    """Runs ``case`` of ``module`` (this one, or another with a ``CASES``
    table whose main is this one's) on ``world`` ranks; returns
    ``[(status, result)]`` by rank: status "ok" (result: the case's return
    value), "error" (its message), or "killed" (no result within
    ``timeout`` seconds, or the process died)."""
    import tempfile

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"rank{r}.json") for r in range(world)]
        child_env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
                     **(env or {})}
        procs = [subprocess.Popen(
            [sys.executable, "-m", module, case, str(r), str(world), str(port),
             outs[r], json.dumps(args or {})],
            cwd=ROOT, env=child_env) for r in range(world)]
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        results = []
        for out in outs:
            if os.path.exists(out):
                with open(out) as f:
                    results.append(tuple(json.load(f)))
            else:
                results.append(("killed", None))
        return results


# ---------------------------------------------------------------- the cases

def _init(rank, world, port, timeout_s=60, backend="disc"):
    import torch
    import torch.distributed as dist
    import torch_disc  # noqa: F401 - registers the "disc" backend

    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=timeout_s))


SIZES = (1, 7, 1000003)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int8", "uint8")


def _values(n, dtype, rank, salt):
    import torch

    x = (torch.arange(n, dtype=torch.int64) * (7 + salt) + 3 * rank + salt) % 23
    return x.to(getattr(torch, dtype))


def _collectives(rank, world, args):
    """Every collective on disc vs the same on CPU through the same group, on
    odd sizes and every supported dtype; returns the mismatches."""
    import torch
    import torch.distributed as dist
    import torch_disc

    R = dist.ReduceOp
    bad = []

    def run(name, fn, dtype, n, salt):
        got = fn("disc", _values(n, dtype, rank, salt).to("disc"))
        want = fn("cpu", _values(n, dtype, rank, salt))
        for g, w in zip(got, want):
            g = g.cpu()
            if g.dtype != w.dtype or g.shape != w.shape or not torch.equal(g, w):
                bad.append(f"{name} {dtype} n={n}: {g.flatten()[:5].tolist()} != {w.flatten()[:5].tolist()}")

    def all_reduce(op):
        def fn(device, x):
            dist.all_reduce(x, op=op)
            return [x]
        return fn

    def broadcast(device, x):
        dist.broadcast(x, src=world - 1)
        return [x]

    def gather_into(device, x):
        out = torch.empty(world * x.numel(), dtype=x.dtype, device=device)
        dist.all_gather_into_tensor(out, x)
        return [out]

    def gather_list(device, x):
        outs = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(outs, x)
        return outs

    def reduce_scatter(device, x):
        big = torch.cat([x * (k + 1) for k in range(world)])
        out = torch.empty_like(x)
        if device == "cpu":  # Gloo has none: the CPU reference sums and slices
            dist.all_reduce(big)
            return [big[rank * x.numel():(rank + 1) * x.numel()]]
        dist.reduce_scatter_tensor(out, big)
        return [out]

    def scatter(device, x):
        out = torch.empty_like(x)
        dist.scatter(out, [x * (k + 1) for k in range(world)] if rank == 0 else None, src=0)
        return [out]

    def gather(device, x):
        outs = [torch.empty_like(x) for _ in range(world)] if rank == world - 1 else None
        dist.gather(x, outs, dst=world - 1)
        return outs if outs is not None else [x]

    def all_to_all_single(device, x):
        out = torch.empty(world * x.numel(), dtype=x.dtype, device=device)
        dist.all_to_all_single(out, torch.cat([x * (k + 1) for k in range(world)]))
        return [out]

    def send_recv(device, x):
        dist.all_reduce(x)  # recorded first: both ranks run it before the exchange
        if rank == 0:
            dist.send(x * 2, dst=1)
            dist.isend(x * 3, dst=1).wait()
            return [x]
        if rank == 1:
            got, later = torch.empty_like(x), torch.empty_like(x)
            dist.recv(got, src=0)
            dist.irecv(later, src=0).wait()
            return [got, later]
        return [x]

    for dtype in DTYPES:
        floating = dtype.startswith(("float", "bfloat"))
        for n in SIZES:
            run("all_reduce sum", all_reduce(R.SUM), dtype, n, 0)
            run("all_reduce max", all_reduce(R.MAX), dtype, n, 1)
            run("broadcast", broadcast, dtype, n, 2)
            run("all_gather_into_tensor", gather_into, dtype, n, 3)
            run("all_gather", gather_list, dtype, n, 4)
            if dtype in ("float32", "int64", "float64"):
                run("reduce_scatter_tensor", reduce_scatter, dtype, n, 5)
                run("scatter", scatter, dtype, n, 10)
                run("gather", gather, dtype, n, 11)
                run("all_to_all_single", all_to_all_single, dtype, n, 12)
                run("send / recv", send_recv, dtype, n, 13)
            if n == 7:  # the other operators, on one size
                run("all_reduce min", all_reduce(R.MIN), dtype, n, 7)
                run("all_reduce product", all_reduce(R.PRODUCT), dtype, n, 8)
                if not floating:
                    for name, op in (("band", R.BAND), ("bor", R.BOR), ("bxor", R.BXOR)):
                        run(f"all_reduce {name}", all_reduce(op), dtype, n, 9)
            if floating and dtype in ("float32", "float64"):
                def avg(device, x):
                    dist.all_reduce(x, op=R.AVG if device == "disc" else R.SUM)
                    return [x if device == "disc" else x / world]
                run("all_reduce avg", avg, dtype, n, 6)
    c = torch_disc.metrics.counters()
    return {"mismatches": bad, "recorded": c.get("dist.recorded", 0),
            "checks": c.get("dist.checks", 0), "fallbacks": c["fallbacks"]}


def _ddp_train(rank, world, args):
    """DDP training on ``args["device"]``: per-step global mean losses, the
    syncs of a step with and without DDP, and a rank-0 checkpoint that every
    rank loads."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    kind, device, steps = args["kind"], args["device"], args["steps"]
    accumulate, per_rank = args.get("accumulate", 1), args.get("per_rank", 4)
    data = [(shard(x, rank, world), shard(y, rank, world))
            for x, y in batches(kind, steps, per_rank * world)]
    # Each rank starts from other weights: DDP must broadcast rank 0's.
    dtype = getattr(torch, args.get("dtype", "float32"))
    model = build_model(kind, seed=rank).to(device, dtype)
    ddp = DDP(model, find_unused_parameters=kind == "mlp",
              bucket_cap_mb=args.get("bucket_cap_mb", 25),
              gradient_as_bucket_view=args.get("bucket_view", False),
              static_graph=args.get("static_graph", False))
    before = _counters(device)
    losses = train(ddp, kind, data, device, accumulate, ddp.no_sync, dtype)
    total = []
    for loss in losses:  # the mean over ranks is the one-process loss
        dist.all_reduce(loss, op=dist.ReduceOp.SUM)
        total.append(loss.item() / world)
    result = {"losses": total}
    if device == "disc":
        result["fallbacks"] = _counters(device)["fallbacks"] - before["fallbacks"]
    if device == "disc" and args.get("pin_syncs", True):
        result["syncs_per_step"] = _syncs_per_step(ddp, kind, data, device)
        result["plain_syncs_per_step"] = _syncs_per_step(build_model(kind, 0).to(device), kind, data,
                                                         device)
    if args.get("checkpoint"):
        result["checkpoint_matches"] = _checkpoint(model, kind, args["checkpoint"], rank, device)
    return result


def _counters(device):
    if device != "disc":
        return {"fallbacks": 0}
    import torch_disc

    return torch_disc.metrics.counters()


def _syncs_per_step(model, kind, data, device, steps=3):
    """Syncs of the last ``steps`` training steps (a loss read each), after
    two to warm up; the same measure with and without DDP."""
    import torch_disc

    opt = optimizer(kind, model.parameters())

    def step(x, y):
        loss = loss_of(model, kind, x, y, device)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for x, y in data[:2]:
        step(x, y)
    before = torch_disc.metrics.syncs()
    for x, y in data[2:2 + steps]:
        step(x, y)
    after = torch_disc.metrics.syncs()
    return {cause: (n - before.get(cause, 0)) / steps for cause, n in after.items()
            if n != before.get(cause, 0)}


def _checkpoint(model, kind, path, rank, device):
    """Rank 0 saves; every rank loads it into a fresh model and compares."""
    import torch
    import torch.distributed as dist

    if rank == 0:
        torch.save(model.state_dict(), path)
    dist.barrier()
    fresh = build_model(kind, seed=123).to(device)
    fresh.load_state_dict(torch.load(path, map_location=device))
    return all(torch.equal(a.cpu(), b.cpu()) for a, b in
               zip(fresh.state_dict().values(), model.state_dict().values()))


def _rank_dies(rank, world, args):
    """The last rank exits before the collective; the others must fail."""
    import torch
    import torch.distributed as dist

    if rank == world - 1:
        os._exit(3)
    t = torch.ones(1000, device="disc")
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        t.cpu()
    except RuntimeError as e:
        return {"error": str(e), "seconds": time.monotonic() - start}
    return {"error": None, "seconds": time.monotonic() - start}


def _mismatch(rank, world, args):
    """Rank 0 all-reduces, the others broadcast (``args["shapes"]``: all
    all-gather 32 elements, rank 0 as [4, 8], the others as [8, 4]): every
    rank must fail."""
    import torch
    import torch.distributed as dist

    t = torch.ones(7, device="disc")
    try:
        if args.get("shapes"):
            t = torch.ones((4, 8) if rank == 0 else (8, 4), device="disc")
            out = torch.empty(world, *t.shape, device="disc")
            dist.all_gather_into_tensor(out, t)
            out.cpu()
        elif rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=0)
        t.cpu()
    except RuntimeError as e:
        return {"error": str(e)}
    return {"error": None}


def _failed_after_a_collective(rank, world, args):
    """Both ranks all-reduce a, then disagree on b = a * 2 (rank 0
    all-reduces it, the others broadcast it): the graph holding both fails.
    The step is undone without running a's all-reduce again: a keeps its
    value from before, b (the step made it) keeps the error."""
    import torch
    import torch.distributed as dist

    import torch_disc

    a = torch.ones(7, device="disc")
    dist.all_reduce(a)
    b = a * 2
    if rank == 0:
        dist.all_reduce(b)
    else:
        dist.broadcast(b, src=0)
    errors = []
    checks = torch_disc.metrics.counters().get("dist.checks", 0)
    for _ in range(2):
        try:
            b.cpu()
            errors.append(None)
        except RuntimeError as e:
            errors.append(str(e))
    return {"errors": errors, "a": a.cpu().tolist(),
            "checks": torch_disc.metrics.counters().get("dist.checks", 0) - checks}


def _leave_with_pending(rank, world, args):
    """Rank 1 all-gathers and drops the result unread; both all-reduce a
    tensor they read only after destroy_process_group, which must run the
    group's recorded collectives first (rank 0 reads its gather)."""
    import torch
    import torch.distributed as dist

    gathered = torch.empty(2 * world, device="disc")
    dist.all_gather_into_tensor(gathered, torch.full((2,), float(rank), device="disc"))
    if rank != 0:
        del gathered
    t = torch.full((3,), float(rank + 1), device="disc")
    dist.all_reduce(t)
    dist.destroy_process_group()
    return {"reduced": t.cpu().tolist(), "gathered": gathered.cpu().tolist() if rank == 0 else None}


def _bad_inputs(rank, world, args):
    """Collectives the disc backend refuses, with the error each gives."""
    import torch
    import torch.distributed as dist

    errors = {}

    def attempt(name, fn):
        try:
            fn()
            errors[name] = None
        except (RuntimeError, ValueError, TypeError) as e:
            errors[name] = str(e)

    attempt("int16", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16, device="disc")))
    attempt("bool", lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool, device="disc")))
    attempt("mixed", lambda: dist.all_gather([torch.ones(3, device="disc"), torch.ones(3)],
                                             torch.ones(3, device="disc")))
    attempt("avg_int", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64, device="disc"),
                                               op=dist.ReduceOp.AVG))
    gloo = dist.new_group(backend="gloo")
    attempt("gloo_group", lambda: dist.all_reduce(torch.ones(3, device="disc"), group=gloo))
    # The group still works after the refusals.
    t = torch.ones(3, device="disc")
    dist.all_reduce(t)
    return {"errors": errors, "after": t.cpu().tolist()}


def _fsdp2_train(rank, world, args):
    """FSDP2 (fully_shard per layer and at the root) on ``args["device"]``:
    per-step global mean losses. FSDP2 frees each unsharded parameter with
    storage.resize_(0) and regrows it for the next all-gather, and orders
    its copies with streams and events through torch.get_device_module.
    Variants: ``reshard`` (reshard_after_forward), ``accumulate`` micro-
    batches a step with gradient sync off for all but the last, and
    ``checkpoint`` (activation checkpointing inside the sharded layers)."""
    import contextlib

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    kind, device, steps, per_rank = args["kind"], args["device"], args["steps"], args["per_rank"]
    reshard, accumulate = args.get("reshard", True), args.get("accumulate", 1)
    data = [(shard(x, rank, world), shard(y, rank, world))
            for x, y in batches(kind, steps, per_rank * world)]
    model = build_model(kind, seed=0).to(device)  # the same start everywhere
    if args.get("checkpoint"):
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            apply_activation_checkpointing)
        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, torch.nn.Linear))
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, reshard_after_forward=reshard)
    fully_shard(model, reshard_after_forward=reshard)

    @contextlib.contextmanager
    def no_sync():
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    before = _counters(device)
    losses = train(model, kind, data, device, accumulate, no_sync if accumulate > 1 else None)
    after = _counters(device)
    total = []
    for loss in losses:
        dist.all_reduce(loss, op=dist.ReduceOp.SUM)
        total.append(loss.item() / world)
    result = {"losses": total, "local_params": sum(p.to_local().numel() for p in model.parameters()),
              "params": sum(p.numel() for p in model.parameters())}
    if device == "disc":
        result["fallbacks"] = after["fallbacks"] - before["fallbacks"]
        result["syncs"] = {k: v - before.get(k, 0) for k, v in after.items()
                           if k.startswith("sync.") and v > before.get(k, 0)}
    return result


def _fsdp2_checkpoint(rank, world, args):
    """FSDP2 on disc saved by torch.distributed.checkpoint after ``stop``
    steps, loaded into a fresh sharded model and optimizer, trained on: the
    per-step losses of that run and of one never stopped; and whether the
    full state dict (gathered to the CPU) loads into an unsharded model that
    then computes what the sharded one does."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_state_dict, set_state_dict)
    from torch.distributed.fsdp import fully_shard

    kind, device, steps, stop, per_rank = "mlp", "disc", args["steps"], args["stop"], 4
    data = [(shard(x, rank, world), shard(y, rank, world))
            for x, y in batches(kind, steps, per_rank * world)]

    def sharded():
        # The MLP without its unused layer: DCP's fresh optimizer state has a
        # momentum buffer for every parameter, and the saved one only for those
        # that got gradients.
        model = build_model(kind, seed=0).body.to(device)
        for layer in model.modules():
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        return model, optimizer(kind, model.parameters())

    def run(model, opt, part):
        losses = []
        for x, y in part:
            loss = loss_of(model, kind, x, y, device)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        return losses

    def global_mean(losses):
        out = []
        for loss in losses:
            dist.all_reduce(loss, op=dist.ReduceOp.SUM)
            out.append(loss.item() / world)
        return out

    straight = global_mean(run(*sharded(), data))
    model, opt = sharded()
    first = run(model, opt, data[:stop])
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=args["path"])
    model, opt = sharded()
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=args["path"])
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    resumed = global_mean(first + run(model, opt, data[stop:]))
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    x, y = data[0]
    sharded_loss = loss_of(model, kind, x, y, device).cpu()  # every rank: it all-gathers
    if rank != 0:  # the full state dict goes to rank 0 alone
        return {"straight": straight, "resumed": resumed, "full_on_cpu": True, "full_loads": not full}
    plain = build_model(kind, seed=3).body
    plain.load_state_dict(full)
    same = torch.allclose(loss_of(plain, kind, x, y, "cpu"), sharded_loss, rtol=1e-5, atol=1e-6)
    return {"straight": straight, "resumed": resumed,
            "full_on_cpu": all(t.device.type == "cpu" for t in full.values()), "full_loads": same}


def _tp_train(rank, world, args):
    """Tensor parallel on a disc (or cpu) mesh: an MLP with its first Linear
    split by columns and its second by rows (parallelize_module), trained
    with SGD on the same batches on every rank. Per-step losses, and the
    parameter elements this rank holds."""
    import torch
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    device = args["device"]
    mesh = init_device_mesh(device, (world,))
    model = tp_model().to(device)
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    before = _counters(device)
    losses = tp_losses(model, opt, device, args["steps"])
    after = _counters(device)
    local = sum(p.to_local().numel() for p in model.parameters())
    result = {"losses": losses, "local_params": local,
              "params": sum(p.numel() for p in model.parameters())}
    if device == "disc":
        result["fallbacks"] = after["fallbacks"] - before["fallbacks"]
    return result


def _fsdp_tp_train(rank, world, args):
    """A 2-D mesh on disc, FSDP2 over "dp" and tensor parallel over "tp": each
    dp group trains on its half of the batch; global mean losses per step."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    mesh = init_device_mesh("disc", (2, world // 2), mesh_dim_names=("dp", "tp"))
    model = tp_model().to("disc")
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dp = mesh.get_local_rank("dp")
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(args["steps"]):
        x, y = torch.randn(16, 24, generator=g), torch.randn(16, 10, generator=g)
        x, y = x[dp * 8:(dp + 1) * 8], y[dp * 8:(dp + 1) * 8]
        loss = torch.nn.functional.mse_loss(model(x.to("disc")), y.to("disc"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)
    return {"losses": losses}


CASES = {"collectives": _collectives, "ddp_train": _ddp_train, "rank_dies": _rank_dies,
         "mismatch": _mismatch, "failed_after_a_collective": _failed_after_a_collective,
         "leave_with_pending": _leave_with_pending,
         "bad_inputs": _bad_inputs, "fsdp2_train": _fsdp2_train,
         "fsdp2_checkpoint": _fsdp2_checkpoint, "tp_train": _tp_train,
         "fsdp_tp_train": _fsdp_tp_train}


def main(argv, cases=None, failing=("rank_dies", "mismatch", "failed_after_a_collective")):
    """One rank: ``argv`` is launch's command line after the module;
    ``cases`` the table to run from (this module's by default); ``failing``
    the cases whose ranks part in a failed collective, which skip the
    process group's teardown (it could wait on a dead peer)."""
    case, rank, world, port, out, args = argv
    rank, world = int(rank), int(world)
    args = json.loads(args)
    try:
        _init(rank, world, int(port), args.get("timeout", 60), args.get("backend", "disc"))
        result = ("ok", (cases or CASES)[case](rank, world, args))
    except Exception as e:  # noqa: BLE001 - reported to the test
        result = ("error", f"{type(e).__name__}: {e}")
    with open(out, "w") as f:
        json.dump(result, f)
    import torch.distributed as dist

    if dist.is_initialized() and case not in failing:
        dist.destroy_process_group()
    # A rank whose peers died may not exit cleanly otherwise (Gloo threads).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
