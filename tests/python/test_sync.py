"""Trace and sync behaviour: what runs when, and what is cached.

Counters are the oracle: graphs run per step, syncs by cause, compiles.
"""
import copy

import pytest
import torch
import torch.nn.functional as F
import torch_disc


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(28 * 28, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    )


def batches(n, batch=16):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(n)]


def test_ops_are_lazy_until_a_sync(counters):
    x = torch.randn(8, 8).to("disc")
    y = (x @ x).relu().sum(0)
    assert counters()["graphs_run"] == 0
    assert counters()["ops_traced"] >= 3
    assert torch_disc._C.is_pending(y)
    y.cpu()
    assert counters()["graphs_run"] == 1
    assert counters()["sync.to_cpu"] == 1


def test_backward_does_not_sync(counters):
    model = mlp().to("disc")
    x, y = batches(1)[0]
    loss = F.cross_entropy(model(x.to("disc")), y.to("disc"))
    loss.backward()
    assert counters()["syncs"] == 0
    assert model[1].weight.grad is not None and torch_disc._C.is_pending(model[1].weight.grad)


def run_training(optimizer_name, steps=20, scheduler=False):
    model = mlp().to("disc")
    opt = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
        "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
    }[optimizer_name](model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9) if scheduler else None
    data = [(x.to("disc"), y.to("disc")) for x, y in batches(steps)]
    torch_disc.sync()
    torch_disc.metrics.reset()
    compiles = []
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        compiles.append(torch_disc.metrics.counters()["compiles"])
    return compiles, loss


def test_training_loop_runs_one_graph_per_step(counters):
    compiles, _ = run_training("sgd", steps=20)
    c = counters()
    assert c["graphs_run"] == 20
    assert c["syncs"] == 20 and c["sync.optimizer_step"] == 20
    assert c["fallbacks"] == 0
    # Step 1 creates the momentum buffers, step 2 first uses them; from then
    # on every step is a cache hit.
    assert compiles[1] == 2 and compiles[-1] == 2
    assert c["cache_hits"] == 18


def test_lr_scheduler_and_adam_step_never_recompile(counters):
    compiles, _ = run_training("adam", steps=12, scheduler=True)
    assert compiles[-1] == compiles[1] == 2
    assert counters()["fallbacks"] == 0


def test_adamw_traces_without_fallback(counters):
    run_training("adamw", steps=3)
    assert counters()["fallbacks"] == 0
    assert counters()["graphs_run"] == 3


def test_item_after_step_reuses_the_computed_loss(counters):
    _, loss = run_training("sgd", steps=2)
    graphs = counters()["graphs_run"]
    loss.item()  # computed by the optimizer-step sync already: no sync at all
    assert counters()["graphs_run"] == graphs
    assert counters().get("sync.item", 0) == 0


def test_item_on_pending_value_syncs_once(counters):
    x = torch.arange(5.0, device="disc")
    s = (x * x).sum()
    assert s.item() == 30.0
    assert s.item() == 30.0
    assert counters()["sync.item"] == 1 and counters()["graphs_run"] == 1


def test_zero_grad_sets_grads_to_none(counters):
    model = mlp().to("disc")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batches(1)[0]
    F.cross_entropy(model(x.to("disc")), y.to("disc")).backward()
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    opt.zero_grad(set_to_none=False)


def test_debug_sync_prints_cause_and_python_line(tmp_path):
    import subprocess
    import sys
    import os
    script = tmp_path / "s.py"
    script.write_text("import torch, torch_disc\nx = torch.ones(3, device='disc') * 2\nx.sum().item()\n")
    env = dict(os.environ, DISC_DEBUG_SYNC="1")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "[disc] sync cause=item at " + str(script) + ":3" in out.stderr


def test_plain_sgd_with_scheduler_hits_the_cache_from_step_two(counters):
    model = mlp().to("disc")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    data = [(x.to("disc"), y.to("disc")) for x, y in batches(6)]
    torch_disc.sync()
    torch_disc.metrics.reset()
    hits = []
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
        hits.append(counters()["cache_hits"])
    assert hits == [0, 1, 2, 3, 4, 5]
    assert counters()["compiles"] == 1


def test_training_with_dropout_traces_and_is_reproducible(counters):
    def losses():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 32), torch.nn.ReLU(),
                                    torch.nn.Dropout(0.5), torch.nn.Linear(32, 10)).to("disc")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        out = []
        for x, y in batches(3):
            opt.zero_grad()
            loss = F.cross_entropy(model(x.to("disc")), y.to("disc"))
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    assert losses() == losses()
    assert counters()["fallbacks"] == 0


