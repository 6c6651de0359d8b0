"""ELMo character tokenizer.

ELMo reads words as sequences of UTF-8 bytes. Every word becomes a row of ``max_characters_per_token`` (50)
character ids in the scheme of the released models (bilm-tf ``UnicodeCharsVocabulary`` and AllenNLP
``ELMoCharacterMapper``):

* raw ids 0-255 are the bytes of the word, 256/257 the sentence begin/end markers (only inside ``<S>`` and
  ``</S>``), 258/259 begin/end of word, 260 the within-word padding;
* at inference every id is shifted by +1 so that 0 means "no token here" (an all-zero row pads a sentence);
* a word keeps at most its first 48 bytes (a multi-byte character may be cut), then BOW, bytes, EOW, padding.

The tokenizer returns ``input_ids`` of shape (batch, tokens, 50) *without* the sentence boundary tokens: the
model adds ``<S>``/``</S>`` itself (as AllenNLP's ``batch_to_ids``/``Elmo`` pair does). A word vocabulary
(optional, ``vocab.txt``) gives word ids for language-model labels.

Two options, each a file saved with the tokenizer:

* a Unicode character vocabulary (``char_vocab.json``, a JSON list of characters): words are then read as code
  points, not bytes. Ids are used as they are: 0 no token, 1 within-word padding, 2/3 begin/end of word, 4/5 the
  ``<S>``/``</S>`` markers, 6 an unknown character, 7 on the listed characters. A word keeps its first
  ``max_characters_per_token - 2`` characters;
* a word-input vocabulary (``word_input_vocab.json``, a JSON list of words after the four special words) for a
  model with a word-embedding input: the tokenizer then also returns ``word_input_ids`` (batch, tokens), exact
  (case-sensitive) matches of the word as cut to its characters, ``<UNK>`` (3) otherwise. (Not ``word_ids``:
  that name is taken, by the language-model labels here and by `BatchEncoding.word_ids()`.)

This file is shipped to the Hub as custom code: it imports only numpy, tokenizers and transformers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tokenizers import Regex
from tokenizers import pre_tokenizers as hf_pre_tokenizers
from transformers import BatchEncoding, PreTrainedTokenizer
from transformers.utils import PaddingStrategy, TensorType, logging

from .configuration_elmo import (
    BEGINNING_OF_SENTENCE_CHARACTER,
    BEGINNING_OF_WORD_CHARACTER,
    BOS_WORD,
    END_OF_SENTENCE_CHARACTER,
    END_OF_WORD_CHARACTER,
    EOS_WORD,
    INFERENCE_SHIFT,
    MAX_CHARACTERS_PER_TOKEN_LIMIT,
    PAD_WORD,
    PADDING_CHARACTER,
    SPECIAL_WORDS,
    UNICODE_BEGINNING_OF_WORD_CHARACTER,
    UNICODE_END_OF_WORD_CHARACTER,
    UNICODE_FIRST_CHARACTER,
    UNICODE_PADDING_CHARACTER,
    UNICODE_UNKNOWN_CHARACTER,
    UNK_ID,
    UNK_WORD,
    sentence_boundary_char_ids,
    sentence_marker_char_ids,
)

logger = logging.get_logger(__name__)

MAX_CHARACTERS_PER_TOKEN = 50
BOS_TOKEN, EOS_TOKEN, UNK_TOKEN, PAD_TOKEN = BOS_WORD, EOS_WORD, UNK_WORD, PAD_WORD

VOCAB_FILES_NAMES = {"vocab_file": "vocab.txt", "char_vocab_file": "char_vocab.json",
                     "word_input_vocab_file": "word_input_vocab.json"}
#: Per-token entries `ElmoTokenizer.pad` pads, and the value it pads them with.
_TOKEN_LEVEL_KEYS = ("attention_mask", "word_ids", "word_input_ids", "special_tokens_mask")
_WORD_PATTERNS = {
    # Word characters run together, punctuation runs together; <S> and </S> stay whole.
    "words": r"</?S>|\w+|[^\w\s]+",
    # Split on whitespace only (for text that is already tokenised).
    "whitespace": r"\S+",
}


def _special_row(character: int, max_characters_per_token: int) -> np.ndarray:
    return np.asarray(sentence_marker_char_ids(character, max_characters_per_token), dtype=np.int64)


#: The character-id rows of ``<S>`` and ``</S>`` at inference (50 ids each).
BOS_CHAR_IDS = _special_row(BEGINNING_OF_SENTENCE_CHARACTER, MAX_CHARACTERS_PER_TOKEN)
EOS_CHAR_IDS = _special_row(END_OF_SENTENCE_CHARACTER, MAX_CHARACTERS_PER_TOKEN)


def encode_words(words: Sequence[str], max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN) -> np.ndarray:
    """Character ids of ``words``, shape ``(len(words), max_characters_per_token)``, int64, inference scheme.

    Vectorised: Python touches each word once (to get its UTF-8 bytes); the rows are filled with numpy.
    ``"<S>"`` and ``"</S>"`` get the sentence-marker rows. Raises `ValueError` on an empty word or a non-string.
    """
    n = len(words)
    width = max_characters_per_token
    max_bytes = width - 2
    out = np.full((n, width), PADDING_CHARACTER + INFERENCE_SHIFT, dtype=np.int64)
    if n == 0:
        return out
    try:
        # A lone surrogate cannot be encoded as UTF-8: it is dropped, as the original encoders do (errors="ignore").
        encoded = [word.encode("utf-8", "ignore")[:max_bytes] for word in words]
    except AttributeError:
        position = next(i for i, w in enumerate(words) if not isinstance(w, str))
        raise ValueError(f"words must be strings, got {type(words[position]).__name__} {words[position]!r} at position {position}.") from None
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    if not lengths.all():
        position = int(np.flatnonzero(lengths == 0)[0])
        if words[position] == "":
            raise ValueError(f"empty word at position {position}: words must contain at least one character.")
    flat = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.int64) + INFERENCE_SHIFT
    rows = np.repeat(np.arange(n), lengths)
    starts = np.cumsum(lengths) - lengths
    columns = np.arange(flat.size) - np.repeat(starts, lengths) + 1
    out[:, 0] = BEGINNING_OF_WORD_CHARACTER + INFERENCE_SHIFT
    out[rows, columns] = flat
    out[np.arange(n), lengths + 1] = END_OF_WORD_CHARACTER + INFERENCE_SHIFT
    specials = {BOS_TOKEN: BEGINNING_OF_SENTENCE_CHARACTER, EOS_TOKEN: END_OF_SENTENCE_CHARACTER}
    if not specials.keys().isdisjoint(words):
        for position, word in enumerate(words):
            if word in specials:
                out[position] = _special_row(specials[word], width)
    return out


def encode_words_unicode(words: Sequence[str], char_to_id: Mapping[str, int],
                         max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN) -> np.ndarray:
    """Character ids of ``words`` in a Unicode character vocabulary (``char_to_id``: character -> id >= 7), shape
    ``(len(words), max_characters_per_token)``: begin-of-word, the first ``max_characters_per_token - 2`` code
    points (unknown ones 6), end-of-word, padding. ``"<S>"`` and ``"</S>"`` get the sentence-marker rows."""
    width = max_characters_per_token
    out = np.full((len(words), width), UNICODE_PADDING_CHARACTER, dtype=np.int64)
    bos, eos = (np.asarray(row, dtype=np.int64) for row in sentence_boundary_char_ids("unicode", width))
    for position, word in enumerate(words):
        if not isinstance(word, str):
            raise ValueError(f"words must be strings, got {type(word).__name__} {word!r} at position {position}.")
        if word in (BOS_TOKEN, EOS_TOKEN):
            out[position] = bos if word == BOS_TOKEN else eos
            continue
        if not word:
            raise ValueError(f"empty word at position {position}: words must contain at least one character.")
        characters = word[: width - 2]
        out[position, 0] = UNICODE_BEGINNING_OF_WORD_CHARACTER
        out[position, 1 : len(characters) + 1] = [char_to_id.get(c, UNICODE_UNKNOWN_CHARACTER) for c in characters]
        out[position, len(characters) + 1] = UNICODE_END_OF_WORD_CHARACTER
    return out


def read_vocabulary_file(path: str | os.PathLike) -> list[str]:
    """The words of a vocabulary file, one per line, in order (bilm-tf's ``!!!MAXTERMID`` line skipped).

    A word's id is its position, so a line that would shift the ids of the words after it is refused, with a
    `ValueError` naming the file and the line: an empty line, a word listed twice, a special word (``<pad>``,
    ``<S>``, ``</S>``, ``<UNK>``, which always take ids 0-3) listed after other words. ``\r\n`` line ends are
    read as line ends.
    """
    shown = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"vocabulary file {shown!r} does not exist.")
    words: list[str] = []
    first_line: dict[str, int] = {}
    after_words = False  # a word other than a special one was listed
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            word = line.rstrip("\n").rstrip("\r")
            if word == "!!!MAXTERMID":
                continue
            if not word.strip():
                raise ValueError(f"vocabulary file {shown!r}: line {number} is empty; every line must hold one word "
                                 "(an empty line would shift the id of every later word).")
            if word in first_line:
                raise ValueError(f"vocabulary file {shown!r}: line {number} repeats the word {word!r} of line "
                                 f"{first_line[word]} (a repeated word would shift the id of every later word).")
            if word in SPECIAL_WORDS and after_words:
                raise ValueError(f"vocabulary file {shown!r}: line {number} lists the special word {word!r} after other "
                                 "words; the special words come first (they take ids 0-3).")
            first_line[word] = number
            after_words = after_words or word not in SPECIAL_WORDS
            words.append(word)
    return words


def decode_char_ids(row: Sequence[int]) -> str | None:
    """The word of one row of character ids (inverse of `encode_words`); `None` for an all-zero (absent) row."""
    ids = np.asarray(row, dtype=np.int64) - INFERENCE_SHIFT
    if (ids < 0).all():
        return None
    if ids[1] == BEGINNING_OF_SENTENCE_CHARACTER and ids[2] == END_OF_WORD_CHARACTER:
        return BOS_TOKEN
    if ids[1] == END_OF_SENTENCE_CHARACTER and ids[2] == END_OF_WORD_CHARACTER:
        return EOS_TOKEN
    body = ids[1:]
    end = np.flatnonzero(body == END_OF_WORD_CHARACTER)
    body = body[: end[0]] if end.size else body
    return bytes(int(b) for b in body if 0 <= b < 256).decode("utf-8", errors="replace")


class ElmoTokenizer(PreTrainedTokenizer):
    r"""Character tokenizer for ELMo.

    Turns text into ``input_ids`` of shape (batch, tokens, ``max_characters_per_token``) holding the original
    character ids, and ``attention_mask`` of shape (batch, tokens). Sentence boundaries are *not* added: the
    model adds ``<S>``/``</S>``.

    Args:
        vocab_file (`str`, *optional*):
            A word vocabulary, one word per line (the first four lines may be ``<pad>``, ``<S>``, ``</S>``,
            ``<UNK>``; missing ones are put first). It gives the word ids of language-model labels
            (``return_word_ids=True``); words not in it get the ``<UNK>`` id 3. Without it only the four special
            words exist.
        max_characters_per_token (`int`, *optional*, defaults to 50):
            Character slots per word; a word keeps at most ``max_characters_per_token - 2`` UTF-8 bytes.
        split_pattern (`str`, *optional*, defaults to `"words"`):
            How raw strings are split into words (with a `tokenizers` pre-tokenizer): `"words"` separates runs of
            word characters from runs of punctuation (``"don't!"`` -> ``don ' t !``); `"whitespace"` splits on
            whitespace only, for text that is already tokenised. Pre-split input (``is_split_into_words=True``)
            is used as given.
        do_lower_case (`bool`, *optional*, defaults to `False`):
            Lower-case words before encoding (the released models are cased: leave it off for them).
        char_vocab_file (`str`, *optional*):
            A Unicode character vocabulary (a JSON list of distinct characters, ids 7 on): words are read as code
            points through it instead of as UTF-8 bytes. The model needs ``char_vocabulary="unicode"`` and
            ``num_characters = 7 + len(list)``.
        word_input_vocab_file (`str`, *optional*):
            The vocabulary of a model's word-embedding input (a JSON list of words, ids 4 on after the four
            special words): the tokenizer then also returns ``word_input_ids``.
        characters (`list[str]`, *optional*, keyword only), input_words (`list[str]`, *optional*, keyword only):
            The same two vocabularies given as lists instead of files (they are written as files on save).

    Example:

    ```python
    >>> from modeling_elmo import ElmoTokenizer
    >>> tok = ElmoTokenizer()
    >>> enc = tok([["Hello", "world"], ["Hi"]], is_split_into_words=True, padding=True, return_tensors="pt")
    >>> tuple(enc["input_ids"].shape), enc["attention_mask"].tolist()
    ((2, 2, 50), [[1, 1], [1, 0]])
    ```
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(
        self,
        vocab_file: str | None = None,
        max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN,
        split_pattern: str = "words",
        do_lower_case: bool = False,
        pad_token: str = PAD_TOKEN,
        bos_token: str = BOS_TOKEN,
        eos_token: str = EOS_TOKEN,
        unk_token: str = UNK_TOKEN,
        char_vocab_file: str | None = None,
        word_input_vocab_file: str | None = None,
        **kwargs: Any,
    ):
        # Keyword-only, outside the signature: the lists are saved as their vocabulary files, never in
        # tokenizer_config.json (every parameter of the signature is kept in init_kwargs, as transformers expects).
        characters: Sequence[str] | None = kwargs.pop("characters", None)
        input_words: Sequence[str] | None = kwargs.pop("input_words", None)
        if split_pattern not in _WORD_PATTERNS:
            raise ValueError(f"`split_pattern` must be one of {sorted(_WORD_PATTERNS)}, got {split_pattern!r}.")
        if (isinstance(max_characters_per_token, bool) or not isinstance(max_characters_per_token, int)
                or not 3 <= max_characters_per_token <= MAX_CHARACTERS_PER_TOKEN_LIMIT):
            raise ValueError(f"`max_characters_per_token` must be an integer in [3, {MAX_CHARACTERS_PER_TOKEN_LIMIT}], "
                             f"got {max_characters_per_token!r}.")
        words = list(SPECIAL_WORDS)
        if vocab_file is not None:
            words += [w for w in read_vocabulary_file(vocab_file) if w not in SPECIAL_WORDS]
        self.vocab: dict[str, int] = {}
        for word in words:
            self.vocab.setdefault(word, len(self.vocab))
        self.ids_to_words = {i: w for w, i in self.vocab.items()}
        self.max_characters_per_token = max_characters_per_token
        self.split_pattern = split_pattern
        self.do_lower_case = do_lower_case
        self._splitter = hf_pre_tokenizers.Split(Regex(_WORD_PATTERNS[split_pattern]), behavior="removed", invert=True)
        if char_vocab_file is not None and characters is None:
            characters = _read_string_list(char_vocab_file, "character vocabulary")
        if word_input_vocab_file is not None and input_words is None:
            input_words = _read_string_list(word_input_vocab_file, "word-input vocabulary")
        self.characters: list[str] | None = None
        self.char_to_id: dict[str, int] = {}
        if characters is not None:
            self.characters = _checked_characters(characters)
            self.char_to_id = {c: UNICODE_FIRST_CHARACTER + i for i, c in enumerate(self.characters)}
        self.input_words: list[str] | None = None
        self.input_word_to_id: dict[str, int] = {}
        if input_words is not None:
            self.input_words = _checked_input_words(input_words)
            self.input_word_to_id = {w: i for i, w in enumerate(SPECIAL_WORDS + tuple(self.input_words))}
        super().__init__(
            pad_token=pad_token,
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            max_characters_per_token=max_characters_per_token,
            split_pattern=split_pattern,
            do_lower_case=do_lower_case,
            char_vocab_file=char_vocab_file,  # file paths: never written into tokenizer_config.json
            word_input_vocab_file=word_input_vocab_file,
            **kwargs,
        )
        if self.input_words is not None and "word_input_ids" not in self.model_input_names:
            self.model_input_names = [*self.model_input_names, "word_input_ids"]

    # ------------------------------------------------------------------ optional vocabularies
    @property
    def char_vocabulary(self) -> str:
        """``"unicode"`` with a character vocabulary, else ``"bytes"`` (the config's ``char_vocabulary``)."""
        return "bytes" if self.characters is None else "unicode"

    @property
    def num_characters(self) -> int:
        """Rows of the character table a model needs for this tokenizer (the config's ``num_characters``)."""
        return 262 if self.characters is None else UNICODE_FIRST_CHARACTER + len(self.characters)

    @property
    def word_input_vocab_size(self) -> int:
        """Rows of the word-embedding input a model needs for this tokenizer (0: no word input)."""
        return 0 if self.input_words is None else len(SPECIAL_WORDS) + len(self.input_words)

    def word_input_ids_of(self, words: Sequence[str]) -> list[int]:
        """Word-input ids of ``words``: the word as cut to ``max_characters_per_token - 2`` characters, matched
        exactly; ``<UNK>`` (3) otherwise."""
        cut = self.max_characters_per_token - 2
        if self.do_lower_case:
            words = [w if w in (BOS_TOKEN, EOS_TOKEN) else w.lower() for w in words]
        return [self.input_word_to_id.get(w[:cut], UNK_ID) for w in words]

    # ------------------------------------------------------------------ word vocabulary
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def get_vocab(self) -> dict[str, int]:
        """The word vocabulary and the tokens added with `add_tokens` / `add_special_tokens`."""
        return {**self.vocab, **self._added_tokens_encoder}

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        # A lone surrogate cannot be encoded as UTF-8 (nor handed to the Rust pre-tokenizer): it is dropped, as the
        # original encoders do (errors="ignore"), here as in `encode_words`.
        text = text.encode("utf-8", "ignore").decode("utf-8")
        words = [piece for piece, _ in self._splitter.pre_tokenize_str(text)]
        return [w.lower() for w in words] if self.do_lower_case else words

    def _convert_token_to_id(self, token: str) -> int:
        return self.vocab.get(token, self.vocab[UNK_TOKEN])

    def _convert_id_to_token(self, index: int) -> str:
        return self.ids_to_words.get(int(index), UNK_TOKEN)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        if not os.path.isdir(save_directory):
            raise ValueError(f"vocabulary directory {save_directory!r} does not exist.")
        prefix = filename_prefix + "-" if filename_prefix else ""
        path = os.path.join(save_directory, prefix + VOCAB_FILES_NAMES["vocab_file"])
        with open(path, "w", encoding="utf-8") as handle:
            for index in range(len(self.ids_to_words)):
                handle.write(self.ids_to_words[index] + "\n")
        written = [path]
        for key, listed in (("char_vocab_file", self.characters), ("word_input_vocab_file", self.input_words)):
            if listed is not None:
                written.append(os.path.join(save_directory, prefix + VOCAB_FILES_NAMES[key]))
                with open(written[-1], "w", encoding="utf-8") as handle:  # JSON: any character, whitespace too
                    json.dump(listed, handle, ensure_ascii=False, indent=0)
                    handle.write("\n")
        return tuple(written)

    def word_ids_of(self, words: Sequence[str]) -> list[int]:
        """Word-vocabulary ids of ``words`` (``<UNK>`` for unknown words; added tokens have their added ids)."""
        unk, added = self.vocab[UNK_TOKEN], self._added_tokens_encoder
        return [added[w] if w in added else self.vocab.get(w, unk) for w in words]

    # ------------------------------------------------------------------ encoding
    def split_words(self, text: str) -> list[str]:
        """Split a raw string into words with the configured pre-tokenizer; tokens added with `add_tokens` (and the
        special words) stay whole, as in `tokenize`."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}: {text!r}.")
        return self.tokenize(text)

    def encode_words(self, words: Sequence[str]) -> np.ndarray:
        """Character ids of a list of words, shape (len(words), max_characters_per_token)."""
        if self.do_lower_case:
            words = [w if w in (BOS_TOKEN, EOS_TOKEN) else w.lower() for w in words]
        if self.characters is not None:
            return encode_words_unicode(words, self.char_to_id, self.max_characters_per_token)
        return encode_words(words, self.max_characters_per_token)

    def _as_word_lists(self, text: Any, is_split_into_words: bool) -> tuple[list[list[str]], bool]:
        """Normalise the accepted input forms to a list of word lists; also say whether a batch was given."""
        if isinstance(text, str):
            if is_split_into_words:
                raise ValueError("with is_split_into_words=True, pass a list of words (or a batch of lists), not a string.")
            return [self.split_words(text)], False
        if not isinstance(text, (list, tuple)):
            raise ValueError(f"text must be a string, a list of strings or a list of word lists, got {type(text).__name__}.")
        if is_split_into_words:
            if len(text) > 0 and all(isinstance(t, str) for t in text):
                return [list(text)], False
            for i, sentence in enumerate(text):
                if not isinstance(sentence, (list, tuple)) or not all(isinstance(w, str) for w in sentence):
                    raise ValueError(f"sentence {i} must be a list of word strings, got {sentence!r:.80}.")
            if len(text) == 0:
                raise ValueError("empty batch: pass at least one sentence.")
            return [list(s) for s in text], True
        if len(text) == 0:
            raise ValueError("empty batch: pass at least one sentence.")
        for i, sentence in enumerate(text):
            if not isinstance(sentence, str):
                raise ValueError(
                    f"item {i} of the batch is not a string but {type(sentence).__name__} {sentence!r:.40}; for "
                    "pre-split words pass is_split_into_words=True."
                )
        return [self.split_words(s) for s in text], True

    def _encode_plus(  # called by __call__ for single and batched input (transformers 5)
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
        return_length: bool = False,
        return_word_ids: bool = False,
        **kwargs: Any,
    ) -> BatchEncoding:
        if text_pair is not None:
            raise ValueError("ElmoTokenizer encodes single sentences; text pairs are not supported.")
        _check_length_option("max_length", max_length)
        _check_length_option("pad_to_multiple_of", pad_to_multiple_of)
        for flag in ("return_overflowing_tokens", "return_offsets_mapping"):
            if kwargs.get(flag):
                raise ValueError(f"ElmoTokenizer does not support {flag}=True.")
        sentences, batched = self._as_word_lists(text, is_split_into_words)
        truncate = truncation_strategy is not None and str(getattr(truncation_strategy, "value", truncation_strategy)) not in (
            "do_not_truncate",
            "False",
        )
        if truncate and max_length is not None:
            side = kwargs.get("truncation_side") or self.truncation_side
            if side not in ("left", "right"):
                raise ValueError(f"truncation_side must be 'left' or 'right', got {side!r}.")
            sentences = [s[:max_length] if side == "right" else s[max(len(s) - max_length, 0):] for s in sentences]
        features: dict[str, list] = {"input_ids": [self.encode_words(s) for s in sentences]}
        if kwargs.get("return_special_tokens_mask"):  # the tokenizer adds none: 1 marks special words in the text
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
            _keep_input_type=False,
        )
        if not batched:
            if return_tensors is None:
                encoding = BatchEncoding({k: v[0] for k, v in encoding.items()})
        return encoding

    # ------------------------------------------------------------------ padding
    def pad(
        self,
        encoded_inputs: Any,
        padding: bool | str | PaddingStrategy = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | TensorType | None = None,
        verbose: bool = True,
        *,
        _keep_input_type: bool = True,
    ) -> BatchEncoding:
        """Pad character ids (rows of zeros), ``attention_mask`` (0) and ``word_ids`` (0) to a common length.

        Accepts what `DataCollatorWithPadding` passes (a list of feature dicts) or a dict of lists, with lists,
        numpy arrays or tensors inside. Other keys (``labels``...) are passed through unchanged.
        """
        _check_length_option("max_length", max_length)
        _check_length_option("pad_to_multiple_of", pad_to_multiple_of)
        if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
            encoded_inputs = {key: [example[key] for example in encoded_inputs] for key in encoded_inputs[0].keys()}
        if not isinstance(encoded_inputs, Mapping) or "input_ids" not in encoded_inputs:
            raise ValueError("pad() needs features with an 'input_ids' entry.")
        encoded_inputs = dict(encoded_inputs)
        width = self.max_characters_per_token
        ids = encoded_inputs["input_ids"]
        if return_tensors is None and _keep_input_type:  # tensors in, tensors out (as transformers' pad does)
            if hasattr(ids, "detach") or (isinstance(ids, (list, tuple)) and ids and hasattr(ids[0], "detach")):
                return_tensors = "pt"
            elif isinstance(ids, np.ndarray) or (isinstance(ids, (list, tuple)) and ids and isinstance(ids[0], np.ndarray)):
                return_tensors = "np"
        rows = [np.asarray(_to_numpy(x), dtype=np.int64).reshape(-1, width) for x in _batch_items(ids, width)]
        single = _is_single_example(ids, width)
        lengths = [r.shape[0] for r in rows]
        strategy = padding if isinstance(padding, PaddingStrategy) else (
            PaddingStrategy.LONGEST if padding is True else PaddingStrategy.DO_NOT_PAD if padding is False else PaddingStrategy(padding)
        )
        if strategy == PaddingStrategy.LONGEST:
            target = max(lengths) if lengths else 0
        elif strategy == PaddingStrategy.MAX_LENGTH:
            if max_length is None:
                raise ValueError("padding='max_length' needs max_length.")
            target = max_length
        else:
            target = None
        if target is not None and pad_to_multiple_of:
            target = -(-target // pad_to_multiple_of) * pad_to_multiple_of
        side = padding_side or self.padding_side
        if side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {side!r}.")
        if "attention_mask" in encoded_inputs:
            masks = [np.asarray(_to_numpy(m), dtype=np.int64).reshape(-1) for m in _batch_items(encoded_inputs["attention_mask"], None, single)]
        else:
            masks = [np.ones(n, dtype=np.int64) for n in lengths]
        per_token = {key: [np.asarray(_to_numpy(w), dtype=np.int64).reshape(-1) for w in _batch_items(encoded_inputs[key], None, single)]
                     for key in _TOKEN_LEVEL_KEYS[1:] if key in encoded_inputs}

        def place(array: np.ndarray, length: int, fill: int) -> np.ndarray:
            missing = length - array.shape[0]
            if missing <= 0:
                return array
            pad_shape = (missing,) + array.shape[1:]
            filler = np.full(pad_shape, fill, dtype=array.dtype)
            return np.concatenate([array, filler] if side == "right" else [filler, array])

        if target is not None:
            rows = [place(r, target, 0) for r in rows]
            masks = [place(m, target, 0) for m in masks]
            fills = {"word_ids": self.vocab[PAD_TOKEN], "word_input_ids": SPECIAL_WORDS.index(PAD_WORD),
                     "special_tokens_mask": 1}
            per_token = {key: [place(w, target, fills[key]) for w in values] for key, values in per_token.items()}
        out: dict[str, Any] = {"input_ids": rows}
        if return_attention_mask is not False:
            out["attention_mask"] = masks
        out.update(per_token)
        for key, value in encoded_inputs.items():
            if key not in _PADDED_KEYS:
                out[key] = value
        same_length = len(set(r.shape[0] for r in rows)) <= 1
        if return_tensors is not None:
            if not same_length:
                raise ValueError(
                    "sentences have different lengths; pass padding=True (or 'max_length') to build a tensor."
                )
            stacked = {k: np.stack(out[k]) for k in _PADDED_KEYS if k in out}
            out.update(stacked)
        else:
            out = {k: ([x.tolist() for x in v] if k in _PADDED_KEYS else v) for k, v in out.items()}
        if single:
            out = {k: (v[0] if k in _PADDED_KEYS else v) for k, v in out.items()}
        return BatchEncoding(out, tensor_type=return_tensors, prepend_batch_axis=False)

    # ------------------------------------------------------------------ decoding
    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> Any:
        """Words back from ids.

        Character ids of one sentence (tokens, 50) give its words joined by spaces; a batch (batch, tokens, 50)
        gives a list of such strings. Absent tokens (all-zero rows) are dropped. Word ids (1-D / 2-D) are decoded
        through the word vocabulary.
        """
        array = np.asarray(_to_numpy(token_ids))
        if array.ndim >= 2 and array.shape[-1] == self.max_characters_per_token and array.dtype != object:
            if array.ndim == 3:
                return [self.decode(sentence, skip_special_tokens=skip_special_tokens) for sentence in array]
            words = [self._decode_row(row) for row in array]
            words = [w for w in words if w is not None]
            if skip_special_tokens:
                words = [w for w in words if w not in (BOS_TOKEN, EOS_TOKEN)]
            return " ".join(words)
        if array.ndim == 2:
            return [self.decode(row, skip_special_tokens=skip_special_tokens, **kwargs) for row in array]
        return super().decode(array.tolist(), skip_special_tokens=skip_special_tokens, **kwargs)

    def _decode_row(self, row: np.ndarray) -> str | None:
        """The word of one row of character ids; `None` for an absent token."""
        if self.characters is None:
            return decode_char_ids(row)
        row = np.asarray(row, dtype=np.int64)
        if not row.any():
            return None
        bos, eos = sentence_boundary_char_ids("unicode", len(row))
        if row[:3].tolist() == bos[:3]:
            return BOS_TOKEN
        if row[:3].tolist() == eos[:3]:
            return EOS_TOKEN
        characters = []
        for value in row[1:].tolist():
            if value in (UNICODE_END_OF_WORD_CHARACTER, 0):
                break
            if value >= UNICODE_FIRST_CHARACTER and value - UNICODE_FIRST_CHARACTER < len(self.characters):
                characters.append(self.characters[value - UNICODE_FIRST_CHARACTER])
            elif value == UNICODE_UNKNOWN_CHARACTER:
                characters.append("\ufffd")
        return "".join(characters)

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


def _checked_characters(characters: Sequence[str]) -> list[str]:
    characters = list(characters)
    for position, character in enumerate(characters):
        if not isinstance(character, str) or len(character) != 1:
            raise ValueError(f"a character vocabulary lists single characters, got {character!r} at position {position}.")
    if len(set(characters)) != len(characters):
        repeated = next(c for i, c in enumerate(characters) if c in characters[:i])
        raise ValueError(f"the character vocabulary lists {repeated!r} twice.")
    return characters


def _checked_input_words(words: Sequence[str]) -> list[str]:
    words = list(words)
    for position, word in enumerate(words):
        if not isinstance(word, str) or not word:
            raise ValueError(f"a word-input vocabulary lists non-empty words, got {word!r} at position {position}.")
    if len(set(words)) != len(words):
        repeated = next(w for i, w in enumerate(words) if w in words[:i])
        raise ValueError(f"the word-input vocabulary lists {repeated!r} twice.")
    clash = sorted(set(words) & set(SPECIAL_WORDS))
    if clash:
        raise ValueError(f"the word-input vocabulary lists the special word(s) {clash}: they have the fixed ids 0-3.")
    return words


#: The per-token entries `ElmoTokenizer.pad` pads (the others pass through unchanged).
_PADDED_KEYS = ("input_ids",) + _TOKEN_LEVEL_KEYS


def _check_length_option(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
        raise ValueError(f"`{name}` must be a positive integer (a number of words) or None, got {value!r}.")


def _to_numpy(value: Any) -> Any:
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return value


def _is_single_example(ids: Any, width: int) -> bool:
    """A single example is (tokens, width); a batch is (batch, tokens, width)."""
    if hasattr(ids, "ndim"):
        return ids.ndim == 2
    if isinstance(ids, (list, tuple)):
        if not ids:
            return False
        first = ids[0]
        if hasattr(first, "ndim"):
            return first.ndim == 1
        return isinstance(first, (list, tuple)) and len(first) == width and all(isinstance(v, (int, np.integer)) for v in first)
    return False


def _batch_items(value: Any, width: int | None, single: bool | None = None) -> list:
    if single is None:
        single = _is_single_example(value, width) if width is not None else False
    if single:
        return [value]
    if hasattr(value, "ndim"):
        return [value[i] for i in range(value.shape[0])]
    return list(value)


__all__ = ["ElmoTokenizer", "encode_words", "encode_words_unicode", "decode_char_ids", "read_vocabulary_file",
           "BOS_CHAR_IDS", "EOS_CHAR_IDS"]
