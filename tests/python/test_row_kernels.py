"""Generated kInput / kStitch kernels (lowering/codegen/cpu/fused_kernel.cpp)
against CPU eager, forward and backward, with pinned kernel counts.

Softmax, log_softmax and layer norm are one generated kernel each, forward
and backward; a reduction over the last dim, or over all leading dims (a
bias grad), takes its element-wise producers into one kernel. Shapes cover
row lengths that are and are not multiples of the vector width, length 1
and 0, no rows, 1-D inputs, and inputs that are not contiguous along the
row (the strided path).
"""
import pytest
import torch
import torch.nn.functional as F
import torch_disc

SHAPES = [(4, 37), (3, 5, 64), (2, 1), (1000,), (0, 8), (5, 0), (64, 10), (2, 3, 4, 33)]
TOL = dict(rtol=1e-5, atol=1e-5, equal_nan=True)  # reductions reorder their sums


def layer_norm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5)


CASES = {
    # name: (fn of x and the affine params, kernels in the forward graph)
    "softmax": lambda x, w, b: torch.softmax(x * 2 + 1, -1),
    "log_softmax": lambda x, w, b: torch.log_softmax(x, -1),
    # SDPA's softmax (rows that are all -inf give 0): here with some -inf.
    "safe_softmax": lambda x, w, b: torch._safe_softmax(x.masked_fill(x > 1, float("-inf")), -1),
    "layer_norm": layer_norm,
    "layer_norm_no_affine": lambda x, w, b: layer_norm(x, None, None),
    "sum_of_exp": lambda x, w, b: (x.exp() * 0.5).sum(-1),
    "mean_keepdim": lambda x, w, b: x.mean(-1, keepdim=True),
}


def run_both(fn, shape, grad_of_params=False):
    """Forward and backward of `fn` on CPU and on disc; returns both results
    and the disc counters of the forward and the backward graph."""
    torch.manual_seed(0)
    x = torch.randn(shape)
    n = shape[-1]
    w, b = torch.linspace(0.5, 1.5, n), torch.linspace(-1, 1, n)
    out = {}
    for dev in ("cpu", "disc"):
        xs, ws, bs = (t.detach().clone().to(dev).requires_grad_() for t in (x, w, b))
        torch_disc.sync()
        torch_disc.metrics.reset()
        y = fn(xs, ws, bs)
        y_host = y.detach().cpu()
        fwd = torch_disc.metrics.counters()
        g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
        torch_disc.metrics.reset()
        y.backward(g.to(dev))
        grads = [t.grad.cpu() if t.grad is not None else None for t in (xs, ws, bs)]
        bwd = torch_disc.metrics.counters()
        out[dev] = (y_host, grads, fwd, bwd)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(CASES))
def test_row_kernels_match_eager_forward_and_backward(name, shape):
    out = run_both(CASES[name], shape)
    y_cpu, g_cpu, _, _ = out["cpu"]
    y_disc, g_disc, fwd, bwd = out["disc"]
    torch.testing.assert_close(y_disc, y_cpu, **TOL)
    for a, b in zip(g_disc, g_cpu):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, **TOL)
    for c in (fwd, bwd):
        assert c.get("codegen.declined", 0) == 0
        assert c["fallbacks"] == 0


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "safe_softmax", "layer_norm"])
def test_stitch_ops_are_one_kernel_forward_and_one_backward(name):
    fn = {"softmax": lambda x, w, b: torch.softmax(x, -1),
          "log_softmax": lambda x, w, b: torch.log_softmax(x, -1),
          "safe_softmax": lambda x, w, b: torch._safe_softmax(x, -1),
          "layer_norm": layer_norm}[name]
    _, _, fwd, bwd = run_both(fn, (64, 48))["disc"]
    assert (fwd["launches.fused"], fwd["launches.aten"]) == (1, 0)
    # Backward: the op's backward is one kernel; layer norm's writes the
    # input, weight and bias grads in it.
    assert (bwd["launches.fused"], bwd["launches.aten"]) == (1, 0)


BF16_SOFTMAXES = {"softmax": lambda x: torch.softmax(x, -1),
                  "log_softmax": lambda x: torch.log_softmax(x, -1),
                  "safe_softmax": lambda x: torch._safe_softmax(x, -1)}


