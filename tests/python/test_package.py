"""torch_disc as a package: a wheel built by pip, installed into a fresh
virtual environment, works from another directory without an import of
torch_disc (the torch.backends entry point) and without paths into this
machine; torch.compile finds backend="disc" through Dynamo's entry point."""
import os
import subprocess
import sys
import sysconfig

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE_PACKAGES = os.path.dirname(os.path.dirname(torch.__file__))


def run(cmd, cwd, timeout=600, **env):
    full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    full.update(env)
    r = subprocess.run(cmd, cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv holding only the wheel; torch comes from this machine's
    site-packages by a path entry (no download), which runs none of that
    directory's .pth files, so the developers' editable install stays out."""
    tmp = tmp_path_factory.mktemp("package")
    wheels = tmp / "wheels"
    # The developers' build directory: the wheel's build only installs.
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
         "-w", str(wheels), f"-Cbuild-dir={ROOT}/build", ROOT], cwd=ROOT)
    (wheel,) = wheels.glob("torch_disc-*.whl")
    env_dir = tmp / "venv"
    run([sys.executable, "-m", "venv", str(env_dir)], cwd=tmp)
    python = str(env_dir / "bin" / "python")
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                  cwd=tmp).strip()
    with open(os.path.join(purelib, "machine_torch.pth"), "w") as f:
        f.write(SITE_PACKAGES + "\n")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], cwd=tmp)
    return python, purelib, tmp


def test_an_unmodified_script_finds_the_disc_device(venv):
    python, purelib, tmp = venv
    out = run([python, "-c", "import sys, torch; print(torch.ones(2, device='disc') + 1); "
               "print(sys.modules['torch_disc'].__file__)"], cwd=tmp)
    lines = out.splitlines()
    assert lines[0] == "tensor([2., 2.], device='disc:0')"
    assert lines[1].startswith(purelib)  # the installed copy, not the checkout


def test_autoload_can_be_turned_off(venv):
    python, _, tmp = venv
    out = run([python, "-c", "import sys, torch; print('torch_disc' in sys.modules)"], cwd=tmp,
              TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out.split() == ["False"]


def test_torch_compile_finds_the_disc_backend(venv):
    python, _, tmp = venv
    code = ("import torch\n"
            "f = torch.compile(lambda x: torch.tanh(x) * 2 + 1, backend='disc')\n"
            "x = torch.linspace(-2, 2, 7)\n"
            "import torch_disc\n"
            "print(torch.allclose(f(x), torch.tanh(x) * 2 + 1), f(x).device,\n"
            "      torch_disc.metrics.counters()['graphs_run'] > 0)\n")
    out = run([python, "-c", code], cwd=tmp, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out.split() == ["True", "cpu", "True"]


def test_the_extension_has_no_path_into_this_machine(venv):
    _, purelib, _ = venv
    (extension,) = [f for f in os.listdir(os.path.join(purelib, "torch_disc"))
                    if f.startswith("_C.") and f.endswith(".so")]
    dynamic = run(["readelf", "-d", os.path.join(purelib, "torch_disc", extension)], cwd=ROOT)
    paths = [line for line in dynamic.splitlines() if "RUNPATH" in line or "RPATH" in line]
    assert paths and "$ORIGIN/../torch/lib" in paths[0]
    for forbidden in (SITE_PACKAGES, ROOT, sysconfig.get_paths()["purelib"]):
        assert forbidden not in paths[0], paths[0]


def test_a_missing_native_library_names_its_debian_package():
    import torch_disc
    error = ImportError("libMLIR.so.15: cannot open shared object file: No such file or directory")
    assert "apt-get install libmlir-15" in str(torch_disc._missing_library(error))
    other = ImportError("undefined symbol: foo")
    assert torch_disc._missing_library(other) is other
