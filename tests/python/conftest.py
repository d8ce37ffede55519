"""Shared fixtures: the disc device, and counters reset before each test."""
import os
import sys

# Compile counts pinned by tests must not depend on what earlier runs left
# in ~/.cache/torch_disc: the persistent cache is off here, and
# test_persistent_cache.py turns it on in subprocesses with their own dirs.
# Set before `import torch`, which loads torch_disc (autoload).
os.environ["DISC_PERSISTENT_CACHE"] = "0"

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The repository root, for `tests.`, `benchmarks.` and `examples.` imports;
# torch_disc itself is the installed package (scripts/setup.sh installs it).
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch_disc  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_metrics():
    """Each test starts with no pending work and zeroed counters."""
    torch_disc.sync("test_setup")
    torch_disc.metrics.reset()
    yield
    # The compiler pipeline runs on every new graph: it must accept them all.
    assert torch_disc.metrics.counters().get("compile_failures", 0) == 0


@pytest.fixture(autouse=True)
def torch_threads_kept():
    """A test that sets torch's thread count (a benchmark's --threads) sets
    it for itself: GEMMs sum in another order at another count, so a later
    test comparing disc with eager step by step would compare other runs."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def counters():
    """Call to read the current counters."""
    return torch_disc.metrics.counters


@pytest.fixture
def executor():
    """Call with "compiled" or "reference"; restores the default after."""
    before = torch_disc.options.get("DISC_EXECUTOR")
    yield torch_disc._C.set_executor
    torch_disc._C.set_executor(before)


def counted(fn):
    """Runs fn, syncs; returns its result (on CPU) and the counters of the run."""
    torch_disc.sync()
    torch_disc.metrics.reset()
    out = fn()
    torch_disc.sync()
    c = torch_disc.metrics.counters()
    cpu = [t.cpu() for t in out] if isinstance(out, (list, tuple)) else out.cpu()
    return cpu, c


def mnist_step(model_name, batch, seed=0):
    """One training step (forward, cross-entropy, backward) of the example
    MNIST model ``model_name`` ("mlp" or "cnn") on disc, on a fixed random
    batch; returns a function that runs it and returns [loss, *grads]."""
    import torch.nn.functional as F

    from examples.mnist.train import build_model

    torch.manual_seed(seed)
    model = build_model(model_name).to("disc")
    x = torch.randn(batch, 1, 28, 28).to("disc")
    y = torch.randint(0, 10, (batch,)).to("disc")
    torch_disc.sync()

    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return [loss.detach()] + [p.grad for p in model.parameters()]
    return step


def run_python(code, timeout=300, **env):
    """Runs ``code`` in a new Python process that imports this checkout's
    torch_disc, with ``env`` added to the environment."""
    import subprocess
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env))
