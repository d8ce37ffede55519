"""Views and in-place ops are exact: every case mirrors CPU eager step by step.

Disc tensors share a lazy storage exactly as CPU views share memory, so these
compare the disc base tensor with the CPU base after the same mutations.
"""
import pytest
import torch
import torch_disc
from conftest import counted


def both(values):
    cpu = values.clone()
    return cpu, cpu.to("disc")


def check(cpu, disc):
    torch.testing.assert_close(disc.cpu(), cpu, rtol=0, atol=0)


def test_view_of_view_inplace_updates_base():
    cpu, disc = both(torch.arange(24.0).reshape(4, 6))
    for t in (cpu, disc):
        t[1:, 2:5].t()[1:].mul_(10)
    check(cpu, disc)


def test_inplace_on_base_is_seen_by_existing_views():
    cpu, disc = both(torch.arange(12.0).reshape(3, 4))
    vc, vd = cpu[1], disc[1]
    cpu.add_(1)
    disc.add_(1)
    check(vc, vd)
    check(cpu, disc)


@pytest.mark.parametrize("index", ["int", "slice", "tensor", "mask", "ellipsis"])
def test_setitem(index):
    cpu, disc = both(torch.arange(20.0).reshape(4, 5))
    keys = {
        "int": lambda t: 2,
        "slice": lambda t: (slice(1, 3), slice(None, None, 2)),
        "tensor": lambda t: torch.tensor([0, 3], device=t.device),
        "mask": lambda t: t > 10,
        "ellipsis": lambda t: (Ellipsis, 1),
    }
    for t in (cpu, disc):
        t[keys[index](t)] = -1.0
    check(cpu, disc)


def test_setitem_with_tensor_value():
    cpu, disc = both(torch.zeros(3, 4))
    src = torch.arange(4.0)
    cpu[1] = src
    disc[1] = src.to("disc")
    check(cpu, disc)


@pytest.mark.parametrize("op", ["add_", "mul_", "copy_", "zero_", "fill_", "clamp_", "sub_"])
def test_inplace_ops_on_strided_views(op):
    cpu, disc = both(torch.arange(30.0).reshape(5, 6))
    calls = {
        "add_": lambda v: v.add_(torch.ones_like(v), alpha=2),
        "mul_": lambda v: v.mul_(3),
        "copy_": lambda v: v.copy_(torch.full_like(v, 9.0)),
        "zero_": lambda v: v.zero_(),
        "fill_": lambda v: v.fill_(4.5),
        "clamp_": lambda v: v.clamp_(3, 20),
        "sub_": lambda v: v.sub_(1.5),
    }
    for t in (cpu, disc):
        calls[op](t[::2, 1::2])
    check(cpu, disc)


def test_detach_shares_storage():
    cpu, disc = both(torch.arange(6.0))
    for t in (cpu, disc):
        t.detach()[2:].zero_()
    check(cpu, disc)


def test_copy_broadcasts_and_converts_dtype():
    cpu, disc = both(torch.zeros(3, 4, dtype=torch.float64))
    src = torch.arange(4, dtype=torch.int32)
    cpu.copy_(src)
    disc.copy_(src.to("disc"))
    check(cpu, disc)
    assert disc.dtype == torch.float64


def test_view_dtype_and_reshape_chain():
    cpu, disc = both(torch.arange(8, dtype=torch.int32))
    for t in (cpu, disc):
        t.view(torch.int16)[::2].add_(1)
        t.view(2, 4).t().reshape(-1)[0].fill_(5)  # reshape of a transpose copies
    check(cpu, disc)


def test_split_chunk_unbind_alias_the_base():
    cpu, disc = both(torch.arange(12.0).reshape(6, 2))
    for t in (cpu, disc):
        a, b = t.chunk(2)
        b.mul_(-1)
        for row in t.unbind(0)[:2]:
            row.add_(100)
    check(cpu, disc)


def test_strides_match_cpu():
    x = torch.zeros(3, 4, device="disc")
    assert x.t().stride() == (1, 4)
    assert not x.t().is_contiguous()
    assert x[1:, 1:].storage_offset() == 5


def channels_last_cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, padding=1, groups=2), torch.nn.GELU(),
    ).to(memory_format=torch.channels_last)


@pytest.mark.parametrize("layer", range(6))
def test_channels_last_results_keep_eager_strides(layer, counters):
    # Eager returns channels_last from element-wise ops, pooling and
    # convolutions of channels_last tensors; disc returned NCHW strides.
    cpu = channels_last_cnn()[: layer + 1]
    disc = channels_last_cnn().to("disc")[: layer + 1]
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    xd = x.to("disc").requires_grad_()
    x.requires_grad_()
    y, yd = cpu(x), disc(xd)
    assert yd.stride() == y.stride()
    torch.testing.assert_close(yd.cpu(), y, rtol=1e-5, atol=1e-5)
    assert yd.cpu().stride() == y.stride()
    w = torch.randn(y.shape)  # a loss whose gradients do not cancel out
    (y * w).sum().backward()
    (yd * w.to("disc")).sum().backward()
    assert xd.grad.stride() == x.grad.stride()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    for p, pd in zip(cpu.parameters(), disc.parameters()):
        assert pd.grad.stride() == p.grad.stride()
        torch.testing.assert_close(pd.grad.cpu(), p.grad, rtol=1e-4, atol=1e-4)
    assert counters().get("fallbacks", 0) == 0


