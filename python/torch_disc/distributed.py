"""torch.distributed on disc: the ``"disc"`` c10d backend.

Importing torch_disc registers it; a process group made with it serves disc
tensors and CPU tensors alike::

    dist.init_process_group("disc")          # or "cpu:gloo,disc:disc"
    model = DistributedDataParallel(model.to("disc"))

A collective on disc tensors (``all_reduce``, ``broadcast``, ``all_gather``,
``all_gather_into_tensor``, ``reduce_scatter``, ``reduce_scatter_tensor``,
their coalesced forms and async work objects) is recorded into the pending
graph, like any op, and runs when the graph runs: DDP's gradient buckets are
all-reduced inside the optimizer step's graph, on the graph worker, with no
sync of their own. The transport is Gloo over TCP (GLOO_SOCKET_IFNAME picks
the interface). ``barrier`` runs the pending graphs first. Before each
collective the ranks compare what they are about to run (``DISC_DIST_CHECK``),
so a rank that took another branch fails every rank with an error naming
both collectives instead of hanging; a rank that dies fails the others'
collectives (their graph raises at the next read), at the latest after the
process group's timeout.
"""
from datetime import timedelta

import torch

from . import _C

BACKEND = "disc"


def _create_backend(store, rank: int, size: int, timeout: timedelta):
    """The creator ``Backend.register_backend`` calls for each new group."""
    from torch.distributed import PrefixStore, ProcessGroupGloo

    transport = ProcessGroupGloo(PrefixStore("transport/", store), rank, size, timeout=timeout)
    return _C.dist_backend(transport, rank, size)


def register() -> bool:
    """Registers the ``"disc"`` backend for cpu and disc tensors (done at
    import); False where torch has no distributed support or no Gloo."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        return False
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_backend, devices=["cpu", "disc"])
    return True


def initialized() -> bool:
    """Whether this process is in a default process group (recorded
    collectives may wait for a sync)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
