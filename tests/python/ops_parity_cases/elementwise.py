"""Element-wise cases: unary, binary (with broadcasting and type promotion),
tensor-scalar, where, comparisons and logical ops."""
import torch
import torch.nn.functional as F

from .core import F32, F64, I64, I32, BOOL, FLOATS, INTS, R, P, NZ, I, M, case, dt, sh

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
