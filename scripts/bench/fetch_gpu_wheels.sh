#!/usr/bin/env bash
# Download, here (where PyPI is reachable), the wheels the GPU machine lacks for scripts/bench/gpu_checks.sh: the
# trainer reads text through `datasets`, which that image does not have (nor `dill` and `multiprocess`; its pyarrow
# may be older than `datasets` needs). They go to .whl/ (ignored by git through .git/info/exclude), which the device
# tool carries: run(command="bash scripts/bench/gpu_checks.sh", carry=[".whl"]). gpu_checks.sh installs them into
# /tmp/site there when `import datasets` fails. About 57 MB with pyarrow (the carry limit is 64 MB, the tree included).
#   bash scripts/bench/fetch_gpu_wheels.sh [--no-pyarrow]
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
[ -x .venv/bin/python ] && py=${PYTHON:-.venv/bin/python}
exclude=$(git rev-parse --git-path info/exclude)
grep -qxF "/.whl/" "$exclude" 2>/dev/null || echo "/.whl/" >> "$exclude"
packages=("datasets==5.2.0" "dill==0.4.1" "multiprocess==0.70.19")
[ "${1:-}" = "--no-pyarrow" ] || packages+=("pyarrow==26.0.1")
rm -rf .whl && mkdir -p .whl
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${packages[@]}"
ls -l .whl
