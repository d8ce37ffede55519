#!/usr/bin/env bash
# disc on 64-bit Arm, emulated on this x86 machine. Sets up the arm64 sysroot
# and torch's aarch64 wheels (scripts/aarch64_sysroot.sh), cross-builds disc
# (the extension torch_disc._C, the GoogleTests, disc-opt) and runs under
# qemu-aarch64-static:
#   - the GoogleTests, on qemu's "max" CPU (SVE at 512 bits, BF16) and on a
#     NEON-only one;
#   - a pytest selection and the MNIST example for 300 steps;
#   - one generated kernel built as SVE, NEON and scalar code, timed (qemu
#     runs a vector instruction lane by lane, so the times come out close:
#     the disassembly's vector instructions are the check) and disassembled.
# Kernels are JIT-compiled for the emulated CPU; oneDNN is Debian's arm64
# build. `--gtest-only`: the compiler side and its GoogleTests alone, without
# torch's wheels (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DISC_AARCH64_DIR:-$PWD/.aarch64}
BUILD=${DISC_AARCH64_BUILD:-$PWD/build-aarch64}
GTEST_ONLY=0
[ "${1:-}" = "--gtest-only" ] && GTEST_ONLY=1
SECONDS=0
export QEMU_LD_PREFIX=$DIR/sysroot  # qemu-aarch64-static -L, for every run and child
SITE=$BUILD/site                    # torch_disc as the emulated Python imports it

setup_and_build() {
  DISC_AARCH64_DIR=$DIR DISC_AARCH64_WHEELS=$((1 - GTEST_ONLY)) bash scripts/aarch64_sysroot.sh
  local torch_side=(-DDISC_TORCH_SIDE=OFF) targets=(test_lowering test_runtime test_cuda_codegen disc-opt)
  if ((!GTEST_ONLY)); then
    torch_side=(-DDISC_TORCH_SIDE=ON "-DDISC_TORCH_DIR=$DIR/site/torch" "-DDISC_EXTENSION_DIR=$SITE/torch_disc")
    targets+=(_C)
  fi
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
    -DDISC_AARCH64_SYSROOT="$DIR/sysroot" "${torch_side[@]}" -DCMAKE_BUILD_TYPE=Release \
    >"$DIR/configure.log" 2>&1 || { cat "$DIR/configure.log"; exit 1; }
  ninja -C "$BUILD" "${targets[@]}"
  echo "== built in ${SECONDS}s"
}

# The package as an install would lay it out: the sources, autograd/ inside
# it, the aarch64 _C, and the entry points that let `import torch` load it.
# The emulated Python's children run emulated too (sys.executable).
lay_out_package() {
  cp -rsf "$PWD/python/torch_disc/." "$SITE/torch_disc/"
  find "$SITE/torch_disc" -name '_C.*x86_64*' -delete
  ln -sfn "$PWD/autograd" "$SITE/torch_disc/autograd"
  python3 scripts/aarch64_dist_info.py pyproject.toml "$SITE"
  printf '#!/bin/sh\nexec qemu-aarch64-static %s "$@"\n' "$DIR/sysroot/usr/bin/python3.11" >"$BUILD/python3"
  chmod +x "$BUILD/python3"
  printf 'import sys\nsys.executable = %s\n' "'$BUILD/python3'" >"$SITE/sitecustomize.py"
}

status=0
gtests() {  # $1: qemu's CPU model, $2: gtest's filter, then the tests
  local cpu=$1 filter=$2; shift 2
  for t in "$@"; do
    echo "== $t (aarch64 $cpu, emulated)"
    QEMU_CPU=$cpu qemu-aarch64-static "$BUILD/tests/cpp/$t" --gtest_filter="$filter" \
      >"$DIR/$t.$cpu.log" 2>&1 || status=1
    grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?[,.]' "$DIR/$t.$cpu.log" || true
  done
}

