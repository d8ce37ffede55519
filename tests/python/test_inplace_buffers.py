"""Buffer reuse in the compiled executor: an op that updates a value in place
writes into its buffer when nothing else reads the old value; otherwise it
works on a copy. Counted as inplace.writes / inplace.copies. A generated
element-wise kernel writes an output into an input buffer nothing reads
after it: inplace.kernel_outputs."""
import torch

import torch_disc


def run_counted(fn, *keys):
    """Runs fn without grad as one graph; returns the counters `keys`."""
    torch_disc.sync()
    torch_disc.metrics.reset()
    with torch.no_grad():
        fn()
    torch_disc.sync()
    c = torch_disc.metrics.counters()
    return tuple(c.get(k, 0) for k in keys)


def step_counts(fn):
    return run_counted(fn, "inplace.writes", "inplace.copies")


def test_lone_parameter_update_writes_in_place():
    p = torch.nn.Parameter(torch.ones(1000, device="disc"))
    assert step_counts(lambda: p.mul_(3)) == (1, 0)
    assert step_counts(lambda: p.add_(1)) == (1, 0)
    torch.testing.assert_close(p.detach().cpu(), torch.full((1000,), 4.0))


def program(p):
    """Reads p's old value (directly and through a view), updates p in place,
    then mixes old and new: the update must not clobber what is still read."""
    old = p * 1
    old_view = p.view(2, 3).t()
    kept = old_view * 1        # a copy made before the update
    p.mul_(10)
    return old + p, kept.sum(0) + old_view.sum(0)


def test_old_value_read_later_in_the_graph_is_kept():
    cpu = torch.arange(6.0)
    disc = cpu.to("disc")
    torch_disc.sync()
    got = {}

    def fn():
        got["out"] = program(disc)
    step_counts(fn)
    want = program(cpu)
    for g, w in zip(got["out"], want):
        torch.testing.assert_close(g.cpu(), w)
    torch.testing.assert_close(disc.cpu(), cpu)


def test_buffer_shared_by_two_tensors_is_copied():
    p = torch.ones(100, device="disc") * 2
    torch_disc.sync()
    q = torch.empty(100, device="disc")
    q.copy_(p)                 # q's value is p's buffer, not a copy of it
    torch_disc.sync()
    assert step_counts(lambda: p.mul_(5)) == (0, 1)
    assert p.cpu()[0].item() == 10.0 and q.cpu()[0].item() == 2.0


def test_masked_fill_of_an_expanded_value_writes_a_copy():
    """masked_fill of an expand (Doge's dynamic attention mask) records an
    in-place masked_fill_ on the expand's value: its [B, H, 1, L] buffer
    has no other reader, but its [B, H, L, L] elements share memory, so
    writing there would let every row overwrite the others."""
    torch.manual_seed(0)
    p = torch.randn(2, 4, 16)
    mask = torch.ones(16, 16, dtype=torch.bool).triu(1)

    def fill(p, mask):
        return torch.exp(p)[:, :, None, :].expand(-1, -1, 16, -1).masked_fill(mask, -1.0)

    pd, md = p.to("disc"), mask.to("disc")
    out = []
    assert step_counts(lambda: out.append(fill(pd, md))) == (0, 1)
    torch.testing.assert_close(out[0].cpu(), fill(p, mask))


def test_training_matches_reference_with_in_place_updates():
    torch.manual_seed(0)
    ref = torch.nn.Linear(8, 4)
    model = torch.nn.Linear(8, 4)
    model.load_state_dict(ref.state_dict())
    model.to("disc")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ref, model)]
    for _ in range(4):
        x = torch.randn(5, 8)
        for m, o, dev in ((ref, opts[0], "cpu"), (model, opts[1], "disc")):
            o.zero_grad()
            m(x.to(dev)).pow(2).sum().backward()
            o.step()
    for a, b in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


def test_dead_intermediates_are_released_before_the_graph_ends(counters):
    # A chain the compiler cannot fuse (GEMMs): each intermediate is dropped
    # after the GEMM that reads it last, so at most two live at once.
    torch.manual_seed(0)
    w = [torch.randn(64, 64) for _ in range(6)]
    x = torch.randn(32, 64)
    y, yd = x, x.to("disc")
    for m in w:
        y, yd = y @ m, yd @ m.to("disc")
    torch.testing.assert_close(yd.cpu(), y, rtol=1e-4, atol=1e-4)
    # 5 intermediates, 6 weights and the input: 12 values read before the end.
    assert counters()["buffers.released_early"] == 12


