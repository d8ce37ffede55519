#!/usr/bin/env bash
# The main job: set up, then train on Fashion-MNIST on the disc device.
# Extra arguments go to examples/mnist/train.py (e.g. --model cnn --epochs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
exec python3 examples/mnist/train.py --device disc "$@"
