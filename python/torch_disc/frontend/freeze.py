"""Freezing (``torch_disc.compile(model, freeze=True)``): the model's
parameters and buffers become constants of its ATen graphs, and what depends
only on constants is computed once, when the graph is first called:

- a BatchNorm in inference after a convolution is folded into the
  convolution's weight and bias (one op fewer, no normalisation pass);
- every other op on constants alone (a weight's transpose, a cast) is
  evaluated once and becomes a constant itself.

Constants go to disc once; the compiled graph's weights are then the same
buffers at every call, so oneDNN packs each of them once (prepack.h).
"""
import operator
from typing import Collection, Dict, List, Optional, Sequence

import torch

from .. import _C
from .compiled import CompiledGraph

aten = torch.ops.aten


def _set_constant(gm: torch.fx.GraphModule, before: torch.fx.Node, value: torch.Tensor) -> torch.fx.Node:
    name = f"_disc_constant{len([n for n in gm.graph.nodes if n.op == 'get_attr'])}"
    while hasattr(gm, name):
        name += "_"
    gm.register_buffer(name, value.detach().contiguous())
    with gm.graph.inserting_before(before):
        node = gm.graph.get_attr(name)
    node.meta["val"] = value
    return node


def _constant(n, known: Dict[torch.fx.Node, torch.Tensor]) -> Optional[torch.Tensor]:
    return known.get(n) if isinstance(n, torch.fx.Node) else None


def fold_batch_norms(gm: torch.fx.GraphModule, known: Dict[torch.fx.Node, torch.Tensor]) -> int:
    """Rewrites convolution -> BatchNorm (inference) on constant weights and
    statistics as one convolution with the folded weight and bias."""
    folded = 0
    for bn in list(gm.graph.nodes):
        if bn.target is not aten._native_batch_norm_legit_no_training.default:
            continue
        conv, gamma, beta, mean, var, _momentum, eps = bn.args
        if (not isinstance(conv, torch.fx.Node) or conv.target is not aten.convolution.default
                or len(conv.users) != 1 or conv.args[6]):  # transposed: not folded
            continue
        weight, bias = _constant(conv.args[1], known), _constant(conv.args[2], known)
        stats = [_constant(a, known) for a in (mean, var)]
        affine = [_constant(a, known) if a is not None else None for a in (gamma, beta)]
        if weight is None or (conv.args[2] is not None and bias is None) or None in stats:
            continue
        if any(a is not None and c is None for a, c in zip((gamma, beta), affine)):
            continue
        outputs = [u for u in bn.users if u.users]  # (export keeps unused getitems)
        if any(u.target is not operator.getitem or u.args[1] != 0 for u in outputs):
            continue
        scale = torch.rsqrt(stats[1].double() + eps)
        if affine[0] is not None:
            scale = scale * affine[0].double()
        shift = -stats[0].double() * scale
        if bias is not None:
            shift = shift + bias.double() * scale
        if affine[1] is not None:
            shift = shift + affine[1].double()
        new_weight = (weight.double() * scale.reshape(-1, *[1] * (weight.dim() - 1))).to(weight.dtype)
        w_node = _set_constant(gm, conv, new_weight)
        b_node = _set_constant(gm, conv, shift.to(weight.dtype))
        known[w_node], known[b_node] = new_weight, shift.to(weight.dtype)
        conv.args = (conv.args[0], w_node, b_node, *conv.args[3:])
        for u in list(bn.users):
            u.replace_all_uses_with(conv)
            gm.graph.erase_node(u)
        gm.graph.erase_node(bn)
        folded += 1
    return folded


def _foldable(n: torch.fx.Node, known) -> bool:
    if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in n.target.tags or not isinstance(n.meta.get("val"), torch.Tensor):
        return False
    inputs = n.all_input_nodes
    return bool(inputs) and all(i in known for i in inputs)


def fold_constants(gm: torch.fx.GraphModule, known: Dict[torch.fx.Node, torch.Tensor]) -> int:
    """Evaluates every op whose inputs are all constants (on the CPU, once)
    and makes each such value that a non-constant op reads a constant."""
    folded = 0
    for n in list(gm.graph.nodes):
        if not _foldable(n, known):
            continue
        args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: known[a])
        known[n] = n.target(*args, **kwargs)
        folded += 1
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n in known and any(u not in known for u in n.users):
            n.replace_all_uses_with(_set_constant(gm, n, known[n]))
    gm.graph.eliminate_dead_code()
    return folded


class FrozenGraph:
    """A CompiledGraph whose inputs that are frozen tensors (``frozen_ids``)
    are constants; the folding happens at the first call, when the tensors
    are known."""

    def __init__(self, gm: torch.fx.GraphModule, frozen_ids: Collection[int]):
        self._boxed_call = True  # as CompiledGraph's
        self.gm, self.frozen_ids = gm, frozen_ids
        self.compiled: Optional[CompiledGraph] = None

    def __call__(self, args: List) -> List:
        if self.compiled is None:
            self.compiled = self._freeze(args)
        return self.compiled(args)

    def _freeze(self, args: Sequence) -> CompiledGraph:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        frozen = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and id(a) in self.frozen_ids]
        known = {placeholders[i]: args[i].detach() for i in frozen}
        for n in self.gm.graph.nodes:
            if n.op == "get_attr":
                value = getattr(self.gm, n.target)
                if isinstance(value, torch.Tensor):
                    known[n] = value
        bn = fold_batch_norms(self.gm, known)
        ops = fold_constants(self.gm, known)
        self.gm.recompile()
        _C.bump("freeze.batch_norms_folded", bn)
        _C.bump("freeze.ops_folded", ops)
        return CompiledGraph(self.gm, frozen)

