"""Graphs run on the graph worker (lazy_backend/base/graph_worker.h).

A sync hands its graph to the worker and returns; every pending tensor's
value becomes a future that a read waits for, delivered as soon as it is
final (a loss before the backward and the update that follow it). The
results are the same as running on the syncing thread (``set_async(False)``),
bit for bit; a failure surfaces at the next read of a tensor it failed to
compute, at ``torch_disc.wait()`` or at the next sync, which does its own
work first; random ops that take a generator never touch the host's CPU
generator; forking waits for the graph in flight.
"""
import multiprocessing
import os

import pytest
import torch
import torch.nn.functional as F

import torch_disc

from conftest import run_python
from test_host_cache import mlp_steps


@pytest.fixture(autouse=True)
def on_the_worker():
    """Each test starts with graphs on the worker, and leaves the setting
    as it found it (DISC_ASYNC may have turned it off for the run)."""
    before = torch_disc._C.is_async()
    torch_disc.set_async(True)
    yield
    torch_disc.set_async(before)


@pytest.fixture
def synchronous():
    """Graphs run on the syncing thread for the test."""
    torch_disc.set_async(False)


def test_async_is_the_default_unless_turned_off():
    import subprocess
    import sys
    code = "import torch_disc; print(torch_disc._C.is_async())"
    env = {k: v for k, v in os.environ.items() if k != "DISC_ASYNC"}
    for value, expected in ((None, "True"), ("0", "False"), ("false", "False"), ("1", "True")):
        if value is not None:
            env["DISC_ASYNC"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == expected, (value, out.stderr[-500:])


def test_async_and_synchronous_runs_give_the_same_bits():
    losses_async, model_async = mlp_steps(4)
    torch_disc.set_async(False)
    losses_sync, model_sync = mlp_steps(4)
    assert losses_async == losses_sync
    for a, b in zip(model_async.parameters(), model_sync.parameters()):
        assert torch.equal(a.detach().cpu(), b.detach().cpu())


def test_the_loss_is_delivered_before_the_rest_of_its_graph():
    per_step = []
    mlp_steps(4, per_step=per_step)
    # A step's graph has 13 outputs: the loss (computed right after the
    # forward: single elements come first), 4 gradients, 4 momentum buffers
    # and 4 parameters. All but the last update kernel's two are delivered
    # before the graph's last step.
    assert [c["graphs_run"] for c in per_step] == [1, 1, 1, 1]
    assert [c["async.early_outputs"] for c in per_step[1:]] == [11, 11, 11]
    assert all(c.get("fallbacks", 0) == 0 for c in per_step)


def test_a_failure_surfaces_at_the_second_sync_and_drops_what_was_traced_since(counters):
    x = torch.randn(5)
    bad = x.to("disc").index_select(0, torch.tensor([0, 7]).to("disc"))  # 7 is out of range
    torch_disc.sync()  # hands the graph over: nothing to raise yet
    good = torch.ones(3, device="disc") + 1
    torch_disc.sync()  # may find the failing graph still running: never raises
    later = torch.ones(2, device="disc") * 3
    with pytest.raises(IndexError, match="index out of range"):
        torch_disc.sync()  # raises the earlier graph's error...
    assert not torch_disc._C.is_pending(later)  # ...and drops what was traced since
    assert good.cpu().tolist() == [2.0, 2.0, 2.0]  # handed over before: it ran
    with pytest.raises(IndexError, match="index out of range"):
        later.cpu()
    assert counters()["failed_syncs"] == 1 and counters()["failures.failed_buffers"] == 1
    assert counters()["failures.discarded_buffers"] == 1
    assert counters().get("async.skipped_launches", 0) == 0
    torch_disc.wait()  # raised once: nothing left to raise
    with pytest.raises(IndexError, match="index out of range"):
        bad.cpu()  # the failed tensor holds its error
    del bad


def test_a_graph_reading_a_failed_result_is_recovered_after_it(counters):
    bad = torch.randn(5).to("disc").index_select(0, torch.tensor([9]).to("disc"))
    torch_disc.sync()
    dep = bad * 2  # reads the result the failing graph never delivers
    free = torch.ones(2, device="disc") + 1
    torch_disc.sync()  # queued behind the failing graph: the worker skips it
    with pytest.raises(IndexError):
        torch_disc.wait()  # the first failure; then the skipped graph reruns here
    assert counters()["async.skipped_launches"] == 1
    assert counters()["failed_syncs"] == 1
    assert free.cpu().tolist() == [2.0, 2.0]  # its part did not need the lost result
    with pytest.raises(IndexError):
        dep.cpu()
    del bad, dep


def test_wait_raises_the_failure_once():
    bad = torch.randn(5).to("disc").index_select(0, torch.tensor([9]).to("disc"))
    torch_disc.sync()
    with pytest.raises(IndexError):
        torch_disc.wait()
    torch_disc.wait()
    torch_disc.sync(wait=True)
    del bad


def test_a_read_of_a_result_raises_its_own_failure_only():
    bad = torch.randn(5).to("disc").index_select(0, torch.tensor([9]).to("disc"))
    good = torch.arange(3.0).to("disc") * 2
    torch_disc.sync()
    assert good.cpu().tolist() == [0.0, 2.0, 4.0]  # its part ran again on its own
    with pytest.raises(IndexError):
        bad.cpu()
    del bad


def test_synchronous_mode_raises_at_the_sync(synchronous):
    bad = torch.randn(5).to("disc").index_select(0, torch.tensor([9]).to("disc"))
    with pytest.raises(IndexError):
        torch_disc.sync()
    del bad


def test_graphs_leave_the_hosts_cpu_generator_alone(counters):
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    noise = torch.rand(1000, device="disc")  # uniform_: a generator of its own
    torch_disc.sync(wait=True)
    assert torch.equal(torch.rand(4), expected)
    assert counters().get("replay.global_generator", 0) == 0
    assert noise.cpu().min() >= 0.0


def test_dropout_is_reproducible_from_the_disc_seed(counters):
    # native_dropout has no generator argument: its replay is ATen's kernel
    # with a generator of the node's own, so the host's CPU generator is
    # never touched (no reseed-and-restore around it).
    def run():
        torch_disc._C.manual_seed(7)
        return F.dropout(torch.ones(256, device="disc"), 0.5, training=True).cpu()

    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    a, b = run(), run()
    assert torch.equal(a, b) and 0 < int((a == 0).sum()) < 256
    assert torch.equal(torch.rand(4), expected)
    assert counters().get("replay.global_generator", 0) == 0


def _child_works_on_the_cpu(queue):
    queue.put(float(torch.arange(4.0).sum()))


def test_forking_while_a_graph_runs_leaves_parent_and_child_working():
    # A DataLoader worker forks while the training step's graph runs: the
    # parent waits for the graph first, so the child holds no half-done
    # state, and the parent goes on. (Running disc graphs in a forked child
    # is not supported, as with CUDA.)
    big = torch.randn(512, 512, device="disc")
    for _ in range(8):
        big = big @ big / 512
    torch_disc.sync()  # likely still running when the process forks
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_works_on_the_cpu, args=(queue,))
    child.start()
    assert queue.get(timeout=60) == 6.0
    child.join(timeout=60)
    assert child.exitcode == 0
    assert torch.isfinite(big.cpu()).all()
    losses, _ = mlp_steps(2)
    assert len(losses) == 2


