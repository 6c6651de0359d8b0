"""Throughput of ``elmo embed``: sentences per second on a file of corpus lines, for random models of two shapes.

    OMP_NUM_THREADS=1 python bench/bench_embed.py --lines 1000            # quick CPU run
    python bench/bench_embed.py --device cuda --dtype bfloat16             # 100,000 lines on a GPU

The input file is built in a temporary folder from the one-sentence-per-line files of ``shared/data/lm-corpus``
(``brown.txt``, ``masc.txt``; override the folder with ``ELMO_SHARED_DATA``), repeated if needed. Each model runs the
whole `modeling_elmo.embed.embed_file` pipeline (streaming, length sorting, chunk files, merge), with random weights
(the speed does not depend on the values). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer  # noqa: E402
from modeling_elmo.embed import DTYPES, ElmoEmbedder, embed_file  # noqa: E402


REPO = Path(__file__).resolve().parents[1]
CORPUS_FILES = ("brown.txt", "masc.txt")
SHAPES = {"tiny": "elmo-tiny.json", "small": "elmo-small.json", "original": "elmo-original.json"}


def shared_data() -> Path:
    return Path(os.environ.get("ELMO_SHARED_DATA", REPO.parent / "shared" / "data"))


def synthetic_lines(seed: int = 0):
    """Endless sentences of a Zipfian vocabulary of random words, 22 words long on average (the corpus's mean), for
    machines without the shared data (the speed depends on lengths and word counts, not on the words)."""
    import random

    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12))) for _ in range(50_000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    while True:
        yield " ".join(rng.choices(vocab, weights, k=max(1, int(rng.expovariate(1 / 22))))) + "\n"


def write_input(path: Path, num_lines: int, synthetic: bool = False) -> dict:
    sources = [shared_data() / "lm-corpus" / name for name in CORPUS_FILES]
    missing = [str(s) for s in sources if not s.is_file()]
    if missing and not synthetic:
        raise SystemExit(f"bench_embed: corpus files not found: {missing} (set ELMO_SHARED_DATA, or pass --synthetic).")

    def corpus_lines():
        if synthetic:
            yield from synthetic_lines()
        for source in sources:
            with open(source, encoding="utf-8") as handle:
                yield from (line for line in handle if line.strip())

    tokens = 0
    with open(path, "w", encoding="utf-8") as out:
        for line in itertools.islice(itertools.cycle(corpus_lines()), num_lines):
            out.write(line)
            tokens += len(line.split())
    return {"lines": num_lines, "tokens": tokens, "mean_tokens_per_line": round(tokens / max(num_lines, 1), 2)}


def load_shape(name: str) -> ElmoConfig:
    with open(REPO / "configuration" / SHAPES[name]) as handle:
        fields = json.load(handle)
    fields.pop("model_type", None)
    return ElmoConfig(**fields)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--models", default="tiny,small", help=f"comma-separated shapes from {sorted(SHAPES)}")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=10_000)
    parser.add_argument("--mode", choices=("all", "top", "average"), default="all")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--synthetic", action="store_true", help="random Zipfian sentences instead of the corpus lines")
    args = parser.parse_args(argv)
    if args.lines < 1:
        raise SystemExit(f"bench_embed: --lines must be positive, got {args.lines}.")
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"bench_embed: unknown model shape(s) {unknown}; choose from {sorted(SHAPES)}.")

    results = {"device": args.device, "dtype": args.dtype, "torch_threads": torch.get_num_threads(),
               "batch_size": args.batch_size, "mode": args.mode, "torch": torch.__version__,
               "cpu": platform.processor() or platform.machine(), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "input.txt"
        results["input"] = write_input(src, args.lines, args.synthetic)
        for name in names:
            torch.manual_seed(0)
            config = load_shape(name)
            embedder = ElmoEmbedder(ElmoModel(config), ElmoTokenizer(), device=args.device,
                                    dtype=DTYPES[args.dtype])
            out = Path(tmp) / f"{name}.h5"
            start = time.perf_counter()
            report = embed_file(src, out, embedder, mode=args.mode, batch_size=args.batch_size,
                                chunk_size=args.chunk_size, show_progress=False)
            wall = time.perf_counter() - start
            results["models"][name] = {
                "parameters": sum(p.numel() for p in embedder.model.parameters()),
                "layers_x_width": [config.num_representation_layers, config.output_size],
                "embed_seconds": round(report.seconds, 3),
                "wall_seconds_with_merge": round(wall, 3),
                "sentences_per_second": round(report.embedded_lines / report.seconds, 1),
                "tokens_per_second": round(report.num_tokens / report.seconds, 1),
                "output_megabytes": round(out.stat().st_size / 2**20, 1),
            }
            out.unlink()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
