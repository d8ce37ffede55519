"""GEMMs on oneDNN in the compiled executor: float32 mm / addmm / bmm run as
oneDNN matmul primitives (a relu on a Linear as its post-op), everything else
of the library class on ATen, counted. The reference executor is the oracle."""

import copy

import torch

from conftest import counted, mnist_step


def library(c):
    keys = ("library.onednn", "library.aten", "library.epilogues")
    return tuple(c.get(k, 0) for k in keys)


def test_mlp_step_matches_the_reference_executor_with_pinned_counters(executor):
    executor("reference")
    want, ref = counted(mnist_step("mlp", 64))
    assert library(ref) == (0, 0, 0)  # the oracle runs every op on ATen
    executor("compiled")
    got, c = counted(mnist_step("mlp", 64))
    # 3 addmm forward; backward: 3 weight-grad mm + 2 input-grad mm (the
    # first layer's input needs none). The two hidden Linear+ReLU pairs run
    # the relu as a post-op.
    assert library(c) == (8, 0, 2)
    assert c["onednn.sized_gemms"] == 8
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_every_gemm_runs_a_primitive_made_for_its_sizes(executor):
    executor("compiled")
    step = mnist_step("mlp", 48)
    _, first = counted(step)
    _, second = counted(step)
    assert first["onednn.sized_gemms"] == second["onednn.sized_gemms"] == 8
    assert second.get("onednn.sized_primitives_created", 0) == 0
    # A new batch size compiles no graph; its GEMMs get primitives of their
    # own sizes (oneDNN's, ~0.3 ms each). No generic primitive runs.
    _, c = counted(mnist_step("mlp", 37))
    assert library(c) == (8, 0, 2)
    assert c["onednn.sized_primitives_created"] == 8
    assert c.get("compiles", 0) == 0
    for k in ("onednn.primitives_created", "onednn.primitive_reuses"):
        assert first.get(k, 0) == second.get(k, 0) == c.get(k, 0) == 0


def test_transposed_operands_and_bias_forms(executor):
    torch.manual_seed(1)
    a, b = torch.randn(13, 7), torch.randn(7, 9)
    at, bt = a.t().contiguous(), b.t().contiguous()
    bias, bias_row, one = torch.randn(9), torch.randn(1, 9), torch.randn(1)

    def cases(dev):
        d = lambda t: t.to(dev)  # noqa: E731
        return [
            d(a) @ d(b),
            d(at).t() @ d(b),                   # A column-major, no copy
            d(a) @ d(bt).t(),                   # B column-major (nn.Linear's weight)
            d(at).t() @ d(bt).t(),
            torch.addmm(d(bias), d(a), d(b)),
            torch.addmm(d(bias_row), d(at).t(), d(b)),
            torch.addmm(d(one), d(a), d(bt).t()),
            torch.relu(torch.addmm(d(bias), d(a), d(b))),
            torch.relu(d(a) @ d(b)),
        ]
    executor("compiled")
    got, c = counted(lambda: cases("disc"))
    assert library(c) == (9, 0, 2)
    assert c["library.operand_copies"] == 1  # the one-value bias, broadcast to a row
    for g, w in zip(got, cases("cpu")):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        assert g.is_contiguous() and g.dtype == torch.float32


def test_a_view_that_is_not_dense_is_copied_and_counted(executor):
    x, w = torch.randn(6, 16), torch.randn(8, 5)
    executor("compiled")
    got, c = counted(lambda: x.to("disc")[:, ::2] @ w.to("disc"))
    assert library(c) == (1, 0, 0) and c["library.operand_copies"] == 1
    torch.testing.assert_close(got, x[:, ::2] @ w, rtol=1e-5, atol=1e-5)


def test_bmm_runs_on_onednn(executor):
    torch.manual_seed(2)
    a, b = torch.randn(4, 5, 6), torch.randn(4, 3, 6)
    executor("compiled")
    empty = torch.randn(0, 5, 6), torch.randn(0, 6, 3)
    got, c = counted(lambda: [torch.bmm(a.to("disc"), b.to("disc").transpose(1, 2)),
                              torch.bmm(a.to("disc").transpose(1, 2), a.to("disc")),
                              torch.bmm(empty[0].to("disc"), empty[1].to("disc"))])
    assert library(c) == (3, 0, 0) and c.get("library.operand_copies", 0) == 0
    torch.testing.assert_close(got[0], torch.bmm(a, b.transpose(1, 2)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], torch.bmm(a.transpose(1, 2), a), rtol=1e-5, atol=1e-5)
    assert got[2].shape == (0, 5, 3)


