"""A deterministic stand-in embedder and the input lines the `elmo embed` tests share."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from modeling_elmo.embedding.embed import embed_file


class FakeEmbedder:
    """Deterministic stand-in for a model: each vector depends on its word, position, layer and the sentence."""

    def __init__(self, num_layers: int = 3, output_size: int = 4, fail_after_batches: int | None = None):
        self.num_layers, self.output_size = num_layers, output_size
        self.fail_after_batches = fail_after_batches
        self.batches: list[list[list[str]]] = []

    def one(self, words: list[str]) -> np.ndarray:
        out = np.empty((self.num_layers, len(words), self.output_size), dtype=np.float32)
        total = sum(map(len, words))
        for t, w in enumerate(words):
            code = sum(ord(c) for c in w) % 1000
            for layer in range(self.num_layers):
                out[layer, t] = code + 0.5 * t + 10.0 * layer + 0.01 * np.arange(self.output_size) + 1e-3 * total
        return out

    def embed_batch(self, sentences):
        if self.fail_after_batches is not None and len(self.batches) >= self.fail_after_batches:
            raise KeyboardInterrupt("simulated kill")
        self.batches.append([list(s) for s in sentences])
        return [self.one(list(s)) for s in sentences]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_h5(path: Path) -> dict[str, np.ndarray | str]:
    with h5py.File(path, "r") as h5:
        return {key: (h5[key][0].decode() if key == "sentence_to_index" else h5[key][()]) for key in h5}


SENTENCES = [
    "the cat sat",
    "a",
    "one two three four five six",
    "x y",
    "hello world again and again",
    "z",
    "short one",
    "a much longer sentence with quite a few words in it",
    "mid size line here",
    "end",
]


def run(tmp_path, lines=SENTENCES, name="out.h5", embedder=None, **kwargs):
    src = write_lines(tmp_path / "in.txt", lines) if not (tmp_path / "in.txt").exists() else tmp_path / "in.txt"
    kwargs.setdefault("mode", "all")
    kwargs.setdefault("show_progress", False)
    report = embed_file(src, tmp_path / name, embedder or FakeEmbedder(), **kwargs)
    return report, tmp_path / name


TINY = dict(
    projection_dim=8,
    cell_size=16,
    char_embedding_dim=4,
    char_cnn_filters=[[1, 4], [2, 8]],
    num_highway_layers=1,
    num_hidden_layers=2,
)