def ulps(a, b, dtype):
    """|a - b| in units of dtype's last place at b (2^-7 of its binade for
    bf16, 2^-10 for f16, whose subnormals have the place of 2^-14's)."""
    info = torch.finfo(dtype)
    mantissa = {torch.bfloat16: 7, torch.float16: 10}[dtype]
    b = b.float()
    ulp = torch.exp2(torch.floor(torch.log2(b.abs().clamp_min(info.tiny))) - mantissa)
    return ((a.float() - b).abs() / ulp).nan_to_num(0.0)


REDUCED = [torch.bfloat16, torch.float16]


def as_eager(got, want, dtype):
    """bf16: eager's bits. f16 keeps three mantissa bits more, so f32 sums
    that differ in their last bits (eager's vector order against the
    kernel's) show at near-ties: within one ulp."""
    if dtype == torch.bfloat16:
        return torch.equal(got, want)
    return got.dtype == want.dtype and ulps(got, want, dtype).max() <= 1


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("shape", [(4, 37), (3, 5, 64), (2, 3, 4, 33), (64, 10)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(BF16_SOFTMAXES))
def test_reduced_float_softmaxes_are_one_kernel_computed_in_f32_and_rounded_once(name, shape,
                                                                                  dtype):
    # bf16 (f16) in, f32 inside, each element rounded once on the way out:
    # no ATen kernel and no f32 copy of the rows. softmax's forward and every
    # backward give eager's bits; log_softmax is the f32 answer correctly
    # rounded, where eager's CPU kernel is up to 1.5 ulp off, so the two
    # differ by at most one ulp.
    fn = BF16_SOFTMAXES[name]
    torch.manual_seed(0)
    x = torch.randn(shape).to(dtype)
    if name == "safe_softmax":  # some -inf, and a row all -inf where there are rows
        x = x.masked_fill(x > 1, float("-inf"))
        x.view(-1, shape[-1])[1] = float("-inf")
    g = torch.randn(shape).to(dtype)
    want, want_f32 = fn(x), fn(x.float())
    xd = x.to("disc").requires_grad_()
    torch_disc.sync()
    torch_disc.metrics.reset()
    y = fn(xd)
    got = y.detach().cpu()
    fwd = torch_disc.metrics.counters()
    assert got.dtype == dtype
    assert (fwd["launches.fused"], fwd["launches.aten"], fwd.get("codegen.declined", 0)) == (1, 0, 0)
    assert ulps(got, want_f32, dtype).max() <= 0.5 + 2 ** -10
    if name == "log_softmax":
        assert ulps(got, want, dtype).max() <= 1
    else:
        assert as_eager(got, want, dtype)
    # The backward of each device's own output: the same formula on the
    # same bf16 inputs.
    xc = x.clone().requires_grad_()
    yc = fn(xc)
    yc.backward(g)
    torch_disc.metrics.reset()
    y.backward(g.to("disc"))
    grad = xd.grad.cpu()
    bwd = torch_disc.metrics.counters()
    assert bwd["launches.aten"] == 0 and bwd.get("codegen.declined", 0) == 0
    if name != "log_softmax":
        assert as_eager(grad, xc.grad, dtype)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("shape", [(4, 37), (3, 5, 64), (2, 3, 4, 33), (64, 10)],
                         ids=lambda s: "x".join(map(str, s)))
def test_reduced_float_layer_norm_with_f32_weights_is_one_kernel_each_way(shape, dtype):
    # Autocast's mix: bf16 (f16) rows, f32 weight and bias. The output and
    # dx are bf16 (f16) with eager's bits; dw and db are f32 sums, exact to
    # float64 where eager's kernel rounds them to bf16 first.
    torch.manual_seed(0)
    n = shape[-1]
    x, g = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    w, b = torch.linspace(0.5, 1.5, n), torch.linspace(-1, 1, n)
    grads, fwd, bwd = {}, None, None
    for dev in ("cpu", "disc", "float64"):
        wide = torch.float64 if dev == "float64" else None
        on = "cpu" if dev == "float64" else dev
        xs, ws, bs = (t.detach().clone().to(on, wide).requires_grad_() for t in (x, w, b))
        torch_disc.sync()
        torch_disc.metrics.reset()
        y = F.layer_norm(xs, [n], ws, bs)
        y_host = y.detach().cpu()
        fwd = torch_disc.metrics.counters() if dev == "disc" else fwd
        torch_disc.metrics.reset()
        y.backward(g.to(on, wide))
        grads[dev] = [y_host] + [t.grad.cpu() for t in (xs, ws, bs)]
        bwd = torch_disc.metrics.counters() if dev == "disc" else bwd
    assert (fwd["launches.fused"], fwd["launches.aten"]) == (1, 0)
    assert (bwd["launches.fused"], bwd["launches.aten"], bwd.get("codegen.declined", 0)) == (1, 0, 0)
    (y, dx, dw, db), (y_cpu, dx_cpu, _, _) = grads["disc"], grads["cpu"]
    assert y.dtype == dx.dtype == dtype and dw.dtype == db.dtype == torch.float32
    assert as_eager(y, y_cpu, dtype) and as_eager(dx, dx_cpu, dtype)
    for got, exact in zip((dw, db), grads["float64"][2:]):
        torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("shape", [(4, 37), (3, 5, 64), (64, 10)], ids=lambda s: "x".join(map(str, s)))
def test_reduced_float_layer_norm_with_reduced_weights_is_one_kernel_each_way(shape, affine, dtype):
    # A model in bf16 (f16) throughout: weights, mean and rstd in the row's
    # dtype too. The output is computed from the f32 moments, which are
    # stored rounded, and the backward reads them rounded, as ATen's CPU
    # kernels do: eager's bits for y, mean, rstd and dx; dw and db are f32
    # sums rounded once (eager's drift further from the exact sums).
    torch.manual_seed(0)
    n = shape[-1]
    x, g = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    params = (torch.linspace(0.5, 1.5, n).to(dtype), torch.linspace(-1, 1, n).to(dtype)) if affine else ()
    results, fwd, bwd = {}, None, None
    for dev in ("cpu", "disc"):
        xs = x.detach().to(dev).requires_grad_()
        ps = [t.detach().to(dev).requires_grad_() for t in params]
        torch_disc.sync()
        torch_disc.metrics.reset()
        y, mean, rstd = torch.ops.aten.native_layer_norm(xs, [n], *(ps or (None, None)), 1e-5)
        host = [t.detach().cpu() for t in (y, mean, rstd)]
        fwd = torch_disc.metrics.counters() if dev == "disc" else fwd
        torch_disc.metrics.reset()
        y.backward(g.to(dev))
        results[dev] = host + [t.grad.cpu() for t in [xs, *ps]]
        bwd = torch_disc.metrics.counters() if dev == "disc" else bwd
    assert (fwd["launches.fused"], fwd["launches.aten"]) == (1, 0)
    assert (bwd["launches.fused"], bwd["launches.aten"], bwd.get("codegen.declined", 0)) == (1, 0, 0)
    got, want = results["disc"], results["cpu"]
    assert [t.dtype for t in got] == [t.dtype for t in want] == [dtype] * len(want)
    for a, b in zip(got[:4], want[:4]):  # y, mean, rstd, dx
        assert as_eager(a, b, dtype)
    if affine:  # dw, db: f32 sums rounded once, within an ulp of the exact sums
        _, mean, rstd = (t.double() for t in got[:3])
        rows = [t.double().reshape(-1, n) for t in (x, g)]
        xhat = (rows[0] - mean.reshape(-1, 1)) * rstd.reshape(-1, 1)
        for a, exact in zip(got[4:], ((rows[1] * xhat).sum(0), rows[1].sum(0))):
            assert ulps(a, exact.to(dtype), dtype).max() <= 1


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("weights", ["none", "same", "float32"])
def test_saved_statistics_have_the_cpu_kernels_dtype(dtype, weights, counters):
    # Meta calls layer norm's mean and rstd f32 and group norm's the input's
    # dtype, whatever the weights; the CPU kernels keep them in f32 only
    # beside f32 weights. The trace takes the CPU's dtype, so no value
    # differs from its recorded type and the backward gets eager's bits.
    torch.manual_seed(0)
    x, g = torch.randn(2, 8, 6).to(dtype), torch.randn(2, 8, 6).to(dtype)
    wdtype = {"none": None, "same": dtype, "float32": torch.float32}[weights]

    def run(device):
        xs = x.detach().to(device).requires_grad_()
        params = [] if wdtype is None else [torch.randn(n).to(wdtype).to(device).requires_grad_()
                                            for n in (6, 6, 8, 8)]
        lw, lb, gw, gb = params or (None,) * 4
        ln = torch.ops.aten.native_layer_norm(xs, [6], lw, lb, 1e-5)
        gn = torch.ops.aten.native_group_norm(xs, gw, gb, 2, 8, 6, 4, 1e-5)
        (ln[0] * g.to(device) + gn[0] * g.to(device)).sum().backward()
        return [t.dtype for t in ln + gn], [t.detach().cpu() for t in ln + gn + (xs.grad,)]

    torch.manual_seed(1)
    want_dtypes, want = run("cpu")
    torch.manual_seed(1)
    got_dtypes, got = run("disc")
    assert got_dtypes == want_dtypes
    for a, b in zip(got, want):
        if a.dtype == torch.float32:  # layer norm's f32 moments: another order of sums
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(a, b)
    assert not [k for k in counters() if k.startswith("replay.dtype_mismatches")]


def test_safe_softmax_gives_zero_for_fully_masked_rows(counters):
    # Scaled-dot-product attention on disc runs ATen's math path, whose
    # softmax is _safe_softmax: a query that may attend to nothing gets 0,
    # not NaN. One kernel, recorded whole (not softmax + isneginf + all +
    # where on ATen). A row with a NaN stays NaN, as on the CPU.
    x = torch.randn(6, 33)
    x[0] = float("-inf")
    x[3] = float("-inf")
    x[4, :20] = float("-inf")
    x[5, 7] = float("nan")
    want = torch._safe_softmax(x, -1)
    got = torch._safe_softmax(x.to("disc"), -1).cpu()
    torch.testing.assert_close(got, want, **TOL)
    assert got[0].eq(0).all() and got[3].eq(0).all() and got[5].isnan().all()
    c = counters()
    assert (c["launches.fused"], c["launches.aten"]) == (1, 0)


def test_layer_norm_backward_honours_the_output_mask():
    torch.manual_seed(0)
    x = torch.randn(6, 40)
    ln = torch.nn.LayerNorm(40)
    ln.weight.requires_grad_(False)
    lnd = torch.nn.LayerNorm(40).to("disc")
    lnd.weight.requires_grad_(False)
    xd = x.to("disc").requires_grad_()
    xc = x.clone().requires_grad_()
    ln(xc).pow(2).sum().backward()
    lnd(xd).pow(2).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **TOL)
    torch.testing.assert_close(lnd.bias.grad.cpu(), ln.bias.grad, **TOL)
    assert lnd.weight.grad is None


