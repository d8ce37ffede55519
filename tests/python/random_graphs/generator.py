"""``generate(seed)``: the random program of a seed, built by ``_Builder``
(the core of builder.py and the op family mixins) from weighted draws of op
families."""
import torch

from .builder import _BuilderBase, _Reject
from .config import MAX_OPS, MIN_OPS
from .elementwise import ElementwiseFamilies
from .inplace import InplaceFamilies
from .layout import LayoutFamilies
from .matmul import MatmulFamilies
from .program import Program
from .reductions import ReductionFamilies


class _Builder(ElementwiseFamilies, ReductionFamilies, LayoutFamilies, MatmulFamilies, InplaceFamilies,
               _BuilderBase):
    # -- op families -------------------------------------------------------

    FAMILIES = [("unary", 20), ("scalar", 10), ("binary", 22), ("where", 4), ("reduction", 10),
                ("normalization", 7), ("layout", 17), ("matmul", 5), ("inplace", 9)]

    def build(self, max_ops: int) -> Program:
        rng = self.rng
        # First input.
        rank = rng.randint(1, 4)
        self.new_input(self.random_shape(rank))
        self.inputs += self.pending_inputs
        self.order += [s.name for s in self.pending_inputs]
        self.pending_inputs = []
        target = rng.randint(MIN_OPS, max_ops)
        names, weights = zip(*self.FAMILIES)
        attempts = 0
        while len(self.lines) < target and attempts < 20 * target:
            attempts += 1
            family = rng.choices(names, weights)[0]
            try:
                getattr(self, family)()
            except _Reject:
                self.drop_pending()
        produced = [n for n in self.order if not self.vals[n].is_input]
        if not produced:
            raise _Reject("nothing produced")
        outputs = [n for n in produced if not self.vals[n].consumed]
        outputs += [s.name for s in self.inputs if self.vals[s.name].mutated]  # written inputs
        for n in produced:
            if n not in outputs and rng.random() < 0.15:
                outputs.append(n)
        if not outputs:
            outputs = [produced[-1]]
        outputs = [n for n in self.order if n in outputs]
        return Program(self.seed, self.inputs, self.lines, outputs,
                       [self.vals[n].cls for n in outputs], [self.vals[n].deps for n in outputs],
                       frozenset(self.pinned), [self.vals[n].same_layout for n in outputs],
                       row_checks=dict(self.row_checks),
                       contiguous_lines=frozenset(self.contiguous_lines))


def generate(seed: int, max_ops: int = MAX_OPS) -> Program:
    """The random program of this seed (deterministic for a given
    ``max_ops``: programs have MIN_OPS to max_ops statements)."""
    with torch.no_grad():
        for attempt in range(10):
            try:
                program = _Builder(seed, attempt).build(max_ops)
                program.max_ops = max_ops
                return program
            except _Reject:
                continue
    raise RuntimeError(f"seed {seed}: no program")
