"""``torch.compile(model, backend="disc")``: the graph Dynamo captured runs
on the disc device, so its ops are traced into disc graphs, compiled once per
structure and cached across batch sizes and sequence lengths like any lazy
graph. Found through the ``torch_dynamo_backends`` entry point, without an
import of torch_disc.

Inputs on another device (plain CPU tensors) go to disc for the call and
the outputs come back to that device, differentiably, so training through
the compiled module works as well as inference::

    >>> model = torch.compile(model, backend="disc")
    >>> model(torch.randn(8, 20))            # CPU in, CPU out, disc inside

Each call still traces the graph's ops (microseconds per op); the
compile-once front end of issue 21 replaces that path.
"""
from typing import Callable, List

import torch
from torch.utils import _pytree as pytree

DEVICE = "disc"


def _to(device: torch.device) -> Callable:
    def move(value):
        return value.to(device) if isinstance(value, torch.Tensor) else value
    return move


def disc(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    """The Dynamo backend: runs ``gm`` with its tensor inputs on disc."""
    import torch_disc  # noqa: F401 - registers the device when Dynamo loads us first

    devices = [t.device for t in example_inputs if isinstance(t, torch.Tensor)]
    if not devices or any(d.type == DEVICE for d in devices):
        return gm.forward  # disc tensors in: the graph traces as eager code would
    home = devices[0]
    to_disc, to_home = _to(torch.device(DEVICE)), _to(home)
    gm.to(DEVICE)  # constants the graph holds (get_attr), once

    def run(*args):
        outputs = gm(*pytree.tree_map(to_disc, list(args)))
        return pytree.tree_map(to_home, outputs)

    return run
