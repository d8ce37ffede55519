#!/usr/bin/env bash
# Runs the C++ tests and the ISA-dependent Python tests on an emulated CPU
# (QEMU user mode, Debian's qemu-user-static), by default an AVX2-only AMD
# EPYC (Zen 3, "EPYC-Milan"): CPUID then reports no AVX-512, so torch, oneDNN
# and disc's JIT pick their AVX2 code as on such a machine, and any AVX-512
# instruction that still ran would stop the run with SIGILL. Slow (~25 min);
# not part of scripts/test.sh.
#   bash scripts/emulated_cpu_check.sh            # EPYC-Milan
#   QEMU_CPU=Haswell bash scripts/emulated_cpu_check.sh
# Not run under emulation: tests that start subprocesses (QEMU user mode
# runs only the process it started; the children would run natively) and
# oneDNN's LSTM, which QEMU 7.2 cannot emulate (PyTorch's own eager LSTM
# crashes under it as well).
set -euo pipefail
cd "$(dirname "$0")/.."
export QEMU_CPU=${QEMU_CPU:-EPYC-Milan}
if ! command -v qemu-x86_64-static >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq qemu-user-static >/dev/null
fi
source scripts/env.sh
PY=$(python3 -c "import sys; print(sys.executable)")
emulated() { qemu-x86_64-static "$@" 2> >(grep -v "TCG doesn't support requested feature" >&2); }

echo "== emulated CPU: $QEMU_CPU, as torch and disc see it"
emulated "$PY" -c "import torch, torch_disc; print('torch:', torch.backends.cpu.get_cpu_capability(), '| disc:', torch_disc.build_components())"
echo "== C++ tests"
emulated build/tests/cpp/test_runtime --gtest_brief=1
emulated build/tests/cpp/test_lowering --gtest_brief=1
echo "== ISA-dependent Python tests"
emulated "$PY" -m pytest -q -p no:cacheprovider \
  tests/python/test_model_zoo.py tests/python/test_conv_calls.py tests/python/test_library_calls.py \
  tests/python/test_fused_kernels.py tests/python/test_gemm_merge.py tests/python/test_autocast.py \
  tests/python/test_build_components.py \
  -k "not lstm and not minimal_build and not lowest_isa_level" "$@"
