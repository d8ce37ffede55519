"""Scan and sorting cases: cumsum, topk, sort and argmax."""
import torch

from .core import F64, BOOL, FLOATS, INTS, R, D, I, M, case, dt, sh

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
