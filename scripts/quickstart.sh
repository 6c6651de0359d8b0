#!/usr/bin/env bash
# Quick start: install, pretrain a small ELMo on WikiText-2 (downloaded from the Hub) and check that AutoModel
# loads the result from outputs/elmo-quickstart. Extra arguments go to scripts/pretrain.py, e.g.
#   bash scripts/quickstart.sh --dataset-name null --train-file my_corpus.txt    (offline, your own text)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
accelerate launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no \
  scripts/pretrain.py --config configuration/recipes/quickstart.yaml "$@"
python - <<'PY'
from transformers import AutoModel, AutoTokenizer
model = AutoModel.from_pretrained("outputs/elmo-quickstart", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("outputs/elmo-quickstart", trust_remote_code=True)
out = model(**tokenizer(["The bank closed early ."], return_tensors="pt"), output_hidden_states=True)
print(f"AutoModel loads outputs/elmo-quickstart: {len(out.hidden_states)} layers of shape {tuple(out.last_hidden_state.shape)}")
PY
