"""torchrun support shared by the examples: the process group, the
DistributedDataParallel wrapper, each rank's shard of an epoch, and output
from rank 0 only. Without torchrun (WORLD_SIZE unset or 1) every function is
a no-op, so the examples run unchanged in one process."""
import os

import torch
import torch.distributed as dist


def launched() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(device_name: str) -> int:
    """Joins torchrun's process group; returns the number of processes.
    disc tensors use the "disc" backend (collectives inside the step's
    graph), CPU ones Gloo."""
    if not launched():
        return 1
    if device_name == "disc":
        import torch_disc  # noqa: F401 - registers the "disc" backend
    dist.init_process_group("disc" if device_name == "disc" else "gloo")
    return dist.get_world_size()


def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def is_main() -> bool:
    return not active() or dist.get_rank() == 0


def wrap(model):
    """The model in DistributedDataParallel when launched by torchrun."""
    if not active():
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model)


def sampler(n: int, seed: int):
    """This rank's shard of each epoch's shuffle of ``n`` samples (the same
    shuffle on every rank), or None in one process."""
    if not active():
        return None
    from torch.utils.data import DistributedSampler

    return DistributedSampler(range(n), shuffle=True, seed=seed, drop_last=True)


def epoch_order(n: int, epoch: int, generator: torch.Generator, shards) -> torch.Tensor:
    """This process's sample order for one epoch: a shuffle of all ``n`` by
    ``generator`` in one process, or this rank's shard of the epoch's
    shuffle (``shards``: what sampler() returned)."""
    if shards is None:
        return torch.randperm(n, generator=generator)
    shards.set_epoch(epoch)
    return torch.tensor(list(shards), dtype=torch.long)


def mean_over_ranks(t: torch.Tensor) -> torch.Tensor:
    """The mean of ``t`` over all ranks (a loss to log); ``t`` in one process.
    On disc the all-reduce is recorded into the step's graph: no sync."""
    if not active():
        return t
    t = t.clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()


def print_once(*args, **kwargs) -> None:
    if is_main():
        print(*args, **kwargs)


def finish() -> None:
    if active():
        dist.destroy_process_group()
