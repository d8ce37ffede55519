#!/usr/bin/env bash
# The whole test suite: set up, then C++ (GoogleTest via CTest) and Python
# (pytest) tests at this CPU's own ISA, then the tests of what depends on the
# ISA (generated kernels, oneDNN GEMMs and convolutions, bf16, the model zoo,
# the hand-vectorized dropout and attention)
# again as on an AVX2-only CPU (scripts/with_isa.sh), so that one machine of
# either kind checks both; last, the C++ tests cross-built for AArch64 and
# run under emulation.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
native=$(python3 -c "import torch_disc; print(torch_disc._C.native_cpu_isa())")
echo "== C++ tests (ctest), native ISA: $native"
ctest --test-dir build --output-on-failure -j 2
echo "== Python tests (pytest), native ISA: $native"
python3 -m pytest tests/python -q "$@"

# Not test_mnist.py: its step-by-step loss bounds hold eager's MKL to the
# CPU's own kernels, and MKL capped on an Intel CPU is not an AVX2 CPU's MKL.
ISA_TESTS=(test_fused_kernels.py test_row_kernels.py test_library_calls.py test_conv_calls.py
           test_gemm_merge.py test_autocast.py test_model_zoo.py test_ops_parity.py
           test_build_components.py test_attention.py test_attention_pattern.py test_dropout.py
           test_opinfo_sweep.py)
case "$native" in
  avx512|avx512_bf16|amx)
    echo "== the ISA-dependent tests capped to avx2 (this CPU: $native)"
    bash scripts/with_isa.sh avx2 ctest --test-dir build --output-on-failure -j 2 \
      -R 'Onednn|MlirJit|FusedKernel|Philox|Attention|VectorLevel'
    bash scripts/with_isa.sh avx2 python3 -m pytest "${ISA_TESTS[@]/#/tests/python/}" -q "$@" ;;
  *)
    echo "== no capped run: this CPU's ISA ($native) is the AVX2 level or below, the run above covered it" ;;
esac

# 64-bit Arm: the compiler side cross-built and its C++ tests under qemu
# (~4.5 min); the whole check with torch, pytest and MNIST is
# scripts/aarch64_check.sh without --gtest-only.
echo "== the C++ tests on AArch64 (cross-built, emulated)"
bash scripts/aarch64_check.sh --gtest-only
