"""tools/gpu_check.py, the prepared check for a machine with a GPU, run here
end to end against an emulated CuPy (fake_cupy.py: kernels built by the
host compiler, run as emulated grids): the script itself must not be what
fails when a GPU is finally lent. Needs the build's cuda_sweep_dump."""
import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import fake_cupy
from conftest import ROOT

DUMP = os.path.join(ROOT, "build", "tests", "cpp", "cuda_sweep_dump")


@pytest.fixture(scope="module")
def gpu_check():
    sys.modules["cupy"] = fake_cupy
    spec = importlib.util.spec_from_file_location("gpu_check", os.path.join(ROOT, "tools", "gpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    del sys.modules["cupy"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cuda_sweep")
    run = subprocess.run([DUMP, str(directory), "1"], capture_output=True, text=True, check=True)
    assert run.stdout.startswith("38 kernels written")
    return directory


def test_every_kernel_passes_in_every_launch_configuration(gpu_check, sweep, capsys):
    assert gpu_check.check(sweep)
    out = capsys.readouterr().out
    assert "38 kernels," in out and "0 mismatching outputs" in out, out


def test_a_wrong_expected_value_is_reported(gpu_check, sweep, tmp_path, capsys):
    for f in sweep.glob("k0.*"):  # one kernel is enough
        shutil.copy(f, tmp_path / f.name)
    path = tmp_path / "k0.out0.bin"
    wrong = np.fromfile(path, dtype=np.float32)
    wrong[5] += 1.0
    wrong.tofile(path)
    assert not gpu_check.check(tmp_path)
    out = capsys.readouterr().out
    assert "MISMATCH k0 aten::neg (loop)" in out and "first at 5" in out, out


def test_the_bench_times_every_kernel(gpu_check, sweep, capsys):
    gpu_check.bench(sweep, rows=24, n=70, repeats=1)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 + 38 and all("GB/s" in line for line in lines[1:]), lines
