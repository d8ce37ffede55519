"""The cases of the op parity sweep (test_ops_parity.py): each is one
function applied to a few seeded inputs, with the shapes and dtypes a
training step uses. Adding an op to the sweep is adding a ``case(...)`` here."""

from dataclasses import dataclass
from typing import Any, Callable, Tuple

import torch
import torch.nn.functional as F

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


# --- elementwise, unary -------------------------------------------------------

UNARY_SHAPES = [(), (1,), (7,), (3, 1, 4), (2, 0, 3)]
UNARY = {
    "neg": (torch.neg, R),
    "abs": (torch.abs, NZ),
    "exp": (torch.exp, R),
    "log": (torch.log, P),
    "sqrt": (torch.sqrt, P),
    "rsqrt": (torch.rsqrt, P),
    "tanh": (torch.tanh, R),
    "sigmoid": (torch.sigmoid, R),
    "relu": (F.relu, NZ),
    "gelu": (F.gelu, R),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), R),
    "silu": (F.silu, R),
    "leaky_relu": (F.leaky_relu, NZ),
    "leaky_relu_0.2": (lambda x: F.leaky_relu(x, 0.2), NZ),
    "softplus": (F.softplus, R),
    "softplus_beta2_thr1": (lambda x: F.softplus(x, beta=2.0, threshold=1.0), R),
    "clamp": (lambda x: x.clamp(-0.5, 0.5), R),
    "clamp_min": (lambda x: x.clamp(min=0.1), R),
    "clamp_max": (lambda x: torch.clamp(x, max=-0.1), R),
    "pow_2": (lambda x: x.pow(2), R),
    "pow_3": (lambda x: x ** 3, R),
    "pow_0.5": (lambda x: x.pow(0.5), P),
    "pow_-1.5": (lambda x: x.pow(-1.5), P),
    "rpow_2": (lambda x: torch.pow(2.0, x), R),
}
for op, (fn, kind) in UNARY.items():
    for dtype in FLOATS:
        for shape in UNARY_SHAPES:
            case(f"{op}-{dt(dtype)}-{sh(shape)}", fn, kind(shape, dtype))

for dtype in INTS:
    for shape in [(), (3, 4), (0, 2)]:
        case(f"neg-{dt(dtype)}-{sh(shape)}", torch.neg, I(shape, dtype))
        case(f"abs-{dt(dtype)}-{sh(shape)}", torch.abs, I(shape, dtype))
        case(f"clamp-{dt(dtype)}-{sh(shape)}", lambda x: x.clamp(-2, 3), I(shape, dtype))
        case(f"pow_2-{dt(dtype)}-{sh(shape)}", lambda x: x.pow(2), I(shape, dtype))

for dtype in FLOATS:
    case(f"clamp_tensor_bounds-{dt(dtype)}", lambda x, lo, hi: torch.clamp(x, lo, hi),
         R((3, 4), dtype), torch.full((1, 4), -0.3, dtype=dtype), torch.full((3, 1), 0.4, dtype=dtype))

# --- elementwise, binary ------------------------------------------------------

BINARY_SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (4,)),
    ((5,), (1,)),
    ((), (2, 3)),
    ((2, 1, 3), (2, 4, 1)),
    ((0, 3), (1, 3)),
    ((2, 0), (2, 1)),
]
BINARY = {
    "add": (torch.add, R, R),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=2.5), R, R),
    "sub": (torch.sub, R, R),
    "sub_alpha": (lambda a, b: torch.sub(a, b, alpha=0.5), R, R),
    "mul": (torch.mul, R, R),
    "div": (torch.div, R, NZ),
    "maximum": (torch.maximum, R, R),
    "minimum": (torch.minimum, R, R),
    "pow_tensor": (torch.pow, P, R),
}
for op, (fn, ka, kb) in BINARY.items():
    for dtype in FLOATS:
        for sa, sb in BINARY_SHAPES:
            case(f"{op}-{dt(dtype)}-{sh(sa)}_{sh(sb)}", fn, ka(sa, dtype), kb(sb, dtype))

INT_BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "div": torch.div,  # true division: a float result
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": torch.remainder,
}
for op, fn in INT_BINARY.items():
    divides = op.startswith("div") or op == "remainder"
    for dtype in INTS:
        for sa, sb in [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((0, 3), (1, 3))]:
            # Divisors in [1, 6): integer division by zero is an error on CPU.
            b = I(sb, dtype, 1, 6) if divides else I(sb, dtype)
            case(f"{op}-{dt(dtype)}-{sh(sa)}_{sh(sb)}", fn, I(sa, dtype), b)
for op in ("add", "mul", "maximum"):
    case(f"{op}-bool-3x4_1x4", getattr(torch, op), M((3, 4)), M((1, 4)))

# Type promotion between inputs of different dtypes.
case("add-promote-i64_f32", torch.add, I((3, 4), I64), R((3, 4), F32))
case("add-promote-i32_i64", torch.add, I((3, 4), I32), I((1, 4), I64))
case("mul-promote-f32_f64", torch.mul, R((3, 4), F32), R((3, 4), F64))
case("mul-promote-bool_f32", torch.mul, M((3, 4)), R((3, 4), F32))
case("add-promote-f32_0dim_f64", torch.add, R((3, 4), F32), R((), F64))  # 0-dim: result stays f32

