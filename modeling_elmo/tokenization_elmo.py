# Copyright 2026 The modeling_elmo authors.
# SPDX-License-Identifier: Apache-2.0 (https://www.apache.org/licenses/LICENSE-2.0)
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

from .configuration_elmo import MAX_CHARACTERS_PER_TOKEN_LIMIT

#: The four special words every word vocabulary starts with, and their ids (the model's and the tokenizer's).
PAD_WORD, BOS_WORD, EOS_WORD, UNK_WORD = SPECIAL_WORDS = ("<pad>", "<S>", "</S>", "<UNK>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
#: Character ids of the markers per character vocabulary: begin-of-word, end-of-word, within-word padding, ``<S>``,
#: ``</S>``. "bytes" (bilm-tf, AllenNLP): UTF-8 bytes 0-255 and markers 256-260, all shifted by +1 so that a row of
#: zeros marks an absent word. "unicode" (ELMoForManyLangs): unshifted; 6 is an unknown character, 7 on are listed.
CHARACTER_MARKERS = {"bytes": (259, 260, 261, 257, 258), "unicode": (2, 3, 1, 4, 5)}
UNICODE_UNKNOWN_CHARACTER, UNICODE_FIRST_CHARACTER = 6, 7


def sentence_boundary_char_ids(char_vocabulary: str, max_characters_per_token: int) -> tuple[list[int], list[int]]:
    """The character-id rows of ``<S>`` and ``</S>``: begin-of-word, the sentence marker, end-of-word, padding."""
    bow, eow, pad, bos, eos = CHARACTER_MARKERS[char_vocabulary]
    padding = [pad] * (max_characters_per_token - 3)
    return [bow, bos, eow, *padding], [bow, eos, eow, *padding]


VOCAB_FILES_NAMES = {
    "vocab_file": "vocab.txt",
    "char_vocab_file": "char_vocab.json",
    "word_input_vocab_file": "word_input_vocab.json",
}
#: The words of the text read as the sentence-boundary tokens, per character vocabulary (as each original does).
BOUNDARY_WORDS = {"bytes": ("<S>", "</S>"), "unicode": ("<bos>", "<eos>")}
#: How raw strings are split into words (the alphabet's boundary words always stay whole).
_WORD_PATTERNS = {"words": r"\w+|[^\w\s]+", "whitespace": r"\S+"}


class CharacterAlphabet:
    """Words to rows of ``max_characters_per_token`` character ids and back: UTF-8 bytes (``characters=None``) or given
    ``characters`` (ids 7 on); a word keeps its first width - 2 bytes (characters), `BOUNDARY_WORDS` a boundary row."""

    def __init__(self, characters: Sequence[str] | None = None, max_characters_per_token: int = 50):
        if characters is not None:
            characters = _distinct(characters, "character vocabulary", lambda c: len(c) == 1, "single characters")
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
        """Character ids of ``words``, shape ``(len(words), width)``, int64 (bytes: a lone surrogate is dropped)."""
        for position, word in enumerate(words):
            if not (isinstance(word, str) and word):
                raise ValueError(f"empty word or non-string {word!r:.40} at position {position}: words are strings.")
        n, (bow, eow, pad), cut = len(words), self.markers[:3], self.width - 2
        if self.characters is None:  # ids are the UTF-8 bytes + 1
            pieces = [word.encode("utf-8", "ignore")[:cut] for word in words]
            flat = np.frombuffer(b"".join(pieces), dtype=np.uint8).astype(np.int64) + 1
        else:
            pieces, get = [word[:cut] for word in words], self.char_to_id.get
            flat = np.fromiter((get(c, UNICODE_UNKNOWN_CHARACTER) for p in pieces for c in p), dtype=np.int64)
        # Vectorised: Python touches each word once, numpy fills the rows.
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=n)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        out = np.full((n, self.width), pad, dtype=np.int64)
        out[:, 0] = bow
        out[np.repeat(np.arange(n), lengths), np.arange(flat.size) - starts + 1] = flat
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
        pad_token, bos_token, eos_token, unk_token (`str`, *optional*): default to ``<pad> <S> </S> <UNK>``.

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
        self.vocab = _read_vocabulary(vocab_file) if vocab_file else {w: i for i, w in enumerate(SPECIAL_WORDS)}
        self.ids_to_words = list(self.vocab)  # the ids are 0, 1, ... in the file's order: a list, not a second dict
        if char_vocab_file is not None and characters is None:
            characters = _read_json_list(char_vocab_file, "character vocabulary")
        if word_input_vocab_file is not None and input_words is None:
            input_words = _read_json_list(word_input_vocab_file, "word-input vocabulary")
        self.alphabet = CharacterAlphabet(characters, max_characters_per_token)
        if input_words is not None:
            kind = "distinct words other than the special words (ids 0-3)"
            input_words = _distinct(input_words, "word-input vocabulary", lambda w: w not in SPECIAL_WORDS, kind)
        self.input_words = input_words
        # The text's boundary words are the boundary words of the word input too (as in ELMoForManyLangs).
        boundaries = dict(zip(self.alphabet.boundary_words, (BOS_ID, EOS_ID), strict=True))
        listed = {w: i for i, w in enumerate(input_words or (), len(SPECIAL_WORDS))}
        self.input_word_to_id = {PAD_WORD: PAD_ID, UNK_WORD: UNK_ID, **boundaries, **listed}
        self.max_characters_per_token, self.split_pattern, self.do_lower_case = width, split_pattern, do_lower_case
        pattern = "|".join(map(re.escape, self.alphabet.boundary_words)) + "|" + _WORD_PATTERNS[split_pattern]
        self._splitter = hf_pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
        specials = dict(zip(("pad_token", "bos_token", "eos_token", "unk_token"), SPECIAL_WORDS, strict=True))
        settings = {"max_characters_per_token": width, "split_pattern": split_pattern, "do_lower_case": do_lower_case}
        files = {"char_vocab_file": char_vocab_file, "word_input_vocab_file": word_input_vocab_file}
        super().__init__(**{**specials, **kwargs}, **settings, **files)
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
        index = int(index)
        return self.ids_to_words[index] if 0 <= index < len(self.ids_to_words) else UNK_WORD

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        texts = {"vocab_file": "".join(word + "\n" for word in self.vocab)}  # in id order
        for key, listed in (("char_vocab_file", self.characters), ("word_input_vocab_file", self.input_words)):
            if listed is not None:  # JSON: any character, whitespace too
                texts[key] = json.dumps(listed, ensure_ascii=False, indent=0) + "\n"
        prefix = filename_prefix + "-" if filename_prefix else ""
        paths = tuple(os.path.join(save_directory, prefix + VOCAB_FILES_NAMES[key]) for key in texts)
        for path, text in zip(paths, texts.values(), strict=True):
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        return paths

    def split_words(self, text: str) -> list[str]:
        """A raw string's words, as the tokenizer splits them (added and special tokens stay whole)."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}: {text!r:.40}.")
        return self.tokenize(text)

    def _cased(self, words: Iterable[str]) -> list[str]:
        if not self.do_lower_case:
            return list(words)
        return [w if w in self.alphabet.boundary_words else w.lower() for w in words]

    def word_ids_of(self, words: Sequence[str]) -> list[int]:
        """Word-vocabulary ids of ``words`` (``<UNK>`` for unknown words; added tokens have their added ids)."""
        return self.convert_tokens_to_ids(list(words))

    def _as_word_lists(self, text: Any, is_split_into_words: bool) -> tuple[list[list[str]], bool]:
        """The accepted input forms as a list of word lists, and whether a batch was given."""
        if isinstance(text, str) and not is_split_into_words:
            return [self.split_words(text)], False
        if isinstance(text, str) or not isinstance(text, (list, tuple)):
            hint = " (with is_split_into_words=True, a list of words or of word lists)" if is_split_into_words else ""
            raise ValueError(f"text must be a string or a list{hint}, got {type(text).__name__} {text!r:.40}.")
        if not text:
            raise ValueError("empty batch: pass at least one sentence.")
        if is_split_into_words and all(isinstance(word, str) for word in text):
            return [self._cased(text)], False
        for i, item in enumerate(text):
            if is_split_into_words and not (isinstance(item, (list, tuple)) and all(isinstance(w, str) for w in item)):
                raise ValueError(f"sentence {i} must be a list of word strings, got {item!r:.80}.")
            if not is_split_into_words and not isinstance(item, str):
                raise ValueError(
                    f"item {i} of the batch is not a string but {type(item).__name__} {item!r:.40}; "
                    "for pre-split words pass is_split_into_words=True."
                )
        return [self._cased(s) if is_split_into_words else self.split_words(s) for s in text], True

    # An ELMo token is a row of character ids, not one id: `_encode_plus` (abstract in the base class) builds the rows
    # and hands them to the base `pad`, whose per-example hook `_pad` pads with all-zero rows.
    def _encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any) -> BatchEncoding:
        if text_pair is not None or kwargs.get("return_overflowing_tokens") or kwargs.get("return_offsets_mapping"):
            raise ValueError("ElmoTokenizer encodes single sentences: no text pairs, overflowing tokens or offsets.")
        for name in ("max_length", "pad_to_multiple_of"):
            value = kwargs.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"`{name}` must be a positive integer (a number of words) or None, got {value!r}.")
        sentences, batched = self._as_word_lists(text, kwargs.get("is_split_into_words", False))
        length, return_tensors = kwargs.get("max_length"), kwargs.get("return_tensors")
        if length is not None and kwargs.get("truncation_strategy") not in (None, "do_not_truncate"):
            side = kwargs.get("truncation_side") or self.truncation_side
            if side not in ("left", "right"):
                raise ValueError(f"`truncation_side` must be 'left' or 'right', got {side!r}.")
            sentences = [s[:length] if side == "right" else s[-length:] for s in sentences]
        features = {"input_ids": [self.alphabet.encode(s).tolist() for s in sentences]}
        if kwargs.get("return_special_tokens_mask"):  # no token is added: 1 marks the special words of the text
            specials = set(self.all_special_tokens)
            features["special_tokens_mask"] = [[int(w in specials) for w in s] for s in sentences]
        if kwargs.get("return_word_ids"):
            features["word_ids"] = [self.word_ids_of(s) for s in sentences]
        if self.input_words is not None:  # a word is looked up as it is encoded: cut to the row's characters
            cut = self.max_characters_per_token - 2
            features["word_input_ids"] = [[self.input_word_to_id.get(w[:cut], UNK_ID) for w in s] for s in sentences]
        if kwargs.get("return_length"):
            features["length"] = [len(s) for s in sentences]
        options = ("max_length", "pad_to_multiple_of", "padding_side", "return_attention_mask", "return_tensors")
        padding = kwargs.get("padding_strategy", "do_not_pad")
        encoding = self.pad(features, padding=padding, **{option: kwargs.get(option) for option in options})
        if return_tensors is None:  # lists, as any tokenizer returns them
            encoding["input_ids"] = [rows.tolist() for rows in encoding["input_ids"]]
            if not batched:
                return BatchEncoding({key: value[0] for key, value in encoding.items()})
        return encoding

    def _batch_encode_plus(self, batch_text_or_text_pairs: Any, **kwargs: Any) -> BatchEncoding:
        """transformers 4.x hands a batch here (5.x hands everything to `_encode_plus`)."""
        return self._encode_plus(list(batch_text_or_text_pairs), **kwargs)

    def _pad(self, encoded_inputs: dict[str, Any], padding_side: str | None = None, **kwargs: Any) -> dict:
        """The base class pads one example's masks; its rows get all-zero rows (an array), its word ids `PAD_ID`."""
        rows = np.asarray(encoded_inputs["input_ids"], dtype=np.int64).reshape(-1, self.max_characters_per_token)
        padded = super()._pad(encoded_inputs, padding_side=padding_side, **kwargs)
        missing, left = len(padded["input_ids"]) - len(rows), (padding_side or self.padding_side) == "left"
        blank = np.zeros((missing, rows.shape[1]), dtype=np.int64)
        padded["input_ids"] = np.concatenate([blank, rows] if left else [rows, blank])
        for key in set(padded) & {"word_ids", "word_input_ids"}:
            ids, padding = list(padded[key]), [PAD_ID] * missing
            padded[key] = padding + ids if left else ids + padding
        return padded

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> Any:
        """Character rows (words, 50) -> words joined by spaces (absent dropped), a batch -> a list; or word ids."""
        array = np.asarray(token_ids.detach().cpu() if hasattr(token_ids, "detach") else token_ids)
        if array.ndim == 3:
            return [self.decode(sentence, skip_special_tokens=skip_special_tokens) for sentence in array]
        if array.ndim == 2 and array.shape[-1] == self.max_characters_per_token and array.dtype != object:
            skipped = self.alphabet.boundary_words if skip_special_tokens else ()
            return " ".join(w for w in map(self.alphabet.decode, array) if w is not None and w not in skipped)
        return super().decode(array.tolist(), skip_special_tokens=skip_special_tokens, **kwargs)


