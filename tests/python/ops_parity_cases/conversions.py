"""Type conversion cases (``.to(dtype)`` and the dtype methods)."""
import torch

from .core import F32, F64, I64, I32, BOOL, Spec, R, I, M, case, dt

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
