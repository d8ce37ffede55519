"""The CUDA target (DISC_TARGET=cuda) on a machine with a GPU, checked: run by
test_cuda_target.py, and by scripts/gpu_check.sh on the GPU machine against
the build there (its package directory as argv[1]). Prints one line per
check and exits 1 if any failed.

    DISC_TARGET=cuda python3 tests/python/cuda_target_cases.py [PACKAGE_DIR]
"""
import sys

from other_build import use_package_dir  # beside this file

if len(sys.argv) > 1:  # a build other than the installed one
    use_package_dir(sys.argv[1])

import torch  # noqa: E402
import torch_disc  # noqa: E402
import torch_disc.frontend.dynamo  # noqa: E402
from mlp_losses import mlp_losses  # noqa: E402  (beside this file)

failures = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(name)


def close(a, b, rel):
    return all(abs(x - y) <= rel * max(abs(y), 1e-6) for x, y in zip(a, b)) and len(a) == len(b)


check("target is cuda", torch_disc.target() == "cuda", torch_disc.target())
before = torch.cuda.memory_allocated()
big = torch.ones(1 << 20).to("disc")
torch_disc.sync()
torch.disc.synchronize()
check("an uploaded tensor is in GPU memory", torch.cuda.memory_allocated() - before >= 4 << 20,
      f"{torch.cuda.memory_allocated() - before} bytes")
check("it reads back", bool((big.cpu() == 1).all()))
del big

torch_disc.metrics.reset()
def losses(device, dropout=0.0):
    return mlp_losses(device, hidden=128, batch=64, dropout=dropout, optimizer=torch.optim.AdamW)


disc = losses("disc")
cuda = losses("cuda")
cpu = losses("cpu")
c = torch_disc.metrics.counters()
check("MLP + AdamW losses equal CUDA eager's", close(disc, cuda, 1e-5), f"{disc} vs {cuda}")
check("and CPU eager's", close(disc, cpu, 1e-4), f"{disc} vs {cpu}")
check("every compile on the reference executor",
      c.get("executor.cuda_reference", 0) == c["compiles"] > 0, str(dict(c)))
check("no CPU fallback", c["fallbacks"] == 0, str(c["fallbacks"]))

# Dropout draws on the host from each node's seed: the CPU target's numbers.
torch_disc.metrics.reset()
with_dropout = losses("disc", dropout=0.1)
check("random ops run on the host", torch_disc.metrics.counters().get("replay.random_on_host", 0) >= 5)
check("dropout training gives finite losses", all(torch.isfinite(torch.tensor(with_dropout))), str(with_dropout))

# torch.compile(backend="disc") on CPU tensors: placed on the GPU, run, back.
torch.manual_seed(3)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
x = torch.randn(8, 16)
with torch.no_grad():
    want = model(x)
    got = torch.compile(model, backend=torch_disc.frontend.dynamo.disc)(x)  # no entry point needed
check("torch.compile output on the CPU", got.device.type == "cpu", str(got.device))
check("torch.compile output equals eager", torch.allclose(got, want, rtol=1e-5, atol=1e-6),
      str((got - want).abs().max().item()))

print(f"{len(failures)} failed", flush=True)
sys.exit(1 if failures else 0)
