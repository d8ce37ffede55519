"""Matmul family (matmul, mm, bmm, addmm, linear), convolution and pooling
cases."""
import torch
import torch.nn.functional as F

from .core import FLOATS, R, D, case, dt, sh

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
