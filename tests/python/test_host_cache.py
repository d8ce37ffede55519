"""The compiled executor's host buffer cache (lazy_backend/device/host_cache.h):
a training step's large buffers come from blocks freed by the step before,
user CPU tensors never do, and the cache can be emptied and turned off."""
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

import torch_disc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mlp_steps(steps, device="disc", per_step=None):
    """Trains a small MLP; ``per_step`` (a list) receives each step's counters."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(64, 784).to(device)
    y = torch.randint(0, 10, (64,)).to(device)
    losses = []
    for _ in range(steps):
        if per_step is not None:
            torch_disc.metrics.reset()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if per_step is not None:
            per_step.append(torch_disc.metrics.counters())
    return losses, model


def test_steady_state_steps_allocate_nothing_new():
    torch.disc.empty_cache()  # idle blocks from earlier tests would serve step 1
    per_step = []
    losses, _ = mlp_steps(6, per_step=per_step)
    misses = [c.get("host_cache.misses", 0) for c in per_step]
    hits = [c.get("host_cache.hits", 0) for c in per_step]
    # Step 1 runs the graph that creates the momentum buffers, step 2 the
    # steady-state graph for the first time, and step 3 still allocates
    # while step 1's blocks come free; from step 4 on every large buffer is
    # a block an earlier step freed.
    assert misses[0] > 0 and misses[3:] == [0, 0, 0], misses
    # Four large blocks a step: the first layer's output, its gradient
    # before and after the ReLU, and its weight's gradient. The parameter
    # and momentum updates take none: they write into the old buffers.
    assert hits[3:] == [4, 4, 4], hits
    expected, _ = mlp_steps(6, device="cpu")
    assert torch.allclose(torch.tensor(losses), torch.tensor(expected), rtol=1e-5, atol=1e-6)


def test_user_cpu_tensors_bypass_the_cache(counters):
    before = torch.disc.memory_stats()
    big = torch.empty(1 << 20)  # 4 MiB on the CPU, outside any graph
    big.fill_(1.0)
    del big
    c = counters()
    assert c.get("host_cache.hits", 0) == 0 and c.get("host_cache.misses", 0) == 0
    assert torch.disc.memory_stats()["host_cache.idle_bytes"] == before["host_cache.idle_bytes"]


def test_a_graph_output_freed_later_returns_to_the_cache():
    x = torch.randn(512, 512).to("disc")
    z = x * 2 + 1
    torch_disc.sync()  # z's storage now holds the executor's 1 MiB output block
    before = torch.disc.memory_stats()
    assert before["host_cache.in_use_bytes"] >= 512 * 512 * 4
    del z
    after = torch.disc.memory_stats()
    assert after["host_cache.in_use_bytes"] == before["host_cache.in_use_bytes"] - 512 * 512 * 4
    assert after["host_cache.idle_bytes"] == before["host_cache.idle_bytes"] + 512 * 512 * 4


def test_empty_cache_frees_the_idle_blocks():
    mlp_steps(2)
    assert torch.disc.memory_stats()["host_cache.idle_bytes"] > 0
    freed = torch.disc.empty_cache()
    assert freed > 0
    stats = torch.disc.memory_stats()
    assert stats["host_cache.idle_bytes"] == 0 and stats["host_cache.idle_blocks"] == 0


def run_child(code, **env):
    full = dict(os.environ, PYTHONPATH=ROOT, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full,
                          timeout=120)


CHILD = """
import sys; sys.path.insert(0, {tests!r})
import torch, torch_disc
from test_host_cache import mlp_steps
losses, _ = mlp_steps(3)
c = torch_disc.metrics.counters()
print(repr(losses), c.get("host_cache.hits", 0), c.get("host_cache.misses", 0))
""".format(tests=os.path.dirname(os.path.abspath(__file__)))


def test_turned_off_it_caches_nothing_and_results_are_the_same():
    on = run_child(CHILD)
    off = run_child(CHILD, DISC_HOST_CACHE_MB="0")
    assert on.returncode == 0, on.stderr
    assert off.returncode == 0, off.stderr
    losses_on, hits_on, _ = on.stdout.rsplit(" ", 2)
    losses_off, hits_off, misses_off = off.stdout.rsplit(" ", 2)
    assert losses_on == losses_off  # bit-identical: the cache only moves memory
    assert int(hits_on) > 0
    assert int(hits_off) == 0 and int(misses_off) == 0


def usable_memory_bytes():
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            return min(total, int(f.read()))
    except (OSError, ValueError):  # no cgroup v2 limit, or "max"
        return total


CAP = "import torch, torch_disc; print(torch.disc.memory_stats()['host_cache.idle_cap_bytes'])"


def test_by_default_it_keeps_a_quarter_of_the_memory_idle():
    """As a CUDA caching allocator keeps what a step freed within the
    device's memory: a fixed 1 GiB made a GPT-2-small step at length 512
    miss 146 of its 524 large allocations and fault their pages in again."""
    assert torch.disc.memory_stats()["host_cache.idle_cap_bytes"] == usable_memory_bytes() // 4
    out = run_child(CAP, DISC_HOST_CACHE_MB="8")
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == 8 << 20


def test_a_bad_setting_is_named():
    bad = run_child(CHILD, DISC_HOST_CACHE_MB="lots")
    assert bad.returncode != 0
    assert "DISC_HOST_CACHE_MB" in bad.stderr and "lots" in bad.stderr


EVICTION = """
import torch, torch_disc
MIB = 1 << 20

def output_block(nbytes):
    # One generated kernel writes a fresh output of nbytes; freeing it
    # returns the block to the cache.
    x = torch.ones(nbytes // 4).to("disc")
    y = x * 2 + 1
    torch_disc.sync()
    return y

def allocations(nbytes):
    before = torch_disc.metrics.counters()
    y = output_block(nbytes)
    after = torch_disc.metrics.counters()
    del y
    return [after.get(k, 0) - before.get(k, 0) for k in ("host_cache.hits", "host_cache.misses")]

sizes = (2 * MIB, 4 * MIB, 3 * MIB)
for n in sizes:
    allocations(n)  # compiles; the graph is the same for every size after
torch.disc.empty_cache()
for n in sizes:
    allocations(n)  # the third does not fit beside the first two under 8 MiB
stats = torch.disc.memory_stats()
print("idle", stats["host_cache.idle_bytes"] // MIB, stats["host_cache.idle_blocks"])
print("newest", *allocations(3 * MIB))
print("oldest", *allocations(2 * MIB))
print("smaller", *allocations(2 * MIB + 3 * MIB // 4))
"""


def test_over_the_cap_the_blocks_idle_longest_go_first():
    """A step freeing a block that does not fit under the cap keeps it and
    frees the block idle the longest (a size no longer asked for): keeping
    the stale one instead made every step of a variable-length run miss and
    fault in its largest buffer again. A request a little smaller than an
    idle block takes it."""
    out = run_child(EVICTION, DISC_HOST_CACHE_MB="8", DISC_PERSISTENT_CACHE="0")
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())
    # 2 MiB + 4 MiB idle, then 3 MiB freed: the 2 MiB block, idle the
    # longest, made room.
    assert lines["idle"] == "7 2", out.stdout
    assert lines["newest"] == "1 0", out.stdout  # hits, misses
    assert lines["oldest"] == "0 1", out.stdout
    # 2.75 MiB: no block of its class; the 3 MiB one is at most a quarter larger.
    assert lines["smaller"] == "1 0", out.stdout
