"""Generated kernels (kLoop fusion -> MLIR -> LLVM) against CPU eager.

Random element-wise chains with broadcasting, random ranks and sizes
(including 1 and 0): every graph runs through a JIT-compiled fused kernel and
must match eager. Chains come from a fixed set of templates, so each kernel
is compiled once and then reused across shapes (kernels are shape-generic).
"""
import copy
import random

import pytest
import torch
import torch.nn.functional as F
import torch_disc
from conftest import counted

UNARY = [torch.relu, torch.exp, torch.tanh, torch.sigmoid, torch.neg, torch.abs]
BINARY = [torch.add, torch.sub, torch.mul, lambda a, b: a + 0.5 * b]


def make_template(rng):
    """A chain of 2-4 element-wise ops over two inputs."""
    steps = []
    for _ in range(rng.randint(2, 4)):
        if rng.random() < 0.5:
            steps.append(("u", rng.randrange(len(UNARY))))
        else:
            steps.append(("b", rng.randrange(len(BINARY))))
    return steps


def run(template, x, y):
    v = x
    for kind, k in template:
        v = UNARY[k](v) if kind == "u" else BINARY[k](v, y)
    return v


def random_shapes(rng):
    rank = rng.randint(1, 3)
    shape = [rng.choice([1, 2, 3, 5, 8, 17]) for _ in range(rank)]
    if rng.random() < 0.05:
        shape[rng.randrange(rank)] = 0
    # y broadcasts against x: some dims set to 1, maybe fewer dims.
    yshape = [s if rng.random() < 0.7 else 1 for s in shape][rng.randint(0, rank - 1):]
    return shape, yshape


def test_random_fused_chains_match_eager(counters):
    rng = random.Random(0)
    templates = [make_template(rng) for _ in range(20)]
    mismatches = []
    for i in range(1000):
        template = templates[i % len(templates)]
        shape, yshape = random_shapes(rng)
        g = torch.Generator().manual_seed(i)
        x = torch.randn(shape, generator=g)
        y = torch.randn(yshape, generator=g)
        want = run(template, x, y)
        got = run(template, x.to("disc"), y.to("disc")).cpu()
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True):
            mismatches.append((template, shape, yshape))
    assert mismatches == []
    c = counters()
    assert c["launches.fused"] >= 900  # nearly every graph ran a fused kernel
    assert c["kernels_jitted"] + c.get("kernel_cache_hits", 0) >= c["kernels_compiled"]
    assert c["fallbacks"] == 0


def test_mlp_step_runs_fused_kernels(counters):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to("disc")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 20), torch.randn(16, 1)
    for _ in range(5):
        for m, o, xx, yy in ((model, opt, x.to("disc"), y.to("disc")), (ref, ref_opt, x, y)):
            o.zero_grad()
            ((m(xx) - yy) ** 2).mean().backward()
            o.step()
    torch.testing.assert_close(model[0].weight.cpu(), ref[0].weight.detach(), rtol=1e-5, atol=1e-6)
    assert counters()["launches.fused"] > 0


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_updates_run_fused_and_match_eager(optimizer, counters):
    # Adam's per-parameter update (lerp_, addcmul_, sqrt, div_, add_,
    # addcdiv_) is one kLoop kernel per parameter on disc.
    make = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[optimizer]
    torch.manual_seed(0)
    ref = torch.nn.Linear(12, 3)
    model = torch.nn.Linear(12, 3).to("disc")
    model.load_state_dict(ref.state_dict())
    opts = [make(m.parameters(), lr=1e-2) for m in (model, ref)]
    x, y = torch.randn(8, 12), torch.randn(8, 3)
    for _ in range(6):
        for m, o, xx, yy in ((model, opts[0], x.to("disc"), y.to("disc")), (ref, opts[1], x, y)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(xx), yy).backward()
            o.step()
    torch.testing.assert_close(model.weight.detach().cpu(), ref.weight.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.bias.detach().cpu(), ref.bias.detach(), rtol=1e-5, atol=1e-6)
    assert counters()["launches.fused"] >= 2 * 5  # two parameters, steady-state steps
    assert counters()["fallbacks"] == 0


