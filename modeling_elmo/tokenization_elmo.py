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
"""ELMo character tokenizer: a word is a row of character ids (UTF-8 bytes, or the characters of ELMoForManyLangs)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from tokenizers import Regex
from tokenizers import pre_tokenizers as hf_pre_tokenizers
from transformers import BatchEncoding, PreTrainedTokenizer
from transformers.tokenization_utils_base import TruncationStrategy
from transformers.utils import PaddingStrategy, TensorType

from .configuration_elmo import (
    BOS_ID,
    CHARACTER_MARKERS,
    EOS_ID,
    MAX_CHARACTERS_PER_TOKEN_LIMIT,
    PAD_ID,
    PAD_WORD,
    SPECIAL_WORDS,
    UNICODE_FIRST_CHARACTER,
    UNICODE_UNKNOWN_CHARACTER,
    UNK_ID,
    UNK_WORD,
    sentence_boundary_char_ids,
)

VOCAB_FILES_NAMES = {
    "vocab_file": "vocab.txt",
    "char_vocab_file": "char_vocab.json",
    "word_input_vocab_file": "word_input_vocab.json",
}
#: The words of the text read as the sentence-boundary tokens, per character vocabulary (as each original does).
BOUNDARY_WORDS = {"bytes": ("<S>", "</S>"), "unicode": ("<bos>", "<eos>")}
#: Per-word entries besides ``input_ids`` and the value a padded position gets.
_PAD_VALUES = {"attention_mask": 0, "word_ids": PAD_ID, "word_input_ids": PAD_ID, "special_tokens_mask": 1}
#: How raw strings are split into words (the alphabet's boundary words always stay whole).
_WORD_PATTERNS = {"words": r"\w+|[^\w\s]+", "whitespace": r"\S+"}


class CharacterAlphabet:
    """Words to rows of ``max_characters_per_token`` character ids and back: UTF-8 bytes (``characters=None``) or the
    given unicode ``characters`` (ids 7 on). A word keeps its first ``max_characters_per_token - 2`` bytes
    (characters); a boundary word of the original (`BOUNDARY_WORDS`) gets the boundary row."""

    def __init__(self, characters: Sequence[str] | None = None, max_characters_per_token: int = 50):
        if characters is not None:
            characters = _checked_list(characters, "character vocabulary", lambda c: len(c) == 1, "single characters")
        self.characters = characters
        self.width = max_characters_per_token
        self.char_vocabulary = "bytes" if characters is None else "unicode"
        self.markers = CHARACTER_MARKERS[self.char_vocabulary]
        self.char_to_id = {c: UNICODE_FIRST_CHARACTER + i for i, c in enumerate(self.characters or ())}
        self.boundary_words = BOUNDARY_WORDS[self.char_vocabulary]
        self.boundary_rows = tuple(
            np.asarray(row, dtype=np.int64) for row in sentence_boundary_char_ids(self.char_vocabulary, self.width)
        )

    @property
    def num_characters(self) -> int:
        """Rows of the character table a model needs for this alphabet (the config's ``num_characters``)."""
        return 262 if self.characters is None else UNICODE_FIRST_CHARACTER + len(self.characters)

    def encode(self, words: Sequence[str]) -> np.ndarray:
        """Character ids of ``words``, shape ``(len(words), width)``, int64. A lone surrogate is dropped."""
        for position, word in enumerate(words):
            if not isinstance(word, str):
                raise ValueError(f"words must be strings, got {type(word).__name__} {word!r} at position {position}.")
            if not word:
                raise ValueError(f"empty word at position {position}: words must contain at least one character.")
        n, (bow, eow, pad) = len(words), self.markers[:3]
        out = np.full((n, self.width), pad, dtype=np.int64)
        out[:, 0] = bow
        if self.characters is None:  # vectorised: Python touches each word once, numpy fills the rows
            encoded = [word.encode("utf-8", "ignore")[: self.width - 2] for word in words]
            lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
            flat = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.int64) + 1  # ids are bytes + 1
            starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
            out[np.repeat(np.arange(n), lengths), np.arange(flat.size) - starts + 1] = flat
        else:
            lengths = np.zeros(n, dtype=np.int64)
            for position, word in enumerate(words):
                ids = [self.char_to_id.get(c, UNICODE_UNKNOWN_CHARACTER) for c in word[: self.width - 2]]
                out[position, 1 : len(ids) + 1], lengths[position] = ids, len(ids)
        out[np.arange(n), lengths + 1] = eow
        for position, word in enumerate(words):
            if word in self.boundary_words:
                out[position] = self.boundary_rows[self.boundary_words.index(word)]
        return out

    def decode(self, row: Sequence[int]) -> str | None:
        """The word of one row; `None` for an all-zero (absent) row. Cut or unknown characters read as U+FFFD."""
        row = np.asarray(row, dtype=np.int64)
        if not row.any():
            return None
        for word, boundary in zip(self.boundary_words, self.boundary_rows, strict=False):
            if np.array_equal(row[:3], boundary[:3]):
                return word
        body = row[1:]
        end = np.flatnonzero((body == self.markers[1]) | ((body == 0) & (self.characters is not None)))
        body = body[: end[0]] if end.size else body
        if self.characters is None:
            return bytes(int(b) - 1 for b in body if 1 <= b <= 256).decode("utf-8", errors="replace")
        first, count = UNICODE_FIRST_CHARACTER, len(self.characters)
        return "".join(self.characters[i - first] if 0 <= i - first < count else "\ufffd" for i in body.tolist())


