"""Character ids of words in the bytes vocabulary of the released models, as `ElmoTokenizer` encodes them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..tokenization_elmo import CharacterAlphabet

_BYTES = CharacterAlphabet()
#: The character-id rows of ``<S>`` and ``</S>`` (bytes vocabulary, 50 ids each).
BOS_CHAR_IDS, EOS_CHAR_IDS = _BYTES.boundary_rows


def encode_words(words: Sequence[str], max_characters_per_token: int = 50) -> np.ndarray:
    """Character ids of ``words`` in the bytes vocabulary, shape ``(len(words), max_characters_per_token)``."""
    alphabet = _BYTES if max_characters_per_token == 50 else CharacterAlphabet(None, max_characters_per_token)
    return alphabet.encode(words)


def decode_char_ids(row: Sequence[int]) -> str | None:
    """The word of one row of bytes-vocabulary character ids (inverse of `encode_words`); `None` for an absent row."""
    return CharacterAlphabet(None, len(row)).decode(row)


__all__ = ["BOS_CHAR_IDS", "EOS_CHAR_IDS", "decode_char_ids", "encode_words"]