def test_clipped_gradients_scale_inside_the_adamw_kernels(counters):
    # clip_grad_norm_'s grad.mul_(coef) is read by two of AdamW's ops; it
    # joins their kernel (fusion-plan) instead of a pass of its own on ATen.
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    model = copy.deepcopy(ref).to("disc")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref)]
    x, y = torch.randn(8, 12), torch.randn(8, 3)
    with torch_disc.options.override(DISC_PROFILE=True):
        for _ in range(4):
            for m, o, xx, yy in ((model, opts[0], x.to("disc"), y.to("disc")), (ref, opts[1], x, y)):
                o.zero_grad()
                torch.nn.functional.mse_loss(m(xx), yy).backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05)  # clips: coef < 1
                o.step()
        c = counters()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    assert not any("mul_.Tensor" in k for k in c if k.startswith("profile.aten."))
    assert c["fallbacks"] == 0


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_its_backward_are_generated_even_alone(approximate):
    # Between two GEMMs (a transformer's feed-forward block) GELU and its
    # backward have no element-wise neighbours; their erf / tanh math still
    # earns them a kernel each. Against float64: as close as eager's float32.
    torch.manual_seed(0)
    x = torch.randn(64, 300) * 3
    dy = torch.randn(64, 300)
    x64 = x.double().requires_grad_()
    y64 = F.gelu(x64, approximate=approximate)
    (g64,) = torch.autograd.grad(y64, x64, dy.double())
    x32 = x.clone().requires_grad_()
    eager = F.gelu(x32, approximate=approximate)
    (eager_g,) = torch.autograd.grad(eager, x32, dy)

    def run():
        xd = x.to("disc").requires_grad_()
        y = F.gelu(xd, approximate=approximate)
        (g,) = torch.autograd.grad(y, xd, dy.to("disc"))
        return y, g

    with torch_disc.options.override(DISC_PROFILE=True):
        torch_disc.metrics.reset()
        y, g = [t.cpu() for t in run()]
        c = torch_disc.metrics.counters()
    assert c["profile.fused.loop_kernel.calls"] == 2
    assert not any(k.startswith("profile.aten.aten::gelu") for k in c)
    for got, ref, ours in ((y, y64, eager), (g, g64, eager_g)):
        err = (got.double() - ref).abs().max().item()
        eager_err = (ours.double() - ref).abs().max().item()
        assert err <= 4 * eager_err + 1e-6, (err, eager_err)


POW_VALUES = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30, -3.5, 7.25])


@pytest.mark.parametrize("exponent,generated", [
    (0, True), (1, True), (2, True), (3, True), (-1, True), (2.0, True), (3.0, True),
    (0.5, False), (-0.5, False), (-2, False), (1.7, False)])
def test_pow_by_a_number_is_generated_where_the_kernel_gives_atens_bits(exponent, generated):
    # 0 and 1 fill and copy, 2 and 3 multiply, -1 divides, as ATen's CPU
    # kernel does: the kernel's bits are eager's, NaN, inf and -0 included.
    # 0.5 and -0.5 (ATen's exact sqrt) and other exponents stay on ATen.
    torch.manual_seed(0)
    x = torch.cat([POW_VALUES, torch.randn(2000) * 4])
    if exponent in (0.5, -0.5, 1.7):
        x = x.abs()
    with torch_disc.options.override(DISC_PROFILE=True):
        torch_disc.metrics.reset()
        got = torch.pow(x.to("disc") * 1.0, exponent).cpu()
        c = torch_disc.metrics.counters()
    want = torch.pow(x * 1.0, exponent)
    assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0))
    assert torch.equal(got.isnan(), want.isnan())
    assert ("profile.aten.aten::pow.Tensor_Scalar.calls" not in c) == generated
    # The multiply and pow are one kernel; a lone multiply runs on ATen.
    assert c.get("profile.fused.loop_kernel.calls", 0) == int(generated)


def test_a_pow_exponent_is_compiled_into_the_graph_once():
    # The exponent decides how the kernel computes, so it is part of the
    # graph's structure (a float Scalar elsewhere is a runtime value): the
    # same exponent reuses the compiled graph, a new one compiles once.
    x = torch.randn(64, 32).to("disc")
    torch_disc.metrics.reset()
    for e in (3.0, 3.0, 2.0, 2.0, 3.0):
        torch.pow(x * 1.0, e).cpu()
    assert torch_disc.metrics.counters()["compiles"] == 2


