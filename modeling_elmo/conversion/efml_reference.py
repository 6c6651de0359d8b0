"""ELMoForManyLangs' forward computation, recomputed in float64 numpy straight from its own files: the reference the
EFML conversion is checked against (`modeling_elmo.conversion.convert_efml`). It shares no code with the model.

What it computes, for one sentence (as the original ``Embedder.sents2elmo`` does, in the original's ids):

1. words: ``<bos>``, each token cut to ``max_characters_per_token - 2`` code points, ``<eos>``; word ids by exact
   match in ``word.dic`` (``<oov>`` otherwise);
2. characters: a row of ``max_characters_per_token`` ids filled with ``<pad>``; slot 0 holds the id of ``<eow>``
   and the slot after the last character the id of ``<bow>`` (the original swaps the two names, in training and
   inference alike); ``<bos>``/``<eos>`` hold their own symbol in slot 1; unknown characters are ``<oov>``;
3. token embedder: character table lookup; per filter a valid 1-D convolution (``weight`` (n, d_c, w)), maximum
   over positions, then the activation; the concatenation goes through the highway layers in AllenNLP's form
   (one linear map to 2F: rows [:F] the transform, rows [F:] the gate g; ``y = g * x + (1 - g) * relu(A x)``);
   ``[word vector; features]`` -> projection;
4. encoder: per direction, layers of AllenNLP's LSTM cell with projection (gates i, f, g, o from
   ``input_linearity`` (no bias) + ``state_linearity`` (with bias); the cell clipped, ``h = clip(W_p (o * tanh(c)))``),
   the backward direction reading the sentence right to left; from layer 1 on the layer's input is added to its
   output;
5. outputs: ``[token; token]``, then each layer's ``[forward; backward]``, with ``<bos>``/``<eos>`` removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow


def efml_inputs(
    tokens: Sequence[str], char_ids: Mapping[str, int], word_ids: Mapping[str, int] | None, max_characters: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """The original's character ids (n + 2, max_characters) and word ids (n + 2,) of one sentence."""
    words = ["<bos>"] + [t[: max_characters - 2] if len(t) + 2 > max_characters else t for t in tokens] + ["<eos>"]
    begin, end, unknown, pad = char_ids["<eow>"], char_ids["<bow>"], char_ids["<oov>"], char_ids["<pad>"]
    chars = np.full((len(words), max_characters), pad, dtype=np.int64)
    for row, word in enumerate(words):
        chars[row, 0] = begin
        if word in ("<bos>", "<eos>"):
            chars[row, 1], chars[row, 2] = char_ids[word], end
            continue
        for position, character in enumerate(word):
            chars[row, position + 1] = char_ids.get(character, unknown)
        chars[row, len(word) + 1] = end
    if word_ids is None:
        return chars, None
    return chars, np.asarray([word_ids.get(w, word_ids["<oov>"]) for w in words], dtype=np.int64)


def token_embeddings(
    chars: np.ndarray, words: np.ndarray | None, weights: Mapping[str, np.ndarray], activation: str
) -> np.ndarray:
    """The token embedder: (n, C) character ids (and (n,) word ids) -> (n, P)."""
    table = weights["char_emb_layer.embedding.weight"]
    act = (lambda v: np.maximum(v, 0.0)) if activation == "relu" else np.tanh
    features = []
    for row in chars:
        embedded = table[row]  # (C, d_c)
        pooled = []
        index = 0
        while f"convolutions.{index}.weight" in weights:
            kernel, bias = weights[f"convolutions.{index}.weight"], weights[f"convolutions.{index}.bias"]  # (n, d_c, w)
            width = kernel.shape[2]
            scores = np.stack(
                [
                    np.einsum("cw,ncw->n", embedded[p : p + width].T, kernel) + bias
                    for p in range(embedded.shape[0] - width + 1)
                ]
            )  # (positions, n)
            pooled.append(act(scores.max(axis=0)))
            index += 1
        features.append(np.concatenate(pooled))
    x = np.stack(features)  # (n, F)
    size = x.shape[1]
    index = 0
    while f"highways._layers.{index}.weight" in weights:
        projected = x @ weights[f"highways._layers.{index}.weight"].T + weights[f"highways._layers.{index}.bias"]
        gate = _sigmoid(projected[:, size:])
        x = gate * x + (1.0 - gate) * np.maximum(projected[:, :size], 0.0)
        index += 1
    if words is not None:
        x = np.concatenate([weights["word_emb_layer.embedding.weight"][words], x], axis=1)
    return x @ weights["projection.weight"].T + weights["projection.bias"]


def lstm_direction(
    inputs: np.ndarray, weights: Mapping[str, np.ndarray], prefix: str, cell_clip: float | None, proj_clip: float | None
) -> np.ndarray:
    """One layer of one direction over (n, P) inputs given in reading order -> (n, P) outputs in that order."""
    w_in = weights[f"{prefix}.input_linearity.weight"]
    w_state, b_state = weights[f"{prefix}.state_linearity.weight"], weights[f"{prefix}.state_linearity.bias"]
    w_proj = weights[f"{prefix}.state_projection.weight"]
    cells = w_in.shape[0] // 4
    h = np.zeros(w_proj.shape[0])
    c = np.zeros(cells)
    outputs = []
    for x in inputs:
        z = w_in @ x + w_state @ h + b_state
        i, f, g, o = (
            _sigmoid(z[:cells]),
            _sigmoid(z[cells : 2 * cells]),
            np.tanh(z[2 * cells : 3 * cells]),
            _sigmoid(z[3 * cells :]),
        )
        c = i * g + f * c
        if cell_clip:
            c = np.clip(c, -cell_clip, cell_clip)
        h = w_proj @ (o * np.tanh(c))
        if proj_clip:
            h = np.clip(h, -proj_clip, proj_clip)
        outputs.append(h)
    return np.stack(outputs)


def efml_forward(
    tokens: Sequence[str],
    char_ids: Mapping[str, int],
    word_ids: Mapping[str, int] | None,
    token_embedder: Mapping[str, Any],
    encoder: Mapping[str, Any],
    architecture: Mapping[str, Any],
) -> np.ndarray:
    """All layers (L + 1, n, 2P) of one sentence of ``tokens``, in float64, as the original computes them."""
    te = {k: np.asarray(v, dtype=np.float64) for k, v in token_embedder.items()}
    en = {k: np.asarray(v, dtype=np.float64) for k, v in encoder.items()}
    embedder, lstm = architecture["token_embedder"], architecture["encoder"]
    chars, words = efml_inputs(tokens, char_ids, word_ids, int(embedder["max_characters_per_token"]))
    x = token_embeddings(chars, words if "word_emb_layer.embedding.weight" in te else None, te, embedder["activation"])
    layers = [np.concatenate([x, x], axis=1)]
    forward, backward = x, x
    index = 0
    while f"forward_layer_{index}.input_linearity.weight" in en:
        clips = (lstm.get("cell_clip"), lstm.get("proj_clip"))
        new_forward = lstm_direction(forward, en, f"forward_layer_{index}", *clips)
        new_backward = lstm_direction(backward[::-1], en, f"backward_layer_{index}", *clips)[::-1]
        if index > 0:
            new_forward, new_backward = new_forward + forward, new_backward + backward
        forward, backward = new_forward, new_backward
        layers.append(np.concatenate([forward, backward], axis=1))
        index += 1
    return np.stack(layers)[:, 1:-1]


__all__ = ["efml_forward", "efml_inputs", "lstm_direction", "token_embeddings"]
