"""Time and parity of ``elmo convert --efml`` on a model of the published ELMoForManyLangs size.

    OMP_NUM_THREADS=2 python scripts/bench/bench_efml_conversion.py            # 3,000 characters, ~45,000 words

Writes, in a temporary folder, a model in the exact published layout and shapes (character CNN of 2048 filters over
50-dimensional character vectors, 100-dimensional word vectors, 2 highways, 2 x LSTM 4096 -> 512; legacy-format
pickles with CUDA storages, ``char.dic``/``word.dic``) with random weights scaled by 1/sqrt(fan-in), as trained
weights are (random weights of a larger scale make the 4096-cell LSTM chaotic, and no two implementations then agree
beyond a few layers), converts it with `modeling_elmo.conversion.convert_efml.convert_efml` and prints one JSON object:
the conversion's wall time, the largest difference per layer to the float64 reference, and the sizes.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import math
import random
import tempfile
import time
from pathlib import Path

import torch
import torch.serialization

from modeling_elmo.conversion.convert_efml import convert_efml

FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


def legacy_cuda_pickle(state: dict) -> bytes:
    """``torch.save`` in the legacy format with storages recorded as ``torch.cuda.FloatStorage`` on ``cuda:0``."""
    original = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        buffer = io.BytesIO()
        torch.save(state, buffer, _use_new_zipfile_serialization=False)
    finally:
        torch.serialization.location_tag = original
    return buffer.getvalue().replace(b"ctorch\nFloatStorage\n", b"ctorch.cuda\nFloatStorage\n")


def write_model(folder: Path, characters: int, words: int, seed: int = 0) -> Path:
    rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)

    def uniform(*shape: int, fan_in: int | None = None, scale: float | None = None) -> torch.Tensor:
        bound = scale if scale is not None else math.sqrt(3.0 / fan_in)
        return ((torch.rand(*shape, generator=generator) * 2 - 1) * bound).float()

    chars = [chr(0x4E00 + i) for i in range(characters)]
    vocabulary = list(
        dict.fromkeys("".join(rng.choice(chars[:500]) for _ in range(rng.randint(1, 4))) for _ in range(words))
    )
    dc, dw, P, H, F = 50, 100, 512, 4096, sum(n for _, n in FILTERS)
    te = collections.OrderedDict()
    te["word_emb_layer.embedding.weight"] = uniform(len(vocabulary) + 4, dw, scale=0.25)
    te["char_emb_layer.embedding.weight"] = uniform(len(chars) + 6, dc, scale=0.25)
    for i, (width, count) in enumerate(FILTERS):
        te[f"convolutions.{i}.weight"] = uniform(count, dc, width, fan_in=dc * width)
        te[f"convolutions.{i}.bias"] = uniform(count, scale=0.05)
    for k in range(2):
        te[f"highways._layers.{k}.weight"] = uniform(2 * F, F, fan_in=F)
        te[f"highways._layers.{k}.bias"] = uniform(2 * F, scale=0.1)
    te["projection.weight"] = uniform(P, dw + F, fan_in=dw + F)
    te["projection.bias"] = uniform(P, scale=0.05)
    en = collections.OrderedDict()
    for layer in range(2):
        for direction in ("forward", "backward"):
            prefix = f"{direction}_layer_{layer}"
            en[f"{prefix}.input_linearity.weight"] = uniform(4 * H, P, fan_in=P)
            en[f"{prefix}.state_linearity.weight"] = uniform(4 * H, P, fan_in=P)
            en[f"{prefix}.state_linearity.bias"] = uniform(4 * H, scale=0.1)
            en[f"{prefix}.state_projection.weight"] = uniform(P, H, fan_in=H)
    folder.mkdir(parents=True)
    symbols = ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"]
    for name, tokens in (
        ("char.dic", chars + symbols),
        ("word.dic", ["<oov>", "<bos>", "<eos>", "<pad>"] + vocabulary),
    ):
        (folder / name).write_text("".join(f"{t}\t{i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    (folder / "token_embedder.pkl").write_bytes(legacy_cuda_pickle(te))
    (folder / "encoder.pkl").write_bytes(legacy_cuda_pickle(en))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--characters", type=int, default=3000)
    parser.add_argument("--words", type=int, default=60000, help="words drawn (repeats dropped)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-efml-") as tmp:
        model = write_model(Path(tmp) / "model", args.characters, args.words)
        size = sum(p.stat().st_size for p in model.iterdir())
        started = time.perf_counter()
        out = convert_efml(model, Path(tmp) / "converted", language="zh")
        seconds = time.perf_counter() - started
        metadata = json.loads((out / "conversion_metadata.json").read_text(encoding="utf-8"))
    print(
        json.dumps(
            {
                "conversion_seconds": round(seconds, 1),
                "model_bytes": size,
                "parameters": metadata["num_parameters"],
                "torch_threads": torch.get_num_threads(),
                "max_abs_difference_per_layer": metadata["validation_max_abs_difference_per_layer"],
            }
        )
    )


if __name__ == "__main__":
    main()