def test_gpt2s_tanh_gelu_and_its_backward_are_generated():
    # transformers' NewGELUActivation (GPT-2): 0.5 x (1 + tanh(sqrt(2 / pi)
    # (x + 0.044715 x^3))), written out with torch.pow; its backward has
    # pow, mul and tanh_backward. None of them runs on ATen. Against
    # float64 the gradient's error is up to ~6x eager's: the generated tanh
    # is within 2.3e-7 of exact where ATen's is within 3e-8 (randn * 3),
    # and 1 - tanh^2 times the inner slope (up to ~10 here) scales that.
    from transformers.activations import NewGELUActivation

    act = NewGELUActivation()
    torch.manual_seed(0)
    x = torch.randn(64, 300) * 3
    dy = torch.randn(64, 300)
    x64 = x.double().requires_grad_()
    y64 = act(x64)
    (g64,) = torch.autograd.grad(y64, x64, dy.double())
    x32 = x.clone().requires_grad_()
    eager = act(x32)
    (eager_g,) = torch.autograd.grad(eager, x32, dy)
    with torch_disc.options.override(DISC_PROFILE=True):
        torch_disc.metrics.reset()
        xd = x.to("disc").requires_grad_()
        y = act(xd)
        (g,) = torch.autograd.grad(y, xd, dy.to("disc"))
        y, g = y.cpu(), g.cpu()
        c = torch_disc.metrics.counters()
    assert [k for k in c if k.startswith("profile.aten.") and k.endswith(".calls")] == []
    for got, ref, ours in ((y, y64, eager), (g, g64, eager_g)):
        err = (got.double() - ref).abs().max().item()
        eager_err = (ours.double() - ref).abs().max().item()
        assert err <= 8 * eager_err, (err, eager_err)


def test_where_is_generated_with_its_neighbours(counters):
    # torch.where selects by a bool condition read as bytes: one kernel with
    # the ops around it (NaNs kept where selected), with broadcasting and a
    # Python scalar (before, the where ran on ATen). The compare that makes
    # the condition stays on ATen: kernels write no bool outputs.
    torch.manual_seed(0)
    x, y = torch.randn(33, 70), torch.randn(70)
    x[0, :5] = float("nan")
    # On ATen besides the kernel: the compare; for the scalar, also the
    # zeros + fill_ that make it a 0-dim disc tensor.
    fns = [(lambda a, b: torch.where(a > 0, a * 2, b) + 1, 1),
           (lambda a, b: torch.where(b < 0.5, 0.0, a.exp()) * 3, 3)]
    for fn, aten in fns:
        got, c = counted(lambda: fn(x.to("disc"), y.to("disc")))
        assert torch.equal(got.isnan(), fn(x, y).isnan())
        torch.testing.assert_close(got, fn(x, y), equal_nan=True)
        assert c["launches.fused"] == 1 and c["launches.aten"] == aten


@pytest.mark.parametrize("threads", [1, 2])
def test_a_large_kernel_is_split_over_torchs_threads(threads, counters):
    # A kernel over 4096 rows is split into one part per torch thread; a
    # small one stays on the calling thread. (Without OpenMP in the build,
    # at::parallel_for is a serial loop: always 1 part.) conftest restores
    # the thread count.
    torch.set_num_threads(threads)
    x = torch.randn(4096, 256)
    out, c = counted(lambda: (x.to("disc") * 2 + 1).exp())
    assert c["launches.fused"] == 1 and c["launches.parallel_parts"] == threads
    torch.testing.assert_close(out, (x * 2 + 1).exp())
    _, c = counted(lambda: (torch.ones(8, 8).to("disc") * 2 + 1).exp())
    assert c["launches.parallel_parts"] == 1


def same_bits_or_both_nan(got, want):
    """Equality to the bit (bf16, f16, f32); any NaN matches any NaN (ATen's
    vector and scalar paths give NaNs different bits)."""
    both_nan = got.isnan() & want.isnan()
    bits = {2: torch.int16, 4: torch.int32}[got.element_size()]
    return got.dtype == want.dtype and bool(
        ((got.view(bits) == want.view(bits)) | both_nan).all())