# Tensor-scalar, including a 0-dim CPU tensor next to a disc tensor (allowed
# by torch as it is for cuda).
TENSOR_SCALAR = {
    "add_scalar": (lambda x: x + 2.5, R),
    "sub_scalar": (lambda x: x - 1, R),
    "rsub_scalar": (lambda x: 3 - x, R),
    "mul_scalar": (lambda x: x * 0.5, R),
    "div_scalar": (lambda x: x / 3, R),
    "rdiv_scalar": (lambda x: 2 / x, NZ),
    "mul_cpu_0dim": (lambda x: x * torch.tensor(1.5), R),
    "add_cpu_0dim_f64": (lambda x: x + torch.tensor(0.25, dtype=F64), R),
}
for op, (fn, kind) in TENSOR_SCALAR.items():
    for dtype in FLOATS:
        for shape in [(3, 4), (), (0, 2)]:
            case(f"{op}-{dt(dtype)}-{sh(shape)}", fn, kind(shape, dtype))
INT_SCALAR = {
    "add_scalar": lambda x: x + 3,
    "mul_scalar": lambda x: x * -2,
    "rsub_scalar": lambda x: 1 - x,
    "mul_float_scalar": lambda x: x * 2.5,  # promotes to the default float dtype
    "div_scalar": lambda x: x / 2,
    "floordiv_scalar": lambda x: x // 2,
}
for op, fn in INT_SCALAR.items():
    for dtype in INTS:
        for shape in [(3, 4), ()]:
            case(f"{op}-{dt(dtype)}-{sh(shape)}", fn, I(shape, dtype))

# --- where, comparisons, logical ----------------------------------------------

WHERE_SHAPES = [((3, 4), (3, 4), (3, 4)), ((3, 4), (3, 1), (1, 4)), ((3, 1), (3, 4), ()), ((0, 3), (0, 3), (1, 3))]
for dtype in FLOATS + INTS + (BOOL,):
    make = (lambda s, d=dtype: R(s, d)) if dtype.is_floating_point else (
        (lambda s: M(s)) if dtype == BOOL else (lambda s, d=dtype: I(s, d)))
    for sc, sx, sy in WHERE_SHAPES:
        case(f"where-{dt(dtype)}-{sh(sc)}_{sh(sx)}_{sh(sy)}", torch.where, M(sc), make(sx), make(sy))
for dtype in FLOATS:
    case(f"where_scalar-{dt(dtype)}", lambda c, x: torch.where(c, x, 0.0), M((3, 4)), R((3, 4), dtype))

COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]
for op in COMPARISONS:
    fn = getattr(torch, op)
    for dtype in FLOATS + INTS:
        # Small whole numbers, also for floats: equal elements exercise eq/le/ge.
        case(f"{op}-{dt(dtype)}-3x4_3x4", fn, I((3, 4), dtype, -2, 3), I((3, 4), dtype, -2, 3),
             backward=False)
        case(f"{op}-{dt(dtype)}-3x1_1x4", fn, I((3, 1), dtype, -2, 3), I((1, 4), dtype, -2, 3),
             backward=False)
        case(f"{op}-{dt(dtype)}-0x4_4", fn, I((0, 4), dtype), I((4,), dtype), backward=False)
        case(f"{op}_scalar-{dt(dtype)}-3x4", lambda x, fn=fn: fn(x, 1), I((3, 4), dtype, -2, 3),
             backward=False)
for op in ("eq", "ne"):
    case(f"{op}-bool-3x4_3x4", getattr(torch, op), M((3, 4)), M((3, 4)))
case("logical_not-bool", torch.logical_not, M((3, 4)))
case("invert-bool", lambda m: ~m, M((3, 4)))
case("logical_and-bool", torch.logical_and, M((3, 4)), M((1, 4)))
case("logical_or-bool", torch.logical_or, M((3, 4)), M((3, 1)))

# --- matmul family ------------------------------------------------------------

MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((4,), (4,)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((2, 3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((0, 4), (4, 5)),
    ((3, 0), (0, 5)),
]
for dtype in FLOATS:
    for sa, sb in MATMUL_SHAPES:
        case(f"matmul-{dt(dtype)}-{sh(sa)}_{sh(sb)}", torch.matmul, R(sa, dtype), R(sb, dtype))
    for sa, sb in [((3, 4), (4, 5)), ((1, 4), (4, 1)), ((3, 0), (0, 2)), ((0, 3), (3, 2))]:
        case(f"mm-{dt(dtype)}-{sh(sa)}_{sh(sb)}", torch.mm, R(sa, dtype), R(sb, dtype))
    for sa, sb in [((2, 3, 4), (2, 4, 5)), ((1, 1, 3), (1, 3, 1)), ((0, 3, 4), (0, 4, 2))]:
        case(f"bmm-{dt(dtype)}-{sh(sa)}_{sh(sb)}", torch.bmm, R(sa, dtype), R(sb, dtype))
    for sbias in [(5,), (3, 5), (1, 5), ()]:
        case(f"addmm-{dt(dtype)}-bias{sh(sbias)}", torch.addmm, R(sbias, dtype), R((3, 4), dtype),
             R((4, 5), dtype))
    case(f"addmm_beta_alpha-{dt(dtype)}", lambda b, x, y: torch.addmm(b, x, y, beta=0.5, alpha=2.0),
         R((3, 5), dtype), R((3, 4), dtype), R((4, 5), dtype))
    for sx in [(4,), (3, 4), (2, 3, 4), (0, 4)]:
        case(f"linear-{dt(dtype)}-{sh(sx)}", F.linear, R(sx, dtype), R((5, 4), dtype), R((5,), dtype))
        case(f"linear_nobias-{dt(dtype)}-{sh(sx)}", F.linear, R(sx, dtype), R((5, 4), dtype))
    # A transposed (non-contiguous) operand, as in linear's backward.
    case(f"matmul_transposed-{dt(dtype)}", lambda a, b: a.t() @ b, R((4, 3), dtype), R((4, 5), dtype))

# --- convolution and pooling --------------------------------------------------

CONV = {
    # name: (input, weight, bias?, kwargs)
    "k3": ((2, 3, 8, 8), (4, 3, 3, 3), True, {}),
    "k3_nobias": ((2, 3, 8, 8), (4, 3, 3, 3), False, {}),
    "k3_pad1": ((2, 3, 8, 8), (4, 3, 3, 3), True, dict(padding=1)),
    "k3_stride2": ((2, 3, 8, 8), (4, 3, 3, 3), True, dict(stride=2)),
    "k3_stride2_pad1": ((2, 3, 7, 7), (4, 3, 3, 3), True, dict(stride=2, padding=1)),
    "k3_pad_same": ((1, 3, 6, 6), (2, 3, 3, 3), True, dict(padding="same")),
    "k3_dilation2": ((1, 2, 9, 9), (3, 2, 3, 3), True, dict(dilation=2)),
    "k3_groups3": ((2, 6, 5, 5), (6, 2, 3, 3), True, dict(groups=3, padding=1)),
    "k1": ((2, 3, 4, 4), (5, 3, 1, 1), True, {}),
    "k2x3_stride1x2_pad0x1": ((1, 2, 6, 7), (3, 2, 2, 3), True, dict(stride=(1, 2), padding=(0, 1))),
    "unbatched": ((3, 5, 5), (2, 3, 3, 3), True, {}),
    "batch1_1x1": ((1, 1, 1, 1), (2, 1, 1, 1), True, {}),
    "empty_batch": ((0, 3, 5, 5), (4, 3, 3, 3), True, dict(padding=1)),
}
for dtype in FLOATS:
    for name, (sx, sw, bias, kw) in CONV.items():
        if bias:
            case(f"conv2d_{name}-{dt(dtype)}", lambda x, w, b, kw=kw: F.conv2d(x, w, b, **kw),
                 R(sx, dtype), R(sw, dtype), R((sw[0],), dtype))
        else:
            case(f"conv2d_{name}-{dt(dtype)}", lambda x, w, kw=kw: F.conv2d(x, w, **kw),
                 R(sx, dtype), R(sw, dtype))

POOL_SHAPES = [(2, 3, 8, 8), (1, 1, 5, 5), (3, 6, 6), (0, 2, 6, 6)]
MAX_POOL = {
    "k2": dict(kernel_size=2),
    "k3_s1_p1": dict(kernel_size=3, stride=1, padding=1),
    "k3_s2_ceil": dict(kernel_size=3, stride=2, ceil_mode=True),
    "k2_dilation2": dict(kernel_size=2, dilation=2),
}
AVG_POOL = {
    "k2": dict(kernel_size=2),
    "k3_s1_p1": dict(kernel_size=3, stride=1, padding=1),
    "k3_s1_p1_nopad": dict(kernel_size=3, stride=1, padding=1, count_include_pad=False),
    "k3_s2_ceil": dict(kernel_size=3, stride=2, ceil_mode=True),
}
for dtype in FLOATS:
    for shape in POOL_SHAPES:
        for name, kw in MAX_POOL.items():
            case(f"max_pool2d_{name}-{dt(dtype)}-{sh(shape)}",
                 lambda x, kw=kw: F.max_pool2d(x, **kw), D(shape, dtype))
        for name, kw in AVG_POOL.items():
            case(f"avg_pool2d_{name}-{dt(dtype)}-{sh(shape)}",
                 lambda x, kw=kw: F.avg_pool2d(x, **kw), R(shape, dtype))
    for shape, out in [((2, 3, 8, 8), (1, 1)), ((2, 3, 8, 8), (2, 4)), ((1, 2, 7, 7), (3, 3)),
                       ((3, 5, 5), (5, 5)), ((2, 3, 8, 8), 1), ((0, 2, 4, 4), (2, 2))]:
        case(f"adaptive_avg_pool2d-{dt(dtype)}-{sh(shape)}_out{out}",
             lambda x, out=out: F.adaptive_avg_pool2d(x, out), R(shape, dtype))

# --- normalization ------------------------------------------------------------

for dtype in FLOATS:
    for shape in [(4, 3), (4, 3, 5), (2, 3, 4, 4), (2, 3, 1, 1)]:
        c = shape[1]
        stats = (R((c,), dtype), P((c,), dtype))  # running mean, running var (> 0)
        affine = (R((c,), dtype), R((c,), dtype))
        for training in (True, False):
            mode = "train" if training else "eval"
            # The running stats are buffers: not leaves, updated in place in
            # training mode (the forward test compares them afterwards).
            case(f"batch_norm_{mode}-{dt(dtype)}-{sh(shape)}",
                 lambda x, m, v, w, b, t=training: F.batch_norm(x, m, v, w, b, training=t,
                                                                 momentum=0.1, eps=1e-5),
                 R(shape, dtype), *stats, *affine, nograd=(1, 2))
            case(f"batch_norm_{mode}_noaffine-{dt(dtype)}-{sh(shape)}",
                 lambda x, m, v, t=training: F.batch_norm(x, m, v, training=t),
                 R(shape, dtype), *stats, nograd=(1, 2))
        case(f"batch_norm_no_running_stats-{dt(dtype)}-{sh(shape)}",
             lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), R(shape, dtype), *affine)

    for shape, norm in [((4, 5), (5,)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 4)), ((1, 1), (1,)),
                        ((0, 5), (5,))]:
        # Normalizing one element: x - mean is exactly 0 and so are the input
        # and weight grads, but CPU's kernel forms them as differences of
        # products scaled by rstd = 1/sqrt(eps) = 316 and returns ~1e-5 of
        # rounding noise; disc returns the exact 0.
        case(f"layer_norm-{dt(dtype)}-{sh(shape)}_{sh(norm)}",
             lambda x, w, b, norm=norm: F.layer_norm(x, norm, w, b, eps=1e-5),
             R(shape, dtype), R(norm, dtype), R(norm, dtype),
             grad_atol=3e-5 if norm == (1,) else 0.0)
        case(f"layer_norm_noaffine-{dt(dtype)}-{sh(shape)}_{sh(norm)}",
             lambda x, norm=norm: F.layer_norm(x, norm), R(shape, dtype))

