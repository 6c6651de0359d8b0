#!/usr/bin/env bash
# Create .venv (if missing) and install the package with its test extras into it.
# torch is installed first, pinned, only when the environment has none: a machine that already has a torch
# (a GPU build, say) keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev]"
