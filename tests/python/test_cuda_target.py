"""DISC_TARGET (lazy_backend/device/target.h): where disc values live. CPU
by default; cuda without a GPU fails naming the variable; with a GPU the
checks of cuda_target_cases.py run (skipped here without one)."""
import os
import subprocess
import sys

import pytest
import torch
import torch_disc

from conftest import ROOT

HAS_GPU = torch.cuda.is_available()


def run_with(target, code):
    env = dict(os.environ, DISC_TARGET=target)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


def test_default_target_is_cpu():
    assert torch_disc.target() == "cpu"


def test_auto_picks_the_gpu_only_where_torch_sees_one():
    run = run_with("auto", "import torch, torch_disc; print(torch_disc.target())")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == ("cuda" if HAS_GPU else "cpu")


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU: DISC_TARGET=cuda is valid")
def test_cuda_without_a_gpu_fails_at_the_first_tensor_naming_the_variable():
    run = run_with("cuda", "\n".join([
        "import torch, torch_disc",
        "for attempt in range(2):",  # every use fails the same way, not just the first
        "    try:",
        "        (torch.ones(2).to('disc') + 1).cpu()",
        "    except RuntimeError as e:",
        "        print('ERROR', str(e).splitlines()[0])",
    ]))
    assert run.returncode == 0, run.stderr
    errors = [line for line in run.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2
    for e in errors:
        assert "DISC_TARGET=cuda, but torch sees no CUDA GPU (torch.cuda.is_available() is False)" in e


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (the CUDA target's parity checks)")
def test_cuda_target_trains_as_cuda_eager():
    env = dict(os.environ, DISC_TARGET="cuda")
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tests/python/cuda_target_cases.py")], env=env,
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
