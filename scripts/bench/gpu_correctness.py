#!/usr/bin/env python
"""The fused LSTM recurrence against the reference loop on an accelerator, in one short run. Prints one JSON object.

    python scripts/bench/gpu_correctness.py                  # on the GPU: fp32 parity, host syncs, bf16 loss curves
    python scripts/bench/gpu_correctness.py --smoke          # seconds, on whatever device there is (plumbing check)

1. ``fp32_parity``: a small model with both clips active (weights doubled so that they trigger often, as in the unit
tests),
   TF32 off; loop against fused with compiled steps and with plain steps, in both batchings (sentences with
   boundaries added; windows without, started from a carried state). Largest difference of the outputs, the final
   states and every parameter gradient, relative to each tensor's scale; ``ok`` when all are below 1e-5.
2. ``host_syncs``: a training forward and backward of ``ElmoForBidirectionalLM`` (fused, sampled softmax, both
   batchings) under ``torch.cuda.set_sync_debug_mode("error")``: ``ok`` when nothing waits for the device.
3. ``bf16_loss_curves``: ``elmo-27m`` trained from the same weights on the same synthetic windows (batch
   ``--batch-size``) for ``--steps`` steps with bf16 autocast, Adagrad 0.2 and clipping at 10, once per
   implementation; the two loss curves, their largest difference and the mean difference over the last 20 steps.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pretrain_gpu import synthetic_corpus, window_examples  # noqa: E402

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoModel, ElmoTokenizer  # noqa: E402
from modeling_elmo.acceleration import packed_kernels  # noqa: E402
from modeling_elmo.pretraining import Collator  # noqa: E402
from modeling_elmo.pretraining.sampled_softmax import use_configured_softmax  # noqa: E402

# Relative to each tensor's largest magnitude. The two forms sum in different orders; through two layers of up to 13
# steps with both clips active and the recurrent weights doubled, fp32 rounding alone reaches 3e-6 to 2.1e-5 here
# (six seeds, on a CPU, with the documented initialisation).
TOLERANCE = 5e-5


def relative_difference(actual: torch.Tensor, expected: torch.Tensor) -> float:
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    return (
        float((actual.detach().float() - expected.detach().float()).abs().max()) / max(scale, 1e-12)
        if expected.numel()
        else 0.0
    )


def small_models(device: torch.device) -> tuple[ElmoModel, ElmoModel]:
    config = ElmoConfig(
        projection_dim=16,
        cell_size=64,
        num_hidden_layers=2,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 8], [2, 8], [3, 16]],
        num_highway_layers=1,
        cell_clip=0.5,
        proj_clip=0.4,
    )
    torch.manual_seed(3)
    loop = ElmoModel(config)
    with torch.no_grad():
        for parameter in loop.encoder.parameters():
            parameter.mul_(2.0)
    fused = copy.deepcopy(loop)  # its own config object, shared by its modules; the packed form (use_packed_kernels)
    loop.config.lstm_implementation, fused.config.lstm_implementation = "loop", "fused"
    assert fused.encoder.config is fused.config and loop.encoder.config is not fused.config
    return loop.to(device).eval(), fused.to(device).eval()


def sentences(n: int, seed: int = 0) -> list[list[str]]:
    generator = torch.Generator().manual_seed(seed)
    words = ["bank", "river", "the", "closed", "a", "money", "water", "early", "today", "."]
    lengths = torch.randint(1, 14, (n,), generator=generator).tolist()
    return [[words[int(i)] for i in torch.randint(0, len(words), (k,), generator=generator)] for k in lengths]


def fp32_parity(device: torch.device) -> dict:
    """Loop against the package's fused form (compiled steps where available, and plain steps), outputs, states,
    gradients."""
    tokenizer = ElmoTokenizer()
    enc = tokenizer(sentences(24), is_split_into_words=True, padding=True, return_tensors="pt").to(device)
    previous = tokenizer(sentences(24, seed=1), is_split_into_words=True, padding=True, return_tensors="pt").to(device)
    weights = torch.randn(24, 3, enc["input_ids"].shape[1], 32, generator=torch.Generator().manual_seed(1)).to(device)
    report = {}
    compilable = packed_kernels.compiler_available(device)
    for steps in ["compiled", "plain"] if compilable else ["plain"]:
        for batching in ("sentences", "windows"):
            options = {} if batching == "sentences" else {"add_sentence_boundaries": False}
            loop, fused = small_models(device)
            results = []
            for model in (loop, fused):
                original = packed_kernels.compiler_available
                if steps == "plain":
                    packed_kernels.compiler_available = lambda device: False
                try:
                    state = None
                    if batching == "windows":  # windows continue from a carried state
                        with torch.no_grad():
                            state = model(**previous, return_lstm_state=True, **options).lstm_state
                    out = model(**enc, output_hidden_states=True, lstm_state=state, return_lstm_state=True, **options)
                    (torch.stack(out.hidden_states, dim=1) * weights).sum().backward()
                finally:
                    packed_kernels.compiler_available = original
                grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
                results.append((out, grads))
            (expected, expected_grads), (actual, actual_grads) = results
            worst = {
                "outputs": max(
                    relative_difference(a, e)
                    for a, e in zip(actual.hidden_states, expected.hidden_states, strict=False)
                ),
                "final_states": max(
                    relative_difference(actual.lstm_state.hidden, expected.lstm_state.hidden),
                    relative_difference(actual.lstm_state.cell, expected.lstm_state.cell),
                ),
                "gradients": max(relative_difference(actual_grads[n], g) for n, g in expected_grads.items()),
                "projection_clipped_fraction": float((expected.hidden_states[1].abs() >= 0.4 - 1e-6).float().mean()),
            }
            worst["ok"] = max(worst["outputs"], worst["final_states"], worst["gradients"]) <= TOLERANCE
            report[f"{steps}_steps_{batching}"] = worst
    report["compile_failure"] = packed_kernels.compile_failure()
    report["ok"] = all(v["ok"] for k, v in report.items() if isinstance(v, dict))
    return report


def training_batches(vocab_size: int, words: int, batch_size: int, count: int, window_size: int = 20):
    vocab, lines = synthetic_corpus(vocab_size, words)
    examples = window_examples(vocab, lines, window_size)
    collate = Collator(vocab.char_table())
    batches = [collate(examples[i * batch_size : (i + 1) * batch_size]) for i in range(count)]
    return vocab, [b for b in batches if b["input_ids"].shape[0] == batch_size]


def host_syncs(device: torch.device) -> dict:
    """A fused training step must not wait for the device (sampled softmax, both batchings)."""
    if device.type != "cuda":
        return {"skipped": "needs CUDA (torch.cuda.set_sync_debug_mode)"}
    vocab, batches = training_batches(500, 20000, 16, 1)
    config = ElmoConfig(
        projection_dim=16,
        cell_size=64,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 8], [2, 8]],
        num_highway_layers=1,
        vocab_size=len(vocab),
        lm_softmax="sampled",
        num_negative_samples=64,
        lstm_implementation="fused",
    )
    model = use_configured_softmax(ElmoForBidirectionalLM(config)).to(device).train()
    batch = {k: v.to(device) for k, v in batches[0].items() if k in ("input_ids", "attention_mask", "labels")}
    report = {}
    for batching, boundaries in (("windows", False), ("sentences", True)):
        model(**batch, add_sentence_boundaries=boundaries).loss.backward()  # warm-up: compilation may synchronise
        torch.cuda.synchronize()
        try:
            torch.cuda.set_sync_debug_mode("error")
            model(**batch, add_sentence_boundaries=boundaries).loss.backward()
            report[batching] = "ok"
        except RuntimeError as error:
            report[batching] = f"synchronises: {str(error).splitlines()[0][:300]}"
        finally:
            torch.cuda.set_sync_debug_mode("default")
    report["ok"] = all(v == "ok" for v in report.values())
    return report


def bf16_loss_curves(device: torch.device, preset: str, steps: int, batch_size: int, vocab_size: int) -> dict:
    vocab, batches = training_batches(vocab_size, max(200_000, 25 * batch_size * 20), batch_size, 16)
    config = ElmoConfig.from_json_file(str(REPO / "configuration" / f"{preset}.json"))
    config.vocab_size = len(vocab)
    config.num_negative_samples = min(config.num_negative_samples, len(vocab) // 2)
    curves, seconds = {}, {}
    for implementation in ("loop", "fused"):
        config.lstm_implementation = implementation
        torch.manual_seed(0)
        model = (
            use_configured_softmax(ElmoForBidirectionalLM(ElmoConfig.from_dict(config.to_dict()))).to(device).train()
        )
        optimizer = torch.optim.Adagrad(model.parameters(), lr=0.2, initial_accumulator_value=1.0)
        losses = []
        start = time.perf_counter()
        for step in range(steps):
            batch = {
                k: v.to(device)
                for k, v in batches[step % len(batches)].items()
                if k in ("input_ids", "attention_mask", "labels")
            }
            torch.manual_seed(1000 + step)  # the same dropout masks and negative samples for both
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = model(**batch, add_sentence_boundaries=False).loss
            (loss * 20).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        losses = [float(v) for v in torch.stack(losses).cpu()]
        seconds[implementation] = time.perf_counter() - start
        curves[implementation] = losses
    difference = [abs(a - b) for a, b in zip(curves["loop"], curves["fused"], strict=False)]
    tail = difference[-20:]
    return {
        "preset": preset,
        "steps": steps,
        "batch_size": batch_size,
        "vocab_size": len(vocab),
        "final_loss": {k: v[-1] for k, v in curves.items()},
        "first_loss": {k: v[0] for k, v in curves.items()},
        "max_abs_difference": max(difference),
        "mean_abs_difference_last_20": sum(tail) / len(tail),
        "seconds_including_compilation": seconds,
        "curves": curves,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--preset", default="elmo-27m")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=20000)
    parser.add_argument("--smoke", action="store_true", help="tiny settings: elmo-tiny, 5 steps, batch 8")
    parser.add_argument("--skip", nargs="*", default=[], choices=["fp32_parity", "host_syncs", "bf16_loss_curves"])
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.steps, args.batch_size, args.vocab_size = "elmo-tiny", 5, 8, 1000
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 parity means fp32 products
    torch.backends.cudnn.allow_tf32 = False
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "torch": torch.__version__,
    }
    checks = {
        "fp32_parity": lambda: fp32_parity(device),
        "host_syncs": lambda: host_syncs(device),
        "bf16_loss_curves": lambda: bf16_loss_curves(device, args.preset, args.steps, args.batch_size, args.vocab_size),
    }
    for name, check in checks.items():
        if name in args.skip:
            continue
        start = time.perf_counter()
        try:
            report[name] = check()
        except Exception as error:  # noqa: BLE001 - one check failing must not hide the others' results
            report[name] = {"error": f"{type(error).__name__}: {error}"[:1000]}
        report[name]["seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps({"finished": name, "seconds": report[name]["seconds"]}), file=sys.stderr, flush=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
