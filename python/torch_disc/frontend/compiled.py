"""One captured FX graph (ATen level: AOTAutograd's or torch.export's) run
by disc with no tracing per call.

The first call runs the FX graph on disc tensors: the disc device's op
capture translates each ATen op into our IR, as for any lazy graph. The
graph of the outputs is kept (``_C.GraphTemplate``) and later calls copy it
at their sizes and run it through the compile cache and executor that lazy
graphs use. Each dim of the graph is tied to the FX graph's symbolic sizes
(``meta["val"]`` of the FX value it belongs to), so a call's sizes follow
from its inputs' sizes: one trace and one compile serve every batch size and
sequence length.

Where the tie is not certain, a call is traced again and checked:

- a dim that no FX value gives directly (one the capture made inside an op)
  takes the expressions of the FX sizes equal to it; while these disagree
  at a call's sizes (a batch of 4 and 4 heads were equal where traced), the
  call is traced and the traced sizes tell them apart;
- a call that changes a size symbol no traced call has changed is traced
  once more and compared with the template's copy (``compiled.checked``):
  a size the FX graph's expressions do not predict (one traced as a
  constant) is caught there, and the graph is traced at every call from
  then on (``compiled.untemplated.mismatch``, warned once);
- a graph that syncs while traced (an op on the CPU fallback) is traced at
  every call (``compiled.untemplated.<reason>``);
- a graph disc fails to trace runs on the CPU as it is, warned once
  (``compiled.eager_calls``): compiling never breaks a program that runs
  eagerly.

Counters: ``compiled.templates``, ``compiled.template_calls`` (calls that
traced nothing), ``compiled.traced_calls``.
"""
import itertools
import threading
import warnings
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set

import sympy
import torch
from torch.utils._sympy.printers import PythonPrinter

from .. import _C

DISC = torch.device("disc")


def _bump(name: str) -> None:
    _C.bump(name)


def _expr(size) -> sympy.Expr:
    return sympy.expand(size.node.expr) if isinstance(size, torch.SymInt) else sympy.Integer(int(size))


def _output_kind(o) -> str:
    if not isinstance(o, torch.fx.Node):
        return "constant"
    return "tensor" if isinstance(o.meta.get("val"), torch.Tensor) else "int"


class _Recorder(torch.fx.Interpreter):
    """Runs the FX graph on disc tensors, pairing every disc tensor it makes
    with its node's symbolic value (``meta["val"]``); constants of the
    module (``get_attr``) go to disc once, and factories made for the CPU
    make disc tensors."""

    def __init__(self, gm: torch.fx.GraphModule, constants: Dict[str, torch.Tensor]):
        super().__init__(gm)
        self.probes: List[tuple] = []
        self._constants = constants

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if not isinstance(value, torch.Tensor) or value.device.type == "disc":
            return value
        if target not in self._constants:
            self._constants[target] = value.detach().to(DISC)
        return self._constants[target]

    def call_function(self, target, args, kwargs):
        # A view of a layout disc's kernels chose differently (an attention
        # output) is a copy: in a functional graph nothing can tell.
        if target is torch.ops.aten.view.default:
            target = torch.ops.aten.reshape.default
        # The graph was captured on CPU tensors: its factories say so.
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cpu":
            kwargs = {**kwargs, "device": DISC}
        return super().call_function(target, args, kwargs)

    def run_node(self, n: torch.fx.Node):
        result = super().run_node(n)
        val = n.meta.get("val")
        if isinstance(result, torch.Tensor) and isinstance(val, torch.Tensor):
            self.probes.append((result, val))
        return result


class _SymbolMap:
    """The FX graph's free size symbols, each read from a dim of an input
    (or an int input), and compiled functions from them to expressions."""

    def __init__(self, placeholders: Sequence[torch.fx.Node]):
        self.readers: Dict[sympy.Symbol, tuple] = {}
        for i, p in enumerate(placeholders):
            val = p.meta.get("val")
            sizes = val.shape if isinstance(val, torch.Tensor) else [val] if isinstance(val, torch.SymInt) else []
            for d, s in enumerate(sizes):
                e = _expr(s)
                if isinstance(e, sympy.Symbol) and e not in self.readers:
                    self.readers[e] = (i, d if isinstance(val, torch.Tensor) else None)

    def values(self, args: Sequence[Any]) -> Dict[sympy.Symbol, int]:
        return {s: int(args[i] if d is None else args[i].shape[d]) for s, (i, d) in self.readers.items()}

    def bound(self, e: sympy.Expr) -> bool:
        return e.free_symbols <= self.readers.keys()

    def function(self, exprs: Sequence[sympy.Expr]):
        """env -> [int(e) for e in exprs]; every symbol must be bound."""
        names = sorted(self.readers, key=str)
        printer = PythonPrinter()
        body = ", ".join(f"int({printer.doprint(e)})" for e in exprs)
        code = f"def f({', '.join(map(str, names))}):\n    return [{body}]\n"
        scope: Dict[str, Any] = {}
        exec(compile(code, "<disc size expressions>", "exec"), scope)  # noqa: S102 - our own printout
        f = scope["f"]
        return lambda env: f(*(env[s] for s in names))


