"""Registration of the "disc" device: names, device module, module.to()."""
import pytest
import torch
import torch_disc


def test_device_names_and_properties():
    x = torch.ones(2, device="disc")
    assert x.device == torch.device("disc", 0)
    assert x.is_disc
    assert torch.ones(2).disc().is_disc
    assert torch.ones(2).to("disc:0").device.type == "disc"


def test_device_module():
    assert torch.disc.is_available()
    assert torch.disc.device_count() == 1
    assert torch.disc.current_device() == 0
    x = torch.ones(3, device="disc") + 1
    torch.disc.synchronize()
    assert not torch_disc._C.is_pending(x)


def test_module_to_keeps_its_parameter_objects():
    # As .to("cuda") does: tied weights and optimizers built before stay
    # valid (test_module_conversion.py).
    m = torch.nn.Linear(4, 3)
    w = m.weight
    values = w.detach().clone()
    m.to("disc")
    assert m.weight is w
    assert isinstance(m.weight, torch.nn.Parameter)
    assert m.weight.device.type == "disc" and m.weight.requires_grad
    torch.testing.assert_close(m.weight.cpu(), values)


def test_rng_state_round_trip():
    torch.disc.manual_seed(123)
    state = torch.disc.get_rng_state()
    a = torch.rand(5, device="disc").cpu()
    torch.disc.set_rng_state(state)
    b = torch.rand(5, device="disc").cpu()
    assert torch.equal(a, b)
    assert torch.disc.initial_seed() == 123


def test_manual_seed_reaches_disc_and_dropout_is_reproducible():
    x = torch.ones(1000, device="disc")
    torch.manual_seed(7)
    a = torch.nn.functional.dropout(x, 0.5).cpu()
    b = torch.nn.functional.dropout(x, 0.5).cpu()
    torch.manual_seed(7)
    c = torch.nn.functional.dropout(x, 0.5).cpu()
    assert torch.equal(a, c)
    assert not torch.equal(a, b)  # each draw advances the generator
    kept = (a != 0).float().mean().item()
    assert 0.4 < kept < 0.6
    assert set(a.unique().tolist()) <= {0.0, 2.0}


def test_new_seed_does_not_recompile(counters):
    x = torch.ones(64, device="disc")
    torch_disc.sync()
    torch_disc.metrics.reset()
    for seed in range(4):
        torch.manual_seed(seed)
        torch.nn.functional.dropout(x, 0.3).cpu()
    assert counters()["compiles"] == 1
    assert counters()["graphs_run"] == 4


def test_print_is_a_sync_not_a_fallback(counters, capsys):
    x = torch.arange(4.0, device="disc") * 2
    print(x)
    out = capsys.readouterr().out
    assert "tensor([0., 2., 4., 6.], device='disc:0')" in out
    assert counters().get("sync.print") == 1
    assert counters()["fallbacks"] == 0


def test_pin_memory_and_pinned_data_loader():
    # With disc the accelerator, pin_memory() asks its hooks for pinned host
    # memory; disc buffers are host memory, so pinned tensors are plain CPU
    # allocations that is_pinned() recognises.
    x = torch.randn(3, 4)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and not x.is_pinned()
    assert pinned.device.type == "cpu" and torch.equal(pinned, x)
    assert torch.equal(pinned.to("disc", non_blocking=True).cpu(), x)
    assert torch.empty(3, pin_memory=True).is_pinned()
    data = torch.utils.data.TensorDataset(torch.randn(10, 3), torch.arange(10))
    batches = list(torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    assert all(t.is_pinned() for b in batches for t in b)


def test_a_cast_on_the_device_is_one_op_and_fuses():
    # .to(dtype) and autocast's casts are recorded as _to_copy, not the
    # composite's zeros + reshape + copy (a fill thrown away, a copy on ATen).
    from conftest import counted

    w = torch.randn(64, 32)
    d = w.to("disc")
    text = torch_disc.graph_text(d.to(torch.bfloat16))
    assert "aten::_to_copy" in text
    assert "aten::zeros" not in text and "aten::copy" not in text
    # neg is exact: eager's bits on every ISA, where exp's rounding is disc's own.
    got, c = counted(lambda: d.to(torch.bfloat16).neg())
    assert c["kernels_launched"] == 1 and c["launches.fused"] == 1
    assert torch.equal(got, w.to(torch.bfloat16).neg())


def test_casts_that_change_layout_or_device_keep_eagers_strides():
    w = torch.randn(2, 3, 4, 5)
    d = w.to("disc")
    for x, cpu in ((d.transpose(1, 3), w.transpose(1, 3)), (d, w)):
        for kwargs in ({"dtype": torch.float64}, {"memory_format": torch.channels_last},
                       {"dtype": torch.bfloat16, "memory_format": torch.contiguous_format}):
            got, want = x.to(**kwargs), cpu.to(**kwargs)
            assert got.stride() == want.stride(), kwargs
            assert torch.equal(got.cpu(), want), kwargs
    assert torch.equal(d.to("cpu", torch.float16), w.half())


def test_device_properties_name_the_target_cpu_and_isa():
    props = torch.disc.get_device_properties(0)
    assert props.type == "disc" and props.target == torch_disc._C.target()
    assert props.isa == torch_disc.build_components()["cpu_isa"]
    assert props.cpu in props.name and props.isa in props.name
    assert torch.disc.get_device_name("disc:0") == props.name
    assert props.total_memory == torch.disc.mem_get_info()[1] > 0
    assert props.multi_processor_count >= 1
    assert torch.disc.get_device_capability() == torch.accelerator.get_device_capability()


def test_the_capability_names_exactly_the_dtypes_disc_tensors_take():
    supported = torch.accelerator.get_device_capability()["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool} <= supported
    quantized = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}
    dtypes = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    for dtype in sorted(dtypes, key=str):
        x = torch.empty(4, dtype=dtype)
        try:
            x.to("disc")
            moved = True
        except (RuntimeError, NotImplementedError) as e:
            # Quantized tensors stop at torch's dispatcher (no Quantizeddisc).
            assert dtype in quantized or "is not supported on the disc device" in str(e), e
            moved = False
        assert moved == (dtype in supported), dtype


def test_rng_state_all_is_one_state_per_device():
    torch.disc.manual_seed(5)
    states = torch.disc.get_rng_state_all()
    assert len(states) == torch.disc.device_count() == 1
    a = torch.rand(4, device="disc").cpu()
    torch.disc.set_rng_state_all(states)
    assert torch.equal(torch.rand(4, device="disc").cpu(), a)
    with pytest.raises(ValueError, match="one state per device"):
        torch.disc.set_rng_state_all(states * 2)


def test_memory_summary_and_device_of():
    x = torch.ones(256, 1024).to("disc")
    torch.disc.synchronize()
    torch.disc.reset_max_memory_allocated()
    assert torch.disc.max_memory_allocated() == torch.disc.memory_allocated() >= x.nbytes
    summary = torch.disc.memory_summary()
    assert "allocated_bytes" in summary and "reserved_bytes" in summary
    assert "host cache" in summary and "host cache" not in torch.disc.memory_summary(abbreviated=True)
    with torch.disc.device_of(x), torch.disc.device_of(torch.ones(1)):
        assert torch.disc.current_device() == 0
    assert torch.disc.OutOfMemoryError is torch.OutOfMemoryError
