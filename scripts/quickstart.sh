#!/usr/bin/env bash
# Quick start, offline: install, pretrain a tiny ELMo on the packaged corpus (Jane Austen's "Emma"), save it to
# outputs/elmo-quickstart (replacing an earlier quick start there) and load it with AutoModel. Extra arguments go
# to the pretraining command, e.g.
#   bash scripts/quickstart.sh --dataset-name wikitext --dataset-config-name wikitext-2-raw-v1   (WikiText-2, Hub)
#   bash scripts/quickstart.sh --train-file my_corpus.txt                                         (your own text)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
accelerate launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no \
  scripts/pretrain.py --config quickstart --overwrite "$@"
python - <<'PY'
from transformers import AutoModel, AutoTokenizer
model = AutoModel.from_pretrained("outputs/elmo-quickstart", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("outputs/elmo-quickstart", trust_remote_code=True)
out = model(**tokenizer(["Emma walked to Hartfield ."], return_tensors="pt"), output_hidden_states=True)
print(f"AutoModel loads outputs/elmo-quickstart: {len(out.hidden_states)} layers of shape {tuple(out.last_hidden_state.shape)}")
PY
