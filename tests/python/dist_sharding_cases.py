"""What each rank runs in test_distributed_sharding.py: FSDP2 with mixed
precision, sequence parallelism, distributed checkpoints of tensor-parallel
models, and ranks that disagree on how to shard. Started by
:func:`tests.python.dist_cases.launch` with ``module=MODULE``; the process
group and the result file are dist_cases.main's.
"""
import sys

from tests.python import dist_cases
from tests.python.dist_models import batches, build_model, shard

MODULE = "tests.python.dist_sharding_cases"


class _Recorder:
    """The dtypes FSDP2 hands its collectives, by collective: wraps
    torch.distributed's functions, which FSDP2 looks up at each call."""

    def __init__(self, names=("all_gather_into_tensor", "reduce_scatter_tensor")):
        import torch.distributed as dist

        self.seen = {name: set() for name in names}
        for name in names:
            setattr(dist, name, self._wrap(name, getattr(dist, name)))

    def _wrap(self, name, fn):
        def recorded(output, input, *args, **kwargs):
            self.seen[name].add(str(input.dtype))
            return fn(output, input, *args, **kwargs)
        return recorded

    def dtypes(self):
        return {name: sorted(d) for name, d in self.seen.items()}


def _fsdp2_mixed_precision(rank, world, args):
    """FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32) on
    ``args["device"]`` (disc, or CPU under plain Gloo): per-step global mean
    losses (f32 cross-entropy of the bf16 logits); the dtypes each Linear
    computed in (weight, input, output), the dtypes FSDP2 all-gathered and
    reduce-scattered in, and the sharded parameters' and gradients' dtypes
    after every step."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from tests.python.dist_cases import _counters
    from tests.python.dist_models import optimizer

    device, steps, per_rank = args["device"], args["steps"], args["per_rank"]
    data = [(shard(x, rank, world), shard(y, rank, world))
            for x, y in batches("mlp", steps, per_rank * world)]
    mesh = init_device_mesh(device, (world,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = build_model("mlp", seed=0).body.to(device)
    computed = set()
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_hook(lambda m, i, o: computed.add(
                (str(m.weight.dtype), str(i[0].dtype), str(o.dtype))))
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    recorder = _Recorder()
    opt = optimizer("mlp", model.parameters())
    kept, losses = set(), []
    before = _counters(device)
    for x, y in data:
        loss = F.cross_entropy(model(x.to(device)).float(), y.to(device))
        loss.backward()
        kept.update(f"grad {p.grad.to_local().dtype}" for p in model.parameters())
        opt.step()
        opt.zero_grad(set_to_none=True)
        kept.update(f"param {p.dtype} {p.to_local().dtype}" for p in model.parameters())
        losses.append(loss.detach())
    after = _counters(device)
    total = []
    for loss in losses:
        dist.all_reduce(loss)
        total.append(loss.item() / world)
    result = {"losses": total, "computed": sorted(map(list, computed)),
              "collectives": recorder.dtypes(), "kept": sorted(kept)}
    if device == "disc":
        result["fallbacks"] = after["fallbacks"] - before["fallbacks"]
        result["syncs"] = {k: v - before.get(k, 0) for k, v in after.items()
                           if k.startswith("sync.") and v > before.get(k, 0)}
    return result


def sequence_parallel_plan():
    """sp_model's tensor-parallel plan: q, k, v and the MLP's first Linear
    split by columns, the attention's output and the MLP's second by rows;
    the residual stream between them split along the sequence (dim 1). The
    LayerNorms run on their rank's positions (SequenceParallel); each
    block's input is all-gathered, its row split's partial sums
    reduce-scattered back onto the sequence split."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)

    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {"inp": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "block.norm1": SequenceParallel(), "block.attn": gather,
            "block.attn.q": ColwiseParallel(), "block.attn.k": ColwiseParallel(),
            "block.attn.v": ColwiseParallel(),
            "block.attn.o": RowwiseParallel(output_layouts=Shard(1)),
            "block.norm2": SequenceParallel(), "block.mlp": gather,
            "block.mlp.0": ColwiseParallel(), "block.mlp.2": RowwiseParallel(output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}


def _sp_train(rank, world, args):
    """sp_model under sequence_parallel_plan on a disc mesh, AdamW on the
    same batches on every rank: per-step losses, the parameter elements this
    rank holds, the local shapes the LayerNorms saw, and the syncs and
    fallbacks of the steps."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    from tests.python.dist_cases import _counters
    from tests.python.dist_models import sp_losses, sp_model

    mesh = init_device_mesh("disc", (world,))
    model = parallelize_module(sp_model().to("disc"), mesh, sequence_parallel_plan())
    normed = set()  # the shapes of the positions each LayerNorm ran on here
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.register_forward_hook(lambda m, i, o: normed.add(tuple(
                i[0].to_local().shape if isinstance(i[0], DTensor) else i[0].shape)))
    before = _counters("disc")
    losses = sp_losses(model, "disc", args["steps"])
    after = _counters("disc")
    return {"losses": losses, "local_params": sum(p.to_local().numel() for p in model.parameters()),
            "params": sum(p.numel() for p in model.parameters()), "normed": sorted(normed),
            "fallbacks": after["fallbacks"] - before["fallbacks"],
            "syncs": {k: v - before.get(k, 0) for k, v in after.items()
                      if k.startswith("sync.") and v > before.get(k, 0)}}


def _tp_checkpoint(rank, world, args):
    """sp_model under sequence_parallel_plan on a disc mesh with AdamW, saved
    by torch.distributed.checkpoint after ``stop`` steps, loaded into a
    fresh parallelized model and optimizer, trained on: the per-step losses
    of that run and of one never stopped; and whether the full state dict,
    gathered to the CPU, loads into an unsharded model that then computes
    what the parallel one does."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_state_dict, set_state_dict)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    from tests.python.dist_models import mse_losses, sp_batches, sp_model

    mesh = init_device_mesh("disc", (world,))
    steps, stop = args["steps"], args["stop"]
    data = sp_batches(steps)

    def parallel(seed):
        model = sp_model()
        if seed:  # another start, for the checkpoint to overwrite
            for p in model.parameters():
                torch.nn.init.normal_(p, generator=torch.Generator().manual_seed(seed))
        model = parallelize_module(model.to("disc"), mesh, sequence_parallel_plan())
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    straight = mse_losses(*parallel(0), data, "disc")
    model, opt = parallel(0)
    first = mse_losses(model, opt, data[:stop], "disc")
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=args["path"])
    model, opt = parallel(5)
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=args["path"])
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    resumed = first + mse_losses(model, opt, data[stop:], "disc")
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))
    x, y = data[0]
    parallel_out = model(x.to("disc")).cpu()  # every rank: its collectives
    result = {"straight": straight, "resumed": resumed}
    if rank != 0:  # the full state dict goes to rank 0 alone
        return dict(result, full_on_cpu=True, full_loads=not full)
    plain = sp_model()
    plain.load_state_dict(full)
    same = torch.allclose(plain(x), parallel_out, rtol=1e-5, atol=1e-6)
    return dict(result, full_on_cpu=all(t.device.type == "cpu" for t in full.values()),
                full_loads=same)