def test_autograd_through_inplace_on_views():
    a = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    ad = a.detach().to("disc").requires_grad_()

    def f(t):
        u = t * 2
        u[:, 1:3].mul_(3)
        u.t()[0].add_(1)
        return (u.sin() ** 2).sum()

    f(a).backward()
    f(ad).backward()
    torch.testing.assert_close(ad.grad.cpu(), a.grad)


def test_no_double_computation_across_syncs(counters):
    x = torch.ones(4, device="disc")
    y = x * 3
    z = y + 1
    z.cpu()
    assert counters()["graphs_run"] == 1
    nodes = counters()["graph_nodes"]
    y.cpu()  # already computed by the previous sync
    assert counters()["graphs_run"] == 1
    assert counters()["graph_nodes"] == nodes


@pytest.mark.parametrize("executor_name", ["compiled", "reference"])
def test_executor_views_of_computed_values(executor_name, executor):
    # Inside a graph, transpose and reshape of a contiguous value are made
    # as views of its buffer without the dispatcher (replay.cpp); a reshape
    # of a transposed or offset value copies, as ATen does. Checked through
    # what reads them afterwards: element-wise ops, a GEMM, an in-place add.
    executor(executor_name)
    x = torch.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5)

    def program(t):
        a = t * 2                                  # a computed, contiguous value
        b = a.transpose(-1, 1).reshape(2, -1)      # transposed: the reshape copies
        c = a.reshape(6, -1).transpose(0, 1)       # [20, 6] view of a's buffer
        d = a[1:].reshape(-1, 5)                   # a view at an offset into a
        e = c.reshape(-1)                          # c is not contiguous: a copy
        f = a.transpose(0, 0) + 1
        g = (c @ c.t()).transpose(1, 0)
        k = a[:, 1].transpose(0, 1)                # a view at an offset, transposed
        m = a[1].reshape(-1)                       # contiguous at an offset: a view
        return [b * 1, c * 1, d * 1, e * 1, f, g, k * 1, m * 1]

    def in_place(t):
        a = t * 2
        h = a.reshape(2, 60)
        h.add_(1)                                  # writes a's buffer through the view
        return [h * 1, a * 1]

    for fn in (program, in_place):
        want = fn(x)
        got = fn(x.to("disc"))
        for w, g in zip(want, got):
            torch.testing.assert_close(g.cpu(), w, rtol=1e-6, atol=1e-5)