def test_bias_grad_is_a_column_sum_kernel(counters):
    # nn.Linear's bias grad sums the output grad over the batch: one kernel
    # with per-column sums (one chunk of rows at this size: nothing to add up).
    torch.manual_seed(0)
    g = torch.randn(37, 3, 70)
    got = (g.to("disc") * 2).sum((0, 1)).cpu()
    torch.testing.assert_close(got, (g * 2).sum((0, 1)), **TOL)
    assert counters()["launches.fused"] == 1
    assert counters()["launches.aten"] == 0


COLUMN_REDUCTIONS = {
    "sum": lambda t: (t * 2).sum((0, 1)),
    "mean": lambda t: (t * 2).mean((0, 1)),
    "mean_keepdim": lambda t: (t - 1).mean((1, 0), keepdim=True),
    "amax": lambda t: (t * 2).amax((0, 1)),
    "amax_keepdim": lambda t: t.exp().amax((-3, -2), keepdim=True),
}


MIDDLE_REDUCTIONS = {
    "sum": lambda t: (t * 2).sum(1),
    "mean": lambda t: (t - 1).mean(1),
    "mean_keepdim": lambda t: t.exp().mean(1, keepdim=True),
    "amax": lambda t: (t * 2).amax(1),
    "sum_4d": lambda t: t.reshape(t.shape[0], t.shape[1], 1, t.shape[2]).expand(
        t.shape[0], t.shape[1], 3, t.shape[2]).relu().sum((1, 2)),
}

