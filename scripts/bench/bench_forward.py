"""ElmoModel forward throughput on CPU (fp32), against a per-time-step baseline and the machine's matmul peak.

    OMP_NUM_THREADS=2 python scripts/bench/bench_forward.py --threads 2 --shapes 32x20 [--preset elmo-original]

For each shape (batch x tokens) it measures:
  * ``loop``: the reference explicit-loop LSTM (``lstm_implementation="loop"``, clipping on as in every released
    model);
  * ``fused``: the fast recurrence (``lstm_implementation="fused"``, what ``"auto"`` picks when clipping) in the
    installed package's form (``modeling_elmo.acceleration.packed_kernels.use_packed_kernels``): for large models each
    direction on its own thread when there are two or more threads, per-step products on weights packed for oneDNN/MKL
    (private torch operators);
  * ``fused_public``: the same model in the public-API form the files shipped with a model run (a model loaded with
    ``trust_remote_code=True``, or an exported one): ``lstm_kernels.stacked_lstm``, both directions stacked, one
    ``bmm`` per step;
  * ``torch``: the ``torch.lstm(proj_size=...)`` path (the same model with both clips off);
  * ``baseline``: a straightforward per-time-step implementation of the same model, as the original PyTorch port
    computes it (input and recurrent products inside the time loop, Conv1d character CNN, every token encoded);
and reports tokens/s, achieved FLOP/s, the fraction of the fp32 matmul throughput measured in the same run, and
the speed-up over the baseline and of ``fused`` over ``loop``. The implementations and the matmul are timed in
turns, ``--repeats`` rounds, best of each kept (the highest matmul rate, so the fractions are conservative): on a
shared machine a neighbour's load then hits every implementation alike. ``matrix_product_floor`` times each of
the forward pass's matrix products alone, in its fastest form, and adds them up: its ``fraction_of_matmul_peak`` is
the best this shape allows with these GEMMs run one after another (the per-step (batch x P) @ (P x 4H) products run
far below the square-matmul peak), and each path's ``fraction_of_product_floor`` says how close the whole forward
pass comes to that sum. FLOPs counted: character CNN, highway, projection and LSTM matrix products of every position
the LSTMs process (boundaries included); element-wise work is not counted. It also measures the tokenizer's
words/s against a per-character Python encoder. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from modeling_elmo import BOS_CHAR_IDS, EOS_CHAR_IDS, ElmoConfig, ElmoModel, encode_words  # noqa: E402
from modeling_elmo.acceleration.packed_kernels import default_cpu_kernels, use_packed_kernels  # noqa: E402


def cpu_name() -> str:
    """The CPU's model name (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def best_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_peak(repeats: int) -> float:
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    return 2 * 2048**3 / best_time(lambda: a @ b, repeats * 3)


def forward_flops(config: ElmoConfig, batch: int, tokens: int) -> float:
    positions = batch * (tokens + 2)
    C, d = config.max_characters_per_token, config.char_embedding_dim
    cnn = sum(2 * (C - w + 1) * w * d * n for w, n in config.char_cnn_filters)
    Fw, P, H = config.num_char_cnn_filters, config.projection_dim, config.cell_size
    highway = config.num_highway_layers * 2 * 2 * Fw * Fw
    projection = 2 * Fw * P
    lstm = 2 * config.num_hidden_layers * (2 * P * 4 * H * 2 + 2 * H * P)
    return positions * (cnn + highway + projection + lstm)


