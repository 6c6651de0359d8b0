# Copyright 2026 The modeling_elmo authors.
# SPDX-License-Identifier: Apache-2.0 (https://www.apache.org/licenses/LICENSE-2.0)
"""PyTorch ELMo (Peters et al. 2018): a character CNN and a biLSTM language model. LSTM gates are in PyTorch order
and their bias holds TensorFlow's forget bias of +1; the highway gate multiplies the transformed branch."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils import ModelOutput

from .configuration_elmo import ElmoConfig
from .tokenization_elmo import BOS_ID, EOS_ID, PAD_ID, sentence_boundary_char_ids

try:
    from transformers import initialization as init
except ImportError:  # transformers 4.x runs `_init_weights` only where a checkpoint left weights out: torch's own do
    from types import SimpleNamespace

    init = SimpleNamespace(**vars(nn.init), copy_=lambda tensor, other: tensor.copy_(other))

IGNORE_INDEX = -100  # labels that predict nothing, as everywhere in transformers


# Inputs: checked (each check names the bad value), and the sentence boundaries the model adds
def _host_waits_for_nothing(device: torch.device) -> bool:
    """Whether a size known only from tensor values is free to read (CPU, eager); elsewhere all rows are computed."""
    return device.type == "cpu" and not torch.compiler.is_compiling()


def check_values(bad: torch.Tensor, message: str) -> None:
    """`ValueError(message)` if any of ``bad`` is set; not while tracing or training on an accelerator (a host wait)."""
    if not torch.compiler.is_compiling() and (bad.device.type == "cpu" or not torch.is_grad_enabled()):
        if bool(bad.any()):
            raise ValueError(message)


def check_shape(values: torch.Tensor, shape, name: str, other: str = "input_ids") -> None:
    """`ValueError` unless ``values`` (``name``) has the (batch, tokens) ``shape`` of ``other``."""
    if tuple(values.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(values.shape)} but {other} has {tuple(shape)} tokens.")


def shape_error(name: str, expected: str, shape) -> ValueError:
    """The `ValueError` of ``name`` (of ``shape``) not having the ``expected`` shape."""
    return ValueError(f"{name} must have shape {expected}, got {tuple(shape)}.")


def _integers(values, name: str, device: torch.device, what: str, shape: tuple | None = None) -> torch.Tensor:
    """``values`` as an int64 tensor on ``device``, of ``shape`` (batch, tokens) if given; else a `ValueError`."""
    values = torch.as_tensor(values, device=device)
    if shape is not None:
        check_shape(values, shape, name)
    if values.dtype.is_floating_point or values.dtype == torch.bool or values.is_complex():
        raise ValueError(f"{name} must {what}, got dtype {values.dtype}.")
    return values.long()


def integer_labels(labels, upper: int, what: str, device: torch.device, counted: torch.Tensor | None = None):
    """``labels`` as int64: integers in [0, ``upper``) or -100 (ignored), checked where ``counted`` (a mask) is set."""
    labels = _integers(labels, "labels", device, f"be integer {what}")
    bad = ((labels < 0) | (labels >= upper)) & (labels != IGNORE_INDEX)
    hint = " (only -100 marks a position to ignore)" if what == "word ids" else ""
    check_values(bad if counted is None else bad & counted, f"labels hold a {what[:-1]} outside [0, {upper}){hint}.")
    return labels


def validated_inputs(input_ids, attention_mask, width: int, max_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Character ids (B, T, ``width``) and token mask (B, T) bool; without a mask, tokens are rows not all 0."""
    if input_ids is None:
        raise ValueError(f"ElmoModel needs input_ids (character ids of shape (batch, tokens, {width})).")
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() != 3 or input_ids.shape[-1] != width:
        raise shape_error("input_ids", f"(batch, tokens, {width}) (character ids from ElmoTokenizer)", input_ids.shape)
    if input_ids.dtype not in (torch.int16, torch.int32, torch.int64):
        raise ValueError(f"input_ids must be int16/32/64 character ids in [0, {max_id}], got dtype {input_ids.dtype}.")
    if input_ids.shape[0] == 0:
        raise ValueError("empty batch: input_ids has batch size 0.")
    check_values((input_ids < 0) | (input_ids > max_id), f"input_ids hold a character id outside [0, {max_id}].")
    present = (input_ids > 0).any(dim=-1)
    if attention_mask is None:
        return input_ids, present
    mask = torch.as_tensor(attention_mask, device=input_ids.device)
    check_shape(mask, present.shape, "attention_mask")
    check_values(mask.bool() & ~present, "attention_mask marks a token as present whose character ids are all 0.")
    return input_ids, mask.bool()


def with_sentence_boundaries(input_ids, mask: torch.Tensor, lengths: torch.Tensor, char_vocabulary: str = "bytes"):
    """Left-aligned (B, T, C) -> (B, T + 2, C), ``<S>`` at 0, ``</S>`` after each last token (as AllenNLP), its mask."""
    batch, steps, width = input_ids.shape
    ids = input_ids.new_zeros(batch, steps + 2, width)
    ids[:, 1:-1] = input_ids * mask.unsqueeze(-1).to(input_ids.dtype)
    # built on the device from scalars (a host list would make the host wait; buffers would stay empty on meta)
    bos, eos = (ids.new_empty(width) for _ in range(2))
    for row, values in zip((bos, eos), sentence_boundary_char_ids(char_vocabulary, width), strict=True):
        for position, value in enumerate(values[:4]):  # the rest is padding
            row[position:] = value
    ids[:, 0] = bos
    ids.scatter_(1, (lengths + 1).view(batch, 1, 1).expand(batch, 1, width), eos.expand(batch, 1, width))
    return ids, torch.arange(steps + 2, device=ids.device).unsqueeze(0) < (lengths + 2).unsqueeze(1)