def read_vocabulary_file(path: str | os.PathLike) -> list[str]:
    """The words of a vocabulary file, one per line (bilm-tf's ``!!!MAXTERMID`` line skipped). A line that would shift
    the ids of later words (empty, a repeated word, a special word after other words) is a `ValueError` naming it."""
    shown, words, first_line = os.fspath(path), [], {}
    if not os.path.isfile(path):
        raise ValueError(f"vocabulary file {shown!r} does not exist.")
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            word = line.rstrip("\n").rstrip("\r")
            if word == "!!!MAXTERMID":
                continue
            shifts = "would shift the id of every later word"
            if not word.strip():
                problem = f"is empty; every line must hold one word (an empty line {shifts})"
            elif word in first_line:
                problem = f"repeats the word {word!r} of line {first_line[word]} (a repeated word {shifts})"
            elif word in SPECIAL_WORDS and any(w not in SPECIAL_WORDS for w in words):
                problem = f"lists the special word {word!r} after other words; the special words come first (ids 0-3)"
            else:
                first_line[word] = number
                words.append(word)
                continue
            raise ValueError(f"vocabulary file {shown!r}: line {number} {problem}.")
    return words


class ElmoTokenizer(PreTrainedTokenizer):
    r"""Character tokenizer for ELMo: ``input_ids`` (batch, words, ``max_characters_per_token``) and ``attention_mask``
    (batch, words), one row per word (word-level labels align with the rows as they are); no boundary is added.

    Args:
        vocab_file (`str`, *optional*): a word vocabulary, one word per line (``<pad> <S> </S> <UNK>`` first, put
            there if missing), for language-model label ids (``return_word_ids=True``; unknown words get 3).
        max_characters_per_token (`int`, *optional*, defaults to 50): character slots per word.
        split_pattern (`str`, *optional*, defaults to `"words"`): how raw strings are split: `"words"` separates runs
            of word characters and of punctuation, `"whitespace"` splits on whitespace only.
        do_lower_case (`bool`, *optional*, defaults to `False`): lower-case words (the released models are cased).
        char_vocab_file (`str`, *optional*): a unicode character vocabulary (JSON list of characters, ids 7 on); the
            model then needs ``char_vocabulary="unicode"`` and ``num_characters = 7 + len(list)``.
        word_input_vocab_file (`str`, *optional*): the vocabulary of a model's word-embedding input (JSON list of words,
            ids 4 on): the tokenizer then also returns ``word_input_ids`` (exact matches, ``<UNK>`` otherwise).
        characters, input_words (`list[str]`, *optional*, keyword only): the same two vocabularies as lists.

    Example:

    ```python
    >>> from modeling_elmo import ElmoTokenizer
    >>> enc = ElmoTokenizer()([["Hello", "world"], ["Hi"]], is_split_into_words=True, padding=True, return_tensors="pt")
    >>> tuple(enc["input_ids"].shape), enc["attention_mask"].tolist()
    ((2, 2, 50), [[1, 1], [1, 0]])
    ```
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(
        self,
        vocab_file: str | None = None,
        max_characters_per_token: int = 50,
        split_pattern: str = "words",
        do_lower_case: bool = False,
        pad_token: str = PAD_WORD,
        bos_token: str = SPECIAL_WORDS[BOS_ID],
        eos_token: str = SPECIAL_WORDS[EOS_ID],
        unk_token: str = UNK_WORD,
        char_vocab_file: str | None = None,
        word_input_vocab_file: str | None = None,
        **kwargs: Any,
    ):
        # Keyword-only, outside the signature: the lists are saved as their files, never in tokenizer_config.json.
        characters, input_words = kwargs.pop("characters", None), kwargs.pop("input_words", None)
        if split_pattern not in _WORD_PATTERNS:
            raise ValueError(f"`split_pattern` must be one of {sorted(_WORD_PATTERNS)}, got {split_pattern!r}.")
        width, limit = max_characters_per_token, MAX_CHARACTERS_PER_TOKEN_LIMIT
        if type(width) is not int or not 3 <= width <= limit:
            raise ValueError(f"`max_characters_per_token` must be an integer in [3, {limit}], got {width!r}.")
        words = list(SPECIAL_WORDS) + ([] if vocab_file is None else read_vocabulary_file(vocab_file))
        self.vocab = {word: i for i, word in enumerate(dict.fromkeys(words))}
        self.ids_to_words = {i: w for w, i in self.vocab.items()}
        if char_vocab_file is not None and characters is None:
            characters = _read_string_list(char_vocab_file, "character vocabulary")
        if word_input_vocab_file is not None and input_words is None:
            input_words = _read_string_list(word_input_vocab_file, "word-input vocabulary")
        self.alphabet = CharacterAlphabet(characters, max_characters_per_token)
        if input_words is not None:
            input_words = _checked_list(input_words, "word-input vocabulary", bool, "non-empty words")
            if specials := sorted(set(input_words) & set(SPECIAL_WORDS)):
                raise ValueError(
                    f"the word-input vocabulary lists the special word(s) {specials}: they have the fixed ids 0-3."
                )
        self.input_words = input_words
        # The text's boundary words are the boundary words of the word input too (as in ELMoForManyLangs).
        boundaries = dict(zip(self.alphabet.boundary_words, (BOS_ID, EOS_ID), strict=True))
        listed = {w: i for i, w in enumerate(input_words or (), len(SPECIAL_WORDS))}
        self.input_word_to_id = {PAD_WORD: PAD_ID, UNK_WORD: UNK_ID, **boundaries, **listed}
        self.max_characters_per_token = max_characters_per_token
        self.split_pattern = split_pattern
        self.do_lower_case = do_lower_case
        pattern = "|".join(map(re.escape, self.alphabet.boundary_words)) + "|" + _WORD_PATTERNS[split_pattern]
        self._splitter = hf_pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
        super().__init__(
            pad_token=pad_token,
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            max_characters_per_token=max_characters_per_token,
            split_pattern=split_pattern,
            do_lower_case=do_lower_case,
            char_vocab_file=char_vocab_file,
            word_input_vocab_file=word_input_vocab_file,
            **kwargs,
        )
        if self.input_words is not None:
            self.model_input_names = [*self.model_input_names, "word_input_ids"]

    # What a model config needs for this tokenizer: ``char_vocabulary``, ``num_characters``, ``word_input_vocab_size``.
    characters = property(lambda self: self.alphabet.characters)
    char_vocabulary = property(lambda self: self.alphabet.char_vocabulary)
    num_characters = property(lambda self: self.alphabet.num_characters)
    word_input_vocab_size = property(lambda self: 0 if self.input_words is None else 4 + len(self.input_words))
    vocab_size = property(lambda self: len(self.vocab))

    def get_vocab(self) -> dict[str, int]:
        return {**self.vocab, **self._added_tokens_encoder}

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        text = text.encode("utf-8", "ignore").decode("utf-8")  # a lone surrogate cannot reach the pre-tokenizer
        return self._cased(piece for piece, _ in self._splitter.pre_tokenize_str(text))

    def _convert_token_to_id(self, token: str) -> int:
        return self.vocab.get(token, UNK_ID)

    def _convert_id_to_token(self, index: int) -> str:
        return self.ids_to_words.get(int(index), UNK_WORD)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        if not os.path.isdir(save_directory):
            raise ValueError(f"vocabulary directory {save_directory!r} does not exist.")
        prefix = filename_prefix + "-" if filename_prefix else ""
        written = [os.path.join(save_directory, prefix + VOCAB_FILES_NAMES["vocab_file"])]
        with open(written[0], "w", encoding="utf-8") as handle:
            handle.writelines(self.ids_to_words[i] + "\n" for i in range(len(self.ids_to_words)))
        for key, listed in (("char_vocab_file", self.characters), ("word_input_vocab_file", self.input_words)):
            if listed is not None:  # JSON: any character, whitespace too
                written.append(os.path.join(save_directory, prefix + VOCAB_FILES_NAMES[key]))
                with open(written[-1], "w", encoding="utf-8") as handle:
                    handle.write(json.dumps(listed, ensure_ascii=False, indent=0) + "\n")
        return tuple(written)

    def split_words(self, text: str) -> list[str]:
        """A raw string's words, as the tokenizer splits them (added and special tokens stay whole)."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}: {text!r}.")
        return self.tokenize(text)

    def _cased(self, words: Iterable[str]) -> list[str]:
        if not self.do_lower_case:
            return list(words)
        return [w if w in self.alphabet.boundary_words else w.lower() for w in words]

    def word_ids_of(self, words: Sequence[str]) -> list[int]:
        """Word-vocabulary ids of ``words`` (``<UNK>`` for unknown words; added tokens have their added ids)."""
        added = self._added_tokens_encoder
        return [added[w] if w in added else self.vocab.get(w, UNK_ID) for w in words]

    def word_input_ids_of(self, words: Sequence[str]) -> list[int]:
        """Word-input ids of ``words`` cut to ``max_characters_per_token - 2`` characters; ``<UNK>`` (3) if unknown."""
        cut = self.max_characters_per_token - 2
        return [self.input_word_to_id.get(w[:cut], UNK_ID) for w in self._cased(words)]

    def _as_word_lists(self, text: Any, is_split_into_words: bool) -> tuple[list[list[str]], bool]:
        """The accepted input forms as a list of word lists, and whether a batch was given."""
        if isinstance(text, str) and not is_split_into_words:
            return [self.split_words(text)], False
        if isinstance(text, str) or not isinstance(text, (list, tuple)):
            hint = " (with is_split_into_words=True, pass a list of words)." if is_split_into_words else "."
            raise ValueError(
                f"text must be a string, a list of strings or a list of word lists, got {type(text).__name__}{hint}"
            )
        if len(text) == 0:
            raise ValueError("empty batch: pass at least one sentence.")
        if not is_split_into_words:
            for i, sentence in enumerate(text):
                if not isinstance(sentence, str):
                    raise ValueError(
                        f"item {i} of the batch is not a string but {type(sentence).__name__} {sentence!r:.40}; "
                        "for pre-split words pass is_split_into_words=True."
                    )
            return [self.split_words(s) for s in text], True
        if all(isinstance(t, str) for t in text):
            return [list(text)], False
        for i, sentence in enumerate(text):
            if not (isinstance(sentence, (list, tuple)) and all(isinstance(w, str) for w in sentence)):
                raise ValueError(f"sentence {i} must be a list of word strings, got {sentence!r:.80}.")
        return [list(s) for s in text], True

    # An ELMo token is a row of character ids, not one id: `_encode_plus` (abstract in the base class) builds the rows
    # and hands them to the base `pad`, whose per-example hook `_pad` pads with all-zero rows.
    def _encode_plus(
        self,
        text: Any,
        text_pair: Any = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: Any = None,
        max_length: int | None = None,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | TensorType | None = None,
        return_attention_mask: bool | None = None,
        return_special_tokens_mask: bool = False,
        return_length: bool = False,
        return_word_ids: bool = False,
        truncation_side: str | None = None,
        **kwargs: Any,
    ) -> BatchEncoding:
        if text_pair is not None:
            raise ValueError("ElmoTokenizer encodes single sentences; text pairs are not supported.")
        for flag in ("return_overflowing_tokens", "return_offsets_mapping"):
            if kwargs.get(flag):
                raise ValueError(f"ElmoTokenizer does not support {flag}=True.")
        for name, value in (("max_length", max_length), ("pad_to_multiple_of", pad_to_multiple_of)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"`{name}` must be a positive integer (a number of words) or None, got {value!r}.")
        sentences, batched = self._as_word_lists(text, is_split_into_words)
        if max_length is not None and truncation_strategy not in (None, TruncationStrategy.DO_NOT_TRUNCATE):
            side = _checked_side("truncation_side", truncation_side or self.truncation_side)
            sentences = [s[:max_length] if side == "right" else s[-max_length:] for s in sentences]
        # Lists: arrays would make the base `pad` return arrays where lists were asked for.
        features: dict[str, list] = {"input_ids": [self.alphabet.encode(self._cased(s)).tolist() for s in sentences]}
        if return_special_tokens_mask:  # no token is added: 1 marks the special words of the text
            specials = set(self.all_special_tokens)
            features["special_tokens_mask"] = [[int(w in specials) for w in s] for s in sentences]
        if return_word_ids:
            features["word_ids"] = [self.word_ids_of(s) for s in sentences]
        if self.input_words is not None:
            features["word_input_ids"] = [self.word_input_ids_of(s) for s in sentences]
        if return_length:
            features["length"] = [len(s) for s in sentences]
        encoding = self.pad(
            features,
            padding=padding_strategy,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_attention_mask=return_attention_mask,
            return_tensors=return_tensors,
        )
        if return_tensors is None:  # lists, as any tokenizer returns them
            encoding["input_ids"] = [rows.tolist() for rows in encoding["input_ids"]]
            if not batched:
                encoding = BatchEncoding({key: value[0] for key, value in encoding.items()})
        return encoding

    def _pad(
        self,
        encoded_inputs: dict[str, Any],
        max_length: int | None = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict:
        rows = np.asarray(encoded_inputs["input_ids"], dtype=np.int64).reshape(-1, self.max_characters_per_token)
        encoded_inputs["input_ids"] = rows
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        if return_attention_mask and "attention_mask" not in encoded_inputs:
            encoded_inputs["attention_mask"] = [1] * len(rows)
        if padding_strategy == PaddingStrategy.LONGEST:
            max_length = len(rows)
        if padding_strategy == PaddingStrategy.DO_NOT_PAD or max_length is None:
            return encoded_inputs
        if pad_to_multiple_of:
            max_length = -(-max_length // pad_to_multiple_of) * pad_to_multiple_of
        right = _checked_side("padding_side", padding_side or self.padding_side) == "right"
        missing = max_length - len(rows)
        if missing > 0:
            zeros = np.zeros((missing, rows.shape[1]), dtype=np.int64)
            encoded_inputs["input_ids"] = np.concatenate([rows, zeros] if right else [zeros, rows])
            for key, fill in _PAD_VALUES.items():
                if key in encoded_inputs:
                    values, padding = list(encoded_inputs[key]), [fill] * missing
                    encoded_inputs[key] = values + padding if right else padding + values
        return encoded_inputs

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> Any:
        """Character rows (words, 50) give the words joined by spaces, a batch of them a list of strings (absent words
        dropped); word ids (1-D / 2-D) are read through the word vocabulary."""
        array = np.asarray(token_ids.detach().cpu() if hasattr(token_ids, "detach") else token_ids)
        if array.ndim == 3:
            return [self.decode(sentence, skip_special_tokens=skip_special_tokens) for sentence in array]
        if array.ndim == 2 and array.shape[-1] == self.max_characters_per_token and array.dtype != object:
            words = [w for w in map(self.alphabet.decode, array) if w is not None]
            if skip_special_tokens:
                words = [w for w in words if w not in self.alphabet.boundary_words]
            return " ".join(words)
        if array.ndim == 2:
            return [self.decode(row, skip_special_tokens=skip_special_tokens, **kwargs) for row in array]
        return super().decode(array.tolist(), skip_special_tokens=skip_special_tokens, **kwargs)

    def batch_decode(self, sequences: Any, skip_special_tokens: bool = False, **kwargs: Any) -> list[str]:
        return [self.decode(s, skip_special_tokens=skip_special_tokens, **kwargs) for s in sequences]


def _read_string_list(path: str, what: str) -> list[str]:
    """A JSON list of strings from ``path``; anything else is a `ValueError` naming the file."""
    if not os.path.isfile(path):
        raise ValueError(f"{what} file {path!r} does not exist.")
    try:
        with open(path, encoding="utf-8") as handle:
            listed = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"{what} file {path!r} is not valid JSON ({error}).") from None
    if not isinstance(listed, list) or not all(isinstance(v, str) for v in listed):
        raise ValueError(f"{what} file {path!r} must hold a JSON list of strings.")
    return listed


def _checked_list(values: Sequence[str], what: str, valid: Any, kind: str) -> list[str]:
    """``values`` as a list, each ``valid`` and none twice; a `ValueError` naming the first bad one otherwise."""
    values, seen = list(values), set()
    for position, value in enumerate(values):
        if not isinstance(value, str) or not valid(value):
            raise ValueError(f"a {what} lists {kind}, got {value!r} at position {position}.")
        if value in seen:
            raise ValueError(f"the {what} lists {value!r} twice.")
        seen.add(value)
    return values


def _checked_side(name: str, side: str) -> str:
    if side not in ("left", "right"):
        raise ValueError(f"{name} must be 'left' or 'right', got {side!r}.")
    return side


__all__ = ["CharacterAlphabet", "ElmoTokenizer", "read_vocabulary_file"]
