"""Batch norm and layer norm, softmax and the losses, and dropout cases."""
import torch
import torch.nn.functional as F

from .core import F64, I64, FLOATS, R, P, I, case, dt, sh

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