def _dim_candidates(graph, probes, symbols: _SymbolMap, env) -> List[Optional[Set[sympy.Expr]]]:
    """Per dim of the graph (traced at the symbol values ``env``): None for
    a literal, else the FX expressions it may be. Exact where an FX value
    holds the dim's node (its sizes, and a shape attribute equal to them:
    view, expand); else every expression of an exact dim of equal value
    (the size pattern's symbol) and every monomial in the symbols of that
    value."""
    dims = graph.dims()
    exact: Dict[tuple, sympy.Expr] = {}
    for tensor, val in probes:
        node, output = graph.node_of(tensor)
        if node >= 0:
            for d, size in enumerate(val.shape):
                exact[(node, False, output, d)] = _expr(size)
    # A shape attribute (view, expand sizes): one element per output dim,
    # equal to it.
    outputs = {}
    attrs: Dict[tuple, list] = {}
    for node, is_attr, which, pos, value, _ in dims:
        (attrs.setdefault((node, which), []) if is_attr else outputs.setdefault((node, which), [])).append(value)
    for (node, which), values in attrs.items():
        if values == outputs.get((node, 0)):
            for pos in range(len(values)):
                if (node, False, 0, pos) in exact:
                    exact[(node, True, which, pos)] = exact[(node, False, 0, pos)]
    by_symbol: Dict[int, Set[sympy.Expr]] = {}
    for node, is_attr, which, pos, value, symbol in dims:
        e = exact.get((node, is_attr, which, pos))
        if symbol >= 0 and e is not None and symbols.bound(e):
            by_symbol.setdefault(symbol, set()).add(e)
    candidates: List[Optional[Set[sympy.Expr]]] = []
    for node, is_attr, which, pos, value, symbol in dims:
        if symbol < 0:
            candidates.append(None)
            continue
        e = exact.get((node, is_attr, which, pos))
        if e is not None and symbols.bound(e):
            candidates.append({e})
        else:
            candidates.append(set(by_symbol.get(symbol, ())) | _monomials(value, env))
    return candidates