def with_word_boundaries(word_ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Left-aligned word ids (B, T) -> (B, T + 2) with ``<S>`` at 0 and ``</S>`` after each row's last word."""
    ids = F.pad(torch.where(mask, word_ids, PAD_ID), (1, 1), value=PAD_ID)
    ids[:, 0] = BOS_ID
    return ids.scatter(1, (lengths + 1).unsqueeze(1), EOS_ID)


# The recurrence: one layer of both directions at once, layout direction-major and time-major (D, T, B, width)
def reverse_each_row(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first ``lengths[b]`` steps of every row of ``x`` (B, T, ...), leaving the padding in place."""
    positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)  # (1, T)
    index = torch.where(positions < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - positions, positions)
    return x.gather(1, index.view(index.shape + (1,) * (x.dim() - 2)).expand_as(x))


def dropout_noise(like: torch.Tensor, dropout: float, num_layers: int) -> list[torch.Tensor] | None:
    """Per layer, scaled masks (2, T, B, P) for ``like`` (B, T, P), drawn in the same order in every form; or `None`."""
    if dropout <= 0:
        return None
    drawn = [[F.dropout(torch.ones_like(like), dropout) for _ in range(num_layers)] for _ in range(2)]
    return [torch.stack(pair).transpose(1, 2) for pair in zip(*drawn, strict=True)]


def state_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the recurrence's state, cell and gate sums: float32 at least (bfloat16 runs only the products)."""
    return torch.promote_types(dtype, torch.float32)


def lstm_step(gates, h, c, valid, project, cell_clip: float | None, proj_clip: float | None):
    """Gate sums (i, f, g, o) -> next (h, c) and output (via ``project``); where ``valid`` is False: same state, 0."""
    i, f, g, o = gates.chunk(4, dim=-1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    if cell_clip is not None:
        c_new = c_new.clamp(-cell_clip, cell_clip)
    h_new = project(torch.sigmoid(o) * torch.tanh(c_new)).to(h.dtype)
    if proj_clip is not None:
        h_new = h_new.clamp(-proj_clip, proj_clip)
    return torch.where(valid, h_new, h), torch.where(valid, c_new, c), h_new * valid


def _exporting() -> bool:
    """Whether `torch.export` traces (sizes may be symbolic: read no count from them); any trace before torch 2.7."""
    return getattr(torch.compiler, "is_exporting", torch.compiler.is_compiling)()


def steps_per_input_product(rows: int, gates: int) -> int:
    """Steps whose input products (``rows`` x ``gates`` each) the fast forms compute at once: about 2**22 numbers."""
    return max(1, 2**22 // max(1, rows * gates))


def stacked_state_and_weights(inputs: torch.Tensor, layers: Sequence[nn.Module], state=None):
    """State (h, c) in `state_dtype` (zeros without ``state``), recurrent weights (D, P, 4H), projection (a ``bmm``)."""
    directions, _, rows, _ = inputs.shape
    dtype, (P, H) = inputs.dtype, layers[0].projection.weight.shape
    h, c = (inputs.new_zeros(directions, rows, n) for n in (P, H)) if state is None else state
    weight_hh = torch.stack([layer.recurrent_transform.weight for layer in layers]).transpose(1, 2)
    weight_hr = torch.stack([layer.projection.weight for layer in layers]).transpose(1, 2)  # (D, H, P)
    project = lambda m: torch.bmm(m.to(dtype), weight_hr)
    return (h.to(state_dtype(dtype)), c.to(state_dtype(dtype))), weight_hh, project


def stacked_lstm(inputs: torch.Tensor, valid: torch.Tensor, layers: Sequence[nn.Module], state=None):
    """The fast form: inputs (D, T, B, P), valid (T, B), state (h (D, B, P), c (D, B, H)) or zeros -> y (D, T, B, P),
    zeros past each row's length, and the final (h, c). Per step one ``bmm`` over both directions' weights."""
    directions, steps, rows, _ = inputs.shape
    dtype, cell_clip, proj_clip = inputs.dtype, layers[0].cell_clip, layers[0].proj_clip
    (h, c), weight_hh, project = stacked_state_and_weights(inputs, layers, state)
    valid, outputs, (P, H) = valid.unsqueeze(-1), [], layers[0].projection.weight.shape

    if isinstance(steps, torch.SymInt) and hasattr(torch.compiler, "is_exporting") and _exporting():
        raise ValueError(
            "torch.export of a dynamic word axis: the recurrence loops over the words, which a trace fixes to the "
            "example's length; export a fixed number of words, or use modeling_elmo.export.dynamic_words(model)."
        )
    # traced: all steps' products at once (a block size read from a dynamic batch would fix the batch)
    block = max(1, steps) if _exporting() else steps_per_input_product(rows, 4 * H)
    for start in range(0, steps, block):
        gates_x = [ls.input_transform(x[start : start + block]) for x, ls in zip(inputs, layers, strict=True)]
        for t in range(start, min(start + block, steps)):
            gates = torch.stack([g[t - start] for g in gates_x]).to(h.dtype) + torch.bmm(h.to(dtype), weight_hh)
            h, c, y = lstm_step(gates, h, c, valid[t], project, cell_clip, proj_clip)
            outputs.append(y)
    y = torch.stack(outputs, dim=1).to(dtype) if outputs else inputs.new_zeros(directions, 0, rows, P)
    return y, (h, c)


def loop_lstm(inputs: torch.Tensor, valid: torch.Tensor, layers: Sequence[nn.Module], state=None):
    """`stacked_lstm` as the reference: each `ElmoLstmLayer` called as a module (hooks, adapters, checkpoints apply)."""
    results = [
        layer(x, valid, None if state is None else (state[0][d], state[1][d]))
        for d, (x, layer) in enumerate(zip(inputs, layers, strict=True))
    ]
    return torch.stack([y for y, _ in results]), tuple(torch.stack([s[k] for _, s in results]) for k in (0, 1))


def torch_lstm(inputs: torch.Tensor, valid: torch.Tensor, layers: Sequence[nn.Module], state=None):
    """`stacked_lstm` through ``torch.nn.LSTM(proj_size=P)`` (cuDNN on a GPU) on the layers' weights: no clipping,
    from zero states, no final state. Right padding needs no packing: valid steps never see padded ones."""
    outputs = []
    for x, layer in zip(inputs, layers, strict=True):
        weight_ih, bias = layer.input_transform.weight, layer.input_transform.bias
        cell = nn.LSTM(weight_ih.shape[1], layer.cell_size, proj_size=layer.hidden_size, device="meta")
        names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0")
        weights = (weight_ih, layer.recurrent_transform.weight, bias, torch.zeros_like(bias), layer.projection.weight)
        outputs.append(torch.func.functional_call(cell, dict(zip(names, weights, strict=True)), (x,))[0])
    return torch.stack(outputs) * valid.unsqueeze(-1).to(inputs.dtype), None


def installed_kernels():
    """The installed package's ``acceleration.packed_kernels`` if usable, else `None` (this file's one import of it)."""
    try:
        from modeling_elmo.acceleration import packed_kernels
    except ImportError:
        return None
    usable = callable(getattr(packed_kernels, "packed_lstm", None)) and packed_kernels.available()
    return packed_kernels if usable else None


def packed_lstm(inputs: torch.Tensor, valid: torch.Tensor, layers: Sequence[nn.Module], state=None):
    """`stacked_lstm`'s signature and numbers, computed by the installed package's kernels (`installed_kernels`)."""
    weights = [
        (ls.input_transform.weight, ls.input_transform.bias, ls.recurrent_transform.weight, ls.projection.weight)
        for ls in layers
    ]
    clips = {"cell_clip": layers[0].cell_clip, "proj_clip": layers[0].proj_clip}
    return installed_kernels().packed_lstm(inputs, valid, weights, state, **clips)


def weights_readable(layers: Sequence[nn.Module]) -> bool:
    """Whether the fast forms may read the layers' weights: every transform a plain `nn.Linear` without hooks."""
    return all(
        type(linear) is nn.Linear and not linear._forward_hooks and not linear._forward_pre_hooks
        for layer in layers
        for linear in (layer.input_transform, layer.recurrent_transform, layer.projection)
    )


def fused_applies(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``"auto"`` fuses on ``device``/``dtype``: CPU, CUDA (ROCm too), floating point; not MPS, XLA, ..."""
    return device.type in ("cpu", "cuda") and dtype.is_floating_point


# Building blocks
class ElmoHighway(nn.Module):
    """One highway layer: ``t = sigmoid(gate(x))``, ``x <- t * relu(transform(x)) + (1 - t) * x``."""

    def __init__(self, size: int):
        super().__init__()
        self.transform = nn.Linear(size, size)
        self.gate = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.gate(x))
        return gate * F.relu(self.transform(x)) + (1.0 - gate) * x


class ElmoCharConvolution(nn.Conv1d):
    """A char CNN filter width: a valid ``Conv1d`` as one matmul over all windows (faster on CPU for few channels)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (self.stride, self.padding, self.dilation, self.groups) != ((1,), (0,), (1,), 1):
            return super().forward(x)  # not a valid convolution of stride 1 (made by an adapter, say): torch's kernel
        n, dim, length = x.shape
        width, windows = self.kernel_size[0], length - self.kernel_size[0] + 1
        # (N, d_c, C - w + 1, w) -> (N, C - w + 1, d_c, w): the window layout of the weight (filters, d_c, w)
        x = x.unfold(2, width, 1).permute(0, 2, 1, 3).reshape(n * windows, dim * width)
        scores = F.linear(x, self.weight.reshape(self.out_channels, dim * width), self.bias)
        return scores.view(n, windows, self.out_channels).transpose(1, 2)


class ElmoWordEmbedding(nn.Embedding):
    """The optional word-embedding input (``config.word_input_vocab_size`` rows, row 3 for unknown words)."""


class ElmoCharacterEncoder(nn.Module):
    """Character (and word) ids -> token vectors (N, P): embedding, CNN max-pooled, highways, [word; x], projection."""

    gradient_checkpointing = False

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.char_embeddings = nn.Embedding(config.num_characters, config.char_embedding_dim, padding_idx=0)
        self.word_embeddings = None
        if config.word_input_vocab_size:  # CODEPATH: ELMoForManyLangs models with a word input; not bilm-tf's
            self.word_embeddings = ElmoWordEmbedding(config.word_input_vocab_size, config.word_input_dim)
        self.convolutions = nn.ModuleList(
            ElmoCharConvolution(config.char_embedding_dim, count, width) for width, count in config.char_cnn_filters
        )
        self.filters = [(width, count) for width, count in config.char_cnn_filters]  # not read from wrappable modules
        # CODEPATH: relu in the released bilm-tf/AllenNLP models, tanh in ELMoForManyLangs'
        self.activation = torch.relu if config.char_cnn_activation == "relu" else torch.tanh
        self.highways = nn.ModuleList(
            ElmoHighway(config.num_char_cnn_filters) for _ in range(config.num_highway_layers)
        )
        self.projection = nn.Linear(config.token_features_size, config.projection_dim)

    def convolve(self, embedded: torch.Tensor) -> torch.Tensor:
        """(N, C, d_c) -> (N, F): each filter's maximum over positions, then the activation (both monotone). With
        autograd ``max``, whose backward is 3x faster than ``amax``'s (tied windows are identical padding)."""
        x, pooled = embedded.transpose(1, 2), []
        for conv in self.convolutions:
            scores = conv(x).transpose(1, 2)  # (N, windows, filters)
            pooled.append(scores.max(dim=1).values if torch.is_grad_enabled() else scores.amax(dim=1))
        return torch.cat([self.activation(features) for features in pooled], dim=-1)

    def piece_sizes(self, embedded: torch.Tensor) -> tuple[int, int]:
        """(words per CNN piece, words per highway piece) for ``embedded`` (N, C, d_c): in CPU inference, pieces of
        about 2**22 numbers (they stay in cache); elsewhere 4096 words for the CNN and all for the highways."""
        if embedded.device.type != "cpu" or embedded.requires_grad:
            return 4096, max(1, len(embedded))
        windows = [(embedded.shape[1] - width + 1) * count for width, count in self.filters]
        return max(1, 2**22 // max(windows)), max(1, 2**22 // self.projection.in_features)

    def token_vectors(self, features: torch.Tensor, word_vectors: torch.Tensor | None = None) -> torch.Tensor:
        """CNN features (N, F) (and word vectors (N, d_w)) -> (N, P): highways, [word vector; features], projection."""
        for highway in self.highways:
            features = highway(features)
        if word_vectors is not None:
            features = torch.cat([word_vectors.to(features.dtype), features], dim=-1)  # the word vector first
        return self.projection(features)

    def encode(self, char_ids: torch.Tensor, word_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(N, C) character ids (and (N,) word ids) -> (N, P), every row, in pieces of `piece_sizes` words."""
        embedded = self.char_embeddings(char_ids)
        word_vectors = None if self.word_embeddings is None else self.word_embeddings(word_ids)
        checkpointing = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        if _exporting() and not checkpointing:  # one piece: no piece count read from a traced (dynamic) shape
            return self.token_vectors(self.convolve(embedded), word_vectors)
        words, rows = self.piece_sizes(embedded)
        convolve = self.convolve
        if checkpointing:  # each piece recomputed in the backward pass
            convolve, words = functools.partial(self._gradient_checkpointing_func, self.convolve), min(words, 512)
        pieces = [convolve(piece) for piece in embedded.split(words)]
        x = torch.cat(pieces) if pieces else self.convolve(embedded)
        if len(x) <= rows:
            return self.token_vectors(x, word_vectors)
        pieces = x.split(rows)
        word_pieces = [None] * len(pieces) if word_vectors is None else word_vectors.split(rows)
        return torch.cat([self.token_vectors(*piece) for piece in zip(pieces, word_pieces, strict=True)])

    def forward(self, char_ids: torch.Tensor, word_ids: torch.Tensor | None = None) -> torch.Tensor:
        """As `encode`, each distinct word (characters and word id) encoded once where `_host_waits_for_nothing`."""
        if not _host_waits_for_nothing(char_ids.device):
            return self.encode(char_ids, word_ids)
        keys = char_ids if word_ids is None else torch.cat([char_ids, word_ids.unsqueeze(-1).to(char_ids.dtype)], -1)
        unique, inverse = torch.unique(keys, dim=0, return_inverse=True)
        if word_ids is None:
            return self.encode(unique)[inverse]
        return self.encode(unique[:, :-1], unique[:, -1].long())[inverse]


class ElmoLstmLayer(GradientCheckpointingLayer):
    """One direction of one layer: an LSTM projected H -> P, optionally clipped; `forward` is the reference loop."""

    def __init__(
        self, input_size: int, cell_size: int, hidden_size: int, cell_clip: float | None, proj_clip: float | None
    ):
        super().__init__()
        self.cell_size, self.hidden_size = cell_size, hidden_size
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        device = torch.empty(0).device  # the default device, or that of a `with torch.device(...)` around the model
        linear = functools.partial(nn.utils.skip_init, nn.Linear, device=device)  # no random draws (see _init_weights)
        self.input_transform = linear(input_size, 4 * cell_size, bias=True)
        self.recurrent_transform = linear(hidden_size, 4 * cell_size, bias=False)
        self.projection = linear(cell_size, hidden_size, bias=False)

    def forward(self, inputs: torch.Tensor, valid: torch.Tensor, state=None):
        """inputs (T, B, P), valid (T, B) each row's valid prefix, state (h (B, P), c (B, H)) -> (T, B, P), (h, c)."""
        steps, batch, _ = inputs.shape
        h, c = (inputs.new_zeros(batch, n) for n in (self.hidden_size, self.cell_size)) if state is None else state
        h, c = h.to(state_dtype(inputs.dtype)), c.to(state_dtype(inputs.dtype))  # float32 in bf16/fp16 models
        # steps via unbind/stack: indexing would cost a full-size zero tensor per step in the backward
        gates_x, valid = self.input_transform(inputs).unbind(0), valid.unsqueeze(-1).unbind(0)  # T x (B, 4H), (B, 1)
        outputs, project = [], lambda m: self.projection(m.to(inputs.dtype))
        for t in range(steps):
            gates = gates_x[t].to(h.dtype) + self.recurrent_transform(h.to(inputs.dtype))
            h, c, y = lstm_step(gates, h, c, valid[t], project, self.cell_clip, self.proj_clip)
            outputs.append(y)
        y = torch.stack(outputs).to(inputs.dtype) if outputs else inputs.new_zeros(0, batch, self.hidden_size)
        return y, (h, c)


@dataclass
class ElmoLstmState:
    """LSTM states carried between calls (stateful, as AllenNLP's ``Elmo``): ``hidden`` (2, L, rows, P), ``cell`` (2, L,
    rows, H) by direction, layer, row. Extra batch rows start at zero; rows past the batch, empty sentences stay."""

    hidden: torch.Tensor
    cell: torch.Tensor

    @staticmethod
    def check(state: object, num_layers: int, hidden_size: int, cell_size: int) -> None:
        """`ValueError` unless ``state`` is an `ElmoLstmState` of these sizes."""
        if not isinstance(state, ElmoLstmState):
            raise ValueError(f"lstm_state must be an ElmoLstmState (from a previous call), got {type(state).__name__}.")
        rows = tuple(state.hidden.shape[2:3]) if isinstance(state.hidden, torch.Tensor) else ()
        for name, width in (("hidden", hidden_size), ("cell", cell_size)):
            tensor = getattr(state, name)
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            if shape != (2, num_layers, *rows, width):
                raise ValueError(
                    f"lstm_state.{name} must have shape (2, {num_layers}, rows, {width}) for this model (the rows of "
                    f"lstm_state.hidden), got {shape}: a state of another model?"
                )

    def initial(self, batch: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The states (2, L, batch, *) a batch like ``like`` starts from (float32 at least), missing rows zero."""
        missing = max(batch - self.hidden.shape[2], 0)
        grown = lambda x: F.pad(x.to(like.device, state_dtype(like.dtype)), (0, 0, 0, missing))[:, :, :batch]
        return grown(self.hidden), grown(self.cell)

    def advanced(self, hidden: torch.Tensor, cell: torch.Tensor, used: torch.Tensor) -> ElmoLstmState:
        """The state after a batch with final states ``hidden``/``cell`` (2, L, B, *); ``used`` (B,): non-empty rows."""
        batch, keep, merged = hidden.shape[2], used.view(1, 1, -1, 1), []
        for new, old, kept in zip((hidden, cell), self.initial(batch, hidden), (self.hidden, self.cell), strict=True):
            merged.append(torch.cat([torch.where(keep, new.detach(), old), kept[:, :, batch:].to(new)], dim=2))
        return ElmoLstmState(*merged)


class ElmoBiLstm(nn.Module):
    """Two stacks of `ElmoLstmLayer`: forward, and backward (each row reversed over its length); layers l >= 1 add their
    input when ``use_skip_connections``. Both directions run at once, the same numbers in every form (`recurrence_for`):
    `stacked_lstm`, `loop_lstm` (reference), `torch_lstm` (no clipping), the package's `packed_lstm` (if configured)."""

    #: A replacement for `stacked_lstm` (same signature and numbers) for experiments, or `None`.
    recurrence = None

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.config, P = config, config.projection_dim
        sizes = (P, config.cell_size, P, config.cell_clip, config.proj_clip)
        self.forward_layers = nn.ModuleList(ElmoLstmLayer(*sizes) for _ in range(config.num_hidden_layers))
        self.backward_layers = nn.ModuleList(ElmoLstmLayer(*sizes) for _ in range(config.num_hidden_layers))

    def recurrence_for(self, inputs: torch.Tensor, stateless: bool):
        """The recurrence a call on ``inputs`` runs (``stateless``: no initial state given nor final state wanted)."""
        implementation, layers = self.config.lstm_implementation, [*self.forward_layers, *self.backward_layers]
        checkpointing = self.training and torch.is_grad_enabled() and any(x.gradient_checkpointing for x in layers)
        if implementation == "loop" or checkpointing or not weights_readable(layers):
            return loop_lstm
        if self.config.uses_torch_lstm and stateless:  # CODEPATH: unclipped models (none of the released ones)
            return torch_lstm
        if implementation == "fused" or (implementation == "auto" and fused_applies(inputs.device, inputs.dtype)):
            if torch.compiler.is_compiling():
                return stacked_lstm
            if self.recurrence is not None:
                return self.recurrence
            return packed_lstm if self.config.use_packed_kernels and installed_kernels() else stacked_lstm
        return loop_lstm

    def forward(
        self,
        embeddings: torch.Tensor,
        mask: torch.Tensor,
        initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
        dropout: float = 0.0,
        need_final_state: bool = False,
    ) -> tuple[list[torch.Tensor], tuple[torch.Tensor, torch.Tensor] | None]:
        """embeddings (B, T, P), mask (B, T) valid prefix, initial (h (2, L, B, P), c (2, L, B, H)) -> one
        (B, T, 2P) tensor per layer, and the final states (as the initial ones) when ``need_final_state``."""
        recurrence = self.recurrence_for(embeddings, initial_state is None and not need_final_state)
        lengths, valid = mask.sum(dim=1), mask.t()
        noise = dropout_noise(embeddings, dropout, len(self.forward_layers))
        x = torch.stack([embeddings, reverse_each_row(embeddings, lengths)]).transpose(1, 2)  # (2, T, B, P)
        outputs, finals = [], []
        for index, layers in enumerate(zip(self.forward_layers, self.backward_layers, strict=True)):
            layer_input = x if noise is None else x * noise[index]
            state = None if initial_state is None else (initial_state[0][:, index], initial_state[1][:, index])
            y, final = recurrence(layer_input, valid, layers, state)
            if index > 0 and self.config.use_skip_connections:  # CODEPATH: all released models; off in ablations
                y = y + layer_input * valid.unsqueeze(-1)
            outputs.append(y.transpose(1, 2))  # (2, B, T, P)
            finals.append(final)
            x = y
        merged = [torch.cat([y[0], reverse_each_row(y[1], lengths)], dim=-1) for y in outputs]
        states = tuple(torch.stack([f[k] for f in finals], dim=1) for k in (0, 1)) if need_final_state else None
        return merged, states  # the final states (2, L, B, *)


class ElmoScalarMix(nn.Module):
    """ELMo's layer mix ``gamma * sum_j softmax(w)_j * N(layer_j)`` per output (``N`` over the batch's unmasked tokens).

    Args:
        num_layers: number of layers to mix (L + 1).
        num_output_representations: independent mixes (each its own weights and gamma).
        do_layer_norm: normalise each layer before mixing.
        fixed_weights: optional pre-softmax weights, not trained (nor is gamma then).
    """

    def __init__(
        self,
        num_layers: int,
        num_output_representations: int = 1,
        do_layer_norm: bool = False,
        fixed_weights: list[float] | None = None,
    ):
        super().__init__()
        if fixed_weights is not None and len(fixed_weights) != num_layers:
            raise ValueError(f"fixed_weights needs {num_layers} values, got {len(fixed_weights)}: {fixed_weights!r}.")
        self.num_layers, self.do_layer_norm, trainable = num_layers, do_layer_norm, fixed_weights is None
        start = torch.zeros(num_layers) if trainable else torch.tensor(fixed_weights, dtype=torch.float)
        self.scalar_parameters = nn.Parameter(start.repeat(num_output_representations, 1), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.ones(num_output_representations), requires_grad=trainable)  # (K,)

    @property
    def layer_weights(self) -> torch.Tensor:
        """The normalised weights softmax(w), (K, L + 1)."""
        return torch.softmax(self.scalar_parameters, dim=-1)

    def forward(self, layers: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """layers (B, L + 1, T, D) (or a list of (B, T, D)), mask (B, T) -> K tensors (B, T, D)."""
        if isinstance(layers, (list, tuple)):
            layers = torch.stack(list(layers), dim=1)
        if layers.dim() != 4 or layers.shape[1] != self.num_layers:
            raise shape_error("ScalarMix's layers", f"(batch, {self.num_layers}, tokens, dim)", layers.shape)
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("ScalarMix with do_layer_norm needs the mask.")
            m = mask.to(layers.dtype)[:, None, :, None]  # (B, 1, T, 1)
            count = (m.sum() * layers.shape[-1]).clamp_min(1.0)
            mean = (layers * m).sum(dim=(0, 2, 3), keepdim=True) / count
            var = (((layers - mean) * m) ** 2).sum(dim=(0, 2, 3), keepdim=True) / count
            layers = (layers - mean) / torch.sqrt(var + 1e-12)
        weights = self.layer_weights.to(layers.dtype)
        # (K, L + 1) @ (L + 1, B * T * D): each output's weighted sum of the layers
        mixed = (weights @ layers.transpose(0, 1).flatten(1)).view(len(weights), layers.shape[0], *layers.shape[2:])
        mixed = mixed * self.gamma.to(layers.dtype)[:, None, None, None]
        if mask is not None:
            mixed = mixed * mask.to(layers.dtype)[None, :, :, None]
        return list(mixed.unbind(0))


# Pretrained base
class ElmoPreTrainedModel(PreTrainedModel):
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["ElmoCharacterEncoder", "ElmoLstmLayer"]
    # one checkpoint serves every class: the biLM alone ignores the softmax or a task head's layers
    _keys_to_ignore_on_load_unexpected = [r"^softmax\.", r"^classifier\.", r"^scalar_mix\."]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """bilm-tf's initialisation: char table U(-1, 1), relu convolutions U(-0.05, 0.05), LSTM Glorot-uniform with
        forget bias +1, other Linears N(0, 1/fan_in) (highway gate bias -2), a head's classifier Glorot-uniform."""
        base = self.base_model
        encoder = getattr(base, "encoder", None)
        lstms = [] if encoder is None else [*encoder.forward_layers, *encoder.backward_layers]
        lstm = next((x for x in lstms if module in x.children()), None)
        if isinstance(module, ElmoWordEmbedding):  # rows of about unit norm
            init.normal_(module.weight, 0.0, 1.0 / math.sqrt(module.embedding_dim))
        elif isinstance(module, nn.Embedding):  # the character table
            table = torch.empty_like(module.weight).uniform_(-1.0, 1.0)
            if module.padding_idx is not None:
                table[module.padding_idx] = 0.0
            init.copy_(module.weight, table)
        elif isinstance(module, nn.Conv1d):
            if self.config.char_cnn_activation == "relu":  # CODEPATH: bilm-tf's relu CNN; tanh: ELMoForManyLangs
                init.uniform_(module.weight, -0.05, 0.05)
            else:
                init.normal_(module.weight, 0.0, math.sqrt(1.0 / (module.kernel_size[0] * module.in_channels)))
            init.zeros_(module.bias)
        elif lstm is not None:
            if module is lstm.projection:
                init.xavier_uniform_(module.weight)
            else:  # Glorot-uniform over the original stacked [x; h] -> 4H matrix
                limit = math.sqrt(6.0 / (lstm.input_transform.in_features + lstm.hidden_size + 4 * lstm.cell_size))
                init.uniform_(module.weight, -limit, limit)
            if module.bias is not None:
                bias = torch.zeros_like(module.bias)
                bias[lstm.cell_size : 2 * lstm.cell_size] = 1.0
                init.copy_(module.bias, bias)
        elif isinstance(module, nn.Linear) and module is getattr(self, "classifier", None):
            init.xavier_uniform_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):  # highway transform or gate, projection, softmax
            char_encoder = getattr(base, "char_encoder", None)
            gate = char_encoder is not None and any(module is highway.gate for highway in char_encoder.highways)
            init.normal_(module.weight, 0.0, math.sqrt(1.0 / module.in_features))
            init.constant_(module.bias, -2.0 if gate else 0.0)
        elif isinstance(module, ElmoScalarMix):
            weights = module.scalar_parameters
            fixed = 0.0 if weights.requires_grad else self.config.scalar_mix_parameters
            init.copy_(weights, torch.tensor(fixed).to(weights).expand_as(weights))
            init.ones_(module.gamma)
        else:  # a module ELMo does not define (an adapter's layer, say)
            super()._init_weights(module)

    def get_correct_attn_implementation(self, requested_attention: str | None, is_init_check: bool = False) -> str:
        """ELMo has no attention: every ``attn_implementation`` is accepted, runs the same code and reads "eager"."""
        return "eager"

    def get_input_embeddings(self) -> nn.Module | None:
        """The word-embedding input of a model that has one, else `None` (characters are not a token table)."""
        return self.base_model.char_encoder.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        if self.get_input_embeddings() is None:
            raise ValueError(f"{type(self).__name__} has no token-embedding input to replace (a character model).")
        self.base_model.char_encoder.word_embeddings = value

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Module:
        """Resize the word-embedding input: kept rows kept, new ones ELMo-initialised (``mean_resizing`` unused)."""
        if (old := self.get_input_embeddings()) is None:
            raise ValueError(
                f"{type(self).__name__} reads characters and has no token-embedding table to resize "
                "(config.word_input_vocab_size is 0); its character table is fixed by the alphabet."
            )
        size = old.num_embeddings if new_num_tokens is None else new_num_tokens
        if pad_to_multiple_of is not None:
            size = -(-size // pad_to_multiple_of) * pad_to_multiple_of
        if isinstance(size, bool) or not isinstance(size, int) or size < 4:
            raise ValueError(f"new_num_tokens must be an integer >= 4 (the special words come first), got {size!r}.")
        try:  # bounded as a config's word input is, before anything is allocated
            self.config.check_fields({"word_input_vocab_size": size})
        except ValueError as error:
            raise ValueError(f"new_num_tokens={size}: {error}") from None
        if size == old.num_embeddings:
            return old
        new = ElmoWordEmbedding(size, old.embedding_dim, device=old.weight.device, dtype=old.weight.dtype)
        self._init_weights(new)
        with torch.no_grad():
            new.weight[: min(size, old.num_embeddings)] = old.weight[:size]
        self.base_model.char_encoder.word_embeddings = new.requires_grad_(old.weight.requires_grad)
        self.config.word_input_vocab_size = size
        return new


def _unused_inputs(kwargs: dict, owner: str, output_attentions: bool | None = None) -> None:
    """Accept what other models' callers pass (``token_type_ids``, ``position_ids``); refuse anything else."""
    if output_attentions:
        raise ValueError(f"{owner} has no attentions to return (a biLSTM): call it without output_attentions=True.")
    if unexpected := [key for key in kwargs if key not in ("token_type_ids", "position_ids")]:
        raise TypeError(f"{owner}.forward() got an unexpected keyword argument {unexpected[0]!r}.")


def _loss_kwargs(kwargs: dict, owner: str):
    """``num_items_in_batch`` (passed by `Trainer`) out of ``kwargs``; the rest checked by `_unused_inputs`."""
    num_items_in_batch = kwargs.pop("num_items_in_batch", None)
    _unused_inputs(kwargs, owner, kwargs.pop("output_attentions", None))
    return num_items_in_batch


def _normalised(total: torch.Tensor, mean: torch.Tensor, num_items_in_batch) -> torch.Tensor:
    """``mean``, or ``total / num_items_in_batch`` under `Trainer`'s gradient accumulation (as transformers' losses)."""
    return mean if num_items_in_batch is None else total / torch.as_tensor(num_items_in_batch, device=total.device)


@dataclass
class ElmoModelOutput(ModelOutput):
    """Output of `ElmoModel`.

    Args:
        last_hidden_state: top layer, forward and backward halves, (batch, tokens, hidden_size).
        hidden_states: with ``output_hidden_states``, all L + 1 layers (layer 0: the token vectors twice).
        attention_mask: (batch, tokens), 1 where a token is.
        lstm_state: with ``return_lstm_state`` (or a given ``lstm_state``), the states to continue from.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attention_mask: torch.LongTensor | None = None
    lstm_state: ElmoLstmState | None = None


@dataclass
class ElmoBidirectionalLMOutput(ModelOutput):
    """Output of `ElmoForBidirectionalLM`.

    Args:
        loss: mean of the forward and backward losses.
        forward_loss / backward_loss: mean negative log-likelihood per target word of each direction.
        forward_nll_sum / backward_nll_sum: summed negative log-likelihoods.
        num_forward_targets / num_backward_targets: number of predicted words of each direction.
        last_hidden_state: top layer (batch, tokens, hidden_size); ``keep_sentence_boundaries``: ``<S>``, ``</S>`` too.
        hidden_states: with ``output_hidden_states``, all L + 1 layers at the same positions.
    """

    loss: torch.FloatTensor | None = None
    forward_loss: torch.FloatTensor | None = None
    backward_loss: torch.FloatTensor | None = None
    forward_nll_sum: torch.FloatTensor | None = None
    backward_nll_sum: torch.FloatTensor | None = None
    num_forward_targets: torch.LongTensor | None = None
    num_backward_targets: torch.LongTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


# Model
class ElmoModel(ElmoPreTrainedModel):
    """The ELMo biLM: character ids (batch, tokens, 50) -> all layers (batch, tokens, hidden_size). ``<S>``/``</S>``
    are added around every sentence inside the model and removed from the outputs; padding (either side) gives 0."""

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.char_encoder = ElmoCharacterEncoder(config)
        self.encoder = ElmoBiLstm(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        word_input_ids: torch.Tensor | None = None,
        lstm_state: ElmoLstmState | None = None,
        return_lstm_state: bool = False,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        add_sentence_boundaries: bool = True,
        keep_sentence_boundaries: bool = False,
        lstm_dropout: float = 0.0,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> ElmoModelOutput | tuple:
        r"""
        Args:
            input_ids: character ids (batch, tokens, 50) from `ElmoTokenizer` (0 rows = no token).
            attention_mask: (batch, tokens) 1 for tokens, 0 for padding; derived from ``input_ids`` when omitted.
            word_input_ids: (batch, tokens) word ids, for a model with a word-embedding input.
            lstm_state: states to start the LSTMs from (the ``lstm_state`` of a previous call).
            return_lstm_state: also return the states to continue from (always when ``lstm_state`` is given).
            add_sentence_boundaries: add ``<S>``/``</S>`` around each sentence (`False`: the input holds them).
            keep_sentence_boundaries: also return the boundary positions (tokens + 2 rows); needs right padding.
            lstm_dropout: dropout on every LSTM layer's input, in training mode (pretraining).
            inputs_embeds: token vectors (batch, tokens, projection_dim) replacing the character encoder's output.
        """
        _unused_inputs(kwargs, type(self).__name__, output_attentions)
        config = self.config
        output_hidden_states = output_hidden_states if output_hidden_states is not None else config.output_hidden_states
        return_dict = return_dict if return_dict is not None else config.return_dict
        if inputs_embeds is not None:
            input_ids, mask = self._placeholder_inputs(input_ids, inputs_embeds, attention_mask)
        else:
            width, max_id = config.max_characters_per_token, config.num_characters - 1
            input_ids, mask = validated_inputs(input_ids, attention_mask, width, max_id)
        word_ids = None
        if config.word_input_vocab_size:  # CODEPATH: ELMoForManyLangs models read word ids too; bilm-tf's do not
            word_ids = torch.zeros_like(mask, dtype=torch.long)  # under inputs_embeds
            if inputs_embeds is None:
                if word_input_ids is None:
                    raise ValueError("this model has a word-embedding input: pass word_input_ids (from its tokenizer).")
                word_ids = _integers(word_input_ids, "word_input_ids", mask.device, "hold integer word ids", mask.shape)
                bad, upper = (word_ids < 0) | (word_ids >= config.word_input_vocab_size), config.word_input_vocab_size
                check_values(bad, f"word_input_ids hold a word id outside [0, {upper}).")
        batch, steps = mask.shape
        lengths = mask.sum(dim=1)
        positions = torch.arange(steps, device=mask.device).unsqueeze(0)
        left_aligned = positions < lengths.unsqueeze(1)  # (B, T): where each row's tokens go when moved to the front
        destination = None
        if keep_sentence_boundaries:
            check_values(mask != left_aligned, "keep_sentence_boundaries needs right-padded input (tokens first).")
        else:
            # tokens to the front in order, t to destination[b, t], and back (counted, not sorted: exporters handle it)
            tokens_before = mask.long().cumsum(dim=1)
            destination = torch.where(mask, tokens_before - 1, lengths.unsqueeze(1) + positions - tokens_before)
            order = torch.empty_like(destination).scatter_(1, destination, positions.expand_as(destination))
            input_ids = input_ids.gather(1, order.unsqueeze(-1).expand_as(input_ids))
            word_ids = None if word_ids is None else word_ids.gather(1, order)
            if inputs_embeds is not None:
                inputs_embeds = inputs_embeds.gather(1, order.unsqueeze(-1).expand_as(inputs_embeds))
        mask = left_aligned
        if add_sentence_boundaries:
            if word_ids is not None:
                word_ids = with_word_boundaries(word_ids, mask, lengths)
            input_ids, mask = with_sentence_boundaries(input_ids, mask, lengths, config.char_vocabulary)
        if inputs_embeds is None:
            embeddings = self._embed_tokens(input_ids, mask, word_ids)  # (B, T', P)
        else:  # the given vectors at the token positions; the boundaries (placeholders are 0 rows) encoded here
            embeddings = inputs_embeds * left_aligned.unsqueeze(-1).to(inputs_embeds.dtype)
            if add_sentence_boundaries:
                boundaries = self._embed_tokens(input_ids, mask & (input_ids != 0).any(dim=-1), word_ids)
                embeddings = boundaries + F.pad(embeddings, (0, 0, 1, 1)).to(boundaries.dtype)
        if lstm_state is not None:
            ElmoLstmState.check(lstm_state, config.num_hidden_layers, config.projection_dim, config.cell_size)
        want_state = return_lstm_state or lstm_state is not None
        initial = None if lstm_state is None else lstm_state.initial(batch, embeddings)
        dropout = lstm_dropout if self.training else 0.0
        layers, final = self.encoder(embeddings, mask, initial, dropout, need_final_state=want_state)
        all_layers, out_mask = [torch.cat([embeddings, embeddings], dim=-1)] + layers, mask
        if add_sentence_boundaries and not keep_sentence_boundaries:
            all_layers, out_mask = [layer[:, 1:-1] for layer in all_layers], left_aligned  # </S> is masked
        all_layers = [layer * out_mask.unsqueeze(-1).to(layer.dtype) for layer in all_layers]
        if destination is not None:  # back to the caller's positions
            all_layers = [layer.gather(1, destination.unsqueeze(-1).expand_as(layer)) for layer in all_layers]
            out_mask = out_mask.gather(1, destination)
        new_state = None
        if want_state:
            start = lstm_state or ElmoLstmState(*(f.new_zeros(f.shape[:2] + (0, f.shape[3])) for f in final))
            new_state = start.advanced(final[0], final[1], used=mask.any(dim=1))
        hidden_states = tuple(all_layers) if output_hidden_states else None
        output = ElmoModelOutput(all_layers[-1], hidden_states, out_mask.long(), new_state)
        return output if return_dict else output.to_tuple()

    def _placeholder_inputs(self, input_ids, inputs_embeds, attention_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """For ``inputs_embeds``: all-zero character ids of its shape and the token mask, after checking shapes."""
        if input_ids is not None:
            raise ValueError("pass either input_ids or inputs_embeds, not both.")
        width = self.config.projection_dim
        if not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != width:
            raise ValueError(
                f"inputs_embeds must be token vectors of shape (batch, tokens, {width}) (projection_dim), "
                f"got {tuple(getattr(inputs_embeds, 'shape', ()))}."
            )
        batch, steps = inputs_embeds.shape[:2]
        mask = torch.ones(batch, steps, dtype=torch.bool, device=inputs_embeds.device)
        if attention_mask is not None:
            mask = torch.as_tensor(attention_mask, device=inputs_embeds.device).bool()
        check_shape(mask, (batch, steps), "attention_mask", "inputs_embeds")
        return mask.new_zeros(batch, steps, self.config.max_characters_per_token, dtype=torch.long), mask

    def _embed_tokens(self, input_ids: torch.Tensor, mask: torch.Tensor, word_ids: torch.Tensor | None = None):
        """Token vectors (B, T, P) of present tokens, padding 0 (only those encoded where `_host_waits_for_nothing`)."""
        batch, steps, width = input_ids.shape
        if not _host_waits_for_nothing(input_ids.device):
            flat_word_ids = None if word_ids is None else word_ids.reshape(batch * steps)
            encoded = self.char_encoder.encode(input_ids.reshape(batch * steps, width), flat_word_ids)
            return encoded.view(batch, steps, -1) * mask.unsqueeze(-1).to(encoded.dtype)
        encoded = self.char_encoder(input_ids[mask], None if word_ids is None else word_ids[mask])
        embeddings = encoded.new_zeros(batch, steps, self.config.projection_dim)  # encoder's dtype (autocast: bf16)
        embeddings[mask] = encoded
        return embeddings


# Heads
class ElmoForBidirectionalLM(ElmoPreTrainedModel):
    """ELMo's pretraining: a forward LM predicts the next word, a backward LM the previous, via one exact softmax."""

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        if config.vocab_size <= 4:
            raise ValueError(
                f"ElmoForBidirectionalLM needs a word vocabulary, but config.vocab_size={config.vocab_size} "
                "(only the special words); build a vocabulary first."
            )
        for name, expected in (("bos_token_id", BOS_ID), ("eos_token_id", EOS_ID)):
            if getattr(config, name) != expected:  # another id would score the boundaries as another word, silently
                raise ValueError(
                    f"ElmoForBidirectionalLM predicts <S> and </S> as words {BOS_ID} and {EOS_ID} of every ELMo "
                    f"vocabulary, but config.{name}={str(getattr(config, name))[:40]}."
                )
        self.elmo = ElmoModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.softmax = nn.Linear(config.projection_dim, config.vocab_size)
        self.post_init()

    @property
    def loss_function(self):
        """Training loss ``(hiddens, targets) -> nlls``: exact unless set (`elmo pretrain`: sampled); eval: exact."""
        return getattr(self, "_loss_function", None) or self.full_softmax_nlls

    @loss_function.setter
    def loss_function(self, value) -> None:
        self._loss_function = value

    def full_softmax_nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Exact -log p(target | hidden) for hidden (N, P), targets (N,), chunked over the vocabulary."""
        weight, bias, chunk = self.softmax.weight, self.softmax.bias, self.config.lm_softmax_chunk_size
        log_normaliser = None
        for start in range(0, weight.shape[0], chunk):
            logits = F.linear(hidden, weight[start : start + chunk], bias[start : start + chunk])
            part = torch.logsumexp(logits.float(), dim=-1)
            log_normaliser = part if log_normaliser is None else torch.logaddexp(log_normaliser, part)
        return log_normaliser - ((hidden * weight[targets]).sum(-1) + bias[targets]).float()

    def full_softmax_nlls(self, hiddens: list[torch.Tensor], targets: list[torch.Tensor]) -> list[torch.Tensor]:
        return [self.full_softmax_nll(h, t) for h, t in zip(hiddens, targets, strict=True)]

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        add_sentence_boundaries: bool = True,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        keep_sentence_boundaries: bool = False,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> ElmoBidirectionalLMOutput | tuple:
        r"""
        Args:
            input_ids / attention_mask / inputs_embeds: as for `ElmoModel`, right-padded.
            labels: word ids (batch, tokens), -100 where nothing is to be predicted; with boundaries, the forward LM
                also predicts ``</S>`` and the backward LM ``<S>``.
            add_sentence_boundaries: `False` for fixed windows of a token stream.
            keep_sentence_boundaries: return the layers at the biLM's positions (tokens + 2 rows).
        """
        num_items_in_batch = _loss_kwargs(kwargs, type(self).__name__)
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        options = {"inputs_embeds": inputs_embeds, "output_hidden_states": output_hidden_states, "return_dict": True}
        boundaries = {"add_sentence_boundaries": add_sentence_boundaries, "keep_sentence_boundaries": True}
        lstm_dropout = self.config.hidden_dropout_prob
        outputs = self.elmo(input_ids, attention_mask, lstm_dropout=lstm_dropout, **boundaries, **options)
        top, full_mask = outputs.last_hidden_state, outputs.attention_mask.bool()  # boundary positions included
        # (B, T) word positions: with boundaries, position p holds a word iff position p + 1 is inside the row
        tokens = full_mask[:, 2:] if add_sentence_boundaries else full_mask
        # the output is built once, at the end: transformers before 5.4 drop fields set on a built output
        states = {"last_hidden_state": top, "hidden_states": outputs.hidden_states}
        if add_sentence_boundaries and not keep_sentence_boundaries:  # one row per word
            words = tokens.unsqueeze(-1).to(top.dtype)
            states["last_hidden_state"] = top[:, 1:-1] * words
            if outputs.hidden_states is not None:
                states["hidden_states"] = tuple(layer[:, 1:-1] * words for layer in outputs.hidden_states)
        if labels is not None:
            labels = integer_labels(labels, self.config.vocab_size, "word ids", top.device, counted=tokens)
            if tuple(labels.shape) != tuple(tokens.shape):
                raise shape_error("labels", f"{tuple(tokens.shape)} (batch, tokens)", labels.shape)
            targets = self._targets(labels, tokens, add_sentence_boundaries)
            P, top = self.config.projection_dim, self.dropout(top)
            selected = []  # a prediction needs a real word at the reading and at the predicted position
            for hidden, target, source in (
                (top[:, :-1, :P], targets[:, 1:], full_mask[:, :-1]),  # forward: position t predicts t + 1
                (top[:, 1:, P:], targets[:, :-1], full_mask[:, 1:]),  # backward: position t predicts t - 1
            ):
                keep = (target != IGNORE_INDEX) & source
                if _host_waits_for_nothing(top.device):  # exactly the predicted rows
                    selected.append((hidden[keep], target[keep], keep[keep]))
                else:  # every row, the others weighted 0
                    selected.append((hidden.reshape(-1, P), target.masked_fill(~keep, 0).reshape(-1), keep.reshape(-1)))
            hiddens, targets, weights = (list(x) for x in zip(*selected, strict=True))
            nlls = (self.loss_function if self.training else self.full_softmax_nlls)(hiddens, targets)
            counts = [w.sum() for w in weights]
            sums = [torch.where(w, nll, 0.0).sum() for nll, w in zip(nlls, weights, strict=True)]
            means = [s / c.clamp_min(1) for s, c in zip(sums, counts, strict=True)]
            states["loss"] = _normalised(0.5 * (sums[0] + sums[1]), 0.5 * (means[0] + means[1]), num_items_in_batch)
            states["forward_loss"], states["backward_loss"] = means
            states["forward_nll_sum"], states["backward_nll_sum"] = sums
            states["num_forward_targets"], states["num_backward_targets"] = counts
        output = ElmoBidirectionalLMOutput(**states)
        return output if return_dict else output.to_tuple()

    def _targets(self, labels: torch.Tensor, mask: torch.Tensor, add_sentence_boundaries: bool) -> torch.Tensor:
        """Word ids aligned with the biLM positions (B, T'), -100 where nothing is to be predicted."""
        labels = labels.masked_fill(~mask, IGNORE_INDEX)
        if not add_sentence_boundaries:
            return labels
        lengths, nonempty = mask.sum(dim=1), mask.any(dim=1)
        targets = F.pad(labels, (1, 1), value=IGNORE_INDEX)
        targets[:, 0] = torch.where(nonempty, self.config.bos_token_id, IGNORE_INDEX)
        eos = torch.where(nonempty, self.config.eos_token_id, IGNORE_INDEX).unsqueeze(1)
        return targets.scatter(1, (lengths + 1).unsqueeze(1), eos)


class ElmoTaskHeadMixin:
    """What the heads share: the scalar mix of the biLM's layers (from ``input_ids`` or cached ``elmo_hidden_states``),
    ``config.freeze_elmo`` (parameters without gradient: adapters inside still train); the biLM applies no dropout."""

    def _build_head(self, config: ElmoConfig, width: int) -> None:
        """The biLM, the mix, the dropout and a ``width`` -> num_labels classifier."""
        self.num_labels = config.num_labels
        self.elmo = ElmoModel(config)
        mix = (config.num_output_representations, config.scalar_mix_layer_norm, config.scalar_mix_parameters)
        self.scalar_mix = ElmoScalarMix(config.num_hidden_layers + 1, *mix)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(width, config.num_labels)

    def post_init(self) -> None:
        super().post_init()
        if self.config.freeze_elmo:  # CODEPATH: heads of a pretrained biLM (default) train only the mix and classifier
            self.freeze_elmo()

    def tie_weights(self, *args, **kwargs):
        """`tie_weights`, then a frozen biLM frozen again (transformers 5 loads weights as parameters needing grad)."""
        tied = super().tie_weights(*args, **kwargs)
        if getattr(self, "_elmo_frozen", False):
            self.elmo.requires_grad_(False)
        return tied

    def freeze_elmo(self) -> None:
        """Freeze the biLM: its parameters stop requiring gradients (the mix and classifier still train)."""
        self._elmo_frozen = True
        self.elmo.requires_grad_(False)

    def unfreeze_elmo(self) -> None:
        """Fine-tune the biLM too: its parameters require gradients again."""
        self._elmo_frozen = False
        self.elmo.requires_grad_(True)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        elmo_hidden_states: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        word_input_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | TokenClassifierOutput | tuple:
        r"""
        Args:
            input_ids / attention_mask / word_input_ids / inputs_embeds: as for `ElmoModel`.
            elmo_hidden_states: instead, cached biLM layers (batch, L + 1, tokens, 2P) with their ``attention_mask``.
            labels: sequence classification: (batch,) class ids, floats for regression, (batch, num_labels) for
                multi-label; token classification: (batch, tokens) class ids, -100 where nothing is predicted.
        """
        num_items_in_batch = _loss_kwargs(kwargs, type(self).__name__)
        if elmo_hidden_states is not None:  # cached biLM layers (B, L + 1, T, 2P) and their mask
            layers, expected = elmo_hidden_states, (self.config.num_representation_layers, self.config.hidden_size)
            if layers.dim() != 4 or (layers.shape[1], layers.shape[3]) != expected:
                raise shape_error("elmo_hidden_states", f"(batch, {expected[0]}, tokens, {expected[1]})", layers.shape)
            if attention_mask is None:
                raise ValueError("cached elmo_hidden_states need their attention_mask.")
            mask = torch.as_tensor(attention_mask, device=layers.device).bool()
            check_shape(mask, (layers.shape[0], layers.shape[2]), "attention_mask", "elmo_hidden_states")
            layers = layers.to(self.scalar_mix.gamma.dtype)
        elif input_ids is None and inputs_embeds is None:
            raise ValueError("pass input_ids (character ids) or cached elmo_hidden_states.")
        else:
            embeds = {"word_input_ids": word_input_ids, "inputs_embeds": inputs_embeds}
            out = self.elmo(input_ids, attention_mask, output_hidden_states=True, return_dict=True, **embeds)
            layers, mask = torch.stack(out.hidden_states, dim=1), out.attention_mask.bool()
        logits, loss = self.classify(self.scalar_mix(layers, mask)[0], mask), None
        if labels is not None:
            total, mean = self.head_loss(logits, torch.as_tensor(labels, device=logits.device), mask)
            loss = _normalised(total, mean, num_items_in_batch)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        hidden_states = tuple(layers.unbind(1)) if output_hidden_states else None
        output = self.output_class(loss=loss, logits=logits, hidden_states=hidden_states)
        return output if (return_dict if return_dict is not None else self.config.return_dict) else output.to_tuple()


class ElmoForSequenceClassification(ElmoTaskHeadMixin, ElmoPreTrainedModel):
    """ELMo features -> scalar mix -> masked pooling -> dropout -> linear, with transformers' ``problem_type``s."""

    output_class = SequenceClassifierOutput

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        pooled = 2 if config.classifier_pooling == "mean_max" else 1  # CODEPATH: mean_max heads pool twice as wide
        self._build_head(config, pooled * config.hidden_size)
        self.post_init()

    def pool(self, mixed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T, D), (B, T) -> (B, D) (2D for mean_max). Empty sentences pool to zeros."""
        m, kind = mask.unsqueeze(-1).to(mixed.dtype), self.config.classifier_pooling
        mean = (mixed * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
        if kind == "mean":
            return mean
        if kind in ("max", "mean_max"):
            maximum = mixed.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
            maximum = torch.where(mask.any(dim=1, keepdim=True), maximum, torch.zeros_like(maximum))
            return maximum if kind == "max" else torch.cat([mean, maximum], dim=-1)
        lengths = mask.sum(dim=1)
        index = torch.zeros_like(lengths) if kind == "first" else (lengths - 1).clamp_min(0)
        first_or_last = mixed[torch.arange(mixed.shape[0], device=mixed.device), index]
        return first_or_last * (lengths > 0).unsqueeze(-1).to(mixed.dtype)

    def classify(self, mixed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.pool(mixed, mask)))

    def head_loss(self, logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor):
        """(sum, mean) of the per-item losses of the config's ``problem_type`` (inferred from the labels if unset)."""
        if self.config.problem_type is None:
            if self.num_labels == 1:
                self.config.problem_type = "regression"
            elif not labels.dtype.is_floating_point and labels.dim() == 1:
                self.config.problem_type = "single_label_classification"
            else:
                self.config.problem_type = "multi_label_classification"
        if self.config.problem_type == "regression":
            if self.num_labels == 1:
                logits, labels = logits.squeeze(-1), labels.view(-1)
            per_item = F.mse_loss(logits, labels.to(logits.dtype), reduction="none")
        elif self.config.problem_type == "single_label_classification":
            labels = integer_labels(labels.view(-1), self.num_labels, "class ids", logits.device)
            per_item = F.cross_entropy(logits.view(-1, self.num_labels), labels, reduction="none")
        else:
            per_item = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), reduction="none")
        return per_item.sum(), per_item.mean()


class ElmoForTokenClassification(ElmoTaskHeadMixin, ElmoPreTrainedModel):
    """ELMo features -> scalar mix -> dropout -> linear, per token (tagging). Labels -100 are ignored."""

    output_class = TokenClassifierOutput

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self._build_head(config, config.hidden_size)
        self.post_init()

    @staticmethod
    def custom_pipelines() -> dict:
        """The ``config.custom_pipelines`` entry of this head's pipeline (``save_model_folder`` writes it)."""
        from .pipeline_elmo import CUSTOM_PIPELINES  # a relative import: saving copies pipeline_elmo.py too

        return CUSTOM_PIPELINES

    def classify(self, mixed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(mixed))  # (B, T, num_labels)

    def head_loss(self, logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor):
        """(sum, mean) of the cross-entropy over the labelled tokens."""
        if tuple(labels.shape) != tuple(mask.shape):
            raise shape_error("labels", f"{tuple(mask.shape)} (batch, tokens)", labels.shape)
        labels = integer_labels(labels, self.num_labels, "class ids", logits.device).masked_fill(~mask, IGNORE_INDEX)
        flat = labels.reshape(-1)
        total = F.cross_entropy(logits.reshape(-1, self.num_labels), flat, ignore_index=IGNORE_INDEX, reduction="sum")
        return total, total / (flat != IGNORE_INDEX).sum().clamp_min(1)


__all__ = [
    "ElmoPreTrainedModel", "ElmoModel", "ElmoForBidirectionalLM", "ElmoForSequenceClassification",
    "ElmoForTokenClassification", "ElmoModelOutput", "ElmoBidirectionalLMOutput", "ElmoLstmState",
]  # fmt: skip
