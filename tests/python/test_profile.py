"""disc's work as profiles see it. DISC_PROFILE=1: the compiled executor
files each step's time under a label that names the kernel or op, and
torch_disc.metrics.profile() prints them. torch.profiler: the same steps as
ranges on the graph worker's thread, inside a range per graph run (hash,
cause, the user's line), and a range per compile."""
import json

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import torch_disc


def test_each_step_is_timed_under_its_label(counters):
    # Setting it clears the compile cache: graphs compiled from now on are profiled.
    with torch_disc.options.override(DISC_PROFILE=True):
        x = torch.randn(33, 17).to("disc")
        w = torch.randn(17, 5).to("disc")
        for _ in range(3):
            y = (torch.relu(x * 2 + 1) @ w).softmax(-1)
            y.cpu()
    c = counters()
    labels = {k[len("profile."):-len(".calls")]: v for k, v in c.items()
              if k.startswith("profile.") and k.endswith(".calls")}
    assert labels["fused.loop_kernel"] == 3  # x * 2 + 1 -> relu, once per run
    assert labels["library.aten::mm"] == 3
    assert labels["fused.row_kernel"] == 3  # softmax
    assert all(c[f"profile.{label}_ns"] > 0 for label in labels)
    table = torch_disc.metrics.profile()
    assert "library.aten::mm" in table and "us/call" in table.splitlines()[0]


def test_off_by_default_nothing_is_filed(counters):
    assert torch_disc.options.get("DISC_PROFILE") is False
    torch_disc._C.clear_compile_cache()
    (torch.randn(8, 8).to("disc") * 3 + 1).cpu()
    assert not any(k.startswith("profile.") for k in counters())
    assert torch_disc.metrics.profile().startswith("no profile")


def profiled_step(tmp_path):
    """One MLP training step under torch.profiler, the first (so its graph
    compiles inside the profile); returns the events and the Chrome trace."""
    torch_disc._C.clear_compile_cache()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to("disc")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 32).to("disc"), torch.randint(0, 4, (8,)).to("disc")
    torch.disc.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()  # the optimizer-step sync hands the step's graph over
        torch.disc.synchronize()  # as with CUDA: the device's work ends inside the profile
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return prof.events(), json.loads(path.read_text())["traceEvents"]


def test_torch_profiler_shows_graphs_kernels_library_calls_and_compiles(tmp_path):
    events, _ = profiled_step(tmp_path)
    graphs = [e for e in events if e.name.startswith("disc::graph ")]
    assert len(graphs) == 1
    graph = graphs[0]
    assert "(optimizer_step)" in graph.name and "test_profile.py" in graph.name
    main_thread = next(e.thread for e in events if e.name.startswith("aten::addmm"))
    assert graph.thread != main_thread  # run by the graph worker
    inside = [e for e in events if e.thread == graph.thread and e.name.startswith("disc::")
              and e.time_range.start >= graph.time_range.start
              and e.time_range.end <= graph.time_range.end and e is not graph]
    kinds = {e.name.split(".")[0] for e in inside}
    assert {"disc::fused", "disc::library", "disc::aten"} <= kinds, kinds
    assert any(e.name == "disc::library.aten::mm" for e in inside)
    compiles = [e for e in events if e.name.startswith("disc::compile ")]
    assert len(compiles) == 1 and compiles[0].thread == main_thread
    assert graph.name.split()[1] == compiles[0].name.split()[1]  # the same graph hash


def test_the_chrome_trace_lines_graph_runs_up_after_the_step_that_traced_them(tmp_path):
    _, trace = profiled_step(tmp_path)
    spans = [e for e in trace if e.get("ph") == "X"]
    graph = next(e for e in spans if e["name"].startswith("disc::graph "))
    traced = [e for e in spans if e["name"] == "aten::addmm" and e["tid"] != graph["tid"]]
    assert traced, "the traced forward's addmm calls are in the trace"
    assert graph["ts"] >= max(e["ts"] for e in traced)
    steps = [e for e in spans if e["tid"] == graph["tid"] and e["name"].startswith("disc::")
             and e is not graph]
    assert steps and all(graph["ts"] <= e["ts"] <= graph["ts"] + graph["dur"] for e in steps)

