#!/usr/bin/env python
"""Throughput of the real trainer (``accelerate launch scripts/pretrain.py``) on synthetic text, per batching.

    python scripts/bench/bench_trainer.py --out /tmp/trainer        # elmo-27m, bf16, 60 s per batching, one GPU
    python scripts/bench/bench_trainer.py --smoke --out /tmp/t      # seconds, on the CPU: a plumbing check

Writes a synthetic corpus (Zipfian words over a ``--vocab-size`` vocabulary, sentences of 5-40 words, the same
generator as ``bench_pretrain_gpu.py``) to ``OUT/corpus.txt``, then for each ``--batchings`` runs the trainer with
``--max-train-minutes`` = ``--seconds`` / 60 (``--per-device-train-batch-size``, ``--logging-steps``, no validation,
no intermediate checkpoint) under a time limit, and reads its ``metrics.jsonl``. Prints one JSON line per batching:
the trainer's ``tokens_per_s`` (its unit: predicted words; in windows every window position) over the logging
windows after the first (which holds start-up and compilation), their median, the steps and tokens done, and the
last loss; ``sentences_over_windows`` compares the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def write_corpus(path: Path, vocab_size: int, words: int) -> int:
    from bench_pretrain_gpu import synthetic_corpus

    _, lines = synthetic_corpus(vocab_size, words)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def run_trainer(args, batching: str, corpus: Path, out: Path) -> dict:
    output_dir = out / f"run-{batching}"
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "1",
        "--num_machines",
        "1",
        "--mixed_precision",
        args.mixed_precision,
        "--dynamo_backend",
        "no",
    ]
    if args.smoke:
        launch.append("--cpu")
    command = launch + [
        str(REPO / "scripts" / "pretrain.py"),
        "--train-file",
        str(corpus),
        "--model-config",
        args.preset,
        "--vocab-size",
        str(args.vocab_size),
        "--batching",
        batching,
        "--window-size",
        "20",
        "--max-sentence-length",
        "50",
        "--per-device-train-batch-size",
        str(args.batch_size),
        "--max-train-minutes",
        str(args.seconds / 60),
        "--num-train-epochs",
        "1000",
        "--logging-steps",
        str(args.logging_steps),
        "--validation-split-percentage",
        "0",
        "--checkpointing-steps",
        "0",
        "--plot",
        "false",
        "--seed",
        "0",
        "--output-dir",
        str(output_dir),
        "--preprocessing-num-workers",
        str(args.workers),
    ]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_DATASETS_CACHE=str(out / "datasets-cache"))
    start = time.perf_counter()
    try:
        result = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=args.seconds + args.startup_seconds
        )
        status = {"returncode": result.returncode}
        if result.returncode != 0:
            status["stderr_tail"] = result.stderr[-1500:]
    except subprocess.TimeoutExpired as expired:
        status = {"error": f"timed out after {expired.timeout:.0f} s"}
    status["wall_seconds"] = round(time.perf_counter() - start, 1)
    metrics = output_dir / "metrics.jsonl"
    records = []
    if metrics.is_file():
        records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    train = [r for r in records if "tokens_per_s" in r]
    rates = [r["tokens_per_s"] for r in train[1:]]  # the first window holds start-up and compilation
    return {
        "bench": "trainer",
        "batching": batching,
        "preset": args.preset,
        "batch_size": args.batch_size,
        "mixed_precision": args.mixed_precision,
        **status,
        "logged_windows": len(train),
        "tokens_per_s": rates,
        "median_tokens_per_s": statistics.median(rates) if rates else None,
        "steps": train[-1]["step"] if train else 0,
        "tokens_seen": train[-1]["tokens_seen"] if train else 0,
        "last_train_loss": train[-1]["train_loss"] if train else None,
        "target_windows_tokens_per_s": 550_000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the corpus and the runs")
    parser.add_argument("--batchings", nargs="+", default=["windows", "sentences"], choices=["windows", "sentences"])
    parser.add_argument("--preset", default="elmo-27m")
    parser.add_argument("--vocab-size", type=int, default=60000)
    parser.add_argument("--corpus-words", type=int, default=3_000_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=60.0, help="training time per batching")
    parser.add_argument("--startup-seconds", type=float, default=60.0, help="allowed on top of --seconds per run")
    parser.add_argument("--logging-steps", type=int, default=20)
    parser.add_argument("--mixed-precision", default="bf16", choices=["no", "bf16", "fp16"])
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--smoke", action="store_true", help="CPU, elmo-tiny, a few seconds per batching")
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.vocab_size, args.corpus_words, args.batch_size = "elmo-tiny", 500, 20000, 8
        args.seconds, args.startup_seconds, args.logging_steps, args.mixed_precision, args.workers = (
            1.5,
            90.0,
            2,
            "no",
            1,
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.txt"
    lines = write_corpus(corpus, args.vocab_size, args.corpus_words)
    print(json.dumps({"bench": "trainer_corpus", "lines": lines, "words": args.corpus_words}), flush=True)
    medians = {}
    for batching in args.batchings:
        record = run_trainer(args, batching, corpus, out)
        medians[batching] = record["median_tokens_per_s"]
        print(json.dumps(record), flush=True)
    if medians.get("windows") and medians.get("sentences"):
        print(
            json.dumps({"bench": "trainer_ratio", "sentences_over_windows": medians["sentences"] / medians["windows"]}),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
