"""An independent numpy ELMo: original-format weight files and a from-scratch forward pass.

This is a test helper. It shares no code with ``modeling_elmo`` on purpose (it imports numpy and h5py
only) and follows ``shared/reference/elmo-reference.md`` sections 1-4 directly, with TensorFlow's
semantics: gate order i, j, f, o, the runtime forget bias +1.0, TF's highway ("carry" gates the transform
branch), the cell clip before ``tanh(c)``, the projection clip after the projection, residuals from layer 1
up, a separate backward stack that reads each row reversed over its own length, and frozen state plus zero
output on padded steps. Everything is computed in float64, so differences against a float32 model measure
the model, not this file.

Contents:

* character ids: :func:`encode_word`, :func:`batch_to_char_ids` (UTF-8 bytes, 48-byte cut, BOW/EOW/pad,
  +1 shift, ``<S>``/``</S>`` special rows, 0 = absent token);
* :func:`tiny_options` and :func:`write_original_files`: ``options.json`` + ``weights.hdf5`` with random
  float32 weights in exactly the layout the released files have;
* :func:`numpy_elmo_forward` and :class:`StatefulNumpyElmo` (AllenNLP-style state carried per batch row).
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import h5py
import numpy as np

# ----------------------------------------------------------------------------------------------------------
# 1. Character ids (reference section 1). Raw ids 0-255 are bytes; the markers follow. Inference adds 1.
# ----------------------------------------------------------------------------------------------------------
MAX_CHARS = 50
RAW_BOS_CHAR, RAW_EOS_CHAR, RAW_BOW, RAW_EOW, RAW_PAD = 256, 257, 258, 259, 260


def _raw_row(content: list[int], max_chars: int = MAX_CHARS) -> list[int]:
    row = [RAW_PAD] * max_chars
    row[0] = RAW_BOW
    for k, c in enumerate(content):
        row[k + 1] = c
    row[len(content) + 1] = RAW_EOW
    return row


def encode_word(word: str, max_chars: int = MAX_CHARS) -> list[int]:
    """The inference character ids (+1 shift) of one token; ``<S>``/``</S>`` get their special rows."""
    if word == "<S>":
        content = [RAW_BOS_CHAR]
    elif word == "</S>":
        content = [RAW_EOS_CHAR]
    else:
        content = list(word.encode("utf-8", "ignore")[: max_chars - 2])
    return [c + 1 for c in _raw_row(content, max_chars)]


def batch_to_char_ids(sentences: list[list[str]], add_boundaries: bool = True, length: int | None = None) -> np.ndarray:
    """(B, T', 50) int64 ids, right-padded with all-zero rows; ``<S>``/``</S>`` wrap each sentence if asked.

    ``length`` pads to a fixed T' (at least the longest row), to build the same sentences with extra padding.
    """
    rows = [(["<S>"] + list(s) + ["</S>"]) if add_boundaries else list(s) for s in sentences]
    width = max(len(r) for r in rows) if rows else 0
    if length is not None:
        if length < width:
            raise ValueError(f"length {length} is shorter than the longest row ({width})")
        width = length
    out = np.zeros((len(rows), width, MAX_CHARS), dtype=np.int64)
    for b, row in enumerate(rows):
        for t, word in enumerate(row):
            out[b, t] = encode_word(word)
    return out


# ----------------------------------------------------------------------------------------------------------
# 2. Original files (reference sections 2.1 and 3.1)
# ----------------------------------------------------------------------------------------------------------
def tiny_options(
    *,
    dim: int = 24,
    projection_dim: int = 8,
    n_layers: int = 2,
    clip: float | None = 3.0,
    use_skip_connections: bool = True,
    n_highway: int = 2,
    filters: list[list[int]] | None = None,
    char_dim: int = 4,
    activation: str = "relu",
) -> dict[str, Any]:
    """A small inference ``options.json`` dict in the released models' schema."""
    lstm: dict[str, Any] = {
        "dim": dim,
        "projection_dim": projection_dim,
        "n_layers": n_layers,
        "use_skip_connections": use_skip_connections,
    }
    if clip is not None:
        lstm["cell_clip"] = clip
        lstm["proj_clip"] = clip
    return {
        "lstm": lstm,
        "char_cnn": {
            "activation": activation,
            "embedding": {"dim": char_dim},
            "filters": filters if filters is not None else [[1, 4], [2, 8], [3, 16]],
            "max_characters_per_token": MAX_CHARS,
            "n_characters": 262,
            "n_highway": n_highway,
        },
    }


def original_dataset_shapes(options: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every dataset of an original ``weights.hdf5`` and its shape, as the options imply."""
    lstm, cnn = options["lstm"], options["char_cnn"]
    d_c, P, H = cnn["embedding"]["dim"], lstm["projection_dim"], lstm["dim"]
    F = sum(n for _, n in cnn["filters"])
    shapes: dict[str, tuple[int, ...]] = {"char_embed": (261, d_c)}
    for i, (w, n) in enumerate(cnn["filters"]):
        shapes[f"CNN/W_cnn_{i}"] = (1, w, d_c, n)
        shapes[f"CNN/b_cnn_{i}"] = (n,)
    for k in range(cnn.get("n_highway", 0) or 0):
        shapes[f"CNN_high_{k}/W_carry"] = (F, F)
        shapes[f"CNN_high_{k}/W_transform"] = (F, F)
        shapes[f"CNN_high_{k}/b_carry"] = (F,)
        shapes[f"CNN_high_{k}/b_transform"] = (F,)
    shapes["CNN_proj/W_proj"] = (F, P)
    shapes["CNN_proj/b_proj"] = (P,)
    for d in range(2):
        for l in range(lstm["n_layers"]):
            prefix = f"RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell"
            shapes[f"{prefix}/W_0"] = (2 * P, 4 * H)
            shapes[f"{prefix}/B"] = (4 * H,)
            shapes[f"{prefix}/W_P_0"] = (H, P)
    return shapes


def write_original_files(
    folder: str | os.PathLike, options: dict[str, Any], seed: int, scale: float = 1.0
) -> tuple[str, str]:
    """Write ``options.json`` and ``weights.hdf5`` (random float32) into ``folder``; return both paths.

    Each weight is drawn N(0, s^2) with ``s`` chosen per tensor so that activations stay in a useful range
    and, with clip 3, both the cell and the projection clip trigger now and then (``scale`` multiplies
    every ``s``). The LSTM biases are drawn without TF's runtime forget bias, as in the released files.
    """
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    lstm, cnn = options["lstm"], options["char_cnn"]
    d_c, P, H = cnn["embedding"]["dim"], lstm["projection_dim"], lstm["dim"]
    F = sum(n for _, n in cnn["filters"])

    def draw(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std * scale).astype(np.float32)

    std: dict[str, float] = {"char_embed": 1.0, "CNN_proj/W_proj": 1.0 / np.sqrt(F), "CNN_proj/b_proj": 0.1}
    for i, (w, _) in enumerate(cnn["filters"]):
        std[f"CNN/W_cnn_{i}"] = 1.0 / np.sqrt(w * d_c)
        std[f"CNN/b_cnn_{i}"] = 0.1
    for k in range(cnn.get("n_highway", 0) or 0):
        std[f"CNN_high_{k}/W_carry"] = 1.0 / np.sqrt(F)
        std[f"CNN_high_{k}/W_transform"] = 1.0 / np.sqrt(F)
        std[f"CNN_high_{k}/b_carry"] = 0.5
        std[f"CNN_high_{k}/b_transform"] = 0.1
    for d in range(2):
        for l in range(lstm["n_layers"]):
            prefix = f"RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell"
            std[f"{prefix}/W_0"] = 1.5 / np.sqrt(2 * P)
            std[f"{prefix}/B"] = 0.5
            std[f"{prefix}/W_P_0"] = 2.5 / np.sqrt(H)

    with open(os.path.join(folder, "options.json"), "w", encoding="utf-8") as f:
        json.dump(options, f, indent=2)
    weights_path = os.path.join(folder, "weights.hdf5")
    with h5py.File(weights_path, "w") as h5:
        for name, shape in original_dataset_shapes(options).items():
            h5.create_dataset(name, data=draw(shape, std[name]))
    return os.path.join(folder, "options.json"), weights_path


# ----------------------------------------------------------------------------------------------------------
# 3. Forward pass (reference section 4)
# ----------------------------------------------------------------------------------------------------------
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _load(weights_path: str | os.PathLike) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with h5py.File(weights_path, "r") as h5:
        h5.visititems(
            lambda name, obj: (
                out.__setitem__(name, obj[()].astype(np.float64)) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return out


def token_embeddings(options: dict[str, Any], w: dict[str, np.ndarray], char_ids: np.ndarray) -> np.ndarray:
    """Context-insensitive token representation e, (..., P), for char ids (..., 50) (reference 4.1)."""
    cnn = options["char_cnn"]
    lead_shape = char_ids.shape[:-1]
    ids = char_ids.reshape(-1, char_ids.shape[-1])
    table = np.concatenate([np.zeros((1, w["char_embed"].shape[1])), w["char_embed"]], axis=0)  # 262 rows
    emb = table[ids]  # (N, C, d_c)
    n_pos = ids.shape[1]
    pooled = []
    for i, (width, _) in enumerate(cnn["filters"]):
        kernel = w[f"CNN/W_cnn_{i}"][0]  # (width, d_c, n)
        conv = sum(emb[:, k : n_pos - width + 1 + k, :] @ kernel[k] for k in range(width))  # valid conv
        conv = conv + w[f"CNN/b_cnn_{i}"]
        pooled.append(conv.max(axis=1))
    x = np.concatenate(pooled, axis=-1)
    x = np.maximum(x, 0.0) if cnn["activation"] == "relu" else np.tanh(x)
    for k in range(cnn.get("n_highway", 0) or 0):
        t = _sigmoid(x @ w[f"CNN_high_{k}/W_carry"] + w[f"CNN_high_{k}/b_carry"])
        u = np.maximum(x @ w[f"CNN_high_{k}/W_transform"] + w[f"CNN_high_{k}/b_transform"], 0.0)
        x = t * u + (1.0 - t) * x
    # bilm-tf builds no projection when F == P already; then the file has no CNN_proj group.
    e = x @ w["CNN_proj/W_proj"] + w["CNN_proj/b_proj"] if "CNN_proj/W_proj" in w else x
    return e.reshape(*lead_shape, -1)


def _lstm_layer(
    x: np.ndarray,
    lengths: np.ndarray,
    W: np.ndarray,
    B: np.ndarray,
    W_P: np.ndarray,
    c0: np.ndarray,
    h0: np.ndarray,
    cell_clip: float | None,
    proj_clip: float | None,
    stats: dict | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One TF ``LSTMCell`` with projection over (B, T, P) left-aligned rows; returns (h per step, c, h)."""
    n_rows, n_steps, P = x.shape
    H = W_P.shape[0]
    c, h = c0.copy(), h0.copy()
    out = np.zeros((n_rows, n_steps, W_P.shape[1]))
    for t in range(n_steps):
        active = (t < lengths)[:, None]
        z = np.concatenate([x[:, t], h], axis=1) @ W + B
        i, j, f, o = z[:, :H], z[:, H : 2 * H], z[:, 2 * H : 3 * H], z[:, 3 * H :]
        c_new = _sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(j)
        if cell_clip is not None:
            if stats is not None:
                stats["cell_clipped"] += int((np.abs(c_new) > cell_clip)[active[:, 0]].sum())
            c_new = np.clip(c_new, -cell_clip, cell_clip)
        h_new = (_sigmoid(o) * np.tanh(c_new)) @ W_P
        if proj_clip is not None:
            if stats is not None:
                stats["proj_clipped"] += int((np.abs(h_new) > proj_clip)[active[:, 0]].sum())
            h_new = np.clip(h_new, -proj_clip, proj_clip)
        c = np.where(active, c_new, c)  # padded steps freeze the state ...
        h = np.where(active, h_new, h)
        out[:, t] = np.where(active, h_new, 0.0)  # ... and output 0
    return out, c, h


def _reverse_rows(x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Reverse each row's first ``lengths[b]`` steps; the padding stays where it is."""
    out = x.copy()
    for b, n in enumerate(lengths):
        out[b, :n] = x[b, :n][::-1]
    return out


def zero_state(options: dict[str, Any], n_rows: int) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    H, P, L = options["lstm"]["dim"], options["lstm"]["projection_dim"], options["lstm"]["n_layers"]
    return {d: [(np.zeros((n_rows, H)), np.zeros((n_rows, P))) for _ in range(L)] for d in ("forward", "backward")}


def numpy_elmo_forward(
    options: dict[str, Any],
    weights_path: str | os.PathLike,
    char_ids: np.ndarray,
    initial_state: dict | None = None,
    stats: dict | None = None,
) -> tuple[list[np.ndarray], dict[str, list[tuple[np.ndarray, np.ndarray]]]]:
    """Run the biLM on (B, T', 50) char ids that already contain ``<S>``/``</S>`` (0 rows = absent tokens).

    Returns ``(layers, final_state)``: ``layers`` is a list of L+1 float64 arrays (B, T', 2P), layer 0 =
    ``[e; e]``, positions past a row's length are 0. ``final_state`` (and ``initial_state``) is
    ``{"forward": [(c (B, H), h (B, P)) per layer], "backward": [...]}``: per row, the forward state after
    ``</S>`` and the backward state after ``<S>``. ``stats``, if given, counts clipped entries
    (``cell_clipped``, ``proj_clipped``) over valid steps.
    """
    char_ids = np.asarray(char_ids)
    lstm = options["lstm"]
    L = lstm["n_layers"]
    skip = bool(lstm.get("use_skip_connections", False))
    cell_clip, proj_clip = lstm.get("cell_clip"), lstm.get("proj_clip")
    if stats is not None:
        stats.setdefault("cell_clipped", 0)
        stats.setdefault("proj_clipped", 0)
    w = _load(weights_path)
    mask = (char_ids > 0).any(axis=-1)  # (B, T')
    lengths = mask.sum(axis=1)
    n_rows = char_ids.shape[0]
    if initial_state is None:
        initial_state = zero_state(options, n_rows)

    e = token_embeddings(options, w, char_ids) * mask[..., None]
    layers = [np.concatenate([e, e], axis=-1)]
    final: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"forward": [], "backward": []}
    outputs = {}
    for d, direction in enumerate(("forward", "backward")):
        x = e if direction == "forward" else _reverse_rows(e, lengths)
        per_layer = []
        for l in range(L):
            prefix = f"RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell"
            c0, h0 = initial_state[direction][l]
            h_seq, c, h = _lstm_layer(
                x,
                lengths,
                w[f"{prefix}/W_0"],
                w[f"{prefix}/B"],
                w[f"{prefix}/W_P_0"],
                c0,
                h0,
                cell_clip,
                proj_clip,
                stats,
            )
            final[direction].append((c, h))
            y = h_seq + x if (l >= 1 and skip) else h_seq  # padded steps: both terms are 0
            per_layer.append(y if direction == "forward" else _reverse_rows(y, lengths))
            x = y
        outputs[direction] = per_layer
    for l in range(L):
        layers.append(np.concatenate([outputs["forward"][l], outputs["backward"][l]], axis=-1))
    return layers, final


def strip_boundaries(layers: list[np.ndarray], char_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the ``<S>``/``</S>`` positions: (L+1, B, T'-2, 2P) with zeros past each row, and the (B, T'-2) mask."""
    lengths = (np.asarray(char_ids) > 0).any(axis=-1).sum(axis=1) - 2
    stacked = np.stack(layers)  # (L+1, B, T', 2P)
    out = np.zeros(stacked.shape[:2] + (stacked.shape[2] - 2, stacked.shape[3]))
    mask = np.zeros(out.shape[1:3], dtype=bool)
    for b, n in enumerate(lengths):
        out[:, b, :n] = stacked[:, b, 1 : n + 1]
        mask[b, :n] = True
    return out, mask


class StatefulNumpyElmo:
    """Replays AllenNLP's stateful inference (reference 4.4): one state store indexed by batch row.

    A batch of B rows starts from stored rows 0..B-1 (zeros for rows never used), writes its final states
    back to those rows, keeps rows >= B untouched, and grows the store with zero rows for a larger batch.
    """

    def __init__(self, options: dict[str, Any], weights_path: str | os.PathLike):
        self.options, self.weights_path = options, weights_path
        self.store = zero_state(options, 0)

    def __call__(self, char_ids: np.ndarray, stats: dict | None = None) -> list[np.ndarray]:
        n_rows = char_ids.shape[0]
        have = self.store["forward"][0][0].shape[0]
        if n_rows > have:
            grow = zero_state(self.options, n_rows - have)
            self.store = {
                d: [
                    (np.concatenate([c, gc]), np.concatenate([h, gh]))
                    for (c, h), (gc, gh) in zip(self.store[d], grow[d], strict=False)
                ]
                for d in self.store
            }
        initial = {d: [(c[:n_rows].copy(), h[:n_rows].copy()) for c, h in self.store[d]] for d in self.store}
        layers, final = numpy_elmo_forward(self.options, self.weights_path, char_ids, initial, stats)
        new_store = copy.deepcopy(self.store)
        for d in new_store:
            for l, (c, h) in enumerate(final[d]):
                new_store[d][l][0][:n_rows] = c
                new_store[d][l][1][:n_rows] = h
        self.store = new_store
        return layers
