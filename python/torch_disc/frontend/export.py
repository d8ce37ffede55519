"""Export and reload for serving: :func:`export` writes one file holding the
model's graph (``torch.export``'s, decomposed to core ATen), its weights and
its input specs with symbolic dims; :func:`load`, in any process and without
the model's Python code, returns a module that runs the graph on disc's
compiler with its weights frozen (see ``torch_disc.frontend.freeze``)::

    >>> torch_disc.export(model, (ids, mask), "model.disc",
    ...                   dynamic_shapes=({0: batch, 1: length}, {0: batch, 1: length}))
    >>> served = torch_disc.load("model.disc")
    >>> served(ids, mask)

The file is ``torch.export.save``'s archive with a ``torch_disc.json``
record (format, versions, input specs, output structure). Kernels are rebuilt
from the graph when it is first called (from the persistent kernel cache when
it is on).

The archive needs only torch to load. Outputs are saved as a flat tuple and
their structure (tuples, lists, dicts, namedtuples, and dict-like types such
as Hugging Face's ``ModelOutput``) in the record: :func:`load` returns the
recorded type where its module imports, else a plain dict of the same fields
(a tuple or list stays one).
"""
import functools
import importlib
import json
import os
import zipfile
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch.utils import _pytree as pytree

from .freeze import FrozenGraph

FORMAT = 2
RECORD = "torch_disc.json"


def _versions() -> Dict[str, Any]:
    from importlib import metadata
    try:
        disc = metadata.version("torch_disc")
    except metadata.PackageNotFoundError:
        disc = "unknown"
    return {"format": FORMAT, "torch": torch.__version__.split("+")[0], "torch_disc": disc}


def _spec_of(node: torch.fx.Node, path: str, ranges) -> Dict[str, Any]:
    val = node.meta["val"]
    dims = []
    for size in val.shape:
        if isinstance(size, torch.SymInt):
            r = ranges.get(size.node.expr)
            upper = None if r is None or r.upper.is_infinite else int(r.upper)
            dims.append({"symbol": str(size.node.expr), "min": int(r.lower) if r is not None else 0, "max": upper})
        else:
            dims.append(int(size))
    return {"name": path, "dtype": str(val.dtype).replace("torch.", ""), "dims": dims}


def _decompositions():
    """Core ATen, except attention: kept whole, it runs as one fused CPU
    kernel (flash attention) instead of score matrices written and read."""
    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.scaled_dot_product_attention.default, None)
    return table


def export(model: torch.nn.Module, example_inputs: Sequence[Any], path: str,
           dynamic_shapes: Optional[Any] = None, kwargs: Optional[Dict[str, Any]] = None) -> str:
    """Exports ``model`` (in inference: call ``model.eval()`` first) at
    ``example_inputs``; ``dynamic_shapes`` as ``torch.export.export`` takes
    it. Writes ``path``; returns it."""
    ep = torch.export.export(model, tuple(example_inputs), kwargs=kwargs, dynamic_shapes=dynamic_shapes)
    ep = ep.run_decompositions(_decompositions())
    record = dict(_versions(), inputs=_input_specs(ep), outputs=_structure(ep.call_spec.out_spec))
    _flatten_outputs(ep)
    with open(path, "wb") as f:  # a file object: any name, not only *.pt2
        torch.export.save(ep, f, extra_files={RECORD: json.dumps(record, indent=1)})
    return path


def _structure(spec) -> Any:
    """The output tree as JSON: None for a tensor (or other leaf), else its
    kind, the type's "module:qualname" and its keys where it has them."""
    if spec.is_leaf():
        return None
    t, items = spec.type, [_structure(c) for c in spec.children()]
    name = f"{t.__module__}:{t.__qualname__}"
    if t is type(None):
        return {"kind": "none"}
    if t in (tuple, list):
        return {"kind": t.__name__, "items": items}
    keys = list(t._fields) if hasattr(t, "_fields") else spec.context
    if not (isinstance(keys, list) and len(keys) == len(items) and all(isinstance(k, str) for k in keys)):
        raise TypeError(f"torch_disc.export: the model returns a {name}, which is not a tuple, list, "
                        f"namedtuple or a dict-like type with string keys: return one of those")
    return {"kind": "keyed", "type": name, "keys": keys, "items": items}


def _flatten_outputs(ep) -> None:
    """The archive's output spec becomes a flat tuple: deserializing a
    library's output type would need that library imported first."""
    signature = ep.module_call_graph[0].signature
    signature.out_spec = pytree.tree_structure(tuple(range(signature.out_spec.num_leaves)))


@functools.lru_cache(maxsize=None)  # once per type: _rebuild runs on every call
def _output_type(name: str) -> Optional[type]:
    module, _, qualname = name.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, type) else None


def _rebuild(structure: Any, leaves) -> Any:
    if structure is None:
        return next(leaves)
    if structure["kind"] == "none":
        return None
    items = [_rebuild(s, leaves) for s in structure["items"]]
    if structure["kind"] in ("tuple", "list"):
        return tuple(items) if structure["kind"] == "tuple" else items
    fields = dict(zip(structure["keys"], items))
    t = _output_type(structure["type"])
    return fields if t is None else t(**fields)


def _user_inputs(ep) -> List[torch.fx.Node]:
    names = {s.arg.name for s in ep.graph_signature.input_specs
             if s.kind == torch.export.graph_signature.InputKind.USER_INPUT}
    return [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in names]


