#!/usr/bin/env bash
# The CUDA target's GPU check, in two halves:
#   bash scripts/gpu_check.sh prepare   here, with the project built: writes
#       the CUDA sweep's kernels, inputs and the CPU kernels' outputs to
#       build/cuda_sweep (cuda_sweep_dump; ~7 MB)
#   bash scripts/gpu_check.sh run       on the GPU machine (the device tool,
#       carrying build/cuda_sweep): builds torch_disc there without LLVM /
#       MLIR / oneDNN (scripts/build_minimal.sh), trains on it
#       (tests/python/minimal_build_cases.py) and runs the CUDA target's
#       checks (DISC_TARGET=cuda, tests/python/cuda_target_cases.py); then
#       compiles each kernel with NVRTC (CuPy), launches it with several
#       launch configurations and compares (tools/gpu_check.py), and times
#       each at [16384, 4096] against a device-to-device copy (--bench).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=build/cuda_sweep
case "${1:-}" in
  prepare)
    cmake --build build --target cuda_sweep_dump
    rm -rf "$DIR"
    build/tests/cpp/cuda_sweep_dump "$DIR"
    ;;
  run)
    bash scripts/build_minimal.sh
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 DISC_PERSISTENT_CACHE=0 \
      python3 tests/python/minimal_build_cases.py build-minimal/python > build/minimal.json || status=1
    tail -c 1500 build/minimal.json
    DISC_TARGET=cuda TORCH_DEVICE_BACKEND_AUTOLOAD=0 DISC_PERSISTENT_CACHE=0 \
      python3 tests/python/cuda_target_cases.py build-minimal/python || status=1
    python3 tools/gpu_check.py "$DIR" || status=1
    python3 tools/gpu_check.py --bench "$DIR" || status=1
    exit "${status:-0}"
    ;;
  *)
    echo "usage: bash scripts/gpu_check.sh prepare|run" >&2
    exit 2
    ;;
esac
