# Copyright 2026 The modeling_elmo authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""The inputs of ELMo's models, checked (every check names the bad value), and the sentence boundaries they add."""

from __future__ import annotations

import torch

from .configuration_elmo import BOS_ID, EOS_ID, PAD_ID, sentence_boundary_char_ids

IGNORE_INDEX = -100  # labels that predict nothing, as everywhere in transformers


def check_values(bad: torch.Tensor, message: str) -> None:
    """Raise ``ValueError(message)`` if any element of ``bad`` is set. Skipped while tracing (a graph cannot branch on
    values) and in training steps on an accelerator (reading the flag would make the host wait for the device)."""
    if torch.compiler.is_compiling() or (bad.device.type != "cpu" and torch.is_grad_enabled()):
        return
    if bool(bad.any()):
        raise ValueError(message)


def _integer_ids(values, name: str, device: torch.device, what: str) -> torch.Tensor:
    values = torch.as_tensor(values, device=device)
    if values.dtype.is_floating_point or values.dtype == torch.bool or values.is_complex():
        raise ValueError(f"{name} must {what}, got dtype {values.dtype}.")
    return values.long()


def _one_per_token(values, name: str, input_ids: torch.Tensor) -> torch.Tensor:
    values = torch.as_tensor(values, device=input_ids.device)
    if tuple(values.shape) != tuple(input_ids.shape[:2]):
        raise ValueError(
            f"{name} has shape {tuple(values.shape)} but input_ids has {tuple(input_ids.shape[:2])} tokens."
        )
    return values


def integer_labels(labels, upper: int, what: str, device: torch.device, counted: torch.Tensor | None = None):
    """``labels`` as int64, checked: integers in [0, ``upper``) or -100 (ignored), where ``counted`` (a mask) is set."""
    labels = _integer_ids(labels, "labels", device, f"be integer {what}")
    bad = ((labels < 0) | (labels >= upper)) & (labels != IGNORE_INDEX)
    check_values(
        bad if counted is None else bad & counted,
        f"labels hold a {what[:-1]} outside [0, {upper})"
        + (" (only -100 marks a position to ignore)." if what == "word ids" else "."),
    )
    return labels


def validated_inputs(input_ids, attention_mask, width: int, max_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The character ids (B, T, ``width``) and the token mask (B, T) bool; without a mask, a token is present where
    its character ids are not all 0."""
    if input_ids is None:
        raise ValueError(f"ElmoModel needs input_ids (character ids of shape (batch, tokens, {width})).")
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() != 3 or input_ids.shape[-1] != width:
        raise ValueError(
            f"input_ids must have shape (batch, tokens, {width}) (character ids from ElmoTokenizer), "
            f"got {tuple(input_ids.shape)}."
        )
    if input_ids.dtype not in (torch.int16, torch.int32, torch.int64):
        raise ValueError(
            f"input_ids must hold integer character ids in [0, {max_id}] (int16, int32 or int64), "
            f"got dtype {input_ids.dtype}."
        )
    if input_ids.shape[0] == 0:
        raise ValueError("empty batch: input_ids has batch size 0.")
    check_values((input_ids < 0) | (input_ids > max_id), f"input_ids hold a character id outside [0, {max_id}].")
    present = (input_ids > 0).any(dim=-1)
    if attention_mask is None:
        return input_ids, present
    mask = _one_per_token(attention_mask, "attention_mask", input_ids).bool()
    check_values(mask & ~present, "attention_mask marks a token as present whose character ids are all 0.")
    return input_ids, mask


def validated_features(features: torch.Tensor, attention_mask, config, dtype: torch.dtype):
    """Cached biLM layers (B, L + 1, T, 2P) given to a head instead of character ids, in ``dtype``, and their mask."""
    expected = (config.num_representation_layers, config.hidden_size)
    if features.dim() != 4 or (features.shape[1], features.shape[3]) != expected:
        raise ValueError(
            f"elmo_hidden_states must have shape (batch, {expected[0]}, tokens, {expected[1]}), "
            f"got {tuple(features.shape)}."
        )
    if attention_mask is None:
        raise ValueError("cached elmo_hidden_states need their attention_mask.")
    attention_mask = torch.as_tensor(attention_mask, device=features.device)
    if tuple(attention_mask.shape) != (features.shape[0], features.shape[2]):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, but the cached features have "
            f"{features.shape[0]} sentences of {features.shape[2]} tokens."
        )
    return features.to(dtype), attention_mask.bool()


def validated_word_inputs(word_input_ids, input_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The word ids (B, T) of a model with a word-embedding input: one per token, integers in [0, ``vocab_size``)."""
    if word_input_ids is None:
        raise ValueError("this model has a word-embedding input: pass word_input_ids (from its tokenizer) too.")
    word_input_ids = _one_per_token(word_input_ids, "word_input_ids", input_ids)
    word_input_ids = _integer_ids(word_input_ids, "word_input_ids", input_ids.device, "hold integer word ids")
    check_values(
        (word_input_ids < 0) | (word_input_ids >= vocab_size),
        f"word_input_ids hold a word id outside [0, {vocab_size}).",
    )
    return word_input_ids


def with_word_boundaries(word_ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Left-aligned word ids (B, T) -> (B, T + 2) with ``<S>`` at 0 and ``</S>`` after each row's last word."""
    batch, steps = word_ids.shape
    ids = word_ids.new_full((batch, steps + 2), PAD_ID)
    ids[:, 1:-1] = torch.where(mask, word_ids, PAD_ID)
    ids[:, 0] = BOS_ID
    return ids.scatter(1, (lengths + 1).view(batch, 1), EOS_ID)


def with_sentence_boundaries(
    input_ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, char_vocabulary: str = "bytes"
):
    """Left-aligned ids (B, T, C) -> (B, T + 2, C) with ``<S>`` at 0 and ``</S>`` after each row's last token (an
    empty row too, as AllenNLP does), and the mask of the result."""
    batch, steps, width = input_ids.shape
    ids = input_ids.new_zeros(batch, steps + 2, width)
    ids[:, 1:-1] = input_ids * mask.unsqueeze(-1).to(input_ids.dtype)
    # Built on the device from scalars (a host list would make the host wait), not kept in buffers (a model made on
    # the meta device would leave them uninitialised).
    bos, eos = (ids.new_empty(width) for _ in range(2))
    for row, values in zip((bos, eos), sentence_boundary_char_ids(char_vocabulary, width), strict=False):
        for position, value in enumerate(values[:4]):  # the rest is padding
            row[position:] = value
    ids[:, 0] = bos
    ids.scatter_(1, (lengths + 1).view(batch, 1, 1).expand(batch, 1, width), eos.expand(batch, 1, width))
    return ids, torch.arange(steps + 2, device=ids.device).unsqueeze(0) < (lengths + 2).unsqueeze(1)
