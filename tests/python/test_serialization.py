"""state_dict, torch.save / torch.load, deepcopy, and the four PrivateUse1
functionalization gaps named in the architecture note. disc does not use
functionalization (its storages are lazy buffers shared by views), so each
gap is a test that the corresponding behaviour is right here."""
import copy
import io

import torch
import torch_disc


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("disc")


def assert_same_params(a, b):
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb
        torch.testing.assert_close(va.cpu(), vb.cpu(), rtol=0, atol=0)


def test_state_dict_round_trip_through_cpu():
    m = model()
    sd = {k: v.cpu() for k, v in m.state_dict().items()}
    m2 = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("disc")
    m2.load_state_dict(sd)
    assert_same_params(m, m2)
    assert m2[0].weight.device.type == "disc"


def test_torch_save_load_keeps_device_and_values():
    m = model()
    m[0].weight.data.mul_(2)  # pending when saved
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["0.weight"].device.type == "disc"
    torch.testing.assert_close(loaded["0.weight"].cpu(), m[0].weight.detach().cpu())
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert on_cpu["0.weight"].device.type == "cpu"
    torch.testing.assert_close(on_cpu["1.running_var"], m[1].running_var.cpu())


def test_saved_views_keep_sharing():
    base = torch.arange(6.0, device="disc")
    buf = io.BytesIO()
    torch.save({"base": base, "view": base[2:4]}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    loaded["view"].fill_(-1)
    assert loaded["base"].cpu().tolist() == [0, 1, -1, -1, 4, 5]


def test_deepcopy_is_independent():
    m = model()
    m2 = copy.deepcopy(m)
    assert_same_params(m, m2)
    m2[0].weight.data.add_(1)
    assert not torch.equal(m2[0].weight.cpu(), m[0].weight.cpu())


def test_gap_scatter_and_copy_variants_are_traced(counters):
    # Gap 1: composite *_copy / *_scatter kernels must not bypass the backend.
    x = torch.arange(12.0).reshape(3, 4)
    d = x.to("disc")
    for f in (
        lambda t: torch.transpose_copy(t, 0, 1),
        lambda t: torch.slice_scatter(t, torch.zeros(3, 2, device=t.device), 1, 0, 2),
        lambda t: torch.select_scatter(t, torch.ones(4, device=t.device), 0, 1),
        lambda t: torch.diagonal_scatter(t, torch.ones(3, device=t.device)),
    ):
        torch.testing.assert_close(f(d).cpu(), f(x))
    assert counters()["fallbacks"] == 0


def test_gap_to_copy_results_are_disc_tensors_with_own_storage():
    # Gap 2: _to_copy results (dtype / device conversions) are real disc
    # tensors; mutating them leaves the source alone.
    d = torch.arange(4.0, device="disc")
    h = d.to(torch.float64)
    assert h.device.type == "disc" and h.dtype == torch.float64
    h.add_(1)
    assert d.cpu().tolist() == [0, 1, 2, 3] and h.cpu().tolist() == [1, 2, 3, 4]


def test_gap_inplace_update_keeps_parameter_storage():
    # Gap 3: an optimizer's in-place update writes into the parameter's own
    # storage (no new buffer, views see it), so a step does not double memory.
    p = torch.nn.Parameter(torch.ones(4, device="disc"))
    ptr = p.data_ptr()
    view = p.detach()[1:]
    opt = torch.optim.SGD([p], lr=0.5)
    p.sum().backward()
    opt.step()
    assert p.data_ptr() == ptr
    assert view.cpu().tolist() == [0.5, 0.5, 0.5]


def test_gap_save_and_deepcopy_take_the_storage_path_correctly():
    # Gap 4: torch.save and deepcopy go through storages; a byte-level read of
    # a pending float buffer must give its values, not garbage.
    d = torch.arange(3.0, device="disc") * 1.5
    raw = d.untyped_storage().cpu()
    assert torch.frombuffer(bytearray(bytes(raw)), dtype=torch.float32).tolist() == [0, 1.5, 3]
    c = copy.deepcopy(d)
    assert c.device.type == "disc" and c.cpu().tolist() == [0, 1.5, 3]


def test_a_buffer_holding_a_slice_of_another_reads_right_as_bytes(tmp_path):
    # DDP's broadcast copies each parameter from a slice of one flat buffer:
    # the parameter's data is then a view into that buffer, and a read of its
    # bytes (torch.save) or of another dtype must start at the slice, not at
    # the big buffer's first element.
    flat = torch.arange(12.0).to("disc") * 1
    p = torch.zeros(3, device="disc")
    p.cpu()
    p.copy_(flat[4:7])
    raw = p.untyped_storage().cpu()
    assert torch.frombuffer(bytearray(bytes(raw)), dtype=torch.float32).tolist() == [4, 5, 6]
    assert p.view(torch.int32).cpu().equal(torch.tensor([4.0, 5, 6]).view(torch.int32))
    torch.save({"p": p}, tmp_path / "p.pt")
    assert torch.load(tmp_path / "p.pt", map_location="cpu")["p"].tolist() == [4, 5, 6]
