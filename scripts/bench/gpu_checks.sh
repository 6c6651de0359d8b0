#!/usr/bin/env bash
# Every GPU check and measurement of this project in one short run (under 8 minutes, each step time-limited), for a
# session lent a GPU machine without network access:
#
#   bash scripts/bench/fetch_gpu_wheels.sh          # here, once: `datasets` and what it needs, into .whl/
#   bash scripts/bench/gpu_checks.sh [OUT_DIR]      # there (device tool: carry [".whl"]); default $OUT, else
#                                                   # scripts/bench/results
#   bash scripts/bench/gpu_checks.sh --cpu-smoke DIR   # anywhere, about a minute: every step on tiny settings
#
# Steps (limit in seconds; GPU settings):
#   correctness   (120) gpu_correctness.py: fused vs loop in fp32 (outputs, states, gradients; compiled and plain
#                       steps; both batchings), no host synchronisation in a training step, bf16 loss curves over
#                       200 steps of elmo-27m for loop and fused;
#   pretrain_gpu  ( 90) bench_pretrain_gpu.py: elmo-27m bf16 training tokens/s and peak memory per token, loop and
#                       fused, batch 128 / 512 / 1024 windows of 20 (target: fused >= 550,000 tokens/s; >= 3x loop
#                       at batch 128);
#   trainer       (190) bench_trainer.py: 60 s of `accelerate launch scripts/pretrain.py` per batching (windows,
#                       sentences), elmo-27m, bf16, batch 1024, synthetic text (needs `datasets`: see .whl above);
#   embed_gpu     ( 60) bench_embed.py: `elmo embed` sentences/s, bf16, elmo-small and elmo-original shapes.
# A step that fails or runs out of time is recorded and the script goes on. OUT_DIR gets at most 8 files (what the
# device tool brings back): environment.json, correctness.json, pretrain_gpu.jsonl, trainer.jsonl, embed_gpu.json,
# stderr.log (every step's error output) and summary.json (the key figures and each step's exit status).
set -uo pipefail
cd "$(dirname "$0")/../.."
smoke=0
if [ "${1:-}" = "--cpu-smoke" ]; then
  smoke=1
  shift
fi
out=${1:-${OUT:-scripts/bench/results}}
mkdir -p "$out"
py=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/elmo-gpu-checks.XXXXXX")  # trainer runs save models: never under OUT
: > "$out/stderr.log"
: > "$work/steps.jsonl"

# `datasets` (the trainer reads text through it) is not on the GPU machine: install the carried wheels if needed.
if ! "$py" -c "import datasets" 2>/dev/null && compgen -G ".whl/*.whl" > /dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >> "$out/stderr.log" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

step() {  # step NAME LIMIT OUTPUT_FILE COMMAND...: run under `timeout`, stdout to OUTPUT_FILE, stderr to stderr.log
  local name=$1 limit=$2 file=$3 start rc
  shift 3
  start=$(date +%s)
  echo "=== $name (limit ${limit}s): $*" >> "$out/stderr.log"
  timeout --kill-after=10 "$limit" "$@" > "$out/$file" 2>> "$out/stderr.log"
  rc=$?
  echo "{\"step\": \"$name\", \"exit\": $rc, \"timed_out\": $([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo true || echo false), \"seconds\": $(( $(date +%s) - start ))}" >> "$work/steps.jsonl"
  echo "$name: exit $rc after $(( $(date +%s) - start )) s"
}

step environment 30 environment.json "$py" - <<'PY'
import importlib, importlib.util, json, os, torch
mods = {m: getattr(importlib.import_module(m), "__version__", "?") if importlib.util.find_spec(m) else None
        for m in ("transformers", "accelerate", "datasets", "pyarrow", "triton", "h5py", "safetensors", "tokenizers")}
