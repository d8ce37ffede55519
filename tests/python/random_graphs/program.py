"""A generated program (``Program``, ``InputSpec``): its text, its seeded
inputs, and running it on any device."""
import math
import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

from .config import INT64, MAX_NUMEL, MAX_OPS

# --------------------------------------------------------------------------
# Programs


@dataclass
class InputSpec:
    name: str
    shape: tuple
    dtype: torch.dtype
    dist: str  # "normal" (randn), "positive" (rand + 0.5), "int" (randint -8..8)
    # "contiguous"; "permuted": dense, dims in memory in the order ``perm``;
    # "sliced": every other element of a tensor twice as long in the last dim.
    layout: str = "contiguous"
    perm: tuple = ()

    def text(self):
        layout = {"contiguous": "", "permuted": f", memory order {self.perm}",
                  "sliced": ", a [..., ::2] slice"}[self.layout]
        return f"{self.name}: {self.dist} {str(self.dtype).replace('torch.', '')}{list(self.shape)}{layout}"


@dataclass
class Program:
    seed: int
    inputs: List[InputSpec]
    lines: List[str]                 # statements, in order
    outputs: List[str]               # names returned
    out_classes: List[int]           # tolerance class per output
    out_deps: List[frozenset]        # magnitude records each output depends on
    pinned: frozenset                # sizes the text names (kept in every instance)
    out_same_layout: List[bool] = None  # disc strides must equal CPU's
    max_ops: int = MAX_OPS              # generate()'s argument (for the replay)
    # Line -> operand whose rows must not be nearly constant (layer_norm, see
    # KNOWN_BUGS); an instance where they are is skipped.
    row_checks: Dict[int, str] = field(default_factory=dict)
    # Lines (not views) whose result eager made contiguous, as disc always
    # does: an instance where eager does not is skipped (layout-changing-results).
    contiguous_lines: frozenset = frozenset()
    _code: list = field(default=None, repr=False)

    def source(self) -> str:
        """The program as a Python function (what runs, line for line)."""
        args = ", ".join(s.name for s in self.inputs)
        body = [f"    {line}" for line in self.lines]
        body.append(f"    return [{', '.join(self.outputs)}]")
        return f"def program({args}):\n" + "\n".join(body)

    def text(self) -> str:
        ins = "\n".join(f"#   {s.text()}" for s in self.inputs)
        return f"# seed {self.seed}; inputs:\n{ins}\n{self.source()}"

    def code(self):
        if self._code is None:
            self._code = [compile(line, f"<seed {self.seed} line {i}>", "exec")
                          for i, line in enumerate(self.lines)]
        return self._code

    def instance_shapes(self, instance: int) -> Optional[List[tuple]]:
        """Input shapes of an instance: 0 is the program's own; 1 scales the
        sizes the text does not name (equal sizes alike). None: no change."""
        shapes = [tuple(s.shape) for s in self.inputs]
        if instance == 0:
            return shapes
        rng = random.Random(self.seed * 7919 + instance)
        factor = {}
        for shape in shapes:
            for d in shape:
                if d > 1 and d not in self.pinned and d not in factor:
                    factor[d] = rng.choice((1, 2, 3))
        new = [tuple(d * factor.get(d, 1) for d in shape) for shape in shapes]
        if new == shapes or any(math.prod(s) > 4 * MAX_NUMEL for s in new):
            return None
        return new

    def make_inputs(self, instance: int = 0, shapes=None) -> List[torch.Tensor]:
        shapes = shapes or self.instance_shapes(instance)
        return [make_input(spec, shape, self.seed, instance, k)
                for k, (spec, shape) in enumerate(zip(self.inputs, shapes))]

    def run(self, inputs: List[torch.Tensor], magnitudes: Optional[dict] = None):
        """Runs the program on these inputs (any device); returns the outputs.
        ``magnitudes`` (a dict) receives max |value| per record."""
        env = {"torch": torch, "F": F}
        for spec, t in zip(self.inputs, inputs):
            env[spec.name] = t
            if magnitudes is not None:
                magnitudes[spec.name] = _magnitude(t)
        for i, code in enumerate(self.code()):
            if magnitudes is not None and i in self.row_checks:
                if _rows_nearly_constant(env[self.row_checks[i]]):
                    raise IllConditioned(f"line {i}: {self.lines[i]}")
            exec(code, env)
            if magnitudes is not None:
                out = env[_target(self.lines[i])]
                if i in self.contiguous_lines and not out.is_contiguous():
                    raise IllConditioned(f"line {i}: eager's result is not contiguous here")
                magnitudes[i] = _magnitude(out)
        return [env[name] for name in self.outputs]


class IllConditioned(Exception):
    """An instance breaks an assumption the program was built on (skipped)."""


def _rows_nearly_constant(x: torch.Tensor) -> bool:
    """Some row (last dim) has (nearly) equal elements, or just one."""
    if x.numel() == 0:
        return False
    return x.shape[-1] == 1 or float(x.double().var(-1, unbiased=False).min()) < 1e-2


def make_input(spec: InputSpec, shape, seed: int, instance: int, k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed((seed * 1_000_003 + instance * 101 + k) % (2**62))
    shape = tuple(shape)
    if spec.layout == "permuted":
        base = _random_values(spec, tuple(shape[d] for d in spec.perm), g)
        return base.permute([spec.perm.index(d) for d in range(len(shape))])
    if spec.layout == "sliced":
        return _random_values(spec, shape[:-1] + (2 * shape[-1],), g)[..., ::2]
    return _random_values(spec, shape, g)


def _random_values(spec, shape, g):
    if spec.dist == "int":
        return torch.randint(-8, 9, shape, generator=g, dtype=INT64)
    if spec.dist == "positive":
        return torch.rand(shape, generator=g) + 0.5
    return torch.randn(shape, generator=g)


def _magnitude(t: torch.Tensor) -> float:
    if t.numel() == 0 or t.dtype == torch.bool:
        return 0.0
    return float(t.detach().abs().max().double())


def _target(line: str) -> str:
    """The name a statement assigns, or the tensor an in-place one mutates."""
    if " = " in line:
        return line.split(" = ", 1)[0].strip()
    return line.split(".", 1)[0].strip()
