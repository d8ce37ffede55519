#!/usr/bin/env bash
# The CUDA target's GPU check, in two halves:
#   bash scripts/gpu_check.sh prepare   here, with the project built: writes
#       the CUDA sweep's kernels, inputs and the CPU kernels' outputs to
#       build/cuda_sweep (cuda_sweep_dump; ~7 MB)
#   bash scripts/gpu_check.sh run       on the GPU machine (the device tool,
#       carrying build/cuda_sweep): compiles each kernel with NVRTC (CuPy),
#       launches it with several launch configurations and compares
#       (tools/gpu_check.py); needs nothing built there.
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
    python3 tools/gpu_check.py "$DIR"
    ;;
  *)
    echo "usage: bash scripts/gpu_check.sh prepare|run" >&2
    exit 2
    ;;
esac
