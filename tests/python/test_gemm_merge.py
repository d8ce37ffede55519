"""GEMM merge and pre-packed weights in the compiled executor.

GEMMs that share an operand run as one oneDNN call (Q/K/V: 3 -> 1 forward,
their weight gradients 3 -> 1 backward); independent equal-shape GEMMs as one
bmm when batched merging is on; weights a graph does not change are packed
once and reused across steps, refreshed when they change. The reference
executor is the oracle."""
import pytest
import torch
import torch.nn as nn

import torch_disc
from benchmarks.gemm_merge import EncoderLayer as BenchEncoderLayer
from conftest import counted


@pytest.fixture
def settings():
    """Restores the executor, GEMM merge and pre-packing after a test."""
    before = torch_disc.options.get("DISC_EXECUTOR")
    merge = torch_disc._C.gemm_merge()
    yield
    torch_disc._C.set_executor(before)
    torch_disc._C.set_gemm_merge(*merge)
    torch_disc._C.set_prepack(True)


def EncoderLayer(hidden=32, heads=4, ffn=64):
    return BenchEncoderLayer(hidden, heads, ffn)


def encoder_step(seed=0, batch=4, seq=8):
    """One training step's forward + backward on disc; returns [loss, *grads]."""
    torch.manual_seed(seed)
    model = EncoderLayer().to("disc")
    x = torch.randn(batch, seq, 32).to("disc")
    torch_disc.sync()

    def step():
        loss = model(x).square().mean()
        loss.backward()
        return [loss.detach()] + [p.grad for p in model.parameters()]
    return step


def gemm_calls(c):
    return c.get("library.gemm_calls", 0)


def test_encoder_layer_merges_qkv_forward_and_backward_and_matches_reference(settings):
    torch_disc._C.set_executor("reference")
    want, _ = counted(encoder_step())
    torch_disc._C.set_executor("compiled")
    torch_disc._C.set_gemm_merge(False)
    off, c_off = counted(encoder_step())
    torch_disc._C.set_gemm_merge(True)
    on, c_on = counted(encoder_step())
    # Forward: 6 Linear; backward: 2 per Linear (input and weight grad), but
    # q / k / v need no input grad (x requires none). The attention's bmm's
    # (2 forward, 4 backward) are one fused call each way.
    assert gemm_calls(c_off) == 6 + 9
    assert c_off["library.attention"] == c_off["library.attention_backward"] == 1
    assert c_off.get("gemm_merge.groups", 0) == 0
    # Merged: q/k/v forward (3 -> 1) and their weight grads, which all read
    # x as B ([gq^T; gk^T; gv^T] @ x, 3 -> 1).
    assert c_on["gemm_merge.groups"] == 2
    assert c_on["gemm_merge.members"] == 6
    assert gemm_calls(c_on) == gemm_calls(c_off) - 4
    # The weight grads are graph outputs (param.grad): their rows are copied
    # into buffers of their own; q / k / v parts stay views, which the
    # reshapes to heads take as they are (views again).
    assert c_on["gemm_merge.slice_copies"] == 3
    assert not [k for k in c_on if k.startswith("replay.contiguous_copies")]
    for g, w, o in zip(on, want, off):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(o, w, rtol=1e-4, atol=1e-5)


def test_new_sequence_length_reuses_the_merged_plan(settings):
    torch_disc._C.set_gemm_merge(True)
    counted(encoder_step(seq=8))
    _, c = counted(encoder_step(seq=12))
    assert c["gemm_merge.launches"] == 2  # decided on symbols: same groups


def test_independent_equal_shape_gemms_batch_into_one_bmm(settings):
    torch.manual_seed(3)
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    cs = [torch.randn(16, 32) for _ in range(3)]
    ds = [torch.randn(32, 8) for _ in range(3)]

    def products(dev):
        # Operands tied to x and w element-wise: equal symbolic m, k, n (one
        # copy of x and of w: each .to() is a new input with its own symbols).
        xd, wd = x.to(dev), w.to(dev)
        return [(xd * c.to(dev)) @ (wd * d.to(dev)) for c, d in zip(cs, ds)]
    want = products("cpu")
    torch_disc._C.set_gemm_merge(True, batched=False)
    _, c = counted(lambda: products("disc"))
    assert gemm_calls(c) == 3
    torch_disc._C.set_gemm_merge(True, batched=True)
    got, c = counted(lambda: products("disc"))
    assert gemm_calls(c) == 1 and c["gemm_merge.members"] == 3
    for g, w_ in zip(got, want):
        torch.testing.assert_close(g, w_, rtol=1e-5, atol=1e-5)


def mlp():
    torch.manual_seed(4)
    return nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 10))


def test_inference_loop_packs_weights_once(settings):
    torch_disc._C.set_prepack(True)
    model, ref = mlp().to("disc"), mlp()
    x = torch.randn(8, 64)
    torch_disc.sync()
    misses, hits = [], []
    with torch.no_grad():
        for _ in range(10):
            got, c = counted(lambda: model(x.to("disc")))
            misses.append(c.get("prepack.misses", 0))
            hits.append(c.get("prepack.hits", 0))
            torch.testing.assert_close(got, ref(x), rtol=1e-5, atol=1e-5)
    assert misses == [2] + [0] * 9  # two Linear weights, packed on step 1 only
    assert hits == [0] + [2] * 9
    assert c.get("onednn.reorders", 0) == 0


