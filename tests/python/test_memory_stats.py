"""disc's allocator statistics (lazy_backend/trace/allocator.h) through
PyTorch's accelerator interface and torch.disc: a storage holds its bytes
from when its value first exists as data until it is freed; traced-only
tensors hold nothing; peaks stay until reset; empty_cache returns the host
cache's idle blocks."""
import pytest
import torch
import torch.nn.functional as F
import torch_disc

MIB4 = 4 << 20


@pytest.fixture(autouse=True)
def reset_peak():
    torch.accelerator.reset_peak_memory_stats()


def test_a_copied_in_tensor_holds_its_bytes_until_freed():
    base = torch.accelerator.memory_allocated()
    x = torch.ones(1 << 20).to("disc")  # 4 MiB, data at once
    assert torch.accelerator.memory_allocated() == base + MIB4
    stats = torch.accelerator.memory_stats()
    assert stats["allocation.large_pool.current"] >= 1
    del x
    assert torch.accelerator.memory_allocated() == base
    assert torch.accelerator.max_memory_allocated() == base + MIB4  # the peak stays
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == base


def test_a_traced_tensor_holds_nothing_until_its_sync():
    base = torch.accelerator.memory_allocated()
    x = torch.zeros(1 << 20, device="disc") + 1  # pending: no graph ran yet
    assert torch.accelerator.memory_allocated() == base
    torch_disc.sync()
    assert torch.accelerator.memory_allocated() == base + MIB4
    assert torch.disc.memory_allocated() == base + MIB4
    del x
    assert torch.disc.memory_allocated() == base


def test_a_resized_buffer_counts_its_new_size():
    base = torch.accelerator.memory_allocated()
    x = torch.ones(1024).to("disc")
    x.resize_(2048)
    torch_disc.sync()
    assert torch.accelerator.memory_allocated() == base + 2048 * 4
    del x
    assert torch.accelerator.memory_allocated() == base


def test_a_storage_freed_by_resize_to_zero_holds_nothing_until_refilled():
    """FSDP2 frees an unsharded parameter with storage.resize_(0) and grows
    it back for the next all-gather."""
    base = torch.accelerator.memory_allocated()
    x = torch.ones(1 << 20).to("disc")
    x.untyped_storage().resize_(0)
    assert torch.accelerator.memory_allocated() == base
    x.untyped_storage().resize_(MIB4)
    x.copy_(torch.full((1 << 20,), 2.0))  # refilled from the host
    assert torch.accelerator.memory_allocated() == base + MIB4
    assert torch.equal(x.cpu(), torch.full((1 << 20,), 2.0))
    with pytest.raises(RuntimeError, match="shrinking is supported to 0 bytes only"):
        x.untyped_storage().resize_(1024)
    del x
    assert torch.accelerator.memory_allocated() == base


def test_a_training_step_holds_parameters_grads_and_optimizer_state():
    base = torch.accelerator.memory_allocated()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10)).to("disc")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(64, 784).to("disc"), torch.randint(0, 10, (64,)).to("disc")
    for _ in range(2):
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch_disc.sync()
    params = sum(p.numel() * 4 for p in model.parameters())
    # Parameters, their gradients and momentum buffers, the batch, the loss.
    expected = 3 * params + x.numel() * 4 + y.numel() * 8 + 4
    assert torch.accelerator.memory_allocated() - base == expected
    assert torch.accelerator.memory_reserved() >= torch.accelerator.memory_allocated()
    # The peak saw the first step's activations held by autograd too.
    assert torch.accelerator.max_memory_allocated() - base >= expected
    del model, opt, x, y, loss
    assert torch.accelerator.memory_allocated() == base


def test_empty_cache_returns_the_idle_host_blocks():
    x = torch.randn(512, 512).to("disc")
    z = x * 2 + 1
    torch_disc.sync()
    del z  # its 1 MiB block goes idle in the host cache: reserved, not allocated
    torch_disc.wait()
    assert torch.disc.memory_stats()["host_cache.idle_bytes"] > 0
    assert torch.accelerator.memory_reserved() > torch.accelerator.memory_allocated()
    torch.accelerator.empty_cache()
    stats = torch.disc.memory_stats()
    assert stats["host_cache.idle_bytes"] == 0
    assert torch.accelerator.memory_reserved() == torch.accelerator.memory_allocated()


def test_the_device_module_and_the_accelerator_agree():
    x = torch.ones(1000).to("disc")
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        assert getattr(torch.disc, name)() == getattr(torch.accelerator, name)()
        assert getattr(torch.disc, name)("disc:0") == getattr(torch.accelerator, name)(0)
    free, total = torch.disc.mem_get_info()
    assert 0 < free <= total
    assert torch.get_device_module("disc").memory_allocated is torch.disc.memory_allocated
    del x


def test_another_device_index_is_a_clear_error():
    with pytest.raises(RuntimeError, match="disc:1.*does not exist"):
        torch.disc.memory_allocated(1)
    with pytest.raises(RuntimeError, match="disc:1"):
        torch.accelerator.memory_stats(1)
