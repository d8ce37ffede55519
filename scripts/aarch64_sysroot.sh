#!/usr/bin/env bash
# An arm64 sysroot of Debian 12's own packages (glibc, libstdc++, LLVM 15 /
# MLIR 15, oneDNN, GoogleTest, Python 3.11) for cross-building disc on this
# x86 machine and running it under qemu-aarch64-static, and torch 2.11's
# aarch64 wheels from PyPI for the Python side. The cross compiler and the
# emulator come as host packages; the arm64 .debs are unpacked (dpkg -x)
# into $DISC_AARCH64_DIR/sysroot, never installed; the wheels are unpacked
# into $DISC_AARCH64_DIR/site, a folder for PYTHONPATH. Idempotent: a second
# run reuses what it downloaded and unpacked.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DISC_AARCH64_DIR:-$PWD/.aarch64}
ROOTS=(libc6-dev libstdc++-12-dev libmlir-15-dev llvm-15-dev libdnnl-dev libgtest-dev zlib1g-dev
       python3.11 libpython3.11-dev)
# torch's aarch64 wheel on PyPI is built with CUDA: its libraries load only
# beside the CUDA ones (nvidia-*), though no GPU is used here. pytest runs
# the tests under emulation; tqdm draws the MNIST example's progress.
WHEELS=(torch==2.11.0 numpy pytest tqdm)

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
need=()
for p in g++-aarch64-linux-gnu qemu-user-static; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
# One index update serves both: the arm64 package lists and the host tools.
update=$((${#need[@]} > 0))
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
  update=1
fi
((update)) && $SUDO apt-get update -qq
if ((${#need[@]})); then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

mkdir -p "$DIR/debs"
if [ "$(cat "$DIR/sysroot/.complete" 2>/dev/null)" != "${ROOTS[*]}" ]; then
  # Every package the roots need, recursively; arm64 builds where the
  # package has one, the architecture-independent one otherwise.
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances --no-pre-depends "${ROOTS[@]/%/:arm64}" 2>/dev/null |
    grep -E '^[a-z0-9]' | sed 's/:arm64$//' | sort -u > "$DIR/packages.txt"
  (cd "$DIR/debs"
   while read -r p; do
     ls "${p}"_*.deb >/dev/null 2>&1 && continue
     apt-get download -qq "$p:arm64" >/dev/null 2>&1 || apt-get download -qq "$p" >/dev/null 2>&1 ||
       echo "aarch64_sysroot: no package $p" >&2
   done < "$DIR/packages.txt")
  rm -rf "$DIR/sysroot" && mkdir -p "$DIR/sysroot"
  for d in "$DIR"/debs/*.deb; do dpkg -x "$d" "$DIR/sysroot"; done
  # Absolute symlinks point into the host's /usr: make them relative to the
  # sysroot, so the cross linker and qemu -L find the arm64 files.
  find "$DIR/sysroot" -type l | while read -r link; do
    target=$(readlink "$link")
    case "$target" in
      /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$DIR/sysroot$target")" "$link" ;;
    esac
  done
  echo "${ROOTS[*]}" > "$DIR/sysroot/.complete"
fi
# DISC_AARCH64_WHEELS=0: the debs alone, for the compiler side.
if [ "${DISC_AARCH64_WHEELS:-1}" = 1 ] && [ "$(cat "$DIR/site/.complete" 2>/dev/null)" != "${WHEELS[*]}" ]; then
  # Debian 12's glibc is 2.36: every manylinux tag up to it fits.
  platforms=(--platform manylinux2014_aarch64 --platform any)
  for minor in $(seq 17 36); do platforms+=(--platform "manylinux_2_${minor}_aarch64"); done
  python3 -m pip download -q --only-binary=:all: --python-version 3.11 "${platforms[@]}" \
    -d "$DIR/wheels" "${WHEELS[@]}"
  rm -rf "$DIR/site" && mkdir -p "$DIR/site"
  # triton drives GPU code generation only; nothing here imports it.
  for w in "$DIR"/wheels/*.whl; do
    case "$(basename "$w")" in triton-*) continue ;; esac
    python3 -m zipfile -e "$w" "$DIR/site"
  done
  echo "${WHEELS[*]}" > "$DIR/site/.complete"
fi
echo "aarch64_sysroot: $DIR/sysroot ($(du -sh "$DIR/sysroot" | cut -f1))"
if [ -d "$DIR/site" ]; then echo "aarch64_sysroot: $DIR/site ($(du -sh "$DIR/site" | cut -f1))"; fi