def test_encoder_inference_packs_the_concatenated_qkv_weight(settings):
    torch_disc._C.set_gemm_merge(True)
    torch.manual_seed(5)
    model = EncoderLayer().eval()
    dmodel = EncoderLayer().to("disc").eval()
    dmodel.load_state_dict(model.state_dict())
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        want = model(x)
        counts = []
        for _ in range(3):
            got, c = counted(lambda: dmodel(x.to("disc")))
            counts.append((c.get("prepack.misses", 0), c.get("prepack.hits", 0)))
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # q/k/v as one packed weight, o, ff1, ff2: four packed weights.
    assert counts == [(4, 0), (0, 4), (0, 4)]


def test_packed_weights_are_refreshed_after_load_state_dict_and_in_place_updates(settings):
    torch_disc._C.set_prepack(True)
    model = mlp().to("disc")
    x = torch.randn(8, 64)
    with torch.no_grad():
        for _ in range(2):
            counted(lambda: model(x.to("disc")))
        # New weights through load_state_dict: a stale packed copy would
        # give the old outputs.
        torch.manual_seed(6)
        fresh = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 10))
        model.load_state_dict(fresh.state_dict())
        torch_disc.sync()
        got, c = counted(lambda: model(x.to("disc")))
        torch.testing.assert_close(got, fresh(x), rtol=1e-5, atol=1e-5)
        assert c["prepack.misses"] == 2
        # In place, on the device: w.add_(1).
        model[0].weight.add_(1)
        fresh[0].weight.add_(1)
        torch_disc.sync()
        got, c = counted(lambda: model(x.to("disc")))
        torch.testing.assert_close(got, fresh(x), rtol=1e-5, atol=1e-5)
        assert c["prepack.misses"] == 1 and c["prepack.hits"] == 1
        got, c = counted(lambda: model(x.to("disc")))
        assert c.get("prepack.misses", 0) == 0
        torch.testing.assert_close(got, fresh(x), rtol=1e-5, atol=1e-5)


def test_a_weight_two_gemms_read_is_repacked_after_each_optimizer_update(settings):
    # A layer applied twice in one step (an RNN, checkpointing): its weight
    # is packed once per step. Adam's update, a generated kernel, writes the
    # new weight into the old buffer; without a version bump the next step
    # read the packed copy of the weight before the update and stopped
    # learning (losses .07518 .03263 .0294 .02636 against CPU's .0132 .00679).
    torch_disc._C.set_prepack(True)

    def losses(dev):
        torch.manual_seed(0)
        m = nn.Linear(16, 16).to(dev)
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        x = torch.ones(4, 16).to(dev)
        out = []
        for _ in range(4):
            opt.zero_grad()
            loss = m(torch.tanh(m(x))).square().mean()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    torch_disc.metrics.reset()
    got = losses("disc")
    c = torch_disc.metrics.counters()
    assert got == pytest.approx(losses("cpu"), rel=1e-4)
    assert c.get("inplace.kernel_outputs", 0) > 0  # the update does land in the old buffer
    assert c.get("prepack.misses", 0) >= 4  # packed again every step


def test_a_dead_weight_leaves_the_packed_cache(settings):
    torch_disc._C.set_prepack(True)  # starts from an empty cache
    model = mlp().to("disc")
    with torch.no_grad():
        counted(lambda: model(torch.randn(8, 64).to("disc")))
    assert torch_disc._C.packed_weights() == 2
    del model
    import gc
    gc.collect()
    with torch.no_grad():  # any packing GEMM prunes dead entries
        other = mlp().to("disc")
        counted(lambda: other(torch.randn(8, 64).to("disc")))
    assert torch_disc._C.packed_weights() == 2


def test_prepack_off_packs_nothing(settings):
    torch_disc._C.set_prepack(False)
    model = mlp().to("disc")
    with torch.no_grad():
        _, c = counted(lambda: model(torch.randn(8, 64).to("disc")))
    assert c.get("prepack.misses", 0) == 0 and c.get("onednn.reorders", 0) == 0


def test_a_weight_two_gemms_read_is_packed_once_per_training_step(settings):
    # The same Linear applied twice (tied weights): forward reads W^T twice.
    # An SGD step per step changes W, so nothing is kept across steps.
    torch_disc._C.set_prepack(True)
    torch.manual_seed(7)
    lin = nn.Linear(16, 16)
    dlin = nn.Linear(16, 16).to("disc")
    dlin.load_state_dict(lin.state_dict())
    opt, dopt = torch.optim.SGD(lin.parameters(), lr=0.1), torch.optim.SGD(dlin.parameters(), lr=0.1)
    x = torch.randn(4, 16)
    for _ in range(3):
        opt.zero_grad()
        lin(lin(x)).square().sum().backward()
        opt.step()

        def step():
            dopt.zero_grad()
            dlin(dlin(x.to("disc"))).square().sum().backward()
            dopt.step()
            return [dlin.weight]
        (got,), c = counted(step)
        assert c["prepack.misses"] == 1 and c["prepack.hits"] == 1
        torch.testing.assert_close(got, lin.weight.detach(), rtol=1e-5, atol=1e-5)


def test_a_new_batch_size_in_inference_keeps_results_and_the_packed_weights(settings):
    # Packed primitives have fixed sizes: a new m makes a new one; the packed
    # weight is reused when its layout fits the new primitive (here it does:
    # oneDNN's blocking of B depends on k and n), else replaced.
    torch_disc._C.set_prepack(True)
    model, ref = mlp().to("disc"), mlp()
    misses = []
    with torch.no_grad():
        for batch in (8, 9, 8, 33, 8):
            x = torch.randn(batch, 64)
            got, c = counted(lambda: model(x.to("disc")))
            torch.testing.assert_close(got, ref(x), rtol=1e-5, atol=1e-5)
            misses.append(c.get("prepack.misses", 0))
    assert misses == [2, 0, 0, 0, 0]
    assert torch_disc._C.packed_weights() == 2