# --- softmax and losses -------------------------------------------------------

for dtype in FLOATS:
    for shape, dim in [((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((1,), 0), ((0, 4), -1), ((4, 1), 1)]:
        case(f"softmax-{dt(dtype)}-{sh(shape)}_dim{dim}", lambda x, d=dim: F.softmax(x, d),
             R(shape, dtype))
        case(f"log_softmax-{dt(dtype)}-{sh(shape)}_dim{dim}", lambda x, d=dim: F.log_softmax(x, d),
             R(shape, dtype))
# A float32 input with a float64 result (the dtype= argument).
case("softmax_dtype-f32_to_f64", lambda x: F.softmax(x, -1, dtype=F64), R((3, 5)))
case("log_softmax_dtype-f32_to_f64", lambda x: F.log_softmax(x, -1, dtype=F64), R((3, 5)))

for dtype in FLOATS:
    for reduction in ("mean", "sum", "none"):
        case(f"cross_entropy_{reduction}-{dt(dtype)}",
             lambda x, t, r=reduction: F.cross_entropy(x, t, reduction=r),
             R((4, 5), dtype), I((4,), I64, 0, 5))
        case(f"nll_loss_{reduction}-{dt(dtype)}",
             lambda x, t, r=reduction: F.nll_loss(F.log_softmax(x, -1), t, reduction=r),
             R((4, 5), dtype), I((4,), I64, 0, 5))
        case(f"mse_loss_{reduction}-{dt(dtype)}",
             lambda a, b, r=reduction: F.mse_loss(a, b, reduction=r), R((3, 4), dtype), R((3, 4), dtype))
    # Class weights are not differentiable in torch, hence nograd.
    case(f"cross_entropy_weight-{dt(dtype)}", lambda x, t, w: F.cross_entropy(x, t, weight=w),
         R((4, 5), dtype), I((4,), I64, 0, 5), P((5,), dtype), nograd=(2,))
    case(f"cross_entropy_ignore_index-{dt(dtype)}",
         lambda x, t: F.cross_entropy(x, t, ignore_index=1),
         R((6, 5), dtype), torch.tensor([1, 0, 1, 4, 2, 1]))
    case(f"cross_entropy_label_smoothing-{dt(dtype)}",
         lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), R((4, 5), dtype), I((4,), I64, 0, 5))
    case(f"cross_entropy_prob_target-{dt(dtype)}",
         lambda x, p: F.cross_entropy(x, p.softmax(-1)), R((4, 5), dtype), R((4, 5), dtype))
    case(f"cross_entropy_spatial-{dt(dtype)}", F.cross_entropy, R((2, 5, 3, 3), dtype),
         I((2, 3, 3), I64, 0, 5))
    case(f"cross_entropy_unbatched-{dt(dtype)}", F.cross_entropy, R((5,), dtype), torch.tensor(3))
    case(f"cross_entropy_empty_sum-{dt(dtype)}", lambda x, t: F.cross_entropy(x, t, reduction="sum"),
         R((0, 5), dtype), torch.zeros(0, dtype=I64))
    case(f"nll_loss_weight-{dt(dtype)}", lambda x, t, w: F.nll_loss(x, t, weight=w),
         R((4, 5), dtype), I((4,), I64, 0, 5), P((5,), dtype), nograd=(2,))
    case(f"nll_loss_ignore_index-{dt(dtype)}", lambda x, t: F.nll_loss(x, t, ignore_index=0),
         R((5, 3), dtype), torch.tensor([0, 2, 1, 0, 2]))
    case(f"nll_loss_2d-{dt(dtype)}", F.nll_loss, R((2, 5, 3, 3), dtype), I((2, 3, 3), I64, 0, 5))
    case(f"mse_loss-{dt(dtype)}-scalar", F.mse_loss, R((), dtype), R((), dtype))
    case(f"mse_loss-{dt(dtype)}-2x3x4", F.mse_loss, R((2, 3, 4), dtype), R((2, 3, 4), dtype))

# --- dropout ------------------------------------------------------------------

for dtype in FLOATS:
    for shape in [(3, 4), (0, 4)]:
        case(f"dropout_p0_train-{dt(dtype)}-{sh(shape)}", lambda x: F.dropout(x, 0.0, training=True),
             R(shape, dtype))
        case(f"dropout_p0.5_eval-{dt(dtype)}-{sh(shape)}", lambda x: F.dropout(x, 0.5, training=False),
             R(shape, dtype))
    case(f"dropout_module_eval-{dt(dtype)}", lambda x: torch.nn.Dropout(0.3).eval()(x) * 2, R((3, 4), dtype))

# --- reductions ---------------------------------------------------------------

REDUCE_DIMS = [None, 0, -1, (0, 2)]
for dtype in FLOATS:
    for dim in REDUCE_DIMS:
        for keepdim in (False, True):
            if dim is None and keepdim:
                continue  # sum(x) has no keepdim; dim=None with keepdim is dim=() below
            tag = f"dim{dim}".replace(" ", "") + ("_keep" if keepdim else "")
            if dim is None:
                sum_fn, mean_fn = torch.sum, torch.mean
                amax_fn = lambda x: torch.amax(x, dim=())  # noqa: E731 - all dims
            else:
                sum_fn = lambda x, d=dim, k=keepdim: torch.sum(x, d, keepdim=k)  # noqa: E731
                mean_fn = lambda x, d=dim, k=keepdim: torch.mean(x, d, keepdim=k)  # noqa: E731
                amax_fn = lambda x, d=dim, k=keepdim: torch.amax(x, d, keepdim=k)  # noqa: E731
            case(f"sum-{dt(dtype)}-3x4x5_{tag}", sum_fn, R((3, 4, 5), dtype))
            case(f"mean-{dt(dtype)}-3x4x5_{tag}", mean_fn, R((3, 4, 5), dtype))
            case(f"amax-{dt(dtype)}-3x4x5_{tag}", amax_fn, D((3, 4, 5), dtype))
    for shape in [(), (1,), (1, 1)]:
        case(f"sum-{dt(dtype)}-{sh(shape)}", torch.sum, R(shape, dtype))
        case(f"mean-{dt(dtype)}-{sh(shape)}", torch.mean, R(shape, dtype))
        case(f"amax-{dt(dtype)}-{sh(shape)}", lambda x: torch.amax(x, dim=()), R(shape, dtype))
    case(f"sum-{dt(dtype)}-0x3", torch.sum, R((0, 3), dtype))
    case(f"sum-{dt(dtype)}-0x3_dim0", lambda x: x.sum(0), R((0, 3), dtype))
    case(f"sum-{dt(dtype)}-0x3_dim1", lambda x: x.sum(1), R((0, 3), dtype))
    case(f"mean-{dt(dtype)}-0x3_dim1", lambda x: x.mean(1), R((0, 3), dtype))  # (0,): no NaN
    case(f"amax-{dt(dtype)}-0x3_dim1", lambda x: x.amax(1), R((0, 3), dtype))
    case(f"amin-{dt(dtype)}-3x4_dim1", lambda x: x.amin(1), D((3, 4), dtype))
    case(f"max_dim_values-{dt(dtype)}-3x4", lambda x: x.max(1).values, D((3, 4), dtype))
    case(f"sum_dtype-{dt(dtype)}-to_f64", lambda x: x.sum(1, dtype=F64), R((3, 4), dtype))

    for dim, correction, keepdim in [(None, 1, False), (0, 1, False), ((1, 2), 1, True), (-1, 0, False),
                                     (None, 0, False), (1, 1, True)]:
        tag = f"dim{dim}_c{correction}".replace(" ", "") + ("_keep" if keepdim else "")
        for op in ("var", "std"):
            fn = getattr(torch, op)
            case(f"{op}-{dt(dtype)}-3x4x5_{tag}",
                 lambda x, fn=fn, d=dim, c=correction, k=keepdim: fn(x, d, correction=c, keepdim=k),
                 R((3, 4, 5), dtype))
    for op in ("var", "std"):
        case(f"{op}-{dt(dtype)}-6", getattr(torch, op), R((6,), dtype))
        case(f"{op}_unbiased_false-{dt(dtype)}-2x1",
             lambda x, op=op: getattr(x, op)(0, unbiased=False), R((2, 1), dtype))

for dtype in INTS + (BOOL,):
    make = M if dtype == BOOL else (lambda s, d=dtype: I(s, d))
    for shape in [(3, 4), (0, 3), ()]:
        case(f"sum-{dt(dtype)}-{sh(shape)}", torch.sum, make(shape))  # int32/bool sum to int64
    case(f"sum-{dt(dtype)}-3x4_dim1", lambda x: x.sum(1), make((3, 4)))
    case(f"sum-{dt(dtype)}-3x4_dim0_keep", lambda x: x.sum(0, keepdim=True), make((3, 4)))
for dtype in INTS:
    case(f"amax-{dt(dtype)}-3x4_dim1", lambda x: x.amax(1), I((3, 4), dtype))

# --- cat and stack ------------------------------------------------------------

for dtype in FLOATS + INTS + (BOOL,):
    make = (lambda s, d=dtype: R(s, d)) if dtype.is_floating_point else (
        M if dtype == BOOL else (lambda s, d=dtype: I(s, d)))
    d = dt(dtype)
    case(f"cat_dim0-{d}", lambda a, b: torch.cat([a, b]), make((2, 4)), make((3, 4)))
    case(f"cat_dim1-{d}", lambda a, b, c: torch.cat([a, b, c], 1), make((2, 1)), make((2, 3)), make((2, 2)))
    case(f"cat_dim-1-{d}", lambda a, b: torch.cat([a, b], -1), make((2, 3, 1)), make((2, 3, 2)))
    case(f"cat_with_empty-{d}", lambda a, b: torch.cat([a, b]), make((0, 4)), make((3, 4)))
    case(f"cat_single-{d}", lambda a: torch.cat([a], 1), make((2, 3)))
    case(f"stack_dim0-{d}", lambda a, b: torch.stack([a, b]), make((2, 3)), make((2, 3)))
    case(f"stack_dim1-{d}", lambda a, b, c: torch.stack([a, b, c], 1), make((2, 3)), make((2, 3)),
         make((2, 3)))
    case(f"stack_dim-1-{d}", lambda a, b: torch.stack([a, b], -1), make((4,)), make((4,)))
    case(f"stack_empty-{d}", lambda a, b: torch.stack([a, b]), make((0, 3)), make((0, 3)))
    case(f"stack_scalars-{d}", lambda a, b: torch.stack([a, b]), make(()), make(()))
case("cat-promote-f32_f64", lambda a, b: torch.cat([a, b]), R((2, 3), F32), R((1, 3), F64))

# --- views followed by a non-view op -------------------------------------------
# Views are strided aliases on disc; the op after them must read the right
# elements. "+ 0.5" keeps the grad a plain pass-through of w.

VIEWS = {
    "transpose": ((2, 3, 4), lambda x: x.transpose(0, 2)),
    "t": ((3, 4), lambda x: x.t()),
    "permute": ((2, 3, 4), lambda x: x.permute(2, 0, 1)),
    "reshape": ((2, 3, 4), lambda x: x.reshape(6, 4)),
    "reshape_-1": ((2, 3, 4), lambda x: x.reshape(-1)),
    "reshape_noncontig": ((2, 3, 4), lambda x: x.transpose(1, 2).reshape(2, 12)),
    "view": ((2, 3, 4), lambda x: x.view(3, 8)),
    "view_-1": ((2, 3, 4), lambda x: x.view(2, -1)),
    "flatten": ((2, 3, 4), lambda x: x.flatten()),
    "flatten_1": ((2, 3, 4), lambda x: x.flatten(1)),
    "flatten_0_1": ((2, 3, 4), lambda x: x.flatten(0, 1)),
    "unsqueeze_0": ((3, 4), lambda x: x.unsqueeze(0)),
    "unsqueeze_-1": ((3, 4), lambda x: x.unsqueeze(-1)),
    "unsqueeze_1": ((3, 4), lambda x: x.unsqueeze(1)),
    "unsqueeze_scalar": ((), lambda x: x.unsqueeze(0)),
    "squeeze": ((2, 1, 4, 1), lambda x: x.squeeze()),
    "squeeze_1": ((2, 1, 4, 1), lambda x: x.squeeze(1)),
    "squeeze_-1": ((2, 1, 4, 1), lambda x: x.squeeze(-1)),
    "squeeze_noop": ((2, 3), lambda x: x.squeeze(0)),
    "expand": ((3, 1), lambda x: x.expand(3, 4)),
    "expand_new_dims": ((1, 4), lambda x: x.expand(2, 3, 4)),
    "expand_-1": ((3, 1), lambda x: x.expand(-1, 5)),
    "expand_scalar": ((), lambda x: x.expand(2, 3)),
    "expand_to_empty": ((1, 3), lambda x: x.expand(0, 3)),
    "transpose_then_view": ((2, 3, 4), lambda x: x.transpose(0, 1).contiguous().view(3, 8)),
    "permute_expand": ((3, 1), lambda x: x.t().expand(4, 3)),
    "slice": ((5, 4), lambda x: x[1:4, ::2]),
    "select": ((5, 4), lambda x: x[2]),
    "narrow": ((5, 4), lambda x: x.narrow(1, 1, 2)),
    "chunk": ((6, 4), lambda x: x.chunk(3)[1]),
    "diagonal": ((4, 4), lambda x: x.diagonal()),
    "empty_transpose": ((2, 0, 3), lambda x: x.transpose(0, 2)),
    "empty_reshape": ((2, 0, 3), lambda x: x.reshape(0, 6)),
}
for name, (shape, view) in VIEWS.items():
    for dtype in FLOATS:
        case(f"{name}_then_add-{dt(dtype)}", lambda x, v=view: v(x) + 0.5, R(shape, dtype))
    # Also the bare view as the result: .cpu() of a strided disc alias.
    case(f"{name}_bare-f32", view, R(shape, F32))
    case(f"{name}_then_add-i64", lambda x, v=view: v(x) + 1, I(shape, I64))
case("contiguous_after_permute-f32", lambda x: x.permute(1, 0, 2).contiguous(), R((2, 3, 4)))
case("view_then_matmul-f32", lambda x, w: x.view(6, 4) @ w, R((2, 3, 4)), R((4, 5)))
case("expand_then_mul_tensor-f32", lambda x, y: x.expand(3, 4) * y, R((3, 1)), R((3, 4)))

# --- indexing -----------------------------------------------------------------

IDX = torch.tensor([4, 0, 2, 2])  # a duplicate: the backward must accumulate
for dtype in FLOATS + INTS + (BOOL,):
    make = (lambda s, d=dtype: R(s, d)) if dtype.is_floating_point else (
        M if dtype == BOOL else (lambda s, d=dtype: I(s, d)))
    d = dt(dtype)
    case(f"index_select_dim0-{d}", lambda x, i: torch.index_select(x, 0, i), make((5, 3)), IDX)
    case(f"index_select_dim1-{d}", lambda x, i: x.index_select(1, i), make((3, 5)), IDX)
    case(f"index_select_empty_index-{d}", lambda x, i: x.index_select(0, i), make((5, 3)),
         torch.zeros(0, dtype=I64))
    case(f"gather_dim1-{d}", lambda x, i: torch.gather(x, 1, i), make((3, 4)), I((3, 5), I64, 0, 4))
    case(f"gather_dim0-{d}", lambda x, i: torch.gather(x, 0, i), make((3, 4)), I((2, 4), I64, 0, 3))
    case(f"gather_empty_index-{d}", lambda x, i: torch.gather(x, 1, i), make((3, 4)),
         torch.zeros(3, 0, dtype=I64))
    case(f"index_tensor-{d}", lambda x, i: x[i], make((5, 3)), IDX)
    case(f"index_tensor_dim1-{d}", lambda x, i: x[:, i], make((3, 5)), IDX)
for dtype in FLOATS:
    d = dt(dtype)
    case(f"index_select_i32_index-{d}", lambda x, i: x.index_select(0, i), R((5, 3), dtype),
         IDX.to(I32))
    case(f"index_select_1d-{d}", lambda x, i: x.index_select(0, i), R((5,), dtype), IDX)
    case(f"gather_3d-{d}", lambda x, i: x.gather(2, i), R((2, 3, 4), dtype), I((2, 3, 2), I64, 0, 4))
    case(f"embedding-{d}-3", F.embedding, I((3,), I64, 0, 10), R((10, 4), dtype))
    case(f"embedding-{d}-2x3", F.embedding, I((2, 3), I64, 0, 10), R((10, 4), dtype))
    case(f"embedding_dup-{d}", F.embedding, torch.tensor([[1, 1], [7, 1]]), R((10, 4), dtype))
    case(f"embedding_i32-{d}", F.embedding, I((2, 3), I32, 0, 10), R((10, 4), dtype))
    case(f"embedding_padding_idx-{d}", lambda i, w: F.embedding(i, w, padding_idx=0),
         torch.tensor([0, 3, 0, 5]), R((10, 4), dtype))
    case(f"embedding_scale_grad_by_freq-{d}", lambda i, w: F.embedding(i, w, scale_grad_by_freq=True),
         torch.tensor([2, 3, 2, 2]), R((10, 4), dtype))
    case(f"embedding_empty-{d}", F.embedding, torch.zeros(0, 2, dtype=I64), R((10, 4), dtype))

for dtype in FLOATS:
    d = dt(dtype)
    case(f"masked_fill-{d}-3x4", lambda x, m: x.masked_fill(m, -1e9), R((3, 4), dtype), M((3, 4)))
    case(f"masked_fill_broadcast-{d}-2x3x4_1x4", lambda x, m: x.masked_fill(m, 0.5),
         R((2, 3, 4), dtype), M((1, 4)))
    case(f"masked_fill_-inf-{d}", lambda x, m: x.masked_fill(m, float("-inf")), R((3, 4), dtype),
         M((3, 4)))
    case(f"masked_fill_0dim_value-{d}", lambda x, m: x.masked_fill(m, torch.tensor(2.0, dtype=dtype)),
         R((3, 4), dtype), M((3, 4)))
    case(f"masked_fill_empty-{d}", lambda x, m: x.masked_fill(m, 1.0), R((0, 4), dtype), M((0, 4)))
    # The attention pattern: mask, then softmax.
    case(f"masked_fill_softmax-{d}", lambda x, m: x.masked_fill(m, float("-inf")).softmax(-1),
         R((3, 4), dtype), torch.tensor([[False, True, True, True], [False, False, True, True],
                                         [False, False, False, True]]))
for dtype in INTS + (BOOL,):
    make = M if dtype == BOOL else (lambda s, d=dtype: I(s, d))
    case(f"masked_fill-{dt(dtype)}-3x4", lambda x, m: x.masked_fill(m, 1), make((3, 4)), M((3, 4)))

# --- scans, sorting -----------------------------------------------------------

for dtype in FLOATS:
    d = dt(dtype)
    for shape, dim in [((3, 4), 0), ((3, 4), -1), ((5,), 0), ((1,), 0), ((0, 3), 0), ((2, 0), 1), ((), 0)]:
        case(f"cumsum-{d}-{sh(shape)}_dim{dim}", lambda x, dim=dim: torch.cumsum(x, dim), R(shape, dtype))
    case(f"cumsum_dtype-{d}-to_f64", lambda x: x.cumsum(1, dtype=F64), R((3, 4), dtype))

    for shape, k, kw in [((3, 8), 1, {}), ((3, 8), 3, {}), ((3, 8), 3, dict(largest=False)),
                         ((4, 3), 2, dict(dim=0)), ((5,), 5, {}), ((3, 8), 0, {}),
                         ((3, 8), 3, dict(sorted=False))]:
        tag = "_".join(f"{a}{b}" for a, b in kw.items())
        case(f"topk_values-{d}-{sh(shape)}_k{k}{'_' + tag if tag else ''}",
             lambda x, k=k, kw=kw: torch.topk(x, k, **kw).values, D(shape, dtype))
    for shape, kw in [((3, 8), {}), ((3, 8), dict(descending=True)), ((4, 3), dict(dim=0)),
                      ((6,), dict(stable=True)), ((0, 3), {}), ((1,), {})]:
        tag = "_".join(f"{a}{b}" for a, b in kw.items())
        case(f"sort_values-{d}-{sh(shape)}{'_' + tag if tag else ''}",
             lambda x, kw=kw: torch.sort(x, **kw).values, D(shape, dtype))
    for shape, kw in [((3, 8), {}), ((3, 8), dict(dim=1)), ((3, 8), dict(dim=0, keepdim=True)),
                      ((5,), dict(dim=0)), ((1,), {})]:
        tag = "_".join(f"{a}{b}" for a, b in kw.items())
        case(f"argmax-{d}-{sh(shape)}{'_' + tag if tag else ''}",
             lambda x, kw=kw: torch.argmax(x, **kw), D(shape, dtype), backward=False)
for dtype in INTS + (BOOL,):
    make = M if dtype == BOOL else (lambda s, d=dtype: I(s, d))
    case(f"cumsum-{dt(dtype)}-3x4_dim1", lambda x: x.cumsum(1), make((3, 4)))  # int32/bool: int64
for dtype in INTS:
    case(f"sort_values-{dt(dtype)}-3x8", lambda x: x.sort(dim=-1, stable=True).values, I((3, 8), dtype))
    case(f"topk_values-{dt(dtype)}-3x8_k3", lambda x: x.topk(3).values, I((3, 8), dtype, -100, 100))
    case(f"argmax-{dt(dtype)}-3x8_dim1", lambda x: x.argmax(1), I((3, 8), dtype))

# --- type conversions ---------------------------------------------------------

CONVERSIONS = [
    (F32, F64), (F64, F32), (F32, I64), (F32, I32), (F32, BOOL), (F64, I64),
    (I64, F32), (I32, F64), (I32, I64), (I64, I32), (I64, BOOL), (BOOL, F32), (BOOL, I64),
    (F32, torch.float16), (F32, torch.bfloat16), (F64, torch.float16),
]
for src, dst in CONVERSIONS:
    if src.is_floating_point:
        spec = R((3, 4), src) if dst != BOOL else I((3, 4), src, -1, 2)  # zeros for the bool case
    else:
        spec = M((3, 4)) if src == BOOL else I((3, 4), src)
    for shape_tag, s in [("3x4", spec), ("0x2", Spec(spec.kind, (0, 2), spec.dtype, spec.lo, spec.hi))]:
        case(f"to-{dt(src)}_to_{dt(dst)}-{shape_tag}", lambda x, d=dst: x.to(d), s,
             backward=dst.is_floating_point)
# Float -> int truncates toward zero: fractional values of both signs.
case("to-f32_to_i64-fractional", lambda x: (x * 3.7).to(I64), R((3, 4)), backward=False)
case("to-f16_roundtrip", lambda x: x.half().float() * 2, R((3, 4)))
case("to-bf16_roundtrip", lambda x: x.bfloat16().float() * 2, R((3, 4)))
case("to-double_method", lambda x: x.double() + 1, R((3, 4)))
