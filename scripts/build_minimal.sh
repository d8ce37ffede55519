#!/usr/bin/env bash
# Builds torch_disc without its optional CPU back ends -- no MLIR 15 / LLVM
# code generator, no oneDNN -- as a machine with only torch (and perhaps the
# CUDA toolkit) builds it, e.g. the GPU test machine; and stages an
# importable package beside the build:
#
#   bash scripts/build_minimal.sh [BUILD_DIR]    (default build-minimal)
#   PYTHONPATH=build-minimal/python TORCH_DEVICE_BACKEND_AUTOLOAD=0 python3 -c \
#       'import torch_disc; print(torch_disc.build_components())'
#
# Graphs then run on the reference executor and GEMMs and convolutions on
# ATen, counted (README, "Build components"). The installed torch_disc is
# left as it is. Needs torch, CMake and Ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-minimal}
PY=${PYTHON:-python3}
# The compiles are the same as the main build's, whose objects ccache keeps
# (CMakeLists.txt): only the runtime's few files and the links are new.
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
PKG="$PWD/$BUILD/python/torch_disc"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
  -DPython3_EXECUTABLE="$(command -v "$PY")" -DDISC_BUILD_TESTS=OFF \
  -DDISC_CPU_CODEGEN=OFF -DDISC_ONEDNN=OFF -DDISC_EXTENSION_DIR="$PKG" >/dev/null
cmake --build "$BUILD" --target _C
# The package: links to our Python sources, beside this build's extension.
for f in python/torch_disc/*; do
  case "$(basename "$f")" in _C*.so | __pycache__) continue ;; esac
  ln -sfn "$PWD/$f" "$PKG/$(basename "$f")"
done
echo "build_minimal: $(ls "$PKG"/_C*.so)"