def test_metrics_include_the_graph_in_flight(counters):
    x = torch.randn(256, 256, device="disc")
    before = counters()["graphs_run"]
    (x @ x).relu_()
    torch_disc.sync()
    assert counters()["graphs_run"] == before + 1  # metrics waits for the worker


def test_dropout_keeps_one_minus_p_and_scales_like_cpu(counters):
    # The replay mirrors ATen's native_dropout: survivors scaled by
    # 1 / (1 - p), a bool mask, eval and empty inputs passed through; the
    # gradient is the mask times the scale.
    x = torch.randn(100_000, device="disc", requires_grad=True)
    y = F.dropout(x, 0.3, training=True)
    y.sum().backward()
    kept = y.detach().cpu() != 0
    assert abs(float(kept.float().mean()) - 0.7) < 0.01
    torch.testing.assert_close(y.detach().cpu()[kept], x.detach().cpu()[kept] / 0.7)
    torch.testing.assert_close(x.grad.cpu(), kept.float() / 0.7)
    assert torch.equal(F.dropout(x.detach(), 0.3, training=False).cpu(), x.detach().cpu())
    assert F.dropout(torch.ones(0, device="disc"), 0.5).cpu().shape == (0,)
    assert counters().get("replay.global_generator", 0) == 0


def test_a_dataloader_worker_over_disc_tensors_fails_at_once_saying_why():
    # The workers fork with copies of disc tensors whose graph worker does
    # not exist in the child: they used to hang the loader forever. Now the
    # first disc op in a child raises, and the loader re-raises it.
    code = (
        "import torch, torch_disc\n"
        "from torch.utils.data import DataLoader, Dataset\n"
        "class D(Dataset):\n"
        "    def __init__(self): self.x = torch.randn(8, 3).to('disc')\n"
        "    def __len__(self): return 8\n"
        "    def __getitem__(self, i): return self.x[i]\n"
        "for b in DataLoader(D(), batch_size=4, num_workers=2): pass\n")
    out = run_python(code, timeout=120)
    assert out.returncode != 0
    assert "cannot be used in a forked child process" in out.stderr
    assert "in __getitem__" in out.stderr  # the user's line


