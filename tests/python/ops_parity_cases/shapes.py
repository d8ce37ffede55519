"""Cat and stack cases, and views (transpose, reshape, expand, slicing, ...)
followed by a non-view op."""
import torch

from .core import F32, F64, I64, BOOL, FLOATS, INTS, R, I, M, case, dt

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
