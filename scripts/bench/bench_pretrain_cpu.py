#!/usr/bin/env python
"""CPU pretraining throughput of ELMo: training tokens/s in fp32 and in bfloat16 autocast, achieved FLOP/s against
the machine's measured matmul throughput in the same dtype, and the 2-process (gloo DDP) scaling efficiency. Prints
one JSON line per measurement.

    OMP_NUM_THREADS=1 python scripts/bench/bench_pretrain_cpu.py --presets elmo-tiny elmo-cpu elmo-27m --steps 10

Batches are real text (../shared/data/lm-corpus, or --text FILE) through the pretraining data pipeline
(`tokenize_batch` + `Collator`): length-bucketed sentences of up to 40 words. "tokens" are predicted words (the
targets of one direction: words + </S>), the unit of the training log. FLOPs are counted analytically per biLM
position (words + <S> + </S>): 2 x multiply-adds for the forward pass, x3 for forward + backward (char CNN,
highways, projection, both LSTM stacks with projections, and the softmax: full V or sampled S + 1 rows per target
and direction). The backward pass is counted as twice the forward everywhere, also for the first convolution, whose
input (the character embeddings) needs no gradient of its own: a slight overcount for the char CNN. Element-wise work
(gates, activations, max-pooling) is not counted.

Every rate is also taken in CPU time (`time.process_time`: the seconds of CPU the process got) against the matmul
peak in CPU time: ``fraction_of_matmul_peak_cpu_time`` and ``cpu_share`` (CPU over wall seconds) change least when
other processes share the cores, where the wall-clock fractions scatter with the load (``load_average`` is printed).

Each LSTM implementation of ``--lstm-implementations`` (default: the reference ``loop`` and the ``fused``
recurrence) in each precision of ``--precisions`` (``fp32``; ``bf16``: the forward pass under
``torch.autocast("cpu", dtype=torch.bfloat16)`` as ``elmo pretrain --mixed-precision bf16`` runs it, fp32 weights
and optimiser) trains its own model from the same initial weights, one step of each in turns, so that a shared
machine's load hits them alike. fp32 runs are set against the fp32 matmul peak, bf16 runs against the bf16 one (and
the fp32 one). Autocast runs only the matrix products and convolutions in bf16, so where bf16 is emulated (far slower
than fp32) a bf16 step can exceed the bf16 "peak": its fp32 parts run at fp32 speed.

    OMP_NUM_THREADS=1 python scripts/bench/bench_pretrain_cpu.py --presets elmo-27m --steps 10 --no-ddp
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM  # noqa: E402
from modeling_elmo.pretraining import Collator, Vocabulary, tokenize_batch  # noqa: E402
from modeling_elmo.pretraining.sampled_softmax import use_configured_softmax  # noqa: E402
from modeling_elmo.utils.capability import bf16_supported  # noqa: E402

try:
    from modeling_elmo.pretraining import build_optimizer  # noqa: E402
except ImportError:  # older checkouts export it from the trainer module only
    from modeling_elmo.pretraining.trainer import build_optimizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_forward import cpu_name  # noqa: E402

#: the pretraining command's optimiser (Adagrad 0.2, the original's), fused on the CPU as in `elmo pretrain`
ADAGRAD = {"optimizer": "adagrad", "learning_rate": 0.2, "device_type": "cpu"}

SHARED = Path(os.environ.get("ELMO_SHARED_DATA", REPO.parent / "shared" / "data"))


#: the precisions a run can train in: the dtype of their matmul peak and its matrix size (bf16: 1024, since a 2048^3
#: bf16 product took about 45 s on a CPU that emulates bf16)
PRECISIONS = {"fp32": (torch.float32, 2048), "bf16": (torch.bfloat16, 1024)}


def matmul_flops(
    n: int = 2048, dtype: torch.dtype = torch.float32, repeats: int = 5, budget_s: float = 10.0, clock=time.perf_counter
) -> float:
    """Best-of matmul FLOP/s of ``n x n`` matrices in ``dtype`` with the current thread setting: ``repeats`` timed
    products after one untimed, fewer (at least one) once ``budget_s`` seconds are spent (an emulated dtype is slow).
    ``clock``: wall time, or `time.process_time` for FLOPs per second of CPU time the process got."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    start = time.perf_counter()
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        torch.matmul(a, b)
        best = min(best, clock() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return 2 * n**3 / best


def flops_per_position(config: ElmoConfig, positions_per_target: float) -> float:
    """Training FLOPs (forward + backward) per biLM position."""
    d_c, P, H, L = config.char_embedding_dim, config.projection_dim, config.cell_size, config.num_hidden_layers
    width = config.max_characters_per_token
    F = sum(n for _, n in config.char_cnn_filters)
    macs = sum((width - w + 1) * w * d_c * n for w, n in config.char_cnn_filters)
    macs += config.num_highway_layers * 2 * F * F + F * P
    macs += 2 * L * (4 * H * P + 4 * H * P + H * P)  # 2 directions; input, recurrent, projection
    rows = config.vocab_size if config.lm_softmax == "full" else config.num_negative_samples + 1
    macs += 2 * rows * P / positions_per_target  # 2 directions, one softmax row set per target
    return 6.0 * macs


def most_frequent_words(lines: list[str], size: int) -> Vocabulary:
    """The ``size - 4`` most frequent words (ties by the word) after the four special words."""
    counts = Counter(word for line in lines for word in line.split())
    return Vocabulary(word for word, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: size - 4])