def test_views_that_cancel_or_chain_match_cpu_and_backward(executor):
    # The fold pass rewires these reads (t().t() -> x, unsqueeze/squeeze ->
    # x, -(-x) -> x, reshape(reshape(y)) -> reshape(y), expand chains);
    # values and gradients must not change, for a non-contiguous reshape
    # source too, on both executors.
    def f(x):
        y = x.t().t() * 2 + x.unsqueeze(1).squeeze(1) - (-(-x))
        y = y + x[:, :1].expand(6, 4).unsqueeze(0).expand(2, 6, 4).sum(0)
        z = x.t().reshape(-1).reshape(4, 6) + x.t().t().transpose(0, 0).reshape(4, 6)
        return (y.sum(0) * z.sum(1).sum()).sum()

    base = torch.randn(6, 4)
    want_x = base.clone().requires_grad_()
    f(want_x).backward()
    for name in ("compiled", "reference"):
        executor(name)
        torch_disc._C.clear_compile_cache()
        x = base.clone().to("disc").requires_grad_()
        out = f(x)
        out.backward()
        torch.testing.assert_close(out.detach().cpu(), f(base), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x.grad.cpu(), want_x.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("module", [torch.nn.BatchNorm1d, torch.nn.BatchNorm2d])
def test_batch_norm_updates_its_running_statistics_as_on_cpu(module, counters):
    # native_batch_norm writes running_mean / running_var without saying so
    # in its schema: recorded as it is, training left them at zeros and ones.
    torch.manual_seed(0)
    cpu = module(4)
    disc = module(4).to("disc")
    shape = (8, 4) if module is torch.nn.BatchNorm1d else (8, 4, 3, 3)
    for training in (True, True, False):
        cpu.train(training)
        disc.train(training)
        x = torch.randn(shape)
        torch.testing.assert_close(disc(x.to("disc")).cpu(), cpu(x), rtol=1e-5, atol=1e-5)
    for name, buf in cpu.named_buffers():
        torch.testing.assert_close(getattr(disc, name).cpu(), buf, rtol=1e-5, atol=1e-6, msg=name)
    assert counters().get("fallbacks", 0) == 0


# conj() and _neg_view() are views that mark their math in a bit of the key
# set; ops that handle the bits themselves (mm, clone, copy_) reach disc with
# them set. Every case here read the base's plain values before.
def in_place_on_conj_view(z):
    c = z.clone()
    c.conj().mul_(1j)
    return c


COMPLEX_CASES = {
    "read": lambda z: z.conj(),
    "elementwise": lambda z: z.conj() * 2,
    "view of it": lambda z: z.conj()[1],
    "mm": lambda z: z.conj() @ z.T,
    "clone": lambda z: z.conj().clone(),
    "sum": lambda z: z.conj().sum(),
    "neg view": lambda z: torch._neg_view(z.real) * 1,
    "imag of conj": lambda z: z.conj().imag * 1,
    "view_as_real": lambda z: torch.view_as_real(z.conj().resolve_conj()),
    "copy into conj view": lambda z: z.clone().conj().copy_(z),
    "in place on conj view": lambda z: in_place_on_conj_view(z),
    "ihfft": lambda z: torch.fft.ihfft(z.real),
}


@pytest.mark.parametrize("case", sorted(COMPLEX_CASES))
def test_conjugate_and_negative_views_read_as_on_cpu(case, counters):
    z = torch.randn(3, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    f = COMPLEX_CASES[case]
    expected = f(z).resolve_conj().resolve_neg()
    actual = f(z.to("disc")).cpu().resolve_conj().resolve_neg()
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6)
    assert counters()["fallbacks"] == 0


def test_real_and_imag_are_views_of_the_complex_buffer():
    cpu, disc = both(torch.randn(2, 3, dtype=torch.complex64))
    for t in (cpu, disc):
        t.real.mul_(2)
        t.imag[0].add_(1)
    check(cpu, disc)


def test_in_place_views_change_only_the_tensor_geometry():
    cpu, disc = both(torch.arange(24.0).reshape(2, 3, 4))
    outs = []
    for t in (cpu, disc):
        v = t * 1
        v.transpose_(1, 2)
        v.unsqueeze_(0)
        v.squeeze_(0)
        v.t_() if v.dim() == 2 else v.as_strided_((4, 3), (1, 4), 12)
        outs.append(v)
    assert outs[1].stride() == outs[0].stride()
    check(outs[0], outs[1])


def test_stft_keeps_eager_values_and_strides():
    # stft transposes its result in place (transpose_, squeeze_)
    x = torch.randn(40, generator=torch.Generator().manual_seed(0))
    window = torch.hann_window(8)
    expected = torch.stft(x, 8, window=window, return_complex=True)
    actual = torch.stft(x.to("disc"), 8, window=window.to("disc"), return_complex=True)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_a_strided_index_view_reaches_cpu_kernels_dense():
    # embedding_bag makes its indices contiguous; the compiler drops that
    # copy of a value, and ATen's CPU kernel reads its indices as dense.
    base = torch.tensor([0, 1, 2, 5, 3, 4, 4, 5, 6, 9])
    weight = torch.randn(10, 5, generator=torch.Generator().manual_seed(0))
    offsets = torch.tensor([0, 3])
    expected = torch.nn.functional.embedding_bag(base[1::2], weight, offsets, mode="sum")
    actual = torch.nn.functional.embedding_bag(base.to("disc")[1::2], weight.to("disc"),
                                               offsets.to("disc"), mode="sum")
    torch.testing.assert_close(actual.cpu(), expected)


def test_eval_batch_norm_saves_no_statistics_as_on_cpu():
    x, w = torch.randn(3, 2, 4), torch.randn(2)
    stats = (torch.zeros(2), torch.ones(2))
    args = lambda dev: [t.to(dev) for t in (x, w, w) + stats]
    expected = torch.native_batch_norm(*args("cpu"), False, 0.1, 1e-5)
    actual = torch.native_batch_norm(*args("disc"), False, 0.1, 1e-5)
    assert [t.shape for t in actual] == [t.shape for t in expected]  # saved mean, invstd: [0]
    torch.testing.assert_close(actual[0].cpu(), expected[0])


def test_views_are_counted_apart_from_kernel_launches():
    # A transpose and a reshape that needs no copy compute nothing: counted
    # as launches.views. A reshape of the transpose copies: a launch.
    x = torch.randn(6, 4)
    got, c = counted(lambda: x.to("disc").t().reshape(24).unsqueeze(0).reshape(2, 12) * 2)
    torch.testing.assert_close(got, x.t().reshape(24).unsqueeze(0).reshape(2, 12) * 2)
    assert c["launches.views"] >= 2  # the transpose, the unsqueeze (and a reshape) at least
    assert c["kernels_launched"] == c["launches.aten"] + c["launches.fused"] + c.get("launches.library", 0)
    assert c["launches.aten"] == 2  # the copying reshape, the lone mul