def test_sizes_zero_and_one(executor):
    executor("compiled")
    for m, k, n in ((0, 4, 3), (1, 1, 1), (5, 0, 3), (1, 7, 1)):
        a, b, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
        got, c = counted(lambda: [torch.relu(torch.addmm(bias.to("disc"), a.to("disc"), b.to("disc"))),
                                  a.to("disc") @ b.to("disc")])
        assert c["library.onednn"] == 2, (m, k, n)
        torch.testing.assert_close(got[0], torch.relu(torch.addmm(bias, a, b)), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[1], a @ b, rtol=1e-5, atol=1e-5)


def test_f16_gemms_are_widened_to_f32_and_rounded_once(executor):
    # ATen's CPU f16 GEMM is 6-100x slower than f32: oneDNN multiplies the
    # operands widened to f32 (an f16 product is exact there) and rounds C
    # once, the f16 GEMM's answer up to summation order.
    torch.manual_seed(3)
    a, w, bias = torch.randn(33, 70).half(), torch.randn(40, 70).half(), torch.randn(40).half()
    q, k = torch.randn(3, 9, 16).half(), torch.randn(3, 11, 16).half()

    def cases(dev):
        d = lambda t: t.to(dev)  # noqa: E731
        return [torch.nn.functional.linear(d(a), d(w), d(bias)), d(a) @ d(w).t(),
                torch.bmm(d(q), d(k).transpose(1, 2))]

    executor("compiled")
    got, c = counted(lambda: cases("disc"))
    assert library(c) == (3, 0, 0) and c["library.f16_widened"] == 3
    wide = [torch.nn.functional.linear(a.float(), w.float(), bias.float()), a.float() @ w.float().t(),
            torch.bmm(q.float(), k.float().transpose(1, 2))]
    for g, e, x in zip(got, cases("cpu"), wide):
        assert g.dtype == torch.float16
        torch.testing.assert_close(g, x.half(), rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(g, e, rtol=1e-3, atol=1e-3)


def test_float64_and_scaled_addmm_run_on_aten_and_are_counted(executor):
    a, b, bias = torch.randn(5, 4, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64), torch.randn(3)
    af, bf = a.float(), b.float()
    executor("compiled")
    got, c = counted(lambda: torch.relu(a.to("disc") @ b.to("disc")))
    assert library(c) == (0, 1, 0) and c["library.aten.mm"] == 1
    assert c["library.aten_reason.dtype"] == 1
    torch.testing.assert_close(got, torch.relu(a @ b))
    got, c = counted(lambda: torch.addmm(bias.to("disc"), af.to("disc"), bf.to("disc"), beta=0.5, alpha=2))
    assert library(c) == (0, 1, 0) and c["library.aten.addmm"] == 1
    assert c["library.aten_reason.scale"] == 1
    torch.testing.assert_close(got, torch.addmm(bias, af, bf, beta=0.5, alpha=2))
    full = torch.randn(5, 3)  # a bias per element, not per column
    got, c = counted(lambda: torch.addmm(full.to("disc"), af.to("disc"), bf.to("disc")))
    assert c["library.aten_reason.bias"] == 1
    torch.testing.assert_close(got, torch.addmm(full, af, bf))


def test_gelu_after_a_linear_is_its_post_op_in_inference(executor):
    # A transformer feed-forward block: Linear -> GELU (exact) -> Linear. In
    # no-grad mode the GELU is the first GEMM's oneDNN post-op; with grad its
    # backward reads the GEMM's output, so it stays an op of its own. The
    # tanh approximation is never a post-op (oneDNN's gelu_erf is the exact one).
    executor("compiled")
    torch.manual_seed(0)
    ffn = torch.nn.Sequential(torch.nn.Linear(32, 96), torch.nn.GELU(), torch.nn.Linear(96, 32))
    tanh_ffn = torch.nn.Sequential(torch.nn.Linear(32, 96), torch.nn.GELU("tanh"))
    x = torch.randn(20, 32)
    dffn, dtanh = [copy.deepcopy(m).to("disc") for m in (ffn, tanh_ffn)]
    with torch.no_grad():
        got, c = counted(lambda: dffn(x.to("disc")))
        torch.testing.assert_close(got, ffn(x), rtol=1e-5, atol=1e-5)
        assert library(c) == (2, 0, 1)  # 2 GEMMs on oneDNN, 1 epilogue: the GELU
        # A [B, S, H] input: reshape -> addmm -> reshape -> GELU, still one call.
        x3 = torch.randn(4, 5, 32)
        got, c = counted(lambda: dffn(x3.to("disc")))
        torch.testing.assert_close(got, ffn(x3), rtol=1e-5, atol=1e-5)
        assert library(c) == (2, 0, 1)
        got, c = counted(lambda: dtanh(x.to("disc")))
        torch.testing.assert_close(got, tanh_ffn(x), rtol=1e-5, atol=1e-5)
        assert library(c)[2] == 0
    xd = x.to("disc").requires_grad_()
    got, c = counted(lambda: dffn(xd))
    assert library(c)[2] == 0
    torch.testing.assert_close(got, ffn(x).detach(), rtol=1e-5, atol=1e-5)
