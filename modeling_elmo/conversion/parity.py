"""The parity check of a converted release: the model against a float64 numpy implementation of the original
TensorFlow computation, read straight from the release's HDF5 tensors.

`validate_converted_model` runs a few sentences (`VALIDATION_SENTENCES`: padding, multi-byte UTF-8, a word over 48
bytes, literal boundary tokens) through the model as one padded batch and through the numpy forward one sentence at a
time (TF gate order i, j, f, o, the run-time forget bias +1, the cell clip before tanh(c), the projection clip after
the projection), and raises with the largest difference and its layer when they disagree.
`modeling_elmo.conversion.convert` runs it before anything is saved.
"""

from __future__ import annotations

import os
from typing import Any

import h5py
import numpy as np
import torch

from ..configuration_elmo import ElmoConfig
from .original_format import LSTM_CELL, convert_config, open_hdf5, read_checked

#: The largest difference to the numpy reference forward that a conversion accepts.
DEFAULT_ATOL = 1e-4

#: Sentences run through both the converted model and the numpy forward by `validate_converted_model`:
#: mixed lengths (so the batch is padded), punctuation, multi-byte UTF-8, a word over 48 bytes, and literal
#: boundary tokens.
VALIDATION_SENTENCES: list[list[str]] = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    ["ELMo", "reads", "UTF-8", "bytes", ":", "naïve", "café", "—", "東京", "!"],
    ["Short"],
    ["Pneumonoultramicroscopicsilicovolcanoconiosis-and-then-some-more-text", "<S>", "</S>", "?"],
]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_sentence_layers(config: ElmoConfig, w: dict[str, np.ndarray], char_ids: np.ndarray) -> np.ndarray:
    """Reference forward of ONE sentence (T', 50) ids with boundaries, TF semantics, float64: (L+1, T', 2P)."""
    table = np.concatenate([np.zeros((1, config.char_embedding_dim)), w["char_embed"]])
    chars = table[char_ids]  # (T', C, d_c)
    pooled = []
    for i, (width, _) in enumerate(config.char_cnn_filters):
        kernel = w[f"CNN/W_cnn_{i}"][0]  # (w, d_c, n)
        windows = np.stack([chars[:, k : chars.shape[1] - width + 1 + k] for k in range(width)], axis=2)
        pooled.append((np.einsum("tpkc,kcn->tpn", windows, kernel) + w[f"CNN/b_cnn_{i}"]).max(axis=1))
    x = np.concatenate(pooled, axis=-1)
    x = np.maximum(x, 0) if config.char_cnn_activation == "relu" else np.tanh(x)
    for k in range(config.num_highway_layers):
        carry = _sigmoid(x @ w[f"CNN_high_{k}/W_carry"] + w[f"CNN_high_{k}/b_carry"])
        x = carry * np.maximum(x @ w[f"CNN_high_{k}/W_transform"] + w[f"CNN_high_{k}/b_transform"], 0) + (1 - carry) * x
    tokens = x @ w["CNN_proj/W_proj"] + w["CNN_proj/b_proj"]
    H = config.cell_size
    layers = [np.concatenate([tokens, tokens], axis=-1)]
    directions = []
    for d in range(2):
        inputs = tokens if d == 0 else tokens[::-1]
        outputs = []
        for l in range(config.num_hidden_layers):
            cell = LSTM_CELL.format(d=d, l=l)
            c, h = np.zeros(H), np.zeros(config.projection_dim)
            ys = []
            for x_t in inputs:
                i, j, f, o = np.split(np.concatenate([x_t, h]) @ w[f"{cell}/W_0"] + w[f"{cell}/B"], 4)
                c = _sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(j)
                if config.cell_clip is not None:
                    c = np.clip(c, -config.cell_clip, config.cell_clip)
                h = (_sigmoid(o) * np.tanh(c)) @ w[f"{cell}/W_P_0"]
                if config.proj_clip is not None:
                    h = np.clip(h, -config.proj_clip, config.proj_clip)
                ys.append(h + x_t if (l >= 1 and config.use_skip_connections) else h)
            inputs = np.stack(ys)
            outputs.append(inputs if d == 0 else inputs[::-1])
        directions.append(outputs)
    for l in range(config.num_hidden_layers):
        layers.append(np.concatenate([directions[0][l], directions[1][l]], axis=-1))
    return np.stack(layers)


def validate_converted_model(
    model: torch.nn.Module,
    options: dict[str, Any],
    weights: h5py.Group | str | os.PathLike,
    sentences: list[list[str]] | None = None,
    atol: float = DEFAULT_ATOL,
) -> float:
    """Compare every layer of ``model`` with a numpy forward computed from the original tensors.

    The sentences (default `VALIDATION_SENTENCES`) go through the model as one padded batch, stateless, and
    through the numpy forward one at a time. Returns the max absolute difference; raises `ValueError` naming it
    (and the worst layer) when it exceeds ``atol``.
    """
    from ..tokenization_elmo import ElmoTokenizer
    from ..utils.characters import BOS_CHAR_IDS, EOS_CHAR_IDS, encode_words

    if not isinstance(weights, h5py.Group):
        with open_hdf5(weights) as h5:
            return validate_converted_model(model, options, h5, sentences, atol)
    config = convert_config(options)
    w = {name: array.astype(np.float64) for name, array in read_checked(weights, config).items()}
    sentences = sentences or VALIDATION_SENTENCES
    tokenizer = ElmoTokenizer()
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = model(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    finally:
        model.train(was_training)
    got = torch.stack(output.hidden_states).double().numpy()  # (L+1, B, T, 2P)
    per_layer = np.zeros(got.shape[0])
    for b, words in enumerate(sentences):
        ids = np.concatenate([BOS_CHAR_IDS[None], encode_words(words), EOS_CHAR_IDS[None]])
        expected = _numpy_sentence_layers(config, w, ids)[:, 1:-1]
        n = len(words)
        diff = np.abs(got[:, b, :n] - expected).max(axis=(1, 2))
        padding = np.abs(got[:, b, n:]).max(axis=(1, 2)) if got.shape[2] > n else np.zeros_like(diff)
        per_layer = np.maximum(per_layer, np.maximum(diff, padding))  # padded positions must be exactly 0; NaN stays
    worst_layer = int(np.argmax(np.where(np.isnan(per_layer), np.inf, per_layer)))  # a NaN layer is the worst
    worst = float(per_layer[worst_layer])
    if not worst <= atol:
        raise ValueError(
            f"the converted model does not reproduce the original computation: max abs difference {worst:.3g} "
            f"(layer {worst_layer}) exceeds atol={atol:g}."
        )
    return worst


__all__ = ["DEFAULT_ATOL", "VALIDATION_SENTENCES", "validate_converted_model"]
