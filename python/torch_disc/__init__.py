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
import atexit
import os
import warnings

import torch

# The extension registers kernels, allocator and hooks when it loads; the
# name must be set first so that errors and reprs say "disc".
torch.utils.rename_privateuse1_backend("disc")

# Native libraries the extension links that no PyPI package provides: the
# wheel declares them here, by the Debian 12 package that installs each.
_DEBIAN_PACKAGES = {"libMLIR.so.15": "libmlir-15", "libLLVM-15.so.1": "libllvm15",
                    "libdnnl.so.2": "libdnnl2"}


def _missing_library(error: ImportError) -> ImportError:
    """The error to raise when the extension does not load: which Debian
    package to install, where a library of ours is missing."""
    for library, package in _DEBIAN_PACKAGES.items():
        if library in str(error):
            return ImportError(f"torch_disc needs {library}: install Debian's {package} "
                               f"(apt-get install {package})")
    return error


try:
    from . import _C
except ImportError as e:
    raise _missing_library(e) from e
from . import device_module as _device_module  # noqa: E402
from .frontend.export import export, load  # noqa: E402
from .frontend.dynamo import compile  # noqa: E402
from . import metrics  # noqa: E402
from . import options  # noqa: E402
from . import distributed as _distributed  # noqa: E402
from .autograd import install as _install_autograd  # noqa: E402
from ._module_conversion import install as _install_module_conversion  # noqa: E402
from ._optimizer_hook import install as _install_optimizer_hook  # noqa: E402
from ._printing import install as _install_printing  # noqa: E402

# A DISC_* variable with a value its option does not take fails here, at
# import, naming the variable, not at the first graph.
options.describe()

torch._register_device_module("disc", _device_module)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)
_install_module_conversion()  # after the generated Module.disc exists
_install_optimizer_hook()
_install_autograd()
_install_printing()
_distributed.register()  # dist.init_process_group("disc")
# torch.autocast("disc") without a dtype: bfloat16, as on the CPU, whose op
# policy disc follows (the setting is the importing thread's, as torch's is).
torch.set_autocast_dtype("disc", torch.bfloat16)
# Hugging Face: accelerate finds disc through torch.accelerator, but
# transformers' TrainingArguments knows its accelerators by name and falls
# back to this variable (else the CPU): without it Trainer would keep the
# model on the CPU while accelerate moves every batch to disc. A value the
# user set wins, and where torch's accelerator is another device (a CUDA
# GPU), nothing is set.
_accelerator = torch.accelerator.current_accelerator()
if _accelerator is not None and _accelerator.type == "disc":
    os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "disc")


def _finish_at_exit() -> None:
    # The last graph may still run when the program ends: let it finish,
    # and say so if it failed where nothing read its results. Collectives
    # recorded but never run are run first: the other ranks wait for them.
    try:
        if _distributed.initialized():
            _C.sync("exit")
        _C.wait()
    except Exception as e:  # noqa: BLE001 - reported, not raised, at exit
        warnings.warn(f"disc: the last graph failed after its results were last read: {e}")


atexit.register(_finish_at_exit)

__all__ = ["compile", "export", "load", "sync", "wait", "set_async", "mark_step", "metrics", "options", "graph_text", "explain",
           "compile_log", "build_components", "target"]


def sync(cause: str = "user", wait: bool = False) -> None:
    """Runs the pending graph of every live disc tensor.

    The graph runs on the graph worker while Python goes on (as an
    accelerator's queue does): each pending tensor's value arrives as soon
    as it is computed, and reading one waits for it. ``wait=True`` returns
    once the whole graph has run and raises its error, if any; otherwise a
    failure is raised by the next read of a tensor it failed to compute or by
    a later sync (the second after this one at the latest). ``DISC_ASYNC=0``
    (or :func:`set_async`) runs graphs on the calling thread instead.

    >>> y = torch.ones(2, device="disc") + 1
    >>> torch_disc.sync()          # y is being computed; y.cpu() runs nothing
    """
    _C.sync(cause)
    if wait:
        _C.wait()


def wait() -> None:
    """Waits until the graph of the last sync has run; raises its error if it
    failed and nothing has raised it yet."""
    _C.wait()


def set_async(on: bool) -> None:
    """Graphs run on the graph worker (``True``, the default unless
    ``DISC_ASYNC=0``) or on the thread that syncs (``False``)."""
    _C.set_async(on)


mark_step = sync


def graph_text(*tensors: torch.Tensor) -> str:
    """The IR of the pending graph that computes ``tensors`` (for debugging)."""
    return _C.graph_text(list(tensors))


def target() -> str:
    """Where disc values live (``DISC_TARGET``): ``"cpu"``, or ``"cuda"`` when
    they are in the GPU's memory and graphs run ATen's CUDA kernels. Raises
    when ``DISC_TARGET=cuda`` and torch sees no GPU."""
    return _C.target()


def build_components() -> dict:
    """The optional back ends this build has: ``cpu_codegen`` (MLIR 15 / LLVM
    kernels; without it graphs run on the reference executor, counted as
    ``executor.no_cpu_codegen``) and ``onednn`` (GEMMs and convolutions;
    without it they run on ATen, counted as ``library.aten_reason.no_onednn``);
    and ``cpu_isa``, the instruction set both use: this CPU's level
    (``"avx2"``, ``"avx512"``, ``"avx512_bf16"``, ``"amx"``...) or the lower one
    ``DISC_CPU_ISA`` caps it to::

        >>> torch_disc.build_components()["cpu_isa"]  # doctest: +SKIP
        'avx2'
    """
    return _C.build_components()


def compile_log() -> list:
    """Every compile since the log was last cleared, oldest first: one dict
    per compile with ``hash``, ``ops``, ``ms``, ``reason`` (why the cache
    missed) and ``location`` (the Python line whose sync compiled it)."""
    return _C.compile_log()


def explain(clear: bool = False) -> str:
    """Why each graph was compiled, one paragraph per compile::

        >>> print(torch_disc.explain())
        2 compiles
        #1 graph 3f2a... (41 ops, 12.3 ms) at train.py:40 (train_step)
           first graph: the cache is empty
        #2 graph 9c1e... (41 ops, 10.8 ms) at train.py:40 (train_step)
           same structure as graph 3f2a..., other sizes: dim 0 of %0 (input 0: ...) is 1, was 32 ...

    ``clear=True`` empties the log afterwards. ``DISC_DEBUG_COMPILE=1``
    prints the same lines as compiles happen.
    """
    log = _C.compile_log()
    lines = [f"{len(log)} compile{'s' if len(log) != 1 else ''}"]
    for k, r in enumerate(log, 1):
        where = r["location"] or "<C++>"
        lines.append(f"#{k} graph {r['hash']:016x} ({r['ops']} ops, {r['ms']:.1f} ms) at {where}")
        lines.append(f"   {r['reason']}")
    if clear:
        _C.clear_compile_log()
    return "\n".join(lines)
