"""What the op parity cases are made of: the dtype shorthands, ``TOLERANCE``,
input specs (``R``, ``P``, ``NZ``, ``D``, ``I``, ``M``) and ``materialize``, and the
case table ``CASES`` that ``case(...)`` appends to."""

from dataclasses import dataclass
from typing import Any, Callable, Tuple

import torch

F32, F64 = torch.float32, torch.float64
I64, I32 = torch.int64, torch.int32
BOOL = torch.bool
FLOATS = (F32, F64)
INTS = (I64, I32)

# (rtol, atol) per result dtype; None means torch's defaults for that dtype.
TOLERANCE = {F32: (1e-5, 1e-6), F64: (1e-7, 1e-7), torch.float16: None, torch.bfloat16: None}


# ----------------------------------------------------------------------------
# Input specs. Cases list specs rather than tensors so that every case draws
# its values from its own seeded generator: adding or reordering cases never
# changes another case's inputs, and a failure reproduces by its id alone.


@dataclass(frozen=True)
class Spec:
    kind: str
    shape: Tuple[int, ...]
    dtype: torch.dtype
    lo: int = 0
    hi: int = 0


def R(shape, dtype=F32):
    """Standard normal values."""
    return Spec("randn", tuple(shape), dtype)


def P(shape, dtype=F32):
    """Values in [0.5, 1.5): the domain of log/sqrt/rsqrt/pow, safe divisors."""
    return Spec("pos", tuple(shape), dtype)


def NZ(shape, dtype=F32):
    """Values with |v| in [0.5, 1.5): away from the kinks of abs/relu at 0."""
    return Spec("nonzero", tuple(shape), dtype)


def D(shape, dtype=F32):
    """Distinct values: no ties for sort/topk/amax/max_pool (grads go to one
    element, and which one would otherwise be the kernel's choice)."""
    return Spec("distinct", tuple(shape), dtype)


def I(shape, dtype=I64, lo=-5, hi=6):  # noqa: E743 - short on purpose, like R/P/D
    """Integers in [lo, hi); with a float dtype, small whole numbers (ties for
    the comparison ops)."""
    return Spec("int", tuple(shape), dtype, lo, hi)


def M(shape):
    """A random bool mask."""
    return Spec("mask", tuple(shape), BOOL)


def materialize(spec, gen):
    if not isinstance(spec, Spec):
        return spec.clone() if isinstance(spec, torch.Tensor) else spec
    shape, dtype = spec.shape, spec.dtype
    if spec.kind == "randn":
        return torch.randn(shape, dtype=dtype, generator=gen)
    if spec.kind == "pos":
        return torch.rand(shape, dtype=dtype, generator=gen) + 0.5
    if spec.kind == "nonzero":
        magnitude = torch.rand(shape, dtype=dtype, generator=gen) + 0.5
        sign = torch.randint(0, 2, shape, generator=gen).to(dtype) * 2 - 1
        return magnitude * sign
    if spec.kind == "distinct":
        n = 1
        for s in shape:
            n *= s
        values = torch.randperm(n, generator=gen).to(dtype) - n / 2
        return (values / max(n, 1) * 4).reshape(shape)
    if spec.kind == "int":
        return torch.randint(spec.lo, spec.hi, shape, dtype=dtype, generator=gen)
    if spec.kind == "mask":
        return torch.rand(shape, generator=gen) > 0.5
    raise ValueError(spec.kind)


def is_float_spec(spec):
    return isinstance(spec, Spec) and spec.dtype.is_floating_point and spec.kind != "mask"


# ----------------------------------------------------------------------------
# The case table.


@dataclass
class Case:
    name: str
    fn: Callable
    inputs: Tuple[Any, ...]
    backward: bool = True
    nograd: Tuple[int, ...] = ()  # float inputs that are not leaves (buffers, class weights)
    grad_atol: float = 0.0  # more than TOLERANCE's where CPU's own grads carry noise

    def grad_indices(self):
        return [i for i, s in enumerate(self.inputs) if is_float_spec(s) and i not in self.nograd]


CASES = []
_NAMES = set()


def case(name, fn, *inputs, backward=True, nograd=(), grad_atol=0.0):
    assert name not in _NAMES, f"duplicate case id {name}"
    _NAMES.add(name)
    # Backward needs a float leaf; the forward-only cases say backward=False
    # for float inputs with non-float outputs (comparisons, argmax).
    has_leaf = any(is_float_spec(s) for i, s in enumerate(inputs) if i not in nograd)
    CASES.append(Case(name, fn, tuple(inputs), backward and has_leaf, tuple(nograd), grad_atol))


def dt(dtype):
    return {F32: "f32", F64: "f64", I64: "i64", I32: "i32", BOOL: "bool",
            torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]


def sh(shape):
    return "x".join(map(str, shape)) if shape else "scalar"