print(json.dumps({"torch": torch.__version__, "cuda": torch.cuda.is_available(), "cpu_cores": os.cpu_count(),
                  "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, **mods}))
PY

if [ $smoke -eq 1 ]; then
  step correctness 120 correctness.json "$py" scripts/bench/gpu_correctness.py --smoke
  step pretrain_gpu 120 pretrain_gpu.jsonl "$py" scripts/bench/bench_pretrain_gpu.py --preset elmo-tiny \
    --vocab-size 1000 --corpus-words 20000 --batch-sizes 8 16 --steps 2 --warmup 1 --mixed-precision no
  step trainer 200 trainer.jsonl "$py" scripts/bench/bench_trainer.py --smoke --out "$work/trainer"
  step embed_gpu 120 embed_gpu.json "$py" scripts/bench/bench_embed.py --device cpu --dtype float32 --lines 200 \
    --models tiny --synthetic --baseline-lines 50
else
  synthetic=()
  [ -f ../shared/data/lm-corpus/brown.txt ] || [ -n "${ELMO_SHARED_DATA:-}" ] || synthetic=(--synthetic)
  step correctness 120 correctness.json "$py" scripts/bench/gpu_correctness.py
  step pretrain_gpu 90 pretrain_gpu.jsonl "$py" scripts/bench/bench_pretrain_gpu.py --steps 20 --warmup 5
  step trainer 190 trainer.jsonl "$py" scripts/bench/bench_trainer.py --out "$work/trainer" --seconds 60 \
    --startup-seconds 30
  step embed_gpu 60 embed_gpu.json "$py" scripts/bench/bench_embed.py --device cuda --dtype bfloat16 --lines 30000 \
    --models small,original "${synthetic[@]}"
fi

"$py" - "$out" "$work/steps.jsonl" <<'PY' > "$out/summary.json"
import json, sys
from pathlib import Path

out, steps = Path(sys.argv[1]), Path(sys.argv[2])

def lines(name):
    try:
        return [json.loads(l) for l in (out / name).read_text().splitlines() if l.strip().startswith("{")]
    except (OSError, ValueError):
        return []

summary = {"steps": [json.loads(l) for l in steps.read_text().splitlines() if l.strip()]}
correctness = (lines("correctness.json") or [{}])[-1]
curves = correctness.get("bf16_loss_curves", {})
summary["correctness"] = {
    "fp32_parity_ok": correctness.get("fp32_parity", {}).get("ok"),
    "compile_failure": correctness.get("fp32_parity", {}).get("compile_failure"),
    "host_syncs": correctness.get("host_syncs"),
    "bf16_final_loss": curves.get("final_loss"), "bf16_max_abs_difference": curves.get("max_abs_difference"),
    "bf16_mean_abs_difference_last_20": curves.get("mean_abs_difference_last_20"),
}
train = [r for r in lines("pretrain_gpu.jsonl") if r.get("bench") == "gpu_train"]
summary["pretrain_gpu"] = {f"{r['lstm_implementation']}@{r['batch_size']}": {
    k: r.get(k) for k in ("tokens_per_s", "ms_per_step", "peak_memory_gib", "peak_memory_kib_per_token", "error")}
    for r in train}
by = {(r["lstm_implementation"], r["batch_size"]): r.get("tokens_per_s") for r in train}
summary["pretrain_gpu"]["fused_over_loop"] = {str(b): by[("fused", b)] / by[("loop", b)]
                                              for (i, b) in by if i == "fused" and by.get(("loop", b)) and by[("fused", b)]}
summary["trainer"] = {r.get("batching", r.get("bench")): r.get("median_tokens_per_s", r.get("sentences_over_windows"))
                      for r in lines("trainer.jsonl") if r.get("bench") in ("trainer", "trainer_ratio")}
try:
    embed = json.loads((out / "embed_gpu.json").read_text())
except (OSError, ValueError):
    embed = {}
summary["embed_gpu"] = {name: {k: model.get(k) for k in ("sentences_per_second", "fraction_of_matmul_peak")}
                        for name, model in embed.get("models", {}).items()}
print(json.dumps(summary, indent=1))
PY
cat "$out/summary.json"
rm -rf "$work"