def load_sentences(path: Path, limit: int = 20000) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = [line.strip() for _, line in zip(range(limit * 2), handle, strict=False)]
    return [line for line in lines if 1 <= len(line.split()) <= 40][:limit]


def make_batches(
    lines: list[str], vocab: Vocabulary, batch_size: int, n: int, batching: str = "sentences"
) -> list[dict[str, torch.Tensor]]:
    """``n`` batches of ``batch_size`` examples: sentences of up to 40 words from pools of similar length across the
    length range, or (``windows``, the lm-corpus recipes' batching) consecutive 20-token windows of the stream, every
    batch the same shape."""
    if batching == "windows":
        out = tokenize_batch({"text": lines}, word_to_id=vocab.index, mode="windows", window_size=20)
        examples = [{"word_ids": i, "oov": o} for i, o in zip(out["word_ids"], out["oov"], strict=False)]
        collate = Collator(vocab.char_table())
        chosen = [examples[i * batch_size : (i + 1) * batch_size] for i in range(n)]
        return [collate(c) for c in chosen if len(c) == batch_size]
    out = tokenize_batch({"text": lines}, word_to_id=vocab.index, mode="sentences", max_sentence_length=40)
    examples = sorted(
        ({"word_ids": i, "oov": o} for i, o in zip(out["word_ids"], out["oov"], strict=False)),
        key=lambda e: len(e["word_ids"]),
    )
    collate = Collator(vocab.char_table())
    # pools of similar length, taken from across the length range
    step = max(1, len(examples) // (n * batch_size))
    chosen = [examples[i * step * batch_size : i * step * batch_size + batch_size] for i in range(n)]
    return [collate(c) for c in chosen if len(c) == batch_size]


def train_throughput(
    config: ElmoConfig,
    batches,
    steps: int,
    warmup: int = 2,
    implementations: tuple[str, ...] = ("auto",),
    precisions: tuple[str, ...] = ("fp32",),
) -> dict[tuple[str, str], dict[str, float]]:
    """Training steps of one model per (LSTM implementation, precision) (same initial weights), taken in turns (one
    step of each, ``warmup + steps`` rounds), so that a shared machine's load hits them alike. Per variant: tokens/s,
    positions/s, positions per target, seconds, and the final loss."""
    variants = [(name, precision) for name in implementations for precision in precisions]
    models, optimizers = {}, {}
    for variant in variants:
        torch.manual_seed(0)
        config.lstm_implementation = variant[0]
        models[variant] = use_configured_softmax(
            ElmoForBidirectionalLM(ElmoConfig.from_dict(config.to_dict()))  # the packed form: use_packed_kernels
        ).train()
        optimizers[variant] = build_optimizer(models[variant], **ADAGRAD)
    totals = {variant: {"tokens": 0, "positions": 0, "seconds": 0.0, "cpu_seconds": 0.0} for variant in variants}
    for step in range(warmup + steps):
        batch = batches[step % len(batches)]
        for variant, model in models.items():
            torch.manual_seed(step)  # the same dropout and negative samples for every variant
            t0, c0 = time.perf_counter(), time.process_time()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant[1] == "bf16"):
                out = model(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
                )
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizers[variant].step()
            optimizers[variant].zero_grad(set_to_none=True)
            if step >= warmup:
                total = totals[variant]
                total["seconds"] += time.perf_counter() - t0
                total["cpu_seconds"] += time.process_time() - c0
                total["tokens"] += int(out.num_forward_targets)
                total["positions"] += int(batch["attention_mask"].sum()) + 2 * batch["attention_mask"].shape[0]
                total["loss"] = float(out.loss.detach())
    return {
        variant: {
            "tokens_per_s": t["tokens"] / t["seconds"],
            "positions_per_s": t["positions"] / t["seconds"],
            "positions_per_target": t["positions"] / t["tokens"],
            "seconds": t["seconds"],
            "positions_per_cpu_s": t["positions"] / t["cpu_seconds"],
            "cpu_share": t["cpu_seconds"] / t["seconds"],
            "final_loss": t["loss"],
        }
        for variant, t in totals.items()
    }