# (kind, name): over all leading dims (one kernel with per-column partials in
# chunks of rows fixed by the size, folded by the launcher; one chunk below
# 64K elements, 4 for 260x9x70), or over every dim but the
# first and last ([B, S, H] -> [B, H]: the same kernel, one chunk per index
# of dim 0).
COLUMN_CASES = [(kind, name) for kind, table in (("leading", COLUMN_REDUCTIONS),
                                                 ("middle", MIDDLE_REDUCTIONS)) for name in table]
COLUMN_SHAPES = [(37, 3, 70), (1, 1, 5), (40, 9, 17), (0, 3, 4), (2, 8, 1), (260, 9, 70)]


@pytest.mark.parametrize("shape", COLUMN_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind,name", COLUMN_CASES, ids=["-".join(c) for c in COLUMN_CASES])
def test_column_reductions_are_one_kernel(kind, name, shape, counters):
    if kind == "leading" and name.startswith("amax") and shape[0] == 0:
        pytest.skip("amax over no rows is an error in eager too")
    torch.manual_seed(0)
    x = torch.randn(*shape)
    fn = (COLUMN_REDUCTIONS if kind == "leading" else MIDDLE_REDUCTIONS)[name]
    got = fn(x.to("disc")).cpu()
    # 2,340 rows summed in another order than eager's: float32 rounding of
    # sums ~100 in size, against a float64 reference.
    tol = dict(rtol=1e-4, atol=1e-4) if x.numel() > 65536 else TOL
    torch.testing.assert_close(got, fn(x.double()).float(), **tol)
    assert counters().get("codegen.declined", 0) == 0
    assert counters()["launches.aten"] == 0
    assert counters().get("launches.views", 0) == (1 if name == "sum_4d" else 0)  # an expand
    assert counters()["launches.fused"] == 1


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("shape,dims", [((37, 3, 70), (0, 1)), ((260, 9, 70), (0, 1)),
                                        ((2, 4096, 64), (0, 1)), ((512, 96), 0),
                                        ((4, 100, 33), 1)], ids=str)
def test_reduced_float_column_sums_are_one_kernel(shape, dims, dtype, counters):
    # Autocast's bias gradients: a bf16 (f16) grad summed over the rows.
    # The kernel keeps f32 partial sums, which the launcher adds up and
    # rounds once, as ATen's CPU sum accumulates in f32 and rounds once:
    # within one ulp of eager's, the sums being added in another order.
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * 3
    got = x.to("disc").to(dtype).sum(dims).cpu()
    want = x.to(dtype).sum(dims)
    assert got.dtype == dtype
    ulp = (torch.nextafter(want.abs(), torch.tensor(float("inf"), dtype=dtype)) - want.abs()).float()
    assert bool(((got.float() - want.float()).abs() <= ulp).all())
    assert (counters()["launches.fused"], counters()["launches.aten"]) == (1, 0)


def test_column_amax_propagates_nan_and_handles_minus_inf():
    x = torch.randn(33, 40)
    x[5, 3] = float("nan")
    x[20, 39] = float("nan")  # a column in the scalar tail
    x[:, 7] = float("-inf")
    got = x.to("disc").amax(0).cpu()
    torch.testing.assert_close(got, x.amax(0), equal_nan=True)


def test_column_mean_of_no_rows_is_nan():
    x = torch.randn(0, 6)
    torch.testing.assert_close(x.to("disc").mean(0).cpu(), x.mean(0), equal_nan=True)


def test_middle_dim_mean_pooling_trains_like_eager():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 4)
    x = torch.randn(6, 11, 16)
    lind = torch.nn.Linear(16, 4).to("disc")
    lind.load_state_dict(lin.state_dict())
    lin(x).amax(1).mean(1).sum().backward()
    lind(x.to("disc")).amax(1).mean(1).sum().backward()
    torch.testing.assert_close(lind.weight.grad.cpu(), lin.weight.grad, **TOL)