def _sharding_disagrees(rank, world, args):
    """Rank 0 shards tp_model one way, the others another (``args["fault"]``
    names how); each trains two steps, logging the mean loss. Returns the
    error this rank got (None, and the losses, if it got none) and how long
    it took."""
    import time

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    from tests.python.dist_models import tp_model

    fault, first = args["fault"], rank == 0
    start = time.monotonic()
    try:
        model = tp_model().to("disc")
        if fault == "tp_vs_none":  # rank 0 splits the Linears, the others do not
            if first:
                parallelize_module(model, init_device_mesh("disc", (world,)),
                                   {"0": ColwiseParallel(), "2": RowwiseParallel()})
        elif fault == "colwise_vs_rowwise":  # the same layers, split the other way
            plan = ({"0": ColwiseParallel(), "2": RowwiseParallel()} if first else
                    {"0": RowwiseParallel(), "2": ColwiseParallel()})
            parallelize_module(model, init_device_mesh("disc", (world,)), plan)
        elif fault == "fsdp_units":  # per layer and at the root, or at the root alone
            if first:
                for layer in (model[0], model[2]):
                    fully_shard(layer)
            fully_shard(model)
        elif fault == "fsdp_mesh_size":  # over all ranks, or over each rank alone
            mesh = (init_device_mesh("disc", (world,)) if first else
                    init_device_mesh("disc", (world, 1), mesh_dim_names=("dp", "shard"))["shard"])
            fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g, losses = torch.Generator().manual_seed(1), []
        for _ in range(2):
            x, y = torch.randn(16, 24, generator=g), torch.randn(16, 10, generator=g)
            loss = torch.nn.functional.mse_loss(model(x.to("disc")), y.to("disc"))
            opt.zero_grad()
            loss.backward()
            opt.step()
            dist.all_reduce(loss)
            losses.append(loss.item() / world)
    except Exception as e:  # noqa: BLE001 - what the test inspects
        return {"error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - start}
    return {"error": None, "seconds": time.monotonic() - start, "losses": losses}


CASES = {"fsdp2_mixed_precision": _fsdp2_mixed_precision, "sp_train": _sp_train,
         "tp_checkpoint": _tp_checkpoint, "sharding_disagrees": _sharding_disagrees}
FAILING = ("sharding_disagrees",)


if __name__ == "__main__":
    dist_cases.main(sys.argv[1:], CASES, FAILING)
