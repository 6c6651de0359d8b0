"""Small synthetic ELMoForManyLangs models in the exact layout of the published ones, for the EFML tests.

`write_efml_model` writes ``char.dic``, ``word.dic`` (``token<TAB>id`` lines: characters in order of first
appearance, multi-byte, combining and whitespace ones among them, then the six symbols; the four word symbols, then
the words), ``token_embedder.pkl`` and ``encoder.pkl`` (state dicts saved in PyTorch's legacy, pre-zip format with
their storages recorded as ``torch.cuda.FloatStorage`` on ``cuda:0``, as PyTorch 0.4 on a GPU wrote them),
``config.json`` (a training command whose ``config_path`` points at a path that does not exist) and ``meta.json``.
"""

from __future__ import annotations

import collections
import io
import json
import zipfile
from pathlib import Path

import torch
import torch.serialization

#: Characters in order of first appearance: ASCII, multi-byte (Cyrillic, CJK, Arabic), a combining acute accent,
#: and an ordinary space (whose line the original reads back as U+3000).
CHARACTERS = ["a", "b", "c", "d", "e", "Ж", "ы", "日", "本", "語", "ب", "\u0301", " ", "ü"]
WORDS = ["abc", "Жы", "日本", "日本語", "бe", "e\u0301", "ü", "ab", "ca"]
SIZES = dict(char_dim=6, word_dim=5, filters=[[1, 4], [2, 4], [3, 6]], highways=2, projection=8, cell=12, layers=2)


def legacy_cuda_bytes(state: dict) -> bytes:
    """``torch.save(state)`` in the legacy format, its storages recorded as CUDA storages on ``cuda:0``."""
    original = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        buffer = io.BytesIO()
        torch.save(state, buffer, _use_new_zipfile_serialization=False)
    finally:
        torch.serialization.location_tag = original
    data = buffer.getvalue()
    assert b"ctorch\nFloatStorage\n" in data and b"cuda:0" in data
    return data.replace(b"ctorch\nFloatStorage\n", b"ctorch.cuda\nFloatStorage\n")


def efml_weights(seed: int = 0, characters=CHARACTERS, words=WORDS, sizes=SIZES) -> tuple[dict, dict]:
    """Random token-embedder and encoder state dicts of the EFML layout, scaled so that the clips are reached."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.5):
        return ((torch.rand(*shape, generator=g) * 2 - 1) * scale).float()

    dc, dw, P, H = sizes["char_dim"], sizes["word_dim"], sizes["projection"], sizes["cell"]
    total = sum(n for _, n in sizes["filters"])
    te = collections.OrderedDict()
    te["word_emb_layer.embedding.weight"] = rand(len(words) + 4, dw, scale=1.0)
    te["char_emb_layer.embedding.weight"] = rand(len(characters) + 6, dc, scale=1.0)  # the <pad> row is not zero
    for i, (width, count) in enumerate(sizes["filters"]):
        te[f"convolutions.{i}.weight"] = rand(count, dc, width)
        te[f"convolutions.{i}.bias"] = rand(count, scale=0.1)
    for k in range(sizes["highways"]):
        te[f"highways._layers.{k}.weight"] = rand(2 * total, total)
        te[f"highways._layers.{k}.bias"] = rand(2 * total, scale=0.5)
    te["projection.weight"] = rand(P, dw + total, scale=1.0)
    te["projection.bias"] = rand(P, scale=0.1)
    en = collections.OrderedDict()
    for layer in range(sizes["layers"]):
        for direction in ("forward", "backward"):
            prefix = f"{direction}_layer_{layer}"
            en[f"{prefix}.input_linearity.weight"] = rand(4 * H, P, scale=1.5)
            en[f"{prefix}.state_linearity.weight"] = rand(4 * H, P, scale=1.5)
            en[f"{prefix}.state_linearity.bias"] = rand(4 * H, scale=0.5)
            en[f"{prefix}.state_projection.weight"] = rand(P, H, scale=2.0)
    return te, en


def write_dic(path: Path, tokens: list[str]) -> None:
    path.write_text("".join(f"{token}\t{index}\n" for index, token in enumerate(tokens)), encoding="utf-8")


def write_efml_model(folder: Path, seed: int = 0, characters=CHARACTERS, words=WORDS) -> Path:
    """Write a synthetic EFML model into ``folder`` (created); return it."""
    folder.mkdir(parents=True, exist_ok=True)
    te, en = efml_weights(seed, characters, words)
    write_dic(folder / "char.dic", list(characters) + ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"])
    write_dic(folder / "word.dic", ["<oov>", "<bos>", "<eos>", "<pad>"] + list(words))
    (folder / "token_embedder.pkl").write_bytes(legacy_cuda_bytes(te))
    (folder / "encoder.pkl").write_bytes(legacy_cuda_bytes(en))
    (folder / "config.json").write_text(
        json.dumps(
            {
                "seed": 1,
                "gpu": 0,
                "train_path": "/data/train.txt",
                "model": "/data/model",
                "batch_size": 32,
                "config_path": "/users/someone/elmo/configs/cnn_50_100_512_4096_sample.json",
                "max_epoch": 10,
                "char_dim": 50,
                "word_dim": 100,
            }
        ),
        encoding="utf-8",
    )
    (folder / "meta.json").write_text(
        json.dumps({"id": 999, "corpus": [{"language": "syn", "tokens": 1000}]}), encoding="utf-8"
    )
    return folder


def zip_folder(folder: Path, archive: Path, inside: str = "") -> Path:
    """Zip ``folder``'s files into ``archive`` (under ``inside/`` if given), as NLPL serves a model."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(folder.iterdir()):
            handle.write(path, f"{inside}/{path.name}" if inside else path.name)
    return archive
