"""``torch.compile(model, backend="disc")``: Dynamo's graph, through
AOTAutograd, runs on disc's compiler. Found through the
``torch_dynamo_backends`` entry point, without an import of torch_disc.

On CPU tensors each ATen graph AOTAutograd makes (the inference graph, or
the forward and the backward of a training step) is a
:class:`torch_disc.frontend.compiled.CompiledGraph`: traced on disc once, then run at
every call with no tracing, one compile per structure across batch sizes and
sequence lengths (``dynamic=True``, ``mark_dynamic`` or Dynamo's automatic
dynamic shapes)::

    >>> model = torch.compile(model, backend="disc")
    >>> model(torch.randn(8, 20))            # CPU in, CPU out, disc inside

On disc tensors the captured graph's ops join the lazy trace of the step
around them, as the same code run eagerly would.

:func:`torch_disc.compile` adds ``freeze=True``: parameters and buffers
become constants of the graph (see :mod:`torch_disc.frontend.freeze`).
"""
import functools
import warnings
from typing import Callable, Collection, List, Optional

import torch

DEVICE = "disc"


def _on_disc(example_inputs) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == DEVICE for t in example_inputs)


def _compiler(frozen_ids: Collection[int]):
    """AOTAutograd's compiler for each ATen graph: inputs that are frozen
    tensors (by identity: AOTAutograd passes the module's own parameters)
    become constants, found at the first call."""
    from .compiled import CompiledGraph
    from .freeze import FrozenGraph

    def compile_graph(gm: torch.fx.GraphModule, example_inputs) -> Callable:
        if not frozen_ids:
            return CompiledGraph(gm)
        return FrozenGraph(gm, frozen_ids)

    return compile_graph


def backend(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor],
            frozen_ids: Optional[Collection[int]] = None) -> Callable:
    """The Dynamo backend. ``frozen_ids``: ids of the tensors to freeze."""
    import torch_disc  # noqa: F401 - registers the device when Dynamo loads us first
    from torch._dynamo.backends.common import aot_autograd

    if _on_disc(example_inputs):
        return gm.forward  # disc tensors in: the graph traces as eager code would
    compiler = _compiler(frozen_ids or ())
    from torch._dynamo.exc import RestartAnalysis
    try:
        return aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                            keep_inference_input_mutations=False)(gm, example_inputs)
    except RestartAnalysis:
        raise  # Dynamo's own control flow: it analyses the frame again
    except Exception as e:  # noqa: BLE001 - the graph still runs, as it is
        # AOTAutograd could not trace it: the captured graph runs eagerly,
        # said and counted; compiling never breaks a program that runs.
        warnings.warn(f"disc: AOTAutograd failed on a captured graph, which runs eagerly: "
                      f"{type(e).__name__}: {e}")
        torch_disc._C.bump("compiled.aot_failures")
        return gm.forward


def disc(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    """``backend="disc"`` (the entry point's name)."""
    return backend(gm, example_inputs)


def compile(model: torch.nn.Module, *, freeze: bool = False, dynamic: Optional[bool] = None,
            **kwargs) -> torch.nn.Module:
    """``torch.compile(model, backend="disc")``; ``freeze=True`` makes the
    model's parameters and buffers constants of the compiled graphs (for
    inference: later changes to them are not seen), so that what depends
    only on them is computed once (BatchNorm folded into the convolution
    before it, transposed weights) and weights are packed once."""
    frozen = {id(t) for t in [*model.parameters(), *model.buffers()]} if freeze else None
    fn = functools.partial(backend, frozen_ids=frozen) if freeze else disc
    return torch.compile(model, backend=fn, dynamic=dynamic, **kwargs)