def test_two_threads_train_independently():
    import threading

    def setup(seed):
        # Made on the main thread: torch.manual_seed is process-wide, so
        # seeding inside the threads would race.
        torch.manual_seed(seed)
        model = torch.nn.Linear(8, 1).to("disc")
        g = torch.Generator().manual_seed(seed)
        return model, torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)

    def train(model, x, y, out, key):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(15):
            opt.zero_grad()
            F.mse_loss(model(x.to("disc")), y.to("disc")).backward()
            opt.step()
        out[key] = model.weight.detach().cpu().clone()

    alone, together = {}, {}
    for seed in (1, 2):
        train(*setup(seed), alone, seed)
    jobs = [setup(seed) for seed in (1, 2)]
    threads = [threading.Thread(target=train, args=(*job, together, seed))
               for job, seed in zip(jobs, (1, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for seed in (1, 2):
        torch.testing.assert_close(together[seed], alone[seed], rtol=0, atol=0)


def test_sync_replaces_the_trace_by_data():
    x = torch.ones(16, device="disc")
    for _ in range(50):
        x = x * 1.01
    torch_disc.sync()
    # After the sync the tensor holds data, not the 50-node chain: the graph
    # for a further op has one data leaf and one op.
    text = torch_disc.graph_text(x + 1)
    assert "params=2" in text and "aten::mul" not in text


def test_mlp_training_step_plan_is_pinned(counters):
    # The compiler front end runs on each new graph; its plan for one MLP
    # SGD step is a regression oracle for fusion (see lowering/passes).
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10)).to("disc")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batches(1)[0]
    x, y = x.to("disc"), y.to("disc")
    torch_disc.sync()
    torch_disc._C.clear_compile_cache()  # plan on this step, not a cached one
    torch_disc.metrics.reset()
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
    c = counters()
    assert c["compiles"] == 1
    planned = {k: c.get("planned." + k, 0)
               for k in ("kLoop", "kInput", "kStitch", "library_calls", "epilogues")}
    # kStitch: log_softmax forward and backward; kInput: the two bias-grad
    # sums, the hidden one with the ReLU's threshold_backward (whose result
    # the weight-gradient GEMM reads too); library: 2 addmm forward + 3 mm
    # backward; the ReLU is the first addmm's oneDNN post-op, not a kLoop
    # kernel. Ops without codegen (ops.def) join no group; a lone op's group
    # (the loss's one-element zeros) is planned but runs on ATen.
    assert planned == {"kLoop": 6, "kInput": 2, "kStitch": 2, "library_calls": 5, "epilogues": 1}


def test_sliced_buffer_reuses_one_graph_for_every_length(counters):
    # A persistent buffer sliced to each step's length (position ids): the
    # slice bound is symbolic, so every length, new or earlier, hits the
    # first step's graph.
    emb = torch.nn.Embedding(16, 4).to("disc")
    ids = torch.arange(16).expand(1, -1).contiguous().to("disc")
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    torch_disc.sync()
    torch_disc.metrics.reset()
    for length in [5, 5, 9, 5, 9, 12]:
        emb(ids[:, :length]).sum().backward()
        opt.step()
        opt.zero_grad()
    assert counters()["compiles"] == 1


def wide():
    """A model whose forward is too large to compute twice (read_alone)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 10))


def test_a_small_read_runs_alone_and_the_step_stays_one_graph(counters):
    # transformers reads `attention_mask.all()` in the middle of the forward:
    # a few ops on a fresh input. They run alone on the reading thread; the
    # rest of the trace (the loss) stays pending, for one graph later.
    cpu_model = wide()
    model = copy.deepcopy(cpu_model).to("disc")
    x, y = batches(1)[0]
    loss = F.cross_entropy(model(x.to("disc")), y.to("disc"))
    mask = torch.ones(4, 7, dtype=torch.long)
    mask[1, 5:] = 0
    dmask = mask.to("disc")
    assert not bool((dmask == 1).all())
    assert int(dmask.sum()) == 26
    c = counters()
    assert c["read_alone.item"] == 2
    assert c["syncs"] == 0 and c["graphs_run"] == 0
    assert torch_disc._C.is_pending(loss)
    torch.testing.assert_close(loss.cpu(), F.cross_entropy(cpu_model(x), y))
    assert counters()["syncs"] == 1


def test_reads_that_are_not_small_and_pure_sync(counters):
    model = wide().to("disc")
    x, y = batches(1)[0]
    loss = F.cross_entropy(model(x.to("disc")), y.to("disc"))
    other = torch.randn(3).to("disc") * 2  # pending
    assert loss.item() > 0  # a forward over [256, 784] weights: too large to run twice
    assert counters()["sync.item"] == 1
    small = torch.ones(3).to("disc")
    small.add_(1)  # writes a buffer in place
    pending = other + 1
    assert small.sum().item() == 6.0  # reads work that writes a buffer: a sync
    assert counters()["sync.item"] == 2 and counters().get("read_alone.item", 0) == 0
    assert torch_disc._C.is_pending(pending) is False


def test_a_read_alone_that_fails_syncs_and_fails_as_before(counters):
    # An index out of range shows only in the data: the small graph fails,
    # and the read then syncs, raising the error the sync always raised.
    table = torch.randn(5, 3).to("disc")
    idx = torch.tensor([1, 7]).to("disc")
    b = torch.randn(40, 40)
    other = b.to("disc") + 1  # other work pending
    bad = table.index_select(0, idx).sum()
    with pytest.raises(Exception, match="index"):
        bad.item()
    assert counters()["sync.item"] == 1 and counters().get("read_alone.item", 0) == 0
    torch.testing.assert_close(other.cpu(), b + 1)  # an independent part: its value