def matrix_product_floor(config: ElmoConfig, batch: int, tokens: int, repeats: int) -> dict:
    """Time every matrix product of one forward pass standalone, each in its fastest form here (the per-step LSTM
    products with MKL-packed weights where available), and add them up: the time a forward pass cannot go under
    without faster GEMMs. Its FLOP/s, as a fraction of the square-matmul peak, is the ceiling this shape allows."""
    positions = batch * (tokens + 2)
    C, d = config.max_characters_per_token, config.char_embedding_dim
    Fw, P, H = config.num_char_cnn_filters, config.projection_dim, config.cell_size
    packed = torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")

    def product(m: int, k: int, n: int, per_step: bool = False) -> float:
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        if per_step and packed:
            pw = torch.ops.mkl._mkl_reorder_linear_weight(w, m)
            return best_time(lambda: torch.ops.mkl._mkl_linear(x, pw, w, b, m), repeats * 5)
        return best_time(lambda: F.linear(x, w, b), repeats * 2)

    parts = {
        "char_cnn": sum(product(positions * (C - w + 1), d * w, n) for w, n in config.char_cnn_filters),
        "highway": config.num_highway_layers * 2 * product(positions, Fw, Fw),
        "projection": product(positions, Fw, P),
        "lstm_input": 2 * config.num_hidden_layers * product(positions, P, 4 * H),
        "lstm_recurrent": 2 * config.num_hidden_layers * (tokens + 2) * product(batch, P, 4 * H, per_step=True),
        "lstm_projection": 2 * config.num_hidden_layers * (tokens + 2) * product(batch, H, P, per_step=True),
    }
    return {"seconds": sum(parts.values()), "seconds_by_part": parts}


def baseline_forward(model: ElmoModel, input_ids: torch.Tensor) -> list[torch.Tensor]:
    """Per-time-step reference: every product inside the loop, Conv1d CNN, no de-duplication (same weights)."""
    config, enc = model.config, model.char_encoder
    mask = (input_ids > 0).any(-1)
    lengths = mask.sum(1)
    batch, steps, width = input_ids.shape
    ids = input_ids.new_zeros(batch, steps + 2, width)
    ids[:, 1:-1] = input_ids
    ids[:, 0] = torch.as_tensor(BOS_CHAR_IDS)
    ids[torch.arange(batch), lengths + 1] = torch.as_tensor(EOS_CHAR_IDS)
    x = enc.char_embeddings(ids.view(-1, width)).transpose(1, 2)
    x = torch.cat([torch.relu(conv(x).amax(-1)) for conv in enc.convolutions], -1)
    for hw in enc.highways:
        x = hw(x)
    e = enc.projection(x).view(batch, steps + 2, -1)
    outputs = [torch.cat([e, e], -1)]

    def run(layers, inputs):
        outs = []
        for index, layer in enumerate(layers):
            h = inputs.new_zeros(batch, config.projection_dim)
            c = inputs.new_zeros(batch, config.cell_size)
            ys = []
            for t in range(inputs.shape[1]):
                gates = layer.input_transform(inputs[:, t]) + layer.recurrent_transform(h)
                i, f, g, o = gates.chunk(4, 1)
                c = (torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)).clamp(-config.cell_clip, config.cell_clip)
                h = layer.projection(torch.sigmoid(o) * torch.tanh(c)).clamp(-config.proj_clip, config.proj_clip)
                ys.append(h)
            y = torch.stack(ys, 1)
            if index > 0:
                y = y + inputs
            outs.append(y)
            inputs = y
        return outs

    forward = run(model.encoder.forward_layers, e)
    backward = run(model.encoder.backward_layers, e.flip(1))  # same work as a per-row reversal
    return outputs + [torch.cat([f, b.flip(1)], -1) for f, b in zip(forward, backward, strict=False)]


def random_input(batch: int, tokens: int, seed: int = 0) -> torch.Tensor:
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 10)))
        for _ in range(batch * tokens)
    ]
    return torch.as_tensor(encode_words(words)).view(batch, tokens, -1)


def bench_tokenizer(repeats: int) -> dict:
    rng = random.Random(0)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyzéü") for _ in range(rng.randint(1, 12))) for _ in range(50_000)
    ]

    def per_character(ws):
        rows = []
        for w in ws:
            row = [259]
            for byte in w.encode("utf-8")[:48]:
                row.append(byte + 1)
            row.append(260)
            row += [261] * (50 - len(row))
            rows.append(row)
        return torch.tensor(rows)

    ours = best_time(lambda: encode_words(words), repeats)
    naive = best_time(lambda: per_character(words), repeats)
    return {
        "words": len(words),
        "vectorised_words_per_s": len(words) / ours,
        "per_character_words_per_s": len(words) / naive,
        "speedup": naive / ours,
    }