def test_ctrl_c_reaches_a_host_waiting_for_a_long_graph():
    # A read waits for the graph worker without the GIL (torch lets go of it
    # around ops); the wait checks for pending signals every 100 ms, so
    # KeyboardInterrupt arrives while the graph still runs (it took until
    # the graph ended), and the value can be read afterwards.
    code = (
        "import os, signal, threading, time, torch, torch_disc\n"
        # Python leaves SIGINT ignored when it starts ignored, as in a job
        # a non-interactive shell put in the background.
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "torch.set_num_threads(1)\n"
        "x = torch.randn(2048, 2048, device='disc')\n"
        "for _ in range(30):\n"
        "    x = torch.tanh(x @ x / 2048)\n"
        "s = x.sum()\n"
        "torch_disc.sync()\n"
        "threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "start = time.time()\n"
        "try:\n"
        "    s.item()\n"
        "    print('no interrupt')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', time.time() - start, torch_disc._C.is_pending(s))\n"
        "print('value', s.item())\n")
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[0] == "interrupted", out.stdout
    assert float(words[1]) < 1.5  # the graph itself runs for seconds
    assert words[-2] == "value" and words[-1] != "nan"


# The main thread syncs long graphs; a second thread traces under the Python
# dispatcher, so it holds the GIL while it waits for the trace lock, which
# the sync holds while its Ctrl-C check takes the GIL every 100 ms.
TRACING_THREAD_DURING_SYNC = """
import threading, torch, torch_disc
from torch._dispatch.python import enable_python_dispatcher
torch.set_num_threads(1)
stop = False
def trace():
    x = torch.ones(64, device="disc")
    with enable_python_dispatcher():
        while not stop:
            x = x * 1.0001 + 0.0001
torch_disc.sync()
thread = threading.Thread(target=trace, daemon=True)
thread.start()
a = torch.randn(512, 512, device="disc") / 32
for _ in range(4):
    b = a
    for _ in range(20):
        b = torch.tanh(b @ a)
    b.sum().item()
stop = True
thread.join(30)
print("done", thread.is_alive())
"""


def test_a_sync_and_a_thread_tracing_with_the_gil_do_not_deadlock():
    # Before: both waited forever (the thread for the trace lock, the sync's
    # check for the GIL). Waits for the trace lock now let go of the GIL.
    r = run_python(TRACING_THREAD_DURING_SYNC, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["done", "False"]


PYTHON_DISPATCH = """
import torch, torch_disc
from torch._dispatch.python import enable_python_dispatcher
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils import _pytree as pytree

class Recording(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.devices = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for a in pytree.tree_leaves((args, kwargs)):
            if isinstance(a, torch.Tensor):
                self.devices.add(a.device.type)
        return func(*args, **(kwargs or {}))

x = torch.arange(1000, dtype=torch.float32).to("disc")
with enable_python_dispatcher():  # what torch.compile's tracing turns on
    print((x * 2).sum().item())
with Recording() as mode:
    print((x + 1).sum().item())
print(sorted(mode.devices))
"""


@pytest.mark.parametrize("async_on", ["1", "0"])
def test_python_dispatch_on_the_host_does_not_reach_the_graphs_ops(async_on):
    # The graph worker inherits the host's dispatch state: with the Python
    # dispatcher on it waited for the GIL that the host, waiting for the
    # graph, held -- a hang. A dispatch mode saw disc's own CPU kernels.
    r = run_python(PYTHON_DISPATCH, timeout=120, DISC_ASYNC=async_on)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["999000.0", "500500.0", "['disc']"]


PYTHON_CUSTOM_OP = """
import torch, torch_disc

@torch.library.custom_op("disc_test::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor, k: float) -> torch.Tensor:
    return torch.sin(x) * k

@scaled_sin.register_fake
def _(x, k):
    return torch.empty_like(x)

def setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.k = inputs[1]

scaled_sin.register_autograd(lambda ctx, g: (g * torch.cos(ctx.saved_tensors[0]) * ctx.k, None),
                             setup_context=setup)

def train(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), 0.01)
    losses = []
    for step in range(30):
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(step)).to(device)
        loss = scaled_sin(model[0](x), 2.0).pow(2).mean() + model(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if step % 3 == 0:
            losses[-1].item()  # a host read while graphs are queued
    return torch.stack([l.cpu() for l in losses])

want, got = train("cpu"), train("disc")
c = torch_disc.metrics.counters()
print(torch.allclose(want, got, rtol=1e-4, atol=1e-6), c["fallbacks"], c["graphs_run"] >= 10)
"""


def test_a_custom_op_with_a_python_kernel_runs_on_the_graph_worker():
    # Its kernel needs the GIL on the graph worker, while the host reads and
    # traces; host waits let go of the GIL, so no DISC_ASYNC=0 is needed.
    r = run_python(PYTHON_CUSTOM_OP, timeout=120, DISC_ASYNC="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "0", "True"]
