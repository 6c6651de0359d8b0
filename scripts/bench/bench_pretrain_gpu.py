#!/usr/bin/env python
"""GPU pretraining throughput of elmo-27m (bf16 autocast through accelerate), a few minutes on one GPU.

    python scripts/bench/bench_pretrain_gpu.py          # loop and fused, batch sizes 128 512 1024, 20 timed steps each
    python scripts/bench/bench_pretrain_gpu.py --batch-sizes 2048 --lstm-implementations torch --no-clip

Target: 550,000 training tokens/s on an H200 (the seed run did about 109,000 on an A100). Each batch is
``batch_size`` windows of 20 tokens of a synthetic Zipfian word stream with sentence boundaries (the original
batching, ``add_sentence_boundaries=False``), sampled softmax with 8,192 negatives over a 60,000-word vocabulary,
Adagrad 0.2 and clipping at 10 as in the recipe. "tokens" are window positions (batch x 20), the unit of the
original's tokens/s. Each of ``--lstm-implementations`` (default the reference ``loop`` and the ``fused``
recurrence) trains its own model from the same initial weights; per batch size the record gives tokens/s, ms per
step, the peak GPU memory and that peak per token. The collator's own throughput (CPU, one process) is reported
too: it must keep up. Prints one JSON line per measurement. Runs on a CPU too (tiny settings: a plumbing check).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM  # noqa: E402
from modeling_elmo.pretraining import Collator, Vocabulary, tokenize_batch  # noqa: E402
from modeling_elmo.pretraining.sampled_softmax import use_configured_softmax  # noqa: E402


def synthetic_corpus(vocab_size: int, n_words: int, seed: int = 0) -> tuple[Vocabulary, list[str]]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words, seen = [], set()
    while len(words) < vocab_size - 4:
        w = "".join(rng.choice(letters, size=int(rng.integers(2, 12))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    vocab = Vocabulary(words)
    # Zipfian word ids, sentences of 5-40 words; 1 % out-of-vocabulary words
    ids = np.minimum(rng.zipf(1.1, size=n_words), vocab_size - 5) + 3
    lines, i = [], 0
    while i < n_words:
        n = int(rng.integers(5, 40))
        line = [vocab.words[j] if rng.random() > 0.01 else "oovword" + str(j) for j in ids[i : i + n]]
        lines.append(" ".join(line))
        i += n
    return vocab, lines


def window_examples(vocab: Vocabulary, lines: list[str], window_size: int) -> list[dict]:
    """The synthetic text cut into windows of the <S> w .. </S> stream, as the trainer's ``--batching windows``."""
    out = tokenize_batch({"text": lines}, word_to_id=vocab.index, mode="windows", window_size=window_size)
    return [{"word_ids": i, "oov": o} for i, o in zip(out["word_ids"], out["oov"], strict=False)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="elmo-27m")
    parser.add_argument("--vocab-size", type=int, default=60000)
    parser.add_argument("--corpus-words", type=int, default=2_000_000, help="size of the synthetic word stream")
    parser.add_argument("--window-size", type=int, default=20)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--mixed-precision", default="bf16", choices=["no", "bf16", "fp16"])
    parser.add_argument(
        "--lstm-implementations",
        nargs="+",
        default=["loop", "fused"],
        choices=["auto", "loop", "fused", "torch"],
        help="each trains its own model, same initial weights",
    )
    parser.add_argument(
        "--lstm-implementation",
        dest="lstm_implementations",
        nargs=1,
        choices=["auto", "loop", "fused", "torch"],
        help=argparse.SUPPRESS,
    )  # the older spelling: one implementation
    parser.add_argument("--no-clip", action="store_true", help="turn cell/proj clipping off (allows the cuDNN LSTM)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = parser.parse_args(argv)

    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    device = accelerator.device
    cuda = torch.cuda.is_available() and device.type == "cuda"
    info = {
        "bench": "gpu_env",
        "device": torch.cuda.get_device_name() if cuda else str(device),
        "torch": torch.__version__,
    }
    print(json.dumps(info), flush=True)

    vocab, lines = synthetic_corpus(args.vocab_size, args.corpus_words)
    t0 = time.perf_counter()
    examples = window_examples(vocab, lines, args.window_size)
    tokenize_s = time.perf_counter() - t0
    collate = Collator(vocab.char_table())
    t0 = time.perf_counter()
    n_coll = 0
    for start in range(0, min(200 * 256, len(examples)), 256):
        collate(examples[start : start + 256])
        n_coll += len(examples[start : start + 256]) * args.window_size
    collate_tps = n_coll / (time.perf_counter() - t0)
    print(
        json.dumps(
            {
                "bench": "cpu_data_pipeline",
                "tokenize_tokens_per_s": len(examples) * args.window_size / tokenize_s,
                "collate_tokens_per_s": collate_tps,
            }
        ),
        flush=True,
    )

    config = ElmoConfig.from_json_file(str(REPO / "configuration" / f"{args.preset}.json"))
    config.vocab_size = len(vocab)
    config.num_negative_samples = min(config.num_negative_samples, len(vocab) // 2)
    if args.no_clip:
        config.cell_clip = None
        config.proj_clip = None
    for implementation in args.lstm_implementations:
        config.lstm_implementation = implementation
        torch.manual_seed(0)
        model = use_configured_softmax(
            ElmoForBidirectionalLM(ElmoConfig.from_dict(config.to_dict()))  # the packed form: use_packed_kernels
        )
        n_params = sum(p.numel() for p in model.parameters())
        optimizer = torch.optim.Adagrad(model.parameters(), lr=0.2, initial_accumulator_value=1.0)
        model, optimizer = accelerator.prepare(model, optimizer)
        if args.compile:
            model = torch.compile(model)
        model.train()
        for batch_size in args.batch_sizes:
            batches = [collate(examples[i * batch_size : (i + 1) * batch_size]) for i in range(8)]
            batches = [
                {k: v.to(device) for k, v in b.items() if k in ("input_ids", "attention_mask", "labels")}
                for b in batches
                if b["input_ids"].shape[0]
            ]
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            try:
                for step in range(args.warmup + args.steps):
                    if step == args.warmup:
                        if cuda:
                            torch.cuda.synchronize()
                        t0 = time.perf_counter()
                    batch = batches[step % len(batches)]
                    loss = model(**batch, add_sentence_boundaries=False).loss
                    accelerator.backward(loss * args.window_size)
                    accelerator.clip_grad_norm_(model.parameters(), 10.0)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                if cuda:
                    torch.cuda.synchronize()
                elapsed = time.perf_counter() - t0
            except torch.OutOfMemoryError:
                print(
                    json.dumps(
                        {
                            "bench": "gpu_train",
                            "lstm_implementation": implementation,
                            "batch_size": batch_size,
                            "error": "out of memory",
                        }
                    ),
                    flush=True,
                )
                torch.cuda.empty_cache()
                continue
            tokens = args.steps * batch_size * args.window_size
            peak = torch.cuda.max_memory_allocated() if cuda else None
            record = {
                "bench": "gpu_train",
                "preset": args.preset,
                "parameters": n_params,
                "vocab_size": len(vocab),
                "lm_softmax": config.lm_softmax,
                "lstm_implementation": implementation,
                "clip": config.cell_clip is not None,
                "compile": args.compile,
                "mixed_precision": args.mixed_precision,
                "batch_size": batch_size,
                "window_size": args.window_size,
                "steps": args.steps,
                "ms_per_step": 1000 * elapsed / args.steps,
                "tokens_per_s": tokens / elapsed,
                "target_tokens_per_s": 550_000,
                "final_loss": float(loss.detach()),
                "peak_memory_gib": peak / 2**30 if peak is not None else None,
                "peak_memory_kib_per_token": peak / 2**10 / (batch_size * args.window_size)
                if peak is not None
                else None,
            }
            print(json.dumps(record), flush=True)
        del model, optimizer
        accelerator.free_memory()
    return 0


if __name__ == "__main__":
    sys.exit(main())