def kernel_reuses(fn):
    return run_counted(fn, "inplace.kernel_outputs", "launches.fused")


def momentum_update(p, buf, g):
    buf.mul_(0.9).add_(g)
    p.add_(buf, alpha=-0.1)


def test_fused_update_writes_into_parameter_and_state_buffers():
    # One generated kernel computes the new momentum and parameter; both
    # land in the buffers they replace (the gradient stays: it is read later).
    torch.manual_seed(0)
    p0, b0, g0 = torch.randn(300, 7), torch.randn(300, 7), torch.randn(300, 7)
    p, buf, g = (t.to("disc") for t in (p0, b0, g0))
    for _ in range(3):
        assert kernel_reuses(lambda: momentum_update(p, buf, g)) == (2, 1)
        momentum_update(p0, b0, g0)
    torch.testing.assert_close(p.cpu(), p0)
    torch.testing.assert_close(buf.cpu(), b0)
    torch.testing.assert_close(g.cpu(), g0)


def test_fused_update_keeps_a_buffer_another_tensor_shares():
    p, buf, g = torch.ones(64, device="disc"), torch.ones(64, device="disc"), torch.ones(64, device="disc")
    torch_disc.sync()
    q = torch.empty(64, device="disc")
    q.copy_(p)                 # q's value is p's buffer
    torch_disc.sync()
    assert kernel_reuses(lambda: momentum_update(p, buf, g)) == (1, 1)  # buf only
    assert q.cpu()[0].item() == 1.0
    torch.testing.assert_close(p.cpu(), torch.full((64,), 0.81))


def test_fused_kernel_does_not_reuse_a_value_read_later_or_broadcast():
    a = torch.randn(40, 16).to("disc")
    row = torch.randn(16).to("disc")
    torch_disc.sync()
    got = {}

    def fn():
        got["y"] = (a * 2 + row).relu()   # row is broadcast: another shape
        got["z"] = a + 1                  # a is read again
    reused, _ = kernel_reuses(fn)
    assert reused == 0
    torch.testing.assert_close(got["y"].cpu(), (a.cpu() * 2 + row.cpu()).relu())
    torch.testing.assert_close(got["z"].cpu(), a.cpu() + 1)


def test_mnist_sgd_step_updates_every_parameter_and_momentum_in_place(counters):
    # The example MLP, SGD with momentum: each of the 6 parameters' update
    # is one kernel writing the new momentum and parameter into the old
    # buffers, so a step allocates no second copy of either. Eager is the
    # oracle for the values.
    import torch.nn.functional as F

    from examples.mnist.train import build_model
    torch.manual_seed(0)
    ref = build_model("mlp")
    model = build_model("mlp")
    model.load_state_dict(ref.state_dict())
    model.to("disc")
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (ref, model)]
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    for step in range(4):
        if step == 2:
            torch_disc.metrics.reset()
        for m, o, dev in ((ref, opts[0], "cpu"), (model, opts[1], "disc")):
            o.zero_grad(set_to_none=True)
            F.cross_entropy(m(x.to(dev)), y.to(dev)).backward()
            o.step()
    c = counters()
    assert c["syncs"] == 2 and c["inplace.kernel_outputs"] == 2 * 12
    for a, b in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


def test_sgd_momentum_is_a_scalar_of_its_update_not_a_graph_input():
    # SGD's foreach path scales each momentum buffer by a Python float
    # (mul_.Scalar). Recorded whole, the factor is runtime data of the node:
    # no 0-dim tensor per parameter and step to upload and bind, and a new
    # momentum value does not change the graph's structure.
    bufs = [torch.randn(8, device="disc") for _ in range(2)]
    want = [b.cpu() for b in bufs]
    torch_disc.sync()
    torch._foreach_mul_(bufs, 0.9)
    text = torch_disc.graph_text(*bufs)
    assert text.count("aten::mul_.Scalar") == 2 and "params=2" in text, text
    torch._foreach_mul_(want, 0.9)
    for b, w in zip(bufs, want):
        torch.testing.assert_close(b.cpu(), w, rtol=0, atol=0)
    other = [torch.randn(8, device="disc") for _ in range(2)]
    torch_disc.sync()
    torch._foreach_mul_(other, 0.5)
    assert torch_disc.graph_text(*other).split(")")[0] == text.split(")")[0]  # same hash
