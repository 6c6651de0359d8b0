#!/usr/bin/env bash
# Quick start, offline: pretrain a tiny ELMo on the packaged corpus (Jane Austen's "Emma"), save it to
# outputs/elmo-quickstart (replacing an earlier quick start there) and load it with AutoModel. Extra arguments go
# to the pretraining command, e.g.
#   bash scripts/quickstart.sh --dataset-name wikitext --dataset-config-name wikitext-2-raw-v1   (WikiText-2, Hub)
#   bash scripts/quickstart.sh --train-file my_corpus.txt                                         (your own text)
#
# The environment: the active one when there is one (a virtual environment or conda environment that is activated,
# or a `python3` on the PATH that already imports the package and its dependencies), with the package installed
# into it if it is missing; otherwise .venv in the repository (created by scripts/install.sh).
# `bash scripts/quickstart.sh --which-python` prints the python it would use, and changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

DEPS="import modeling_elmo, torch, transformers, accelerate, datasets"
ACTIVE="${VIRTUAL_ENV:-${CONDA_PREFIX:-}}"
if [ -n "$ACTIVE" ] && [ -x "$ACTIVE/bin/python" ]; then
  PYTHON="$ACTIVE/bin/python"
  WHY="the active environment $ACTIVE"
elif command -v python3 >/dev/null 2>&1 && python3 -c "$DEPS" 2>/dev/null; then
  PYTHON="$(command -v python3)"
  WHY="python3 on the PATH, which has the package and its dependencies"
else
  PYTHON=".venv/bin/python"
  WHY="no active environment: .venv in the repository"
fi
if [ "${1:-}" = "--which-python" ]; then
  echo "$PYTHON ($WHY)"
  exit 0
fi
if [ "$PYTHON" = ".venv/bin/python" ]; then
  bash scripts/install.sh
elif ! "$PYTHON" -c "$DEPS" 2>/dev/null; then
  echo "installing the package into $WHY" >&2
  "$PYTHON" -m pip install -q .
fi
echo "using $PYTHON ($WHY)" >&2
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
"$PYTHON" -m accelerate.commands.launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no \
  scripts/pretrain.py --config quickstart --overwrite "$@"
"$PYTHON" - <<'PY'
from transformers import AutoModel, AutoTokenizer
model = AutoModel.from_pretrained("outputs/elmo-quickstart", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("outputs/elmo-quickstart", trust_remote_code=True)
out = model(**tokenizer(["Emma walked to Hartfield ."], return_tensors="pt"), output_hidden_states=True)
print(f"AutoModel loads outputs/elmo-quickstart: {len(out.hidden_states)} layers of shape {tuple(out.last_hidden_state.shape)}")
PY
