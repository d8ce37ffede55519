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


CASES = {"fsdp2_mixed_precision": _fsdp2_mixed_precision}


if __name__ == "__main__":
    dist_cases.main(sys.argv[1:], CASES)
