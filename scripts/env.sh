# Sourced by the scripts: the repository root on the path, for the
# examples', benchmarks' and tests' own modules. torch_disc is installed
# (scripts/setup.sh).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