def _input_specs(ep) -> List[Dict[str, Any]]:
    # Each input by its name in the model's forward and its place in the call.
    paths = [("args" if p[0].idx == 0 else "kwargs") + pytree.keystr(p[1:])
             for p, _ in pytree.tree_flatten_with_path(ep.example_inputs)[0]]
    return [_spec_of(n, f"{n.name} ({p})", ep.range_constraints) for n, p in zip(_user_inputs(ep), paths)]


def _read_record(path: str) -> Dict[str, Any]:
    if not os.path.exists(path):
        raise FileNotFoundError(f"torch_disc.load: no file {path}")
    try:
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith("/extra/" + RECORD) or n == RECORD]
            if not names:
                raise ValueError(f"torch_disc.load: {path} was not written by torch_disc.export "
                                 f"(no {RECORD} in it)")
            return json.loads(z.read(names[0]))
    except (zipfile.BadZipFile, json.JSONDecodeError, OSError) as e:
        raise ValueError(f"torch_disc.load: {path} is damaged or not an exported model: {e}") from e


def _check_versions(path: str, record: Dict[str, Any]) -> None:
    mine = _versions()
    if record.get("format") != FORMAT:
        raise ValueError(f"torch_disc.load: {path} has format {record.get('format')}, this torch_disc "
                         f"reads format {FORMAT}: export the model again with this version")
    if record.get("torch", "").rsplit(".", 1)[0] != mine["torch"].rsplit(".", 1)[0]:
        raise ValueError(f"torch_disc.load: {path} was exported with torch {record.get('torch')}, "
                         f"this is torch {mine['torch']}: export the model again with this version")


class ExportedModule(torch.nn.Module):
    """A model loaded by :func:`load`: CPU tensors in, CPU tensors out; the
    graph runs on disc with its weights as constants."""

    def __init__(self, ep, record: Dict[str, Any], path: str):
        super().__init__()
        self.path, self.inputs = path, record["inputs"]
        self._in_spec, self._outputs = ep.call_spec.in_spec, record["outputs"]
        self._user = _user_inputs(ep)
        state = {**ep.state_dict, **ep.constants}
        self._weights = [state[s.target] for s in ep.graph_signature.input_specs
                         if s.kind != torch.export.graph_signature.InputKind.USER_INPUT]
        self._ranges = ep.range_constraints
        self._user_outputs = sum(s.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT
                                 for s in ep.graph_signature.output_specs)
        self._graph = FrozenGraph(ep.graph_module, {id(w) for w in self._weights})

    def forward(self, *args, **kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            raise TypeError(f"{self.path}: the model takes inputs structured as {self._in_spec}, "
                            f"got {spec}")
        flat = [a.cpu() if isinstance(a, torch.Tensor) and a.device.type != "cpu" else a for a in flat]
        self._check(flat)
        out = self._graph([*self._weights, *flat])
        return _rebuild(self._outputs, iter(out[len(out) - self._user_outputs:]))

    def _check(self, flat: Sequence[Any]) -> None:
        """Inputs against the exported specs: rank, dtype, and each dim
        (static size or symbolic range), naming the input and dim."""
        symbols: Dict[Any, int] = {}
        for spec, node, a in zip(self.inputs, self._user, flat):
            name = spec["name"]
            val = node.meta["val"]
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"{self.path}: input {name} must be a tensor, got {type(a).__name__}")
            if a.dtype != val.dtype:
                raise TypeError(f"{self.path}: input {name} must be {val.dtype}, got {a.dtype}")
            if a.dim() != val.dim():
                raise ValueError(f"{self.path}: input {name} must have {val.dim()} dims, got {a.dim()} "
                                 f"(sizes {list(a.shape)})")
            for d, (size, want) in enumerate(zip(a.shape, val.shape)):
                self._check_dim(name, d, int(size), want, symbols)

    def _check_dim(self, name: str, d: int, size: int, want, symbols: Dict[Any, int]) -> None:
        if not isinstance(want, torch.SymInt):
            if size != int(want):
                raise ValueError(f"{self.path}: input {name} dim {d} must be {int(want)}, got {size}")
            return
        expr = want.node.expr
        r = self._ranges.get(expr)
        if r is not None and (size < int(r.lower) or (not r.upper.is_infinite and size > int(r.upper))):
            hi = "inf" if r.upper.is_infinite else int(r.upper)
            raise ValueError(f"{self.path}: input {name} dim {d} is {size}, outside the exported "
                             f"range {int(r.lower)}..{hi} of {expr}")
        if symbols.setdefault(expr, size) != size:
            raise ValueError(f"{self.path}: input {name} dim {d} is {size}, but {expr} is "
                             f"{symbols[expr]} in an earlier input")


def load(path: str) -> ExportedModule:
    """The model :func:`export` wrote to ``path``, ready to call. A file not
    written by it, damaged, or written by another format or torch version is
    a ValueError saying which."""
    record = _read_record(path)
    _check_versions(path, record)
    try:
        with open(path, "rb") as f:
            ep = torch.export.load(f)
    except Exception as e:  # noqa: BLE001 - re-raised naming the file
        raise ValueError(f"torch_disc.load: {path} could not be read: {e}") from e
    return ExportedModule(ep, record, path).eval()


