"""How the examples split a model over torchrun's processes: ``--fsdp``
(FSDP2, each transformer layer and the root sharded) or ``--tp`` (tensor
parallel: every transformer layer's attention and MLP split across the
processes), beside examples.distributed's DistributedDataParallel.

    world = distributed.init("disc")
    model = sharding.parallelize(model.to("disc"), "fsdp")   # or "tp", "ddp"
    shards = distributed.sampler(n, seed) if sharding.splits_data("fsdp") else None
    ...
    with sharding.mixed_parameters():                        # --tp's plain + DTensor
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

Both run through PyTorch's own engine on a disc mesh (``init_device_mesh``):
the all-gathers, reduce-scatters and all-reduces are recorded in the step's
graph. Out of torchrun (one process) every mode leaves the model as it is.
"""
import contextlib

import torch.distributed as dist
from torch import nn

from examples import distributed

MODES = ("ddp", "fsdp", "tp")


def splits_data(mode: str) -> bool:
    """Whether the processes train on different samples: DDP and FSDP2 do
    (each its shard of the batch); tensor parallel ranks share each batch."""
    return mode != "tp"


def layers(model: nn.Module) -> list:
    """The model's transformer layers: the modules of its ModuleList of
    blocks (BertLayer, GPT2Block, ...)."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) and all(
                type(m) is type(module[0]) for m in module):
            return list(module)
    raise ValueError(f"{type(model).__name__}: no list of transformer layers found")


def tp_plan(layer: nn.Module) -> dict:
    """One BERT layer's tensor-parallel plan: q, k, v and the MLP's first
    Linear split by output columns (each process: its heads, its slice of
    the MLP), the attention's output and the MLP's second Linear by input
    rows, whose partial sums are all-reduced. Needs attention that sizes its
    heads from q's width (transformers' BERT does)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    names = dict(layer.named_modules())
    plan = {"attention.self.query": ColwiseParallel(), "attention.self.key": ColwiseParallel(),
            "attention.self.value": ColwiseParallel(),
            "attention.output.dense": RowwiseParallel(),
            "intermediate.dense": ColwiseParallel(), "output.dense": RowwiseParallel()}
    missing = [name for name in plan if not isinstance(names.get(name), nn.Linear)]
    if missing:
        raise ValueError(f"{type(layer).__name__}: --tp knows BERT's layers; no Linear "
                         f"{', '.join(missing)} here")
    return plan


def parallelize(model: nn.Module, mode: str) -> nn.Module:
    """``model`` (already on its device) made ready for torchrun's
    processes: wrapped in DDP, or sharded in place by FSDP2 or tensor
    parallelism; the module to train (and to evaluate)."""
    if not distributed.active():
        return model
    if mode == "ddp":
        return distributed.wrap(model)
    from torch.distributed.device_mesh import init_device_mesh

    device = next(model.parameters()).device.type
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in layers(model):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    if mode == "tp":
        from torch.distributed.tensor.parallel import parallelize_module

        heads = getattr(model.config, "num_attention_heads", 0)
        if heads % mesh.size():
            raise ValueError(f"--tp: {heads} attention heads do not split over "
                             f"{mesh.size()} processes")
        for layer in layers(model):
            parallelize_module(layer, mesh, tp_plan(layer))
        return model
    raise ValueError(f"unknown mode {mode!r}: one of {', '.join(MODES)}")


def mixed_parameters():
    """A context for the gradient clipping and the optimizer step: tensor
    parallelism leaves the parameters outside its plan (embeddings,
    LayerNorms, the head) plain tensors beside its DTensors, and the foreach
    kernels of clip_grad_norm_ and AdamW take one list of both. DTensor's
    implicit_replication treats the plain ones as replicated, which they
    are. No effect where no DTensor meets a plain tensor."""
    if not distributed.active():
        return contextlib.nullcontext()
    from torch.distributed.tensor.experimental import implicit_replication

    return implicit_replication()


def full_state_dict(model: nn.Module) -> dict:
    """The whole model's state on the CPU on rank 0 (an empty dict on the
    others), gathered from FSDP2's or tensor parallelism's shards; every
    process must call it. The plain state dict otherwise."""
    from torch.distributed.tensor import DTensor

    if not any(isinstance(p, DTensor) for p in model.parameters()):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))
    # The other ranks drop their gathered copies unread: on disc their
    # all-gathers are recorded, not run, until a barrier (or a read) runs
    # them; leaving without would strand rank 0 in its all-gathers.
    dist.barrier()
    return state
