"""Convolutions on oneDNN in the compiled executor: float32 2-D
aten::convolution (its relu as a post-op) and aten::convolution_backward run
as oneDNN primitives, activations kept NHWC between them; other convolutions
(1-D, transposed, float64) run their ATen kernels, counted. The reference
executor is the oracle."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_disc

from conftest import counted, mnist_step

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def get(c, *keys):
    return tuple(c.get(k, 0) for k in keys)


CONVS = ("onednn.conv.forward", "onednn.conv.backward_data", "onednn.conv.backward_weights")


def test_cnn_step_matches_the_reference_executor_with_pinned_counters(executor):
    executor("reference")
    want, ref = counted(mnist_step("cnn", 64))
    assert get(ref, "library.onednn", "library.aten") == (0, 0)  # the oracle is all ATen
    executor("compiled")
    got, c = counted(mnist_step("cnn", 64))
    # 2 conv forward (relu as post-op), 2 convolution_backward (the first
    # conv's input needs no gradient: one primitive; the second: two) and
    # 6 GEMMs (2 addmm, 2 weight-grad mm, 2 input-grad mm).
    assert get(c, *CONVS) == (2, 1, 2)
    assert c["library.onednn"] == 4 + 6
    assert c.get("library.aten", 0) == 0 and c.get("library.aten.convolution", 0) == 0
    assert c["library.epilogues"] == 3  # two conv + relu, one linear + relu
    # Weights go into oneDNN's blocked layout once per primitive; activations
    # stay NHWC through relu, pooling and their backward, except at Flatten:
    # the second pool's output goes NCHW for it, and the flattened gradient
    # back to NHWC for the pool's backward.
    assert c["onednn.reorders.weights"] == 5
    assert c["onednn.reorders.activations"] == 2
    assert c["onednn.reorders"] == 7
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        assert g.is_contiguous()


def test_second_step_creates_no_primitive(executor):
    executor("compiled")
    step = mnist_step("cnn", 16)
    counted(step)
    _, c = counted(step)
    assert c.get("onednn.primitives_created", 0) == 0
    assert c.get("onednn.sized_primitives_created", 0) == 0
    assert c["onednn.primitive_reuses"] == 5  # the convolutions
    assert c["onednn.sized_gemms"] == 6


@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (2, 0, 1, 1), (1, 1, 1, 1), (2, 2, 1, 1), (1, 0, 2, 1), (3, 1, 2, 1), (1, 1, 1, 2), ((2, 1), (0, 1), (1, 2), 1),
])
def test_conv_geometry_forward_and_backward_match(executor, stride, padding, dilation, groups):
    torch.manual_seed(3)
    x = torch.randn(3, 4, 11, 9)
    w = torch.randn(6, 4 // groups, 3, 3)
    b = torch.randn(6)
    g = None

    def run(dev):
        xd = x.to(dev).detach().requires_grad_()
        wd = w.to(dev).detach().requires_grad_()
        bd = b.to(dev).detach().requires_grad_()
        y = F.conv2d(xd, wd, bd, stride=stride, padding=padding, dilation=dilation, groups=groups)
        nonlocal g
        g = torch.randn(y.shape) if g is None else g
        y.backward(g.to(dev))
        return [y.detach(), xd.grad, wd.grad, bd.grad]

    want = run("cpu")
    executor("compiled")
    got, c = counted(lambda: run("disc"))
    assert get(c, *CONVS) == (1, 1, 1)
    assert c.get("library.aten", 0) == 0
    for gt, wt in zip(got, want):
        torch.testing.assert_close(gt, wt, rtol=1e-4, atol=1e-4)


def test_sizes_one_and_an_empty_batch(executor):
    executor("compiled")
    for n, c_in, hw, k in ((1, 1, 1, 1), (1, 3, 5, 5), (0, 2, 6, 3)):
        x, w = torch.randn(n, c_in, hw, hw), torch.randn(2, c_in, k, k)
        got, c = counted(lambda: torch.relu(F.conv2d(x.to("disc"), w.to("disc"))))
        assert c["library.onednn"] == 1 and c.get("library.aten", 0) == 0
        torch.testing.assert_close(got, torch.relu(F.conv2d(x, w)), rtol=1e-5, atol=1e-5)


def test_a_user_visible_conv_output_is_nchw(executor):
    # A graph output must be NCHW (a later read may view its storage): the
    # user's NCHW input goes NHWC and the NHWC result back, both counted.
    torch.manual_seed(4)
    x, w = torch.randn(2, 16, 8, 8), torch.randn(32, 16, 3, 3)
    executor("compiled")
    got, c = counted(lambda: F.conv2d(x.to("disc"), w.to("disc")))
    assert c["onednn.reorders.activations"] == 2
    assert got.is_contiguous()
    torch.testing.assert_close(got, F.conv2d(x, w), rtol=1e-4, atol=1e-4)
    got, c = counted(lambda: F.conv2d(x.to("disc"), w.to("disc")).view(2, -1))
    torch.testing.assert_close(got, F.conv2d(x, w).view(2, -1), rtol=1e-4, atol=1e-4)


def test_conv1d_transposed_and_float64_run_on_aten_and_are_counted(executor):
    torch.manual_seed(5)
    executor("compiled")
    x1, w1 = torch.randn(2, 3, 10), torch.randn(4, 3, 3)
    got, c = counted(lambda: F.conv1d(x1.to("disc"), w1.to("disc")))
    assert get(c, "library.aten.convolution", "library.aten_reason.rank") == (1, 1)
    torch.testing.assert_close(got, F.conv1d(x1, w1))
    x, w = torch.randn(2, 3, 6, 6), torch.randn(3, 4, 3, 3)
    got, c = counted(lambda: F.conv_transpose2d(x.to("disc"), w.to("disc")))
    assert get(c, "library.aten.convolution", "library.aten_reason.transposed") == (1, 1)
    torch.testing.assert_close(got, F.conv_transpose2d(x, w))
    xd, wd = torch.randn(2, 3, 6, 6, dtype=torch.float64), torch.randn(4, 3, 3, 3, dtype=torch.float64)
    got, c = counted(lambda: torch.relu(F.conv2d(xd.to("disc"), wd.to("disc"))))
    assert get(c, "library.aten.convolution", "library.aten_reason.dtype", "library.onednn") == (1, 1, 0)
    torch.testing.assert_close(got, torch.relu(F.conv2d(xd, wd)))


def test_nhwc_flows_through_residual_adds_and_reductions(executor):
    # A skip connection adds an NCHW tensor to an NHWC one (element-wise:
    # layout-agnostic), a reduction reads a conv output (not: made NCHW).
    torch.manual_seed(6)
    x, skip = torch.randn(2, 8, 9, 9), torch.randn(2, 16, 9, 9)
    w1, w2 = torch.randn(16, 8, 3, 3), torch.randn(16, 16, 3, 3)

    def run(dev):
        d = lambda t: t.to(dev)  # noqa: E731
        b = torch.relu(F.conv2d(d(x), d(w1), padding=1)) + d(skip)
        c = F.conv2d(b, d(w2), padding=1)
        return [c.sum(dim=(2, 3)), b.mean(), torch.relu(c)]
    executor("compiled")
    got, c = counted(lambda: run("disc"))
    assert c["onednn.conv.forward"] == 2 and c.get("library.aten", 0) == 0
    for gt, wt in zip(got, run("cpu")):
        torch.testing.assert_close(gt, wt, rtol=1e-4, atol=1e-4)
        assert gt.is_contiguous()


def cnn_step_counters_in_child(env, *names):
    """Counters ``names`` of one compiled CNN step (batch 16) in a new
    process with ``env`` set (the environment's path into the options)."""
    code = (
        "import torch_disc, tests.python.test_conv_calls as t\n"
        "torch_disc._C.set_executor('compiled')\n"
        "_, c = t.counted(t.mnist_step('cnn', 16))\n"
        f"print(*[c.get(n, 0) for n in {list(names)!r}])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env),
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return [int(v) for v in out.stdout.split()[-len(names):]]


def test_nchw_baseline_reorders_every_activation():
    # DISC_CONV=nchw, from the environment: disc converts no activation
    # (NHWC kept: 2), and each of the step's 5 conv calls lets oneDNN reorder
    # its two activations into the blocked layout it picked and back where it
    # wants to. Which ones is oneDNN's choice per ISA (8 with AVX-512, 9 with
    # AVX2), so only the bounds are pinned; the weights are always blocked.
    own, blocked, weights = cnn_step_counters_in_child(
        {"DISC_CONV": "nchw"}, "onednn.reorders.activations", "onednn.reorders.blocked",
        "onednn.reorders.weights")
    assert own == 0 and 5 <= blocked <= 10 and weights == 5


def test_an_aten_conv_on_nhwc_values_still_hands_views_nchw(executor):
    # An NHWC conv output feeds a transposed convolution (ATen, which keeps
    # channels_last) whose relu epilogue is viewed: the plan turns that
    # value NCHW where the ATen conv made it (counted), besides the user's
    # NCHW input going NHWC.
    torch.manual_seed(7)
    x, w1, w2 = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4, 5, 3, 3)

    def run(dev):
        a = F.conv2d(x.to(dev), w1.to(dev))
        return torch.relu(F.conv_transpose2d(a, w2.to(dev))).view(2, -1)
    executor("compiled")
    got, c = counted(lambda: run("disc"))
    assert get(c, "library.onednn", "library.aten_reason.transposed", "library.epilogues") == (1, 1, 0)
    assert c["onednn.reorders.activations"] == 2
    torch.testing.assert_close(got, run("cpu"), rtol=1e-5, atol=1e-5)


def test_disc_conv_aten_runs_every_convolution_on_aten():
    assert cnn_step_counters_in_child({"DISC_CONV": "aten"}, "library.aten_reason.disabled",
                                      "onednn.reorders") == [4, 0]


@pytest.mark.parametrize("conv", ["nhwc", "nchw", "aten"])
def test_layer_norm_over_channels_last_then_a_depthwise_conv(conv, executor):
    # A ConvNeXt block's order: layer norm over the channels of a permuted
    # activation, back, then a depthwise conv. Its weight's dim 1 (1) once
    # named the input's channels "size 1", and the layer norm kernel read
    # each row as one broadcast value (max error 2.06 against |y| <= 2.14).
    torch.manual_seed(0)
    x = torch.randn(2, 8, 6, 6)
    dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def run(dev):
        t = x.to(dev).permute(0, 2, 3, 1)
        t = F.layer_norm(t, (8,)).permute(0, 3, 1, 2)
        return F.conv2d(t, dw.weight.detach().to(dev), dw.bias.detach().to(dev), padding=1, groups=8)

    executor("compiled")
    with torch_disc.options.override(DISC_CONV=conv):
        got = run("disc").cpu()
    torch.testing.assert_close(got, run("cpu"), rtol=1e-5, atol=1e-5)
