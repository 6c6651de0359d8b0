"""What ELMo's models accept, checked, and the sentence boundaries they add: the input side of `modeling_elmo.py`.

Every check names the bad value. Checks of tensor values run in eager mode, and on an accelerator outside training
steps only (`check_values`): the host never waits for the device in a training step. This file is shipped to the Hub with
`modeling_elmo.py` as custom code: it imports only torch and its sibling `configuration_elmo.py`.
"""

from __future__ import annotations

import torch

from .configuration_elmo import BOS_ID, EOS_ID, MAX_CHARACTER_ID, PAD_ID, sentence_boundary_char_ids

IGNORE_INDEX = -100  # labels that predict nothing (padding), as everywhere in transformers


def check_values(bad: torch.Tensor, message: str) -> None:
    """Raise ``ValueError(message)`` if any element of the boolean tensor ``bad`` is set, in eager mode.

    On the CPU the check is exact and cheap, and so it is on an accelerator in inference. In a training step on an
    accelerator (autograd on) it is left out: reading the flag would make the host wait for the device at every
    step (an out-of-range character or label id still stops the step there, in the embedding or loss kernel). In a
    graph traced by ``torch.compile`` or ``torch.export`` (`torch.compiler.is_compiling`) there is no value check:
    a traced graph cannot branch on values, so inputs are checked before they reach it (the tokenizer's ids are
    valid by construction).
    """
    if torch.compiler.is_compiling() or (bad.device.type != "cpu" and torch.is_grad_enabled()):
        return
    if bool(bad.any()):
        raise ValueError(message)


def integer_labels(labels, upper: int, what: str, device: torch.device, counted: torch.Tensor | None = None) -> torch.Tensor:
    """``labels`` as int64, checked: integers in [0, ``upper``) or -100 (ignored), where ``counted`` (a mask) is set."""
    labels = torch.as_tensor(labels, device=device)
    if labels.dtype.is_floating_point or labels.dtype == torch.bool or labels.is_complex():
        raise ValueError(f"labels must be integer {what}, got dtype {labels.dtype}.")
    labels = labels.long()
    bad = ((labels < 0) | (labels >= upper)) & (labels != IGNORE_INDEX)
    check_values(bad if counted is None else bad & counted, f"labels hold a {what[:-1]} outside [0, {upper})"
                 + (" (only -100 marks a position to ignore)." if what == "word ids" else "."))
    return labels


def validated_inputs(input_ids, attention_mask, width: int, max_id: int = MAX_CHARACTER_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """The character ids (B, T, ``width``) and the token mask (B, T) bool, after checking shapes, dtypes and values
    (ids in [0, ``max_id``]); without a mask, a token is present where its character ids are not all 0."""
    if input_ids is None:
        raise ValueError(f"ElmoModel needs input_ids (character ids of shape (batch, tokens, {width})).")
    if not isinstance(input_ids, torch.Tensor):
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
    check_values((input_ids < 0) | (input_ids > max_id),
                 f"input_ids hold a character id outside [0, {max_id}].")
    present = (input_ids > 0).any(dim=-1)  # (B, T)
    if attention_mask is None:
        return input_ids, present
    if not isinstance(attention_mask, torch.Tensor):
        attention_mask = torch.as_tensor(attention_mask, device=input_ids.device)
    if tuple(attention_mask.shape) != tuple(present.shape):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids has {tuple(present.shape)} tokens."
        )
    mask = attention_mask.bool()
    check_values(mask & ~present, "attention_mask marks a token as present whose character ids are all 0.")
    return input_ids, mask


def validated_features(features: torch.Tensor, attention_mask, config, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Cached biLM layers (B, L + 1, T, 2P) given to a task head instead of character ids, checked against
    ``config``, in ``dtype``, with their mask (B, T) bool."""
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
    """The word ids (B, T) of a model with a word-embedding input, checked: one per token of ``input_ids``, integers
    in [0, ``vocab_size``)."""
    if word_input_ids is None:
        raise ValueError("this model has a word-embedding input: pass word_input_ids (from its tokenizer) too.")
    word_input_ids = torch.as_tensor(word_input_ids, device=input_ids.device)
    if tuple(word_input_ids.shape) != tuple(input_ids.shape[:2]):
        raise ValueError(f"word_input_ids has shape {tuple(word_input_ids.shape)} but input_ids has "
                         f"{tuple(input_ids.shape[:2])} tokens.")
    if word_input_ids.dtype.is_floating_point or word_input_ids.dtype == torch.bool or word_input_ids.is_complex():
        raise ValueError(f"word_input_ids must hold integer word ids, got dtype {word_input_ids.dtype}.")
    word_input_ids = word_input_ids.long()
    check_values((word_input_ids < 0) | (word_input_ids >= vocab_size),
                 f"word_input_ids hold a word id outside [0, {vocab_size}).")
    return word_input_ids


def with_word_boundaries(word_ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Left-aligned word ids (B, T) -> (B, T + 2) with the ``<S>`` id at 0 and the ``</S>`` id after each row's last
    word, as `with_sentence_boundaries` does for the character ids."""
    batch, steps = word_ids.shape
    ids = word_ids.new_full((batch, steps + 2), PAD_ID)
    ids[:, 1:-1] = torch.where(mask, word_ids, PAD_ID)
    ids[:, 0] = BOS_ID
    return ids.scatter(1, (lengths + 1).view(batch, 1), EOS_ID)


def with_sentence_boundaries(input_ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor,
                             char_vocabulary: str = "bytes"):
    """Left-aligned ids (B, T, C) -> (B, T + 2, C) with ``<S>`` at 0 and ``</S>`` after each row's last token, and
    the mask of the result.

    Every row gets both, an empty one too (as AllenNLP does: it matters for the carried state). The boundary rows
    are built here, not kept in buffers: transformers creates models on the meta device and would leave
    non-persistent buffers uninitialised.
    """
    batch, steps, width = input_ids.shape
    ids = input_ids.new_zeros(batch, steps + 2, width)
    ids[:, 1:-1] = input_ids * mask.unsqueeze(-1).to(input_ids.dtype)
    # built on the device from scalars: copying a host list there would make the host wait for the device
    bos, eos = (ids.new_empty(width) for _ in range(2))
    for row, values in zip((bos, eos), sentence_boundary_char_ids(char_vocabulary, width)):
        for position, value in enumerate(values[:4]):  # the rest is padding
            row[position:] = value
    ids[:, 0] = bos
    ids.scatter_(1, (lengths + 1).view(batch, 1, 1).expand(batch, 1, width), eos.expand(batch, 1, width))
    return ids, torch.arange(steps + 2, device=ids.device).unsqueeze(0) < (lengths + 2).unsqueeze(1)