def timed_in_turns(runs: dict, repeats: int, samples: dict[str, int] | None = None) -> dict[str, float]:
    """Best-of seconds of every callable of ``runs``, timed in turns (one warm-up each first): ``repeats`` rounds,
    in each ``samples.get(name, 1)`` timings of ``name`` (short runs such as the matmul get more chances to meet a
    quiet moment of a shared machine)."""
    for fn in runs.values():
        fn()
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            for _ in range((samples or {}).get(name, 1)):
                start = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="elmo-original")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", default="32x20,8x50", help="comma-separated BATCHxTOKENS")
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--skip-torch", action="store_true", help="skip the unclipped torch.lstm path")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    path = str(REPO / "configuration" / f"{args.preset}.json")

    def build(**overrides) -> ElmoModel:
        config = ElmoConfig.from_json_file(path)
        for key, value in overrides.items():
            setattr(config, key, value)
        return ElmoModel(config).eval()

    model = build(lstm_implementation="loop")
    config = model.config
    models = {
        "loop": model,
        "fused": use_packed_kernels(build(lstm_implementation="fused")),
        "fused_public": build(lstm_implementation="fused"),
    }
    if not args.skip_torch:
        models["torch"] = build(cell_clip=None, proj_clip=None, lstm_implementation="torch")
    for other in models.values():
        other.load_state_dict(model.state_dict())
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    report = {
        "preset": args.preset,
        "threads": args.threads,
        "torch": torch.__version__,
        "cpu": cpu_name(),
        "cpu_cores": os.cpu_count(),
        "cpu_kernels": default_cpu_kernels().name,
        "shapes": {},
    }
    peaks = []
    for shape in args.shapes.split(","):
        batch, tokens = map(int, shape.split("x"))
        ids = random_input(batch, tokens)
        flops = forward_flops(config, batch, tokens)
        with torch.inference_mode():
            runs = {name: (lambda m=m: m(input_ids=ids)) for name, m in models.items()}
            if not args.skip_baseline:
                runs["baseline"] = lambda: baseline_forward(model, ids)
            runs["matmul_2048"] = lambda: a @ b
            seconds = timed_in_turns(runs, args.repeats, samples={"matmul_2048": 10})
            peak = 2 * 2048**3 / seconds.pop("matmul_2048")
            peaks.append(peak)
            results = {
                name: {
                    "seconds": s,
                    "tokens_per_s": batch * tokens / s,
                    "gflops": flops / s / 1e9,
                    "fraction_of_matmul_peak": flops / s / peak,
                }
                for name, s in seconds.items()
            }
            reference = model(input_ids=ids).last_hidden_state
            torch.testing.assert_close(
                models["fused"](input_ids=ids).last_hidden_state, reference, atol=1e-4, rtol=1e-4
            )
            if "fused_public" in results:
                torch.testing.assert_close(
                    models["fused_public"](input_ids=ids).last_hidden_state, reference, atol=1e-4, rtol=1e-4
                )
                results["fused_public"]["speedup_over_loop"] = (
                    results["loop"]["seconds"] / results["fused_public"]["seconds"]
                )
                results["fused"]["speedup_over_public_form"] = (
                    results["fused_public"]["seconds"] / results["fused"]["seconds"]
                )
            if "baseline" in results:
                torch.testing.assert_close(baseline_forward(model, ids)[-1][:, 1:-1], reference, atol=1e-4, rtol=1e-4)
                for name in [n for n in results if n != "baseline"]:
                    results[name]["speedup_over_baseline"] = results["baseline"]["seconds"] / results[name]["seconds"]
            results["fused"]["speedup_over_loop"] = results["loop"]["seconds"] / results["fused"]["seconds"]
        floor = matrix_product_floor(config, batch, tokens, args.repeats)
        floor["fraction_of_matmul_peak"] = flops / floor["seconds"] / peak
        for name in results:
            results[name]["fraction_of_product_floor"] = floor["seconds"] / results[name]["seconds"]
        report["shapes"][shape] = {
            "gflop_per_call": flops / 1e9,
            "matmul_peak_gflops": peak / 1e9,
            "matrix_product_floor": floor,
            **results,
        }
    report["matmul_peak_gflops"] = max(peaks) / 1e9
    report["tokenizer"] = bench_tokenizer(args.repeats)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
