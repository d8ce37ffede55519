"""Symbolic-shape cache keys: new batch sizes and sequence lengths reuse the
compiled graph; each compile is explained; sizes 0 and 1 are specialized."""
import os
import random
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_disc
from torch_disc import _C


@pytest.fixture
def fresh_cache():
    """An empty compile cache and log, so compile counts are this test's."""
    _C.clear_compile_cache()
    _C.clear_compile_log()
    yield


def compiles():
    return torch_disc.metrics.counters().get("cache_misses", 0)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def twins(make, lr=1e-2, opt=torch.optim.Adam):
    """The same model on CPU and on disc, with one optimizer each."""
    torch.manual_seed(0)
    cpu = make()
    disc = make()
    disc.load_state_dict(cpu.state_dict())
    disc.to("disc")
    return (cpu, opt(cpu.parameters(), lr)), (disc, opt(disc.parameters(), lr))


def train_step(model, opt, x, y, device):
    opt.zero_grad()
    loss = F.cross_entropy(model(x.to(device)), y.to(device))
    loss.backward()
    opt.step()
    return loss.item()


def test_mlp_random_batch_sizes_compile_once_per_structure(fresh_cache, counters):
    (cm, co), (dm, do) = twins(mlp)
    rng = random.Random(0)
    sizes = [rng.randint(2, 64) for _ in range(20)] + [7]  # and a last partial batch
    assert len(set(sizes)) > 10
    for b in sizes:
        x, y = torch.randn(b, 20), torch.randint(0, 3, (b,))
        lc, ld = train_step(cm, co, x, y, "cpu"), train_step(dm, do, x, y, "disc")
        assert ld == pytest.approx(lc, rel=1e-4, abs=1e-5), b
    # Step 1 also creates Adam's state: its graph has another structure.
    assert compiles() == 2
    with torch.no_grad():
        for b in (5, 33, 64, 2):
            x = torch.randn(b, 20)
            torch.testing.assert_close(dm(x.to("disc")).cpu(), cm(x), rtol=1e-4, atol=1e-5)
    assert compiles() == 3  # one eval graph
    assert counters()["fallbacks"] == 0
    for p_cpu, p_disc in zip(cm.parameters(), dm.parameters()):
        torch.testing.assert_close(p_disc.cpu(), p_cpu, rtol=1e-4, atol=1e-5)


def test_batch_size_one_is_specialized_and_explained(fresh_cache):
    (cm, _), (dm, _) = twins(mlp)
    with torch.no_grad():
        for b in (8, 9, 1, 1):
            x = torch.randn(b, 20)
            torch.testing.assert_close(dm(x.to("disc")).cpu(), cm(x), rtol=1e-4, atol=1e-5)
    assert compiles() == 2
    log = torch_disc.compile_log()
    assert log[0]["reason"].startswith("first graph")
    # The miss names the dim, its new and old size, and why 1 is special.
    assert re.search(r"dim 0 of %\d+ \(input \d+: float32\[1,20\]\) is 1, was 8", log[1]["reason"])
    assert "specialized" in log[1]["reason"]
    assert log[1]["location"].startswith(__file__)


def test_explain_names_the_first_differing_node_of_a_new_structure(fresh_cache):
    x = torch.randn(4, 3)
    d = x.to("disc")
    (d + 1).cpu()
    (d * 2).cpu()
    log = torch_disc.compile_log()
    assert len(log) == 2
    assert "new structure" in log[1]["reason"]
    assert "here aten::mul" in log[1]["reason"] and "there aten::add" in log[1]["reason"]
    report = torch_disc.explain(clear=True)
    assert report.splitlines()[0] == "2 compiles"
    assert torch_disc.compile_log() == []


def encoder():
    return torch.nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True
    )


def run_encoder(lengths, counters):
    (cm, co), (dm, do) = twins(encoder, lr=1e-3, opt=torch.optim.AdamW)
    for s in lengths:
        x = torch.randn(3, s, 32)
        losses = []
        for model, opt, dev in ((cm, co, "cpu"), (dm, do, "disc")):
            opt.zero_grad()
            loss = model(x.to(dev)).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-4, abs=1e-6), s
    assert counters()["fallbacks"] == 0


def test_transformer_layer_trains_on_16_lengths_with_one_compile_per_structure(
    fresh_cache, counters
):
    run_encoder(list(range(5, 37, 2)), counters)
    assert compiles() == 2  # step 1 (AdamW state created) and every step after


def test_lengths_equal_to_model_dims_are_revalidated_not_compiled(fresh_cache, counters):
    # 32 = d_model, 8 = head dim, 64 = feed-forward, 4 = heads: such a length
    # gives the graph another size pattern; its plan is the same, so the
    # cached executable is checked and reused instead of compiled.
    run_encoder([5, 7, 32, 8, 64, 4, 16, 12], counters)
    assert compiles() == 2
    assert counters()["cache_revalidated"] >= 4


def test_lr_scheduler_and_adam_step_count_do_not_recompile(fresh_cache, counters):
    (cm, co), (dm, do) = twins(mlp)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda k: 1.0 / (1 + k)) for o in (co, do)]
    x, y = torch.randn(16, 20), torch.randint(0, 3, (16,))
    for _ in range(6):
        lc, ld = train_step(cm, co, x, y, "cpu"), train_step(dm, do, x, y, "disc")
        assert ld == pytest.approx(lc, rel=1e-4, abs=1e-5)
        for s in scheds:
            s.step()
    assert compiles() == 2


def test_debug_compile_prints_each_compile_with_its_line():
    code = (
        "import torch, torch_disc\n"
        "x = torch.ones(3, device='disc')\n"
        "(x + 1).cpu()\n"
        "(x * 2).cpu()\n"
    )
    env = dict(os.environ, DISC_DEBUG_COMPILE="1", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("[disc] compile")]
    assert len(lines) == 2
    assert "<string>:3" in lines[0] and "first graph" in lines[0]
    assert "<string>:4" in lines[1] and "new structure" in lines[1]


def test_new_length_traces_without_meta_kernels(fresh_cache, counters):
    # Shapes learned at one length answer for the next by size pattern:
    # tracing a new length runs no Meta kernel (they cost 10-100 us per op).
    torch.manual_seed(0)
    model = encoder().to("disc")
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    for step, s in enumerate([9, 9, 13, 21, 30]):
        if step == 2:
            torch_disc.metrics.reset()
        opt.zero_grad()
        model(torch.randn(2, s, 32).to("disc")).pow(2).mean().backward()
        opt.step()
    torch_disc.sync()
    c = counters()
    assert c.get("shape_cache.meta_runs", 0) == 0, {k: v for k, v in c.items() if "meta_runs" in k}
    assert c["shape_cache.symbolic_hits"] > 100
    assert c.get("compiles", 0) == 0


@pytest.mark.parametrize("op", [torch.maximum, torch.add, lambda a, b: F.softmax(b, -1) * a])
def test_size_pattern_answer_keeps_each_inputs_layout(op):
    # A permuted input and a row-major one can share a size pattern (the
    # symbols say which sizes and strides are equal, not which is larger);
    # the output's layout follows the input's, so each gets its own answer.
    bias = torch.randn(5)
    permuted = torch.randn(4, 2, 16, 5).permute(1, 0, 2, 3)  # strides (80, 160, 5, 1)
    row_major = torch.randn(2, 4, 16, 5)  # strides (320, 80, 5, 1)
    for x in (permuted, row_major, permuted):
        want = op(bias, x)
        got = op(bias.to("disc"), x.to("disc"))
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want)
