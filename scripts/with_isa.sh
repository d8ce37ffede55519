#!/usr/bin/env bash
# Runs a command as on a CPU whose instruction set stops at ISA: disc
# (DISC_CPU_ISA), ATen's vectorized kernels (ATEN_CPU_CAPABILITY), the
# oneDNN inside torch and Debian's (ONEDNN_MAX_CPU_ISA) and MKL
# (MKL_ENABLE_INSTRUCTIONS) all capped, so that eager and disc compare as
# they would on such a machine. A level above the CPU's runs at the CPU's.
#   bash scripts/with_isa.sh avx2 python -m benchmarks.mnist_step --threads 1
set -euo pipefail
usage="usage: $0 native|avx512_bf16|avx512|avx2|sse4.2 COMMAND..."
(($# >= 2)) || { echo "$usage" >&2; exit 2; }
isa=$1; shift
case "$isa" in
  native) exec "$@" ;;
  avx512_bf16) aten=avx512 onednn=AVX512_CORE_BF16 mkl=AVX512 ;;
  avx512) aten=avx512 onednn=AVX512_CORE mkl=AVX512 ;;
  avx2) aten=avx2 onednn=AVX2 mkl=AVX2 ;;
  sse4.2) aten=default onednn=SSE41 mkl=SSE4_2 ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
export DISC_CPU_ISA=$isa ATEN_CPU_CAPABILITY=$aten ONEDNN_MAX_CPU_ISA=$onednn \
       MKL_ENABLE_INSTRUCTIONS=$mkl
# Inductor's cache key misses ATEN_CPU_CAPABILITY: a kernel it built for the
# native vector width, reloaded under a cap, segfaults. One cache per ISA.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/torchinductor_${USER:-$(id -un)}_$isa}
exec "$@"