python_checks() {
  export PYTHONPATH=$SITE:$DIR/site:$PWD
  echo "== pytest (aarch64 max, emulated)"
  "$BUILD/python3" -m pytest -q -p no:cacheprovider "${PYTEST_SELECTION[@]}" >"$DIR/pytest.log" 2>&1 ||
    status=1
  tail -1 "$DIR/pytest.log"
  echo "== MNIST, 300 steps on disc and on CPU eager (aarch64 max, emulated)"
  for device in disc cpu; do
    DISC_PERSISTENT_CACHE=0 "$BUILD/python3" -m examples.mnist.train --device $device --max-steps 300 \
      --no-progress --log-losses "$DIR/mnist.$device.json" >"$DIR/mnist.$device.log" 2>&1 || status=1
    grep -E "^epoch" "$DIR/mnist.$device.log" | sed "s/^/$device: /" || cat "$DIR/mnist.$device.log"
  done
  python3 -c "import json, sys; d, c = (json.load(open(f'$DIR/mnist.{x}.json')) for x in ('disc', 'cpu'));
worst = max(abs(a - b) / abs(b) for a, b in zip(d, c)); print(f'worst relative loss difference: {worst:.1e}');
sys.exit(len(d) != len(c) or worst > 1e-3)" || status=1
  echo "== one kernel: SVE, NEON and scalar (aarch64, emulated)"
  for run in max:native max,sve=off:neon max,sve=off:generic; do
    local out=$DIR/kernel.${run#*:}
    QEMU_CPU=${run%%:*} DISC_CPU_ISA=${run#*:} "$BUILD/python3" scripts/aarch64_kernel_timing.py "$out" ||
      status=1
    aarch64-linux-gnu-objdump -d "$out/kernel.o" >"$out/kernel.s"
    echo "   its code: $(grep -cE '^ +[0-9a-f]+:' "$out/kernel.s") instructions," \
      "$(grep -cE '\bz[0-9]+\.' "$out/kernel.s") on SVE registers," \
      "$(grep -cE '\bv[0-9]+\.[0-9]*[bhsd]\b' "$out/kernel.s") on NEON vectors ($out/kernel.s)"
  done
}

# What runs under emulation (~1/3 of a minute natively): the ops and views,
# sync, fused and row kernels, oneDNN GEMMs and convolutions, bf16
# (autocast), dropout's RNG, two models of the zoo, ops_parity's add, mul,
# softmax and matmul cases; not the longest randomized and bf16 chains.
LEFT_OUT="not random_fused_chains and not bf16_chains and not nchw_baseline and not disc_conv_aten"
# Layer norm of rows of length 1: the input grad is 0, and eager's AArch64
# kernel leaves 1.5e-5 of rounding in it (1e-5 allowed); disc's is 0.
LEFT_OUT+=" and not layer_norm_no_affine-2x1"
PYTEST_SELECTION=(tests/python/test_fused_kernels.py tests/python/test_sync.py
  tests/python/test_views_inplace.py tests/python/test_library_calls.py
  tests/python/test_conv_calls.py tests/python/test_autocast.py tests/python/test_dropout.py
  tests/python/test_row_kernels.py
  "tests/python/test_model_zoo.py::test_model_trains_like_float64_cpu[transformer_encoder]"
  "tests/python/test_model_zoo.py::test_model_trains_like_float64_cpu[lstm_classifier]"
  tests/python/test_ops_parity.py
  -k "(not test_ops_parity or add or mul or softmax or matmul) and $LEFT_OUT")

setup_and_build
# The CUDA kernels built for the host and run as grids take 3 minutes
# emulated: once in the whole check, not in CI's (x86 runs them natively).
on_host='*'
((GTEST_ONLY)) && on_host='-CudaKernelsOnHost.*'
gtests max "$on_host" test_lowering test_runtime test_cuda_codegen
# What depends on the ISA, again without SVE.
gtests max,sve=off '-CudaKernelsOnHost.*' test_runtime
if ((!GTEST_ONLY)); then
  lay_out_package
  python_checks
fi
echo "== aarch64 check: $([ $status -eq 0 ] && echo passed || echo FAILED) in ${SECONDS}s"
exit $status
