"""Dropout on disc draws its mask by Philox from the node's seed
(runtime/philox.h): ATen's contract, reproducible, the same on both
executors and at any thread count, laid out as its input."""
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
