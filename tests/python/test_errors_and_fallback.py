"""Bad input gets a clear error naming the op or dtype; ops that cannot be
traced fall back to the CPU, counted, with correct results."""
import pytest
import torch
import torch_disc


def test_mixing_disc_and_cpu_tensors_raises_like_cuda():
    a = torch.ones(3, device="disc")
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*disc:0 and cpu"):
        torch.add(a, torch.ones(3))


def test_cpu_scalar_tensor_is_allowed_like_cuda():
    a = torch.ones(3, device="disc")
    assert (a * torch.tensor(2.0)).cpu().tolist() == [2, 2, 2]


def test_shape_errors_are_raised_at_trace_time_like_eager():
    a = torch.ones(2, 3, device="disc")
    with pytest.raises(RuntimeError, match=r"aten::mm: .*(same reduction dim|shapes cannot be multiplied)"):
        torch.mm(a, a)


def test_unsupported_dtype_names_the_dtype():
    with pytest.raises(RuntimeError, match=r"disc: dtype .*(UInt16|uint16).* not supported"):
        torch.empty(3, dtype=torch.uint16, device="disc")


def test_bad_device_index():
    with pytest.raises(RuntimeError, match=r"disc:1 does not exist|does not exist"):
        torch.ones(2, device="disc:1")


def test_data_dependent_ops_fall_back_counted_and_correct(counters):
    x = torch.tensor([0.0, 1.5, 0.0, -2.0])
    d = x.to("disc") * 1  # pending when the fallback needs it
    torch.testing.assert_close(torch.nonzero(d).cpu(), torch.nonzero(x))
    torch.testing.assert_close(d[d != 0].cpu(), x[x != 0])
    c = counters()
    assert c["fallback.aten::nonzero"] == 1
    assert c["fallbacks"] >= 1
    assert c["sync.fallback:aten::nonzero"] == 1


def test_fallback_result_is_a_disc_tensor_usable_in_traces():
    d = torch.tensor([3.0, 0.0, 1.0], device="disc")
    idx = torch.nonzero(d).squeeze(1)
    assert idx.device.type == "disc"
    assert (d[idx] * 2).cpu().tolist() == [6.0, 2.0]


def test_explicit_cpu_generator_falls_back_and_is_reproducible(counters):
    # The disc trace draws from the disc generator; a user-supplied CPU
    # generator is honoured by running the op on the CPU fallback.
    x = torch.empty(4, device="disc")
    a = x.uniform_(generator=torch.Generator().manual_seed(3)).cpu()
    b = x.uniform_(generator=torch.Generator().manual_seed(3)).cpu()
    assert torch.equal(a, b)
    assert counters()["fallback.aten::uniform_"] == 2


# Ops that PyTorch gives no Meta kernel, though their result shapes follow
# from their arguments', and ops whose shapes do not depend on values after
# all: recorded (a rule in shape_rules.cpp or their Meta kernel), not run on
# the CPU fallback.
RECORDED_WITHOUT_META = {
    "cummax": lambda x: torch.cummax(x, 1),
    "logcumsumexp": lambda x: torch.logcumsumexp(x, 1),
    "geqrf": lambda x: torch.geqrf(x),
    "histc": lambda x: torch.histc(x, 7, -1, 1),
    "histogram": lambda x: torch.histogram(x, 5),
    "nonzero_static": lambda x: torch.nonzero_static(x > 0, size=6),
    "masked_scatter": lambda x: x.masked_scatter(x > 0, x * 10),
    "multi_margin_loss backward": lambda x: torch.autograd.grad(
        torch.nn.functional.multi_margin_loss(x, torch.tensor([1, 2, 0, 3], device=x.device)),
        x)[0],
}


@pytest.mark.parametrize("case", sorted(RECORDED_WITHOUT_META))
def test_ops_without_meta_kernels_are_recorded(case, counters):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    f = RECORDED_WITHOUT_META[case]
    expected = f(x.clone().requires_grad_())
    actual = f(x.to("disc").requires_grad_())
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    for a, e in zip(actual, expected):
        assert a.device.type == "disc" and a.stride() == e.stride()
        torch.testing.assert_close(a.cpu(), e.detach())
    assert counters()["fallbacks"] == 0
