"""torch.autocast("disc"): the CPU autocast policy (which ops run in the
lower-precision dtype, which in float32, which promote), GradScaler, and
mixed-precision training that matches CPU autocast."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_disc


def policy_cases():
    x = torch.randn(4, 8)
    w = torch.randn(6, 8)
    img = torch.randn(2, 3, 8, 8)
    k = torch.randn(4, 3, 3, 3)
    y = torch.randint(0, 6, (4,))
    return {
        "linear": (lambda a, b: F.linear(a, b), (x, w)),
        "matmul": (lambda a, b: a @ b.t(), (x, w)),
        "bmm": (lambda a, b: torch.bmm(a[None], b.t()[None]), (x, w)),
        "conv2d": (lambda a, b: F.conv2d(a, b), (img, k)),
        "softmax (no policy)": (lambda a, b: torch.softmax(F.linear(a, b), -1), (x, w)),
        "cross_entropy (fp32)": (lambda a, b, t: F.cross_entropy(F.linear(a, b), t), (x, w, y)),
        "mse_loss (fp32)": (lambda a, b: F.mse_loss(F.linear(a, b), a[:, :6]), (x, w)),
        "cat (promote)": (lambda a, b: torch.cat([F.linear(a, b), a[:, :6]]), (x, w)),
        "add (no policy)": (lambda a, b: a + b[:4], (x, w)),
    }


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", list(policy_cases()))
def test_each_op_gets_the_cpu_policys_dtype(case, dtype):
    fn, args = policy_cases()[case]
    with torch.autocast("cpu", dtype=dtype):
        want = fn(*args)
    with torch.autocast("disc", dtype=dtype):
        got = fn(*[a.to("disc") for a in args])
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=1e-2, atol=1e-2)


def test_default_dtype_is_bfloat16_as_on_the_cpu():
    assert torch.get_autocast_dtype("disc") == torch.bfloat16
    with torch.disc.amp.autocast():
        y = F.linear(torch.randn(2, 3, device="disc"), torch.randn(4, 3, device="disc"))
    assert y.dtype == torch.bfloat16


def mlp_steps(device, dtype, inject_inf_at=None, steps=8):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=3)
    losses, scales = [], []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 32, generator=g)
        if step == inject_inf_at:
            x[0, 0] = float("inf")
        y = torch.randint(0, 10, (16,), generator=g)
        with torch.autocast(device, dtype=dtype):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.detach().float().cpu())
        scales.append(scaler.get_scale())
    return torch.stack(losses), scales, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_grad_scaler_trains_like_cpu_and_skips_a_step_with_infs(dtype, counters):
    want_losses, want_scales, want_params = mlp_steps("cpu", dtype, inject_inf_at=4)
    got_losses, got_scales, got_params = mlp_steps("disc", dtype, inject_inf_at=4)
    # The inf step is skipped and the scale halved, then grows every 3 steps.
    assert got_scales == want_scales and want_scales[4] == want_scales[3] / 2
    finite = torch.isfinite(want_losses)
    assert torch.equal(finite, torch.isfinite(got_losses))
    torch.testing.assert_close(got_losses[finite], want_losses[finite], rtol=1e-3, atol=1e-4)
    for got, want in zip(got_params, want_params):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
    assert counters()["fallbacks"] == 0, torch_disc.metrics.fallbacks()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("n,ci,co,size,k,stride,pad,groups",
                         [(2, 3, 8, 12, 3, 1, 1, 1), (4, 8, 16, 9, 3, 2, 0, 1),
                          (2, 8, 8, 7, 3, 1, 1, 8)])
def test_reduced_float_convolutions_run_on_onednn(n, ci, co, size, k, stride, pad, groups, dtype,
                                                  counters):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, ci, size, size, generator=g).to(dtype)
    w = (torch.randn(co, ci // groups, k, k, generator=g) * 0.3).to(dtype)
    b = torch.randn(co, generator=g).to(dtype)

    def run(x, w, b):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        y = F.conv2d(x, w, b, stride, pad, 1, groups)
        y.backward(torch.ones_like(y))
        return [t.cpu() for t in (y.detach(), x.grad, w.grad, b.grad)]

    want = run(x, w, b)
    got = run(*(t.to("disc") for t in (x, w, b)))
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    for a, e in zip(got, want):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), e.float(), rtol=tol, atol=tol)
    c = counters()
    # Forward and backward on oneDNN: in bf16 where its bf16 kernels are
    # chosen (DISC_ONEDNN_BF16), else widened to f32 and rounded once
    # (counted); f16 always widened.
    assert c.get("library.onednn", 0) == 2 and c.get("library.aten", 0) == 0
    widened = 0 if dtype == torch.bfloat16 and not torch_disc._C.bf16_widened() else 2
    key = "library.bf16_widened" if dtype == torch.bfloat16 else "library.f16_widened"
    assert c.get(key, 0) == widened


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_group_norm_under_autocast_trains_as_eager(dtype, counters):
    # native_group_norm is recorded whole and run by ATen's CPU kernel, which
    # takes a bf16 (f16) input with f32 weights and returns the input's
    # dtype. PyTorch's decomposition promoted it to f32, and its backward then
    # refused the f32 gradient (wav2vec2 could not train under autocast).
    torch.manual_seed(0)
    conv, norm = torch.nn.Conv1d(1, 8, 5), torch.nn.GroupNorm(4, 8)
    x = torch.randn(2, 1, 40)

    def step(device):
        c, g = copy.deepcopy(conv).to(device), copy.deepcopy(norm).to(device)
        with torch.autocast(device, dtype=dtype):
            y = g(c(x.to(device)))
        F.gelu(y).float().pow(2).sum().backward()
        return [y.dtype] + [t.detach().cpu() for t in (y, c.weight.grad, g.weight.grad, g.bias.grad)]

    want, got = step("cpu"), step("disc")
    assert got[0] == want[0] == dtype
    assert all(torch.equal(a, e) for a, e in zip(got[1:], want[1:]))
    c = counters()
    assert c["fallbacks"] == 0 and c.get("replay.dtype_mismatches.aten::native_group_norm", 0) == 0


def autocast_eval(model, x, device, dtype=torch.bfloat16):
    with torch.no_grad(), torch.autocast(device, dtype=dtype):
        return model(x.to(device)).cpu()


def test_inference_keeps_the_weights_casts_until_they_change(counters):
    # Autocast casts every weight to bf16 in every forward. In no-grad mode
    # a graph that leaves the weights as they are keeps their casts for the
    # next one (4 here: two weights, two biases), keyed by the parameter and
    # its version: a weight written since is cast again, and the results
    # stay eager's. Training (grad mode) looks none up.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    on_disc = copy.deepcopy(model).to("disc")
    x = torch.randn(32, 64)

    def evaluate():
        before = counters()
        got, want = autocast_eval(on_disc, x, "disc"), autocast_eval(model, x, "cpu")
        # oneDNN's bf16 GEMMs may add up in another order than eager's: a
        # stale cast (weights 1 smaller) would be far outside.
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        c = counters()
        return [c.get(k, 0) - before.get(k, 0) for k in ("cast_cache.hits", "cast_cache.misses")]

    assert evaluate() == [0, 4]
    assert evaluate() == [4, 0]
    assert torch_disc._C.kept_casts() == 4
    with torch.no_grad():
        model[0].weight.add_(1)
        on_disc[0].weight.add_(1)
    assert evaluate() == [3, 0]  # the weight's add_ and cast run in one graph
    assert evaluate() == [3, 1]  # the new version, cast once more
    assert evaluate() == [4, 0]

    before = counters().get("cast_cache.misses", 0)
    with torch.autocast("disc", dtype=torch.bfloat16):
        on_disc(x.to("disc")).float().sum().backward()
    torch_disc.sync(wait=True)
    assert counters().get("cast_cache.misses", 0) == before


def test_cast_cache_off_keeps_nothing(counters):
    model = torch.nn.Linear(8, 4).to("disc")
    torch_disc.options.set("DISC_CAST_CACHE", "0")
    try:
        for _ in range(2):
            autocast_eval(model, torch.randn(2, 8), "disc")
        assert torch_disc._C.kept_casts() == 0
        assert counters().get("cast_cache.hits", 0) == 0
    finally:
        torch_disc.options.set("DISC_CAST_CACHE", "1")


@pytest.mark.parametrize("mode", ["widened", "native"])
def test_bf16_linear_runs_widened_as_disc_gemm_bf16_says(mode, counters):
    # A bf16 product is exact in f32 and oneDNN's bf16 and f32 GEMMs both
    # accumulate in f32, so either way the GEMM is eager's up to summation
    # order. "widened" (and, on a CPU without bf16, every mode) converts the
    # operands to f32 and rounds the result once, counted per GEMM; "native"
    # runs oneDNN's bf16 kernels where the CPU has them.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 96, generator=g).bfloat16()
    w = torch.randn(80, 96, generator=g).bfloat16()
    b = torch.randn(80, generator=g).bfloat16()
    torch_disc.options.set("DISC_ONEDNN_BF16", mode)
    try:
        got = F.linear(x.to("disc"), w.to("disc"), b.to("disc")).cpu()
    finally:
        torch_disc.options.set("DISC_ONEDNN_BF16", "auto")
    assert got.dtype == torch.bfloat16
    exact = x.double() @ w.double().t() + b.double()
    torch.testing.assert_close(got.double(), exact, rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=8e-3, atol=1e-2)
    widened = mode == "widened" or not torch_disc._C.bf16_native()
    assert counters().get("library.bf16_widened", 0) == (1 if widened else 0)
    assert counters()["library.onednn"] == 1
