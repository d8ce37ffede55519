"""Optional back ends (runtime/components.h): the test build has them all,
and a build without the CPU code generator and oneDNN
(scripts/build_minimal.sh, as on a machine with only torch and the CUDA
toolkit) still trains, on ATen, saying so in the metrics."""
import json
import os
import subprocess
import sys

import pytest
import torch_disc

from conftest import ROOT


def test_this_build_has_every_cpu_component():
    # CI's build must not lose MLIR or oneDNN without a test noticing.
    components = torch_disc.build_components()
    assert {k: components[k] for k in ("cpu_codegen", "onednn")} == {"cpu_codegen": True, "onednn": True}
    # The ISA level in use: the CPU's, or DISC_CPU_ISA's cap below it.
    native, cap = torch_disc._C.native_cpu_isa(), os.environ.get("DISC_CPU_ISA", "native")
    levels = ISA_LEVELS["aarch64" if native in ISA_LEVELS["aarch64"][1:] else "x86"]
    want = native if cap == "native" else min(cap, native, key=levels.index)
    assert components["cpu_isa"] == want


# Each family's levels, lowest first; "generic" (no vector extension) is
# below both.
ISA_LEVELS = {"x86": ["generic", "sse4.2", "avx2", "avx512", "avx512_bf16", "amx"],
              "aarch64": ["generic", "neon", "sve", "sve_bf16"]}


def test_a_cap_from_the_other_isa_family_is_a_clear_error():
    native = torch_disc._C.native_cpu_isa()
    other = "avx2" if native in ISA_LEVELS["aarch64"][1:] else "neon"
    code = "import torch_disc; torch_disc.build_components()"
    env = dict(os.environ, DISC_CPU_ISA=other, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode != 0
    assert f"DISC_CPU_ISA={other}" in run.stderr and f"this CPU is {native}" in run.stderr


@pytest.fixture(scope="module")
def minimal_build():
    """The package directory of the minimal build (its compiles come from
    ccache after scripts/setup.sh: seconds)."""
    subprocess.run(["bash", "scripts/build_minimal.sh"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, timeout=1800)
    return os.path.join(ROOT, "build-minimal", "python")


def test_minimal_build_trains_on_aten_and_counts_it(minimal_build):
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", DISC_PERSISTENT_CACHE="0")
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tests/python/minimal_build_cases.py"), minimal_build],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["extension"].startswith(minimal_build)
    assert r["components"] == {"cpu_codegen": False, "onednn": False,
                               "cpu_isa": torch_disc.build_components()["cpu_isa"]}
    # The MLP's five Adam steps: the same losses as CPU eager, each graph
    # (two structures: the first step, then the rest) on the reference
    # executor, said once.
    assert r["disc"] == pytest.approx(r["cpu"], rel=1e-6)
    mlp = r["mlp"]
    assert mlp["executor.no_cpu_codegen"] == mlp["compiles"] == 2
    assert mlp.get("kernels_compiled", 0) == 0 and mlp["fallbacks"] == 0
    assert "no CPU codegen           2 graphs on the reference executor" in r["report"]
    assert run.stderr.count("this build has no CPU code generator") == 1
    # A graph of library calls only runs on the compiled executor: the
    # merged GEMM and the convolution on ATen, counted.
    lib = r["library"]
    assert r["library_error"] < 1e-5
    assert lib.get("executor.no_cpu_codegen", 0) == 0
    assert lib["gemm_merge.launches"] == 1
    assert lib["library.aten_reason.no_onednn"] == 2
    assert lib["library.aten.convolution"] == 1
    assert lib.get("library.onednn", 0) == 0


def test_the_lowest_isa_level_trains_on_a_slower_path_not_a_crash():
    # DISC_CPU_ISA=sse4.2 stands for a CPU below AVX2: 4-wide SSE kernels,
    # oneDNN's SSE4.1 code and the exp without AVX-512, the same losses as
    # CPU eager, and the level said in the components and the report.
    code = ("import json, torch_disc\n"
            "from mlp_losses import mlp_losses\n"
            "print(json.dumps({'disc': mlp_losses('disc'), 'cpu': mlp_losses('cpu'),\n"
            "  'isa': torch_disc.build_components()['cpu_isa'],\n"
            "  'kernels': torch_disc.metrics.counters().get('kernels_compiled', 0),\n"
            "  'onednn': torch_disc.metrics.counters().get('library.onednn', 0),\n"
            "  'report': torch_disc.metrics.report()}))\n")
    env = dict(os.environ, DISC_CPU_ISA="sse4.2", DISC_PERSISTENT_CACHE="0",
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), *sys.path]))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["isa"] == ("generic" if torch_disc._C.native_cpu_isa() == "generic" else "sse4.2")
    assert r["kernels"] > 0 and r["onednn"] > 0
    assert r["disc"] == pytest.approx(r["cpu"], rel=1e-5)
    assert "CPU ISA" in r["report"] and r["isa"] in r["report"]