REDUCED = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("seed", range(3))
def test_reduced_float_chains_fuse_and_round_every_op_as_eager(seed, dtype, counters):
    # Values are computed in f32 and rounded to bf16 (f16) after every op,
    # as ATen does: the fused kernel gives eager's bits, not better ones.
    rng = random.Random(seed)
    templates = [make_template(rng) for _ in range(12)]
    for i in range(120):
        template = templates[i % len(templates)]
        shape, yshape = random_shapes(rng)
        g = torch.Generator().manual_seed(i)
        x = (torch.randn(shape, generator=g) * 3).to(dtype)
        y = torch.randn(yshape, generator=g).to(dtype)
        if x.numel() > 1:
            x.view(-1)[0] = float("nan")
            x.view(-1)[-1] = float("inf")
        want = run(template, x, y)
        got = run(template, x.to("disc"), y.to("disc")).cpu()
        assert same_bits_or_both_nan(got, want), (template, shape, yshape)
    c = counters()
    assert c["launches.fused"] >= 50 and c["fallbacks"] == 0


def test_f16_conversions_in_kernels_give_atens_bits(counters):
    # Kernels convert f16 with integer ops (float16.cpp). Every f16 bit
    # pattern widens to ATen's f32; f32 narrows as c10::Half rounds: ties to
    # even in normals and subnormals, 65520 and up to inf, NaN to NaN.
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    wide = (every.to("disc").float() * 1.0).cpu()
    assert same_bits_or_both_nan(wide, every.float())
    g = torch.Generator().manual_seed(0)
    any_bits = torch.randint(-2**31, 2**31 - 1, (1 << 18,), generator=g).to(torch.int32)
    f16_range = torch.randn(1 << 16, generator=g) * torch.exp2(
        torch.randint(-30, 17, (1 << 16,), generator=g).float())
    ties = torch.tensor([65504.0, 65519.99, 65520.0, -65520.0, 2.0**-24, 2.0**-25, 3 * 2.0**-25,
                         2.0**-25 * 1.0001, 2.0**-14, 2.0**-14 * (1 - 2.0**-11), 1 + 2.0**-11,
                         1 + 3 * 2.0**-11, 0.0, -0.0, float("inf"), -float("inf"), float("nan"),
                         1e-40])
    x = torch.cat([any_bits.view(torch.float32), f16_range, ties])
    narrow = (x.to("disc") * 1.0).half().cpu()
    assert same_bits_or_both_nan(narrow, x.half())
    c = counters()
    assert (c["launches.fused"], c["launches.aten"]) == (2, 0)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("op", [torch.add, torch.sub], ids=["add", "sub"])
def test_reduced_float_add_with_alpha_gives_eagers_bits(op, dtype, counters):
    # ATen's CPU add rounds alpha to bf16 (f16) and computes
    # fma(other, +-alpha, self) in f32: with alpha = 0.3 as an f32 product
    # a quarter of bf16 sums came out one ulp off. 4096 elements: ATen's
    # vector body only (its scalar tail rounds alpha * other first).
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(4096, generator=g) * 3).to(dtype), torch.randn(4096, generator=g).to(dtype)
    for alpha in (0.3, 1.7, -1.3):
        got = op(x.to("disc"), y.to("disc"), alpha=alpha).exp().cpu()
        assert same_bits_or_both_nan(got, op(x, y, alpha=alpha).exp()), alpha
    c = counters()
    assert (c["launches.fused"], c["launches.aten"]) == (3, 0)


def number(v, dtype=torch.float32):
    return lambda x: torch.tensor(v, dtype=dtype).to(x.device)


