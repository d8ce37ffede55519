"""torch_disc: a lazy-tensor training backend for PyTorch, device ``"disc"``.

Importing the package registers the device::

    >>> import torch, torch_disc
    >>> x = torch.ones(3, device="disc") * 2   # traced, not run
    >>> x.cpu()                                # a sync point: the graph runs
    tensor([2., 2., 2.])

Ops on disc tensors are recorded into a graph that runs at sync points:
``.cpu()``, ``.item()``, ``.tolist()``, printing, :func:`sync`, and the end of
every ``optimizer.step()``.
"""
import torch

# The extension registers kernels, allocator and hooks when it loads; the
# name must be set first so that errors and reprs say "disc".
torch.utils.rename_privateuse1_backend("disc")
from . import _C  # noqa: E402
from . import device_module as _device_module  # noqa: E402
from . import metrics  # noqa: E402
from ._optimizer_hook import install as _install_optimizer_hook  # noqa: E402
from ._printing import install as _install_printing  # noqa: E402

torch._register_device_module("disc", _device_module)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)
_install_optimizer_hook()
_install_printing()

__all__ = ["sync", "mark_step", "metrics", "graph_text"]


def sync(cause: str = "user") -> None:
    """Runs the pending graph of every live disc tensor.

    >>> y = torch.ones(2, device="disc") + 1
    >>> torch_disc.sync()          # y is now computed; y.cpu() runs nothing
    """
    _C.sync(cause)


mark_step = sync


def graph_text(*tensors: torch.Tensor) -> str:
    """The IR of the pending graph that computes ``tensors`` (for debugging)."""
    return _C.graph_text(list(tensors))