def test_rows_not_contiguous_take_the_strided_path():
    torch.manual_seed(0)
    x = torch.randn(33, 20)
    for fn in (lambda t: torch.softmax(t.t(), -1), lambda t: t.t().sum(-1),
               lambda t: layer_norm(t.t(), None, None)):
        torch.testing.assert_close(fn(x.to("disc")).cpu(), fn(x), **TOL)


def test_amax_propagates_nan_and_softmax_of_all_minus_inf_is_nan():
    x = torch.randn(4, 40)
    x[1, 3] = float("nan")
    x[2, 39] = float("nan")  # in the scalar tail
    torch.testing.assert_close(x.to("disc").amax(-1).cpu(), x.amax(-1), equal_nan=True)
    y = torch.full((3, 40), float("-inf"))
    torch.testing.assert_close(y.to("disc").amax(-1).cpu(), y.amax(-1))
    torch.testing.assert_close(torch.softmax(y.to("disc"), -1).cpu(), torch.softmax(y, -1),
                               equal_nan=True)


def test_one_row_kernel_serves_every_row_length(counters):
    # Kernels are shape-generic: after the first length, new lengths compile
    # neither a graph nor a kernel.
    x = torch.randn(8, 16)
    torch.testing.assert_close(torch.softmax(x.to("disc"), -1).cpu(), torch.softmax(x, -1))
    torch_disc.metrics.reset()
    for n in (17, 40, 100, 3):
        x = torch.randn(8, n)
        torch.testing.assert_close(torch.softmax(x.to("disc"), -1).cpu(), torch.softmax(x, -1))
    c = counters()
    assert c["cache_misses"] == 0
    assert c.get("kernels_jitted", 0) == 0
    assert c["launches.fused"] == 4