# A bf16 (f16) op with a number: a Python float or int, or a 0-dim f32 / f64
# tensor. ATen's CPU kernels round it to the op's dtype first for add and
# sub, wherever it is, and for mul and div only when it comes first.
WITH_NUMBERS = {
    "mul": lambda x: x * 0.3, "mul_int": lambda x: x * 3, "div": lambda x: x / 0.3,
    "add": lambda x: x + 0.3, "sub": lambda x: x - 0.1234567, "rsub": lambda x: 0.37 - x,
    "mul_f32": lambda x: x * number(0.3)(x), "div_f64": lambda x: x / number(0.3, torch.float64)(x),
    "mul_number_first": lambda x: torch.mul(number(0.3)(x), x),
    "div_number_first": lambda x: torch.div(number(0.3)(x), x),
    "add_alpha": lambda x: torch.add(x, 0.3, alpha=0.7),
    "sub_number_first": lambda x: torch.sub(number(0.3)(x), x, alpha=0.3),
    "mul_": lambda x: x.clone().mul_(number(0.3)(x)), "add_": lambda x: x.clone().add_(1e-8),
}


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("name", list(WITH_NUMBERS))
def test_reduced_float_ops_with_a_number_fuse_with_eagers_bits(name, dtype, counters):
    # Each op then a neg (exact): one kernel. Before, such an op ran on ATen
    # alone (bf16 AdamW's bias corrections and eps, clipping's coefficient).
    fn = WITH_NUMBERS[name]
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    got = fn(x.to("disc")).neg().cpu()
    assert same_bits_or_both_nan(got, fn(x).neg())
    c = counters()
    assert (c["launches.fused"], c["launches.aten"]) == (1, 0)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_reduced_float_where_takes_its_bool_condition_and_a_number(dtype, counters):
    # Attention masking in bf16: where(mask, scores, number). The number is
    # rounded to the dtype, as ATen's where casts it.
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(64, 64, generator=g) * 3).to(dtype), torch.randn(64, 64, generator=g).to(dtype)
    mask = torch.rand(64, 64, generator=g) > 0.3

    def f(mask, x, y):
        return [torch.where(mask, x, y).neg(), torch.where(mask, x, number(-0.1234567)(x)).neg(),
                torch.where(mask, number(1e9, torch.float64)(x), x).neg()]

    got = [t.cpu() for t in f(mask.to("disc"), x.to("disc"), y.to("disc"))]
    assert all(same_bits_or_both_nan(a, e) for a, e in zip(got, f(mask, x, y)))
    c = counters()
    assert (c["launches.fused"], c["launches.aten"]) == (3, 0)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_reduced_float_dropout_backward_takes_its_bool_mask(dtype, counters):
    # Autocast's backward of a bf16 (f16) dropout after a layer norm: the
    # f32 grad cast down, then grad * mask * scale. One kernel with the
    # cast, eager's bits (inf, nan and -0 included); it ran on ATen, which
    # promotes the mask to a tensor of the dtype and multiplies twice.
    g = torch.Generator().manual_seed(0)
    grad = torch.randn(8, 64, 384, generator=g) * 3
    grad[0, 0, :4] = torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0])
    mask = torch.rand(8, 64, 384, generator=g) > 0.1

    def f(grad, mask, scale):
        return torch.ops.aten.native_dropout_backward(grad.to(dtype), mask, scale)

    for scale in (1 / 0.9, 1 / 0.3):
        got = f(grad.to("disc"), mask.to("disc"), scale).cpu()
        assert same_bits_or_both_nan(got, f(grad, mask, scale)), scale
    c = counters()
    assert (c["launches.fused"], c["launches.aten"]) == (2, 0)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_reduced_float_kernel_writes_a_parameter_update_in_place(dtype, counters):
    # A momentum-like update on bf16 (f16) buffers, w = w * m + g: the
    # kernel's output takes over the dead input's buffer (same dtype and size).
    w, m, g = (torch.randn(64, 33, generator=torch.Generator().manual_seed(k)).to(dtype)
               for k in range(3))
    want = w.clone().mul_(m).add_(g)
    d = w.to("disc")
    d.mul_(m.to("disc")).add_(g.to("disc"))
    assert same_bits_or_both_nan(d.cpu(), want)
    c = counters()
    assert c["launches.fused"] == 1 and c["inplace.kernel_outputs"] == 1


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_casts_between_f32_and_reduced_floats_fuse_with_their_neighbours(dtype, counters):
    # Autocast's casts around a GEMM: (x.bf16() * w + b).float() is one
    # kernel whose rounding matches eager's casts (int and f64 sources too).
    g = torch.Generator().manual_seed(0)
    x = torch.randn(33, 70, generator=g) * 100
    w, b = torch.randn(70, generator=g).to(dtype), torch.randn(33, 70, generator=g).to(dtype)
    n = torch.randint(-300, 300, (33, 70), generator=g)
    d = torch.randn(33, 70, generator=g, dtype=torch.float64) * 1e3

    def f(x, w, b, n, d):
        return [(x.to(dtype) * w + b).float(), n.to(dtype) + b, d.to(dtype) * w]

    want = f(x, w, b, n, d)
    got = [t.cpu() for t in f(*(t.to("disc") for t in (x, w, b, n, d)))]
    assert torch.equal(got[0], want[0])
    assert all(same_bits_or_both_nan(a, e) for a, e in zip(got[1:], want[1:]))
    assert counters()["launches.fused"] == 3
