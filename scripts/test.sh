#!/usr/bin/env bash
# The whole test suite: set up, then C++ (GoogleTest via CTest) and Python
# (pytest) tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
echo "== C++ tests (ctest)"
ctest --test-dir build --output-on-failure -j 2
echo "== Python tests (pytest)"
python3 -m pytest tests/python -q "$@"