def _ddp_worker(rank: int, world: int, config_dict: dict, batches, steps: int, port: int, queue) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        use_configured_softmax(ElmoForBidirectionalLM(ElmoConfig.from_dict(config_dict)))
    )
    optimizer = build_optimizer(model, **ADAGRAD)
    tokens, elapsed, cpu = 0, 0.0, 0.0
    mine = batches[rank::world]
    for step in range(2 + steps):
        batch = mine[step % len(mine)]
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= 2:
            elapsed += time.perf_counter() - t0
            cpu += time.process_time() - c0  # the process's threads, gloo's included
            tokens += int(out.num_forward_targets)
    total = torch.tensor([float(tokens), elapsed, cpu])
    dist.all_reduce(total)
    if rank == 0:
        queue.put((total[0].item() / (total[1].item() / world), total[0].item() / total[2].item()))
    dist.destroy_process_group()


def ddp_throughput(config: ElmoConfig, batches, steps: int) -> tuple[float, float]:
    """(tokens/s of two gloo DDP processes together, wall time; tokens per CPU second of both processes)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(
        _ddp_worker, args=(2, config.to_dict(), batches, steps, port, queue), nprocs=2, start_method="spawn"
    )
    return queue.get(timeout=10)


def variant_name(implementation: str, precision: str) -> str:
    """A variant's key in the record: the implementation (fp32), or ``<implementation>_bf16``."""
    return implementation if precision == "fp32" else f"{implementation}_{precision}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["elmo-tiny", "elmo-27m"])
    parser.add_argument("--text", default=str(SHARED / "lm-corpus" / "masc.txt"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--batching",
        choices=("sentences", "windows"),
        default="sentences",
        help="sentences of up to 40 words from across the length range (default), or 20-token windows of the "
        "stream, as the lm-corpus recipes train (every batch, on every DDP process, the same shape)",
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds before the --steps timed ones")
    parser.add_argument("--vocab-size", type=int, default=None, help="default: the preset's (tiny: 10,000)")
    parser.add_argument("--no-ddp", action="store_true", help="skip the 2-process scaling measurement")
    parser.add_argument(
        "--lstm-implementations",
        nargs="+",
        default=["loop", "fused"],
        choices=["auto", "loop", "fused", "torch"],
        help="timed in turns in one process; the last one is also used for the DDP measurement",
    )
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=["fp32", "bf16"],
        choices=list(PRECISIONS),
        help="fp32, and/or the forward pass in bfloat16 autocast (each against its own dtype's matmul peak)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    peaks, cpu_peaks = {}, {}
    for precision in args.precisions:
        dtype, n = PRECISIONS[precision]
        peaks[precision] = matmul_flops(n, dtype)
        cpu_peaks[precision] = matmul_flops(n, dtype, clock=time.process_time)
        line = {"bench": f"{precision}_matmul", "cpu": cpu_name(), "cpu_cores": os.cpu_count()}
        line.update(threads=torch.get_num_threads(), matrix_size=n, flop_per_s=peaks[precision])
        line.update(flop_per_cpu_s=cpu_peaks[precision], load_average=os.getloadavg()[0])
        if precision == "bf16":
            line["native_bf16"] = bf16_supported("cpu")  # without it, bf16 products are emulated
        print(json.dumps(line), flush=True)
    lines = load_sentences(Path(args.text))
    last, main_precision = args.lstm_implementations[-1], args.precisions[0]
    for preset in args.presets:
        config = ElmoConfig.from_json_file(str(REPO / "configuration" / f"{preset}.json"))
        size = args.vocab_size or (config.vocab_size if config.vocab_size > 4 else 10000)
        vocab = most_frequent_words(lines, size)
        config.vocab_size = len(vocab)
        if config.lm_softmax == "sampled" and config.num_negative_samples >= config.vocab_size:
            config.num_negative_samples = config.vocab_size // 2
        batches = make_batches(lines, vocab, args.batch_size, max(args.steps, 4), args.batching)
        runs = train_throughput(
            config,
            batches,
            args.steps,
            warmup=args.warmup,
            implementations=tuple(args.lstm_implementations),
            precisions=tuple(args.precisions),
        )
        config.lstm_implementation = last
        record = {
            "bench": "cpu_train",
            "preset": preset,
            "vocab_size": config.vocab_size,
            "lm_softmax": config.lm_softmax,
            "batch_size": args.batch_size,
            "batching": args.batching,
            "steps": args.steps,
            "threads": torch.get_num_threads(),
        }
        for (name, precision), run in runs.items():
            per_position = flops_per_position(config, run["positions_per_target"])
            achieved = run["positions_per_s"] * per_position
            record[variant_name(name, precision)] = {
                "tokens_per_s": round(run["tokens_per_s"], 1),
                "achieved_flop_per_s": achieved,
                "fraction_of_matmul_peak": achieved / peaks[precision],
                # in CPU time (the process's, both clocks): what a shared machine's load changes least
                "fraction_of_matmul_peak_cpu_time": run["positions_per_cpu_s"] * per_position / cpu_peaks[precision],
                "cpu_share": round(run["cpu_share"], 3),
                "final_loss": round(run["final_loss"], 4),
            }
            if precision != "fp32" and "fp32" in peaks:
                record[variant_name(name, precision)]["fraction_of_fp32_matmul_peak"] = achieved / peaks["fp32"]
        # the last implementation's figures in the first precision also at the top level
        record.update(
            {
                k: record[variant_name(last, main_precision)][k]
                for k in ("tokens_per_s", "achieved_flop_per_s", "fraction_of_matmul_peak")
            }
        )
        record["lstm_implementation"] = last
        first = args.lstm_implementations[0]
        if first != last:
            record[f"{last}_over_{first}"] = (
                runs[last, main_precision]["tokens_per_s"] / runs[first, main_precision]["tokens_per_s"]
            )
        if "fp32" in args.precisions and "bf16" in args.precisions:
            record["bf16_over_fp32"] = runs[last, "bf16"]["tokens_per_s"] / runs[last, "fp32"]["tokens_per_s"]
        if not args.no_ddp and (last, "fp32") in runs:  # the DDP processes train in fp32
            two, two_per_cpu_s = ddp_throughput(config, batches, args.steps)
            record["ddp2_tokens_per_s"] = round(two, 1)
            record["ddp2_scaling_efficiency"] = two / (2 * runs[last, "fp32"]["tokens_per_s"])
            # in CPU time: the work DDP adds (gloo's all-reduce, hooks), not the waits for the other process
            one_per_cpu_s = runs[last, "fp32"]["tokens_per_s"] / runs[last, "fp32"]["cpu_share"]
            record["ddp2_scaling_efficiency_cpu_time"] = two_per_cpu_s / one_per_cpu_s
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
