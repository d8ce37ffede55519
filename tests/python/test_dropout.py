"""Dropout on disc draws its mask by Philox from the node's seed
(runtime/cpu/philox.h): ATen's contract, reproducible, the same on both
executors and at any thread count, laid out as its input."""
import pytest
import torch
import torch.nn.functional as F

import torch_disc


def dropped(x, p=0.3, seed=0):
    torch.manual_seed(seed)
    y = F.dropout(x.to("disc"), p=p, training=True)
    return y.cpu()


def test_mask_rate_and_scale():
    x = torch.full((1000, 1000), 2.0)
    y = dropped(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 6 * (0.7 * 0.3 / 1e6) ** 0.5
    torch.testing.assert_close(y[kept], torch.full((int(kept.sum()),), 2.0 / 0.7))


def test_reproducible_and_the_same_on_both_executors_and_thread_counts(executor):
    x = torch.randn(64, 300)
    first = dropped(x, seed=5)
    assert torch.equal(first, dropped(x, seed=5))
    assert not torch.equal(first, dropped(x, seed=6))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(first, dropped(x, seed=5))
    finally:
        torch.set_num_threads(threads)
    executor("reference")
    torch_disc._C.clear_compile_cache()
    assert torch.equal(first, dropped(x, seed=5))


def test_channels_last_input_keeps_its_layout_and_backward_uses_the_mask():
    x = torch.randn(2, 8, 5, 5).to(memory_format=torch.channels_last).requires_grad_()
    torch.manual_seed(1)
    xd = x.detach().to("disc").requires_grad_()
    y = F.dropout(xd, p=0.5, training=True)
    y.sum().backward()
    out, grad = y.cpu(), xd.grad.cpu()
    kept = out != 0
    torch.testing.assert_close(out[kept], (x.detach() * 2)[kept])
    torch.testing.assert_close(grad, kept.float() * 2)


def atens_product(x, mask, p):
    # ATen's CPU native_dropout: input.mul(mask).mul_(scale) in C++, which
    # multiplies by the scale in the input's dtype, rounding once.
    return x.mul(mask).mul_(torch.tensor(1 / (1 - p), dtype=x.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_output_is_atens_product_of_input_mask_and_scale_to_the_bit(dtype):
    # A dropped inf or NaN is NaN, a dropped negative -0, and a reduced
    # float is rounded once from float; disc computes it in one pass.
    x = torch.randn(7, 333).mul_(300).to(dtype)
    x[0, :40] = float("inf")
    x[1, :40] = float("nan")
    x[2, :40] = -1.5
    eager, eager_mask = torch.ops.aten.native_dropout(x, 0.4, True)
    torch.manual_seed(3)
    out, mask = torch.ops.aten.native_dropout(x.to("disc"), 0.4, True)
    out, mask = out.cpu(), mask.cpu()
    assert mask.dtype == torch.bool and out.dtype == dtype
    assert (~mask[:3, :40]).any() and mask.any()
    for got, want in [(eager, atens_product(x, eager_mask, 0.4)), (out, atens_product(x, mask, 0.4))]:
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num())
        number = ~want.isnan()  # a NaN's sign is not a number's
        assert torch.equal(got.signbit()[number], want.signbit()[number])


def profiled_labels(fn, runs=3):
    """Calls of each profiled step label over `runs` calls of fn (synced)."""
    with torch_disc.options.override(DISC_PROFILE=True):
        torch_disc.metrics.reset()
        for _ in range(runs):
            out = fn()
            torch_disc.sync()
        c = torch_disc.metrics.counters()
    return out, {k[len("profile."):-len(".calls")]: v for k, v in c.items()
                 if k.startswith("profile.") and k.endswith(".calls")}


def test_dropout_backward_is_generated_with_its_neighbours(executor):
    # grad * mask * scale, the mask read as bytes: one kernel with the
    # element-wise ops around it, equal to ATen's to the bit.
    g = torch.randn(37, 129)
    mask = torch.rand(37, 129) < 0.8
    want = torch.ops.aten.native_dropout_backward(g * 2, mask, 1.25) + 1
    dg, dmask = g.to("disc"), mask.to("disc")
    got, labels = profiled_labels(
        lambda: torch.ops.aten.native_dropout_backward(dg * 2, dmask, 1.25) + 1)
    assert torch.equal(got.cpu(), want)
    assert labels["fused.loop_kernel"] == 3
    assert not [label for label in labels if label.startswith("aten.")]


def test_attention_dropout_backward_fuses_into_the_softmax_backward(executor):
    torch.manual_seed(0)
    s = torch.randn(2, 3, 17, 17, requires_grad=True)
    v = torch.randn(2, 3, 17, 8)

    def step(scores):
        probs = F.dropout(scores.softmax(-1), p=0.2, training=True)
        (probs @ v.to(scores.device)).square().sum().backward()
        return scores.grad

    def run():
        torch.manual_seed(3)
        ds = s.detach().to("disc").requires_grad_()
        return step(ds)

    got, labels = profiled_labels(run, runs=2)
    assert "aten.aten::native_dropout_backward" not in labels
    assert labels["fused.row_kernel"] == 2 * 2  # softmax, and its backward with the dropout's
    executor("reference")
    torch_disc._C.clear_compile_cache()
    torch.testing.assert_close(got.cpu(), run().cpu(), rtol=1e-6, atol=1e-6)