def _open(path: str, what: str) -> Any:
    if not os.path.isfile(path):
        raise ValueError(f"{what} file {path!r} does not exist.")
    return open(path, encoding="utf-8")


def _read_vocabulary(path: str) -> dict[str, int]:
    """Word ids of a vocabulary file: the special words (ids 0-3, listed first or not at all), then a word per line
    (bilm-tf's ``!!!MAXTERMID`` skipped). A line that would shift the ids of the words after it is a `ValueError`."""
    vocab = {word: i for i, word in enumerate(SPECIAL_WORDS)}
    leading = True  # the special words listed first
    with _open(path, "vocabulary") as handle:  # streamed: memory holds the mapping, not the lines as well
        for number, line in enumerate(handle, start=1):
            word = line.rstrip("\n")
            if leading and word in SPECIAL_WORDS:
                continue
            leading = False
            if word in vocab or not word.strip():
                why = f"repeats the word {word[:80]!r} (a repeated word" if word.strip() else "is empty (an empty line"
                raise ValueError(
                    f"vocabulary file {path!r}: line {number} {why} would shift the id of every later word)."
                )
            if word != "!!!MAXTERMID":
                vocab[word] = len(vocab)
    return vocab


def _read_json_list(path: str, what: str) -> list:
    try:
        with _open(path, what) as handle:
            listed = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise ValueError(f"{what} file {path!r} is not valid JSON ({error}).") from None
    if not isinstance(listed, list):
        raise ValueError(f"{what} file {path!r} must hold a JSON list, got {type(listed).__name__}.")
    return listed


def _distinct(values: Iterable[str], what: str, valid: Any, kind: str) -> list[str]:
    """``values`` as a list, each a ``valid`` string listed once; a `ValueError` naming the first that is not."""
    values, seen = list(values), set()
    for position, value in enumerate(values):
        if not (isinstance(value, str) and value and valid(value)) or value in seen:
            raise ValueError(f"the {what} must list {kind}, got {value!r:.40} at position {position}.")
        seen.add(value)
    return values


__all__ = ["CharacterAlphabet", "ElmoTokenizer"]
