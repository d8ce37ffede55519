"""The compile cache on disk: a second process compiles nothing and gets the
same results; damaged entries are discarded and recompiled; concurrent
writers do not corrupt it."""
import json
import os
import subprocess
import sys

import pytest
import torch_disc

# A few MLP training steps at two batch sizes; prints losses and counters.
SCRIPT = r"""
import json, torch, torch_disc
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to("disc")
opt = torch.optim.Adam(model.parameters(), 1e-2)
losses = []
for b in (8, 8, 5, 8):
    x, y = torch.randn(b, 12), torch.randint(0, 3, (b,))
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x.to("disc")), y.to("disc"))
    loss.backward()
    opt.step()
    losses.append(loss.item())
c = torch_disc.metrics.counters()
print(json.dumps({"losses": losses, "counters": c}))
"""


def run(cache_dir, enabled=True, **extra_env):
    env = dict(os.environ, DISC_CACHE_DIR=str(cache_dir), PYTHONPATH=os.pathsep.join(sys.path),
               DISC_PERSISTENT_CACHE="1" if enabled else "0", OMP_NUM_THREADS="1", **extra_env)
    return subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def result(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def entries(cache_dir, prefix):
    return sorted(p for p in os.listdir(cache_dir) if p.startswith(prefix))


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """One cold run into a fresh cache directory."""
    d = tmp_path_factory.mktemp("disc_cache")
    return d, result(run(d))


def test_cold_run_compiles_and_writes_entries(first):
    d, r = first
    c = r["counters"]
    assert c["compiles"] == 2  # first step (Adam state created), then steady state
    assert c["kernels_jitted"] >= 1
    assert len(entries(d, "g-")) == 2
    assert len(entries(d, "k-")) == c["kernels_jitted"]
    assert not [p for p in os.listdir(d) if ".tmp." in p]


def test_second_process_compiles_nothing_and_matches(first):
    d, cold = first
    warm = result(run(d))
    c = warm["counters"]
    assert c.get("compiles", 0) == 0
    assert c.get("kernels_jitted", 0) == 0
    assert c["disk_cache.graph_hits"] == 2
    assert c["disk_cache.kernel_hits"] == cold["counters"]["kernels_jitted"]
    assert warm["losses"] == cold["losses"]  # same code, bit for bit


def test_kernels_made_for_a_wider_isa_are_recompiled_not_loaded(first, tmp_path):
    # The cache of this CPU's ISA read under a lower one (an AVX-512
    # machine's cache on an AVX2 machine): its kernels could use
    # instructions that CPU lacks, so every one is compiled again; the
    # graph manifests are per ISA too.
    d, cold = first
    native = torch_disc._C.native_cpu_isa()
    if native in ("generic", "sse4.2"):
        pytest.skip("no lower ISA level to cap this CPU to")
    if os.environ.get("DISC_CPU_ISA", "native") not in ("native", native):
        pytest.skip("the suite already runs capped: the cold cache is not the CPU's own")
    lower = {"avx2": "sse4.2", "neon": "generic", "sve": "neon", "sve_bf16": "neon"}.get(native, "avx2")
    shared = tmp_path / "cache"
    shared.mkdir()
    for name in os.listdir(d):
        (shared / name).write_bytes((d / name).read_bytes())
    capped = result(run(shared, DISC_CPU_ISA=lower))
    c = capped["counters"]
    assert c.get("disk_cache.kernel_hits", 0) == 0 and c.get("disk_cache.graph_hits", 0) == 0
    assert c["kernels_jitted"] == cold["counters"]["kernels_jitted"]
    assert capped["losses"] == pytest.approx(cold["losses"], rel=1e-5)
    # And a second capped process finds its own entries.
    again = result(run(shared, DISC_CPU_ISA=lower))["counters"]
    assert again.get("kernels_jitted", 0) == 0 and again["disk_cache.graph_hits"] == 2


def test_damaged_entries_are_discarded_and_recompiled(first, tmp_path):
    d, cold = first
    damaged = tmp_path / "cache"
    damaged.mkdir()
    for name in os.listdir(d):
        (damaged / name).write_bytes((d / name).read_bytes())
    kernels, graphs = entries(damaged, "k-"), entries(damaged, "g-")
    k = damaged / kernels[0]
    k.write_bytes(k.read_bytes()[:-7])                 # truncated kernel
    g = damaged / graphs[0]
    data = bytearray(g.read_bytes())
    data[-3] ^= 0xFF                                   # flipped bit in a manifest
    g.write_bytes(bytes(data))
    r = result(run(damaged))
    c = r["counters"]
    assert c["disk_cache.discarded"] == 2, c
    assert c["compiles"] == 1 and c["kernels_jitted"] >= 1
    assert r["losses"] == cold["losses"]
    # Rewritten: the next process finds everything again.
    again = result(run(damaged))["counters"]
    assert again.get("compiles", 0) == 0 and again.get("disk_cache.discarded", 0) == 0


def test_concurrent_writers_leave_a_valid_cache(tmp_path):
    procs = [run(tmp_path), run(tmp_path)]
    results = [result(p) for p in procs]
    assert results[0]["losses"] == results[1]["losses"]
    after = result(run(tmp_path))["counters"]
    assert after.get("compiles", 0) == 0
    assert after.get("disk_cache.discarded", 0) == 0
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]


def test_disabled_cache_writes_nothing(tmp_path):
    r = result(run(tmp_path / "off", enabled=False))
    assert r["counters"]["compiles"] == 2
    assert not (tmp_path / "off").exists()