def _monomials(value: int, env: Dict[sympy.Symbol, int], degree: int = 3) -> Set[sympy.Expr]:
    """Every c * s1^a1 * s2^a2 ... (total degree up to ``degree``, c a
    positive integer) equal to ``value`` at ``env``: what a size the capture
    made inside an op may be (an embedding's rows, batch * length; a
    flattened score matrix, batch * heads * length^2), to be told apart by
    the sizes of later traced calls."""
    found = set()
    for d in range(degree + 1):
        for factors in itertools.combinations_with_replacement(list(env), d):
            base = 1
            for s in factors:
                base *= env[s]
            if base and value % base == 0:
                found.add(sympy.expand(value // base * sympy.Mul(*factors)))
    return found


class _Binding(NamedTuple):
    """One tie of a template's dims to expressions: the C++ template whose
    dims read them, the expressions, a function computing them, and the
    groups of them that must agree for a call to use the binding."""
    graph: Any
    exprs: List[sympy.Expr]
    evaluate: Callable
    groups: List[List[int]]


class _Template:
    """A graph template, the FX expressions each of its dims may be, and
    which size symbols calls have checked. Calls read ``bound`` once: a check
    on another thread replaces it whole."""

    def __init__(self, graph, candidates, symbols: _SymbolMap, env: Dict[sympy.Symbol, int]):
        self.candidates, self.symbols = candidates, symbols
        self.built_at = dict(env)   # the symbol values it was traced at
        self.verified: Set[sympy.Symbol] = set()  # symbols a checked call has changed
        self.bound = self._bind(graph)

    def _bind(self, graph) -> _Binding:
        """Ties each dim to one expression of its candidates."""
        index: Dict[sympy.Expr, int] = {}
        groups: Set[frozenset] = set()
        sources = []
        for found in self.candidates:
            if found is None:
                sources.append(-1)
                continue
            ids = frozenset(index.setdefault(e, len(index)) for e in found)
            sources.append(min(ids))
            if len(ids) > 1:
                groups.add(ids)
        exprs = sorted(index, key=index.get)
        return _Binding(graph.with_sources(sources), exprs, self.symbols.function(exprs),
                        [sorted(g) for g in groups])

    def values(self, env: Dict[sympy.Symbol, int]):
        """(binding, the call's size values), or None when the call must be
        traced: a symbol it changes is unchecked, or candidates of a dim
        disagree at its sizes."""
        if any(v != self.built_at[s] and s not in self.verified for s, v in env.items()):
            return None
        bound = self.bound
        values = bound.evaluate(env)
        if not self._sizes_ok(values) or any(len({values[i] for i in g}) > 1 for g in bound.groups):
            return None
        return bound, values

    @staticmethod
    def _sizes_ok(values: List[int]) -> bool:
        # A size of 0 or 1 changes what kernels do (broadcasting, empty
        # tensors): such a call is traced (an int input that is no size,
        # a position offset, may well be 0).
        return all(v >= 2 for v in values)

    def sizes_ok(self, env) -> bool:
        return self._sizes_ok(self.bound.evaluate(env))

    def check(self, traced, leaves, env) -> str:
        """Narrows the candidates by a traced call's sizes and compares the
        rest of that graph with the template's copy; "" when they agree."""
        bound = self.bound
        structure, dims = bound.graph.traced(traced)
        values = bound.evaluate(env)
        if structure != bound.graph.structure_hash:  # which node differs
            return bound.graph.mismatch(traced, leaves, values) or "the structure differs"
        index = {e: i for i, e in enumerate(bound.exprs)}
        for k, found in enumerate(self.candidates):
            if found is not None:
                kept = {e for e in found if values[index[e]] == dims[k]}
                if not kept:
                    return f"no FX size gives dim {k} ({dims[k]})"
                self.candidates[k] = kept
        bound = self._bind(bound.graph)
        why = bound.graph.mismatch(traced, leaves, bound.evaluate(env))
        if not why:
            self.bound = bound
            self.verified |= {s for s, v in env.items() if v != self.built_at[s]}
        return why


class CompiledGraph:
    """Callable running an ATen-level FX graph on disc; takes and returns
    CPU tensors. ``frozen``: positions of inputs that are constants of the
    graph (frozen weights), taken at the first call and ignored after."""

    def __init__(self, gm: torch.fx.GraphModule, frozen: Sequence[int] = ()):
        # AOTAutograd's boxed calling convention (one list of arguments); an
        # attribute of the instance, which the wrappers around it copy.
        self._boxed_call = True
        self.gm = gm
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.frozen = frozenset(frozen)
        self.symbols = _SymbolMap(self.placeholders)
        self.template: Optional[_Template] = None
        self.untemplated: Optional[str] = None  # why every call is traced
        self._tracing = threading.Lock()  # one thread makes or checks the template
        self._constants: Dict[str, torch.Tensor] = {}
        self._frozen_disc: Dict[int, torch.Tensor] = {}
        (out_node,) = [n for n in gm.graph.nodes if n.op == "output"]
        self._outputs = out_node.args[0]
        # Each output once: a tensor the graph computes, an int (a size),
        # or a constant of the graph (None, a literal).
        self._output_kinds = [_output_kind(o) for o in self._outputs]
        ints = [o.meta.get("val") for o, k in zip(self._outputs, self._output_kinds) if k == "int"]
        self._int_outputs = None
        if ints and all(self.symbols.bound(_expr(v)) for v in ints):
            self._int_outputs = self.symbols.function([_expr(v) for v in ints])
        elif ints:  # an int output no input size gives: traced per call
            self._give_up("unbound_int_output")

    def __call__(self, args: List[Any]) -> List[Any]:
        args = list(args)
        if self.untemplated == "translation_failed":
            _bump("compiled.eager_calls")
            return list(self.gm(*args))
        env = self.symbols.values(args)
        template = self.template
        call = template.values(env) if template is not None else None
        if call is None:
            with self._tracing:
                return self._trace(env, args)
        return self._run_template(*call, env, args)

    def _run_template(self, bound: _Binding, values: List[int], env, args) -> List[Any]:
        _bump("compiled.template_calls")
        inputs = [a.detach() for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in self.frozen]
        results = iter(bound.graph.run(values, inputs))
        ints = iter(self._int_outputs(env)) if self._int_outputs else iter(())
        return [next(results) if k == "tensor" else next(ints) if k == "int" else o
                for o, k in zip(self._outputs, self._output_kinds)]

    def _disc_inputs(self, args: Sequence[Any]) -> List[Any]:
        moved = []
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                moved.append(a)
            elif i in self.frozen:
                if i not in self._frozen_disc:
                    self._frozen_disc[i] = a.detach().to(DISC)
                moved.append(self._frozen_disc[i])
            else:
                moved.append(a.detach().contiguous().to(DISC))
        return moved

    def _trace(self, env, args) -> List[Any]:
        """Traces the FX graph on disc; makes or checks the template, and
        runs the call through it where it can."""
        disc_args = self._disc_inputs(args)
        recorder = _Recorder(self.gm, self._constants)
        rng = _C.get_rng_state()  # a run from the template draws what the trace drew
        leaves = _C.input_leaves(
            [a for i, a in enumerate(disc_args) if isinstance(a, torch.Tensor) and i not in self.frozen])
        syncs = _C.metrics()["syncs"]
        try:
            with torch.no_grad():
                results = recorder.run(*disc_args)
        except Exception as e:  # noqa: BLE001 - the graph still runs, on the CPU
            return self._run_eagerly(args, e)
        if self.untemplated is None and _C.metrics()["syncs"] != syncs:
            self._give_up("synced_while_traced")
        self._forget_written_constants(args)
        if self.untemplated is None:
            traced = [r for r, k in zip(results, self._output_kinds) if k == "tensor"]
            if self.template is None:  # (a traced symbolic size is never 0 or 1)
                self._make_template(traced, leaves, recorder.probes, env)
            elif self.template.sizes_ok(env):
                self._check(traced, leaves, env)
        recorder.probes.clear()
        call = self.template.values(env) if self.template is not None else None
        if call is not None:  # the traced values are dropped unrun
            _C.set_rng_state(rng)
            return self._run_template(*call, env, args)
        _bump("compiled.traced_calls")
        return [r.cpu() if isinstance(r, torch.Tensor) else int(r) if isinstance(r, torch.SymInt) else r
                for r in results]

    def _forget_written_constants(self, args) -> None:
        """A constant the trace wrote (in a functional graph, with the value
        it had) is made again from its CPU tensor: the next trace must not
        read this one's pending value, which would chain it onto this
        trace's graph."""
        for i in [i for i, t in self._frozen_disc.items() if _C.is_pending(t)]:
            self._frozen_disc[i] = args[i].detach().to(DISC)
            _bump("compiled.constants_written")
        for name in [n for n, t in self._constants.items() if _C.is_pending(t)]:
            del self._constants[name]
            _bump("compiled.constants_written")

    def _run_eagerly(self, args, error: Exception) -> List[Any]:
        """A graph disc cannot trace runs as it is, on the CPU, from now on
        (ATen's own kernels: what the model would do without compiling)."""
        warnings.warn(f"disc: a compiled graph could not be traced on disc and runs on the CPU as it "
                      f"is: {type(error).__name__}: {error}")
        self._give_up("translation_failed")
        _bump("compiled.eager_calls")
        return list(self.gm(*args))

    def _give_up(self, reason: str) -> None:
        self.untemplated = reason
        self.template = None
        _bump(f"compiled.untemplated.{reason}")

    def _make_template(self, traced, leaves, probes, env) -> None:
        graph, why_not = _C.make_template(traced, leaves)
        if graph is None:
            return self._give_up("input_view")
        candidates = _dim_candidates(graph, probes, self.symbols, env)
        self.template = _Template(graph, candidates, self.symbols, env)
        _bump("compiled.templates")

    def _check(self, traced, leaves, env) -> None:
        why = self.template.check(traced, leaves, env)
        _bump("compiled.checked")
        if why:
            warnings.warn(f"disc: a compiled graph traced at new sizes differs from its template ({why}); "
                          f"it is traced at every call from now on")
            self._give_up("mismatch")
