#!/usr/bin/env bash
# Every GPU measurement of this project in one short run (budget: about 8 minutes), for a session that is lent a GPU
# machine without network access:
#   bash scripts/bench/gpu_checks.sh [OUT_DIR]          # default: $OUT if set, else scripts/bench/results
# 1. bench_pretrain_gpu.py: elmo-27m bf16 training tokens/s (target on an H200: 550,000), synthetic text;
# 2. bench_embed.py: `elmo embed` sentences/s, bf16, elmo-small and elmo-original shapes, 100,000 lines (the corpus
#    lines when ../shared/data is there, else synthetic sentences of the same mean length).
# Each step has its own time limit and the script goes on when one fails; results are JSON files in OUT_DIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-scripts/bench/results}}
mkdir -p "$out"
python - <<'PY' | tee "$out/environment.json"
import importlib, importlib.util, json, torch
mods = {m: getattr(importlib.import_module(m), "__version__", "?") if importlib.util.find_spec(m) else None
        for m in ("transformers", "accelerate", "datasets", "h5py", "safetensors", "tokenizers")}
print(json.dumps({"torch": torch.__version__, "cuda": torch.cuda.is_available(),
                  "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, **mods}))
PY
synthetic=()
[ -f ../shared/data/lm-corpus/brown.txt ] || [ -n "${ELMO_SHARED_DATA:-}" ] || synthetic=(--synthetic)
timeout 270 python scripts/bench/bench_pretrain_gpu.py > "$out/pretrain_gpu.jsonl" 2> "$out/pretrain_gpu.err"
echo "bench_pretrain_gpu: exit $?"; cat "$out/pretrain_gpu.jsonl"
timeout 210 python scripts/bench/bench_embed.py --device cuda --dtype bfloat16 --lines 100000 --models small,original \
    "${synthetic[@]}" > "$out/embed_gpu.json" 2> "$out/embed_gpu.err"
echo "bench_embed: exit $?"; cat "$out/embed_gpu.json"
