"""Reduction cases: sum, mean, amax / amin, max, var and std."""
import torch

from .core import F64, BOOL, FLOATS, INTS, R, D, I, M, case, dt, sh

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
