"""The generator's core (``_BuilderBase``): the values built so far, random
shapes and broadcast partners, and ``emit``, which runs a candidate
statement on CPU and keeps it only if it is legal and tame. The op families
that draw statements are mixins in the modules named after them; ``_Builder``
(generator.py) puts them together."""
import math
import random
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

from .config import (ELEMENTWISE, FLOAT32, INT64, LARGE_SIZES, MAX_INPUTS, MAX_INT, MAX_MAGNITUDE, MAX_NUMEL,
                     SIZES)
from .program import InputSpec, _magnitude, make_input

# --------------------------------------------------------------------------
# The generator


@dataclass
class _Value:
    name: str
    cls: int
    pos: bool      # > 0 by construction, to relative accuracy (safe for log, div)
    exact: bool    # bit-identical under every executor (safe for conditions)
    deps: frozenset
    is_input: bool
    consumed: bool = False
    same_layout: bool = True  # disc gives it CPU's strides (see KNOWN_BUGS)
    mutated: bool = False     # an in-place statement wrote to its storage


class _Reject(Exception):
    pass


class _BuilderBase:
    """What every op family of ``_Builder`` (generator.py) builds on."""

    def __init__(self, seed: int, attempt: int = 0):
        self.seed = seed
        self.rng = random.Random(seed * 64 + attempt)
        self.inputs: List[InputSpec] = []
        self.lines: List[str] = []
        self.env = {"torch": torch, "F": F}
        self.vals: Dict[str, _Value] = {}
        self.order: List[str] = []
        self.pinned = set()
        self.n_values = 0
        self.pending_inputs: List[InputSpec] = []
        self.row_checks: Dict[int, str] = {}
        self.contiguous_lines = set()

    # -- values ------------------------------------------------------------

    def t(self, name) -> torch.Tensor:
        return self.env[name]

    def new_input(self, shape, dtype=None, dist=None) -> str:
        """A new program input (kept only if the statement using it is)."""
        if dtype is None:
            dtype = INT64 if self.rng.random() < 0.15 else FLOAT32
        if dist is None:
            dist = "int" if dtype == INT64 else ("positive" if self.rng.random() < 0.25 else "normal")
        name = f"x{len(self.inputs) + len(self.pending_inputs)}"
        spec = InputSpec(name, tuple(shape), dtype, dist)
        r = self.rng.random()
        if len(shape) >= 2 and r < 0.15:
            spec.layout, spec.perm = "permuted", tuple(self.rng.sample(range(len(shape)), len(shape)))
        elif len(shape) >= 1 and r < 0.22:
            spec.layout = "sliced"
        self.pending_inputs.append(spec)
        index = len(self.inputs) + len(self.pending_inputs) - 1
        self.env[name] = make_input(spec, spec.shape, self.seed, 0, index)
        # .to("disc") keeps a dense layout and makes a sliced one contiguous.
        self.vals[name] = _Value(name, ELEMENTWISE, dist == "positive", True, frozenset([name]), True,
                                 same_layout=spec.layout != "sliced")
        return name

    def can_add_input(self):
        return len(self.inputs) + len(self.pending_inputs) < MAX_INPUTS

    def pick(self, pred=lambda name: True) -> Optional[str]:
        """An earlier value, mostly a recent or unconsumed one."""
        names = [n for n in self.order if pred(n)]
        if not names:
            return None
        fresh = [n for n in names if not self.vals[n].consumed]
        if fresh and self.rng.random() < 0.6:
            return self.rng.choice(fresh[-3:])
        if self.rng.random() < 0.5:
            return names[-1]
        return self.rng.choice(names)

    def is_float(self, name):
        return self.t(name).dtype == FLOAT32

    def shape(self, name):
        return tuple(self.t(name).shape)

    # -- shapes ------------------------------------------------------------

    def random_shape(self, rank=None, allow_zero=True):
        rank = self.rng.randint(1, 4) if rank is None else rank
        while True:
            shape = [self.rng.choice(SIZES) for _ in range(rank)]
            if rank <= 2 and self.rng.random() < 0.15:  # loop tails, thread splits
                shape[self.rng.randrange(rank)] = self.rng.choice(LARGE_SIZES)
            if allow_zero and rank and self.rng.random() < 0.04:
                shape[self.rng.randrange(rank)] = 0
            if math.prod(shape) <= MAX_NUMEL:
                return tuple(shape)

    def smaller_shape(self, shape):
        """A shape that broadcasts to ``shape``."""
        shape = list(shape)
        out = [1 if self.rng.random() < 0.3 else d for d in shape]
        if out and self.rng.random() < 0.3:
            out = out[self.rng.randint(1, len(out)):]
        return tuple(out)

    def larger_shape(self, shape):
        """A shape that ``shape`` broadcasts to (new leading dim, 1s grown)."""
        out = [self.rng.choice(SIZES[1:]) if d == 1 and self.rng.random() < 0.6 else d for d in shape]
        if len(out) < 4 and self.rng.random() < 0.5:
            out = [self.rng.choice(SIZES)] + out
        return tuple(out)

    def partner(self, a, to_shape_of_a=False) -> Optional[str]:
        """A value to combine with ``a`` element-wise: an earlier one that
        broadcasts with it, or a new input. ``to_shape_of_a``: it must
        broadcast *to* a's shape (for in-place ops)."""
        sa = self.shape(a)

        def fits(n):
            out = _broadcast(sa, self.shape(n))
            if out is None:
                return False
            if to_shape_of_a:
                return tuple(out) == sa
            return math.prod(out) <= MAX_NUMEL

        def fits_other(n):  # the value itself now and then only
            return fits(n) and (n != a or self.rng.random() < 0.1)

        r = self.rng.random()
        if r < 0.45 or not self.can_add_input():
            b = self.pick(fits_other)
            if b is not None:
                return b
            if not self.can_add_input():
                return None
        if to_shape_of_a or self.rng.random() < 0.6:
            return self.new_input(self.smaller_shape(sa))
        return self.new_input(self.larger_shape(sa))

    # -- statements -------------------------------------------------------

    def emit(self, expr: str, operands, cls=ELEMENTWISE, pos=False, exact=False, inplace=None,
             view=False):
        """Runs one statement on the CPU values; keeps it if it is legal and
        tame, else raises _Reject. Returns the new value's name."""
        ops = [self.vals[o] for o in operands]
        if inplace is None:
            name = f"v{self.n_values}"
            line = f"{name} = {expr}"
        else:
            name, line = inplace, expr
        saved = None
        try:
            if inplace is not None:
                self.check_inplace(inplace, expr, operands)
                # A dropped in-place statement must leave no trace.
                saved = self.t(inplace).untyped_storage().clone()
            scratch = dict(self.env)
            exec(line, scratch)
            out = scratch[name]
            if not isinstance(out, torch.Tensor):
                raise _Reject("not a tensor")
            if out.numel() > MAX_NUMEL:
                raise _Reject("too large")
            if out.numel():
                if out.dtype.is_floating_point:
                    if not torch.isfinite(out).all() or _magnitude(out) > MAX_MAGNITUDE:
                        raise _Reject("not tame")
                elif _magnitude(out) > MAX_INT:
                    raise _Reject("int too large")
        except Exception as e:  # illegal in eager, or not tame: draw another
            if saved is not None:
                self.t(inplace).untyped_storage().copy_(saved)
            if isinstance(e, _Reject):
                raise
            raise _Reject(str(e)) from None
        # Accepted.
        self.inputs += self.pending_inputs
        for spec in self.pending_inputs:
            self.order.append(spec.name)
        self.pending_inputs = []
        for o in ops:
            o.consumed = True
        record = len(self.lines)
        self.lines.append(line)
        deps = frozenset().union(*[o.deps for o in ops]) | {record}
        cls = max([cls] + [o.cls for o in ops])
        if inplace is None:
            self.env[name] = out
            # disc makes every op result contiguous (layout-changing-results).
            same = ops[0].same_layout if view else out.is_contiguous()
            if same and not view:
                self.contiguous_lines.add(record)
            self.vals[name] = _Value(name, cls, pos, exact, deps, False, same_layout=same)
            self.order.append(name)
            self.n_values += 1
        else:
            # The write reaches every alias of the mutated storage.
            self.env.update({k: v for k, v in scratch.items() if k in self.env})
            ptr = out.untyped_storage().data_ptr()
            for n in self.order:
                t = self.env[n]
                if t.untyped_storage().data_ptr() == ptr:
                    v = self.vals[n]
                    v.cls, v.deps = max(v.cls, cls), v.deps | deps
                    v.pos, v.exact = v.pos and pos, v.exact and exact
                    v.consumed, v.mutated = False, True
        return name

    def drop_pending(self):
        for spec in self.pending_inputs:
            del self.env[spec.name]
            del self.vals[spec.name]
        self.pending_inputs = []

    def check_inplace(self, target, expr, operands):
        t = self.t(target)
        if torch._debug_has_internal_overlap(t) != 0:
            raise _Reject("internal overlap")
        ptr = t.untyped_storage().data_ptr()
        for o in operands:
            if o != target and self.t(o).untyped_storage().data_ptr() == ptr and t.numel():
                raise _Reject("operand aliases the target")

    def guard_pos(self, a):
        """An expression for a positive value made from ``a``."""
        if self.vals[a].pos:
            return a
        if self.rng.random() < 0.5:
            return f"({a} * {a} + {self.rng.choice(['1.0', '0.5', '2.0'])})"
        return f"(torch.sigmoid({a}) + {self.rng.choice(['0.5', '1.0'])})"


def _broadcast(a, b):
    """torch.broadcast_shapes(a, b), or None where they do not broadcast."""
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        x = a[-k] if k <= len(a) else 1
        y = b[-k] if k <= len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))
