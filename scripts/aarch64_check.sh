#!/usr/bin/env bash
# disc's compiler side on 64-bit Arm, emulated on this x86 machine: sets up
# the arm64 sysroot (scripts/aarch64_sysroot.sh), cross-builds the torch-free
# part (IR, passes, codegen, the MLIR JIT, oneDNN calls, Philox, disc-opt and
# their GoogleTests) and runs the tests under qemu-aarch64-static. The
# kernels are JIT-compiled for the emulated CPU (aarch64 NEON); oneDNN is
# Debian's arm64 build. The Python extension is not built here yet: the
# torch side needs torch's aarch64 wheel in the sysroot.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DISC_AARCH64_DIR:-$PWD/.aarch64}
BUILD=${DISC_AARCH64_BUILD:-$PWD/build-aarch64}
DISC_AARCH64_DIR=$DIR bash scripts/aarch64_sysroot.sh
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DDISC_AARCH64_SYSROOT="$DIR/sysroot" -DDISC_TORCH_SIDE=OFF -DCMAKE_BUILD_TYPE=Release \
  >"$DIR/configure.log" 2>&1 || { cat "$DIR/configure.log"; exit 1; }
ninja -C "$BUILD" test_lowering test_runtime test_cuda_codegen disc-opt
run() { qemu-aarch64-static -L "$DIR/sysroot" "$@"; }
status=0
for t in test_lowering test_runtime test_cuda_codegen; do
  echo "== $t (aarch64, emulated)"
  run "$BUILD/tests/cpp/$t" >"$DIR/$t.log" 2>&1 || status=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?[,.]' "$DIR/$t.log" || true
done
echo "== disc-opt --target=cpu (aarch64, emulated)"
run "$BUILD/tools/disc-opt" --until=codegen tests/ir/codegen/loop_kernel_as_mlir_for_the_cpu.txt |
  grep -c 'vector<16xf32>' | sed 's/^/vector<16xf32> lines in the kernel: /'
exit $status
