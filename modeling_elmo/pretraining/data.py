"""Corpus loading, word vocabulary and tokenisation for ELMo pretraining (batching is in `batching.py`).

`load_raw_splits` reads text files (as bytes; invalid UTF-8 is replaced and counted, never fatal) or a Hub dataset
into splits with one ``text`` column; `build_vocabularies` counts the words once (``<pad>``, ``<S>``, ``</S>``,
``<UNK>`` are ids 0-3); `tokenize_splits` maps lines to word ids, cached by ``datasets``, in one of two layouts:
``sentences`` (a line cut into pieces of at most ``max_sentence_length`` words; the model adds the boundaries) or
``windows`` (the original's ``<S> w1 .. wn </S> <S> ...`` stream cut into ``window_size`` tokens). Each example
holds ``word_ids`` (``<UNK>`` = 3), its out-of-vocabulary words ``oov`` (encoded from their own characters) and
``length``.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import math
import multiprocessing
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..evaluation.lm_scoring import LAYOUTS as BATCHING_MODES
from ..tokenization_elmo import BOS_ID, EOS_ID, SPECIAL_WORDS, UNK_ID, CharacterAlphabet
from ..utils.config_checks import shown
from ..utils.io_utils import MAX_LINE_BYTES, LineTooLongError, atomic_write_text, hub_reachable, iter_lines
from ..utils.loading import HubUnreachableError
from .recipes import BUILTIN_PREFIX, builtin_corpus_file

logger = logging.getLogger(__name__)

#: Bump when the tokenised layout changes, so stale caches are not reused.
_TOKENIZATION_VERSION = "1"


# ----------------------------------------------------------------------------------------------- reading text
_SPLIT_OF_FLAG = {"--train-file": "train", "--validation-file": "validation", "--test-file": "test"}


def check_is_text(path: str, what: str) -> None:
    """Refuse a binary or compressed file (a NUL byte in its first 8 KB); invalid UTF-8 alone is not refused."""
    with open(path, "rb") as handle:
        head = handle.read(8192)
    if b"\x00" in head:
        raise ValueError(
            f"{what}: {path!r} is not text (a NUL byte at offset {head.index(bytes(1))}); pass UTF-8 text, "
            "one sentence per line (decompress .gz/.bz2 files first)."
        )


def expand_text_files(patterns: str | Sequence[str], what: str = "--train-file") -> list[str]:
    """Files, globs, directories (every non-hidden file under it: the 1B Word Benchmark's shards have no
    extension) and packaged corpora (``builtin:NAME``: the split ``what`` reads, or ``builtin:NAME/SPLIT``) as a
    sorted list of non-empty text files; `ValueError` naming a pattern that matches nothing or no text."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    files: list[str] = []
    for pattern in patterns:
        pattern = os.fspath(pattern)
        if pattern.startswith(BUILTIN_PREFIX):
            pattern = builtin_corpus_file(pattern, _SPLIT_OF_FLAG.get(what, "train"))
        if os.path.isdir(pattern):
            found = sorted(
                os.path.join(root, name)
                for root, dirs, names in os.walk(pattern)
                for name in names
                if not name.startswith(".")
                and not any(part.startswith(".") for part in Path(root).relative_to(pattern).parts)
            )
            found = [f for f in found if os.path.isfile(f)]
            if not any(os.path.getsize(f) > 0 for f in found):
                raise ValueError(f"{what}: directory {pattern!r} contains no text (no non-empty files).")
        elif glob.has_magic(pattern):
            found = sorted(f for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))
            if not found:
                raise ValueError(f"{what}: the glob {pattern!r} matches no file.")
            if not any(os.path.getsize(f) > 0 for f in found):
                raise ValueError(f"{what}: every file matched by {pattern!r} is empty.")
        else:
            if not os.path.exists(pattern):
                raise ValueError(f"{what}: file {pattern!r} does not exist.")
            if not os.path.isfile(pattern):
                raise ValueError(f"{what}: {pattern!r} is not a regular file.")
            if os.path.getsize(pattern) == 0:
                raise ValueError(f"{what}: file {pattern!r} is empty.")
            found = [pattern]
        files.extend(f for f in found if os.path.getsize(f) > 0)
    if not files:
        raise ValueError(f"{what}: no text files given.")
    for path in files:
        check_is_text(path, what)
    return files


_OFFLINE_ALTERNATIVE = (
    "train offline on the packaged corpus (--train-file builtin:austen-emma, the quick-start "
    "default) or on your own text (--train-file FILES)"
)


def check_hub_dataset(dataset_name: str) -> None:
    """Raise `HubUnreachableError` within seconds when ``dataset_name`` must come from the Hub but the Hub cannot be
    reached (a local dataset folder passes; in offline mode the cache is tried when the data are loaded)."""
    from huggingface_hub import constants

    from ..utils.compat import is_offline_mode

    if os.path.exists(dataset_name) or is_offline_mode():
        return
    if not hub_reachable():
        raise HubUnreachableError(
            f"--dataset-name {dataset_name}: the Hugging Face Hub ({constants.ENDPOINT}) cannot be "
            f"reached; {_OFFLINE_ALTERNATIVE}, or set HF_HUB_OFFLINE=1 to use a cached copy."
        )


def load_hub_dataset(dataset_name: str, config_name: str | None, **kwargs: Any) -> Any:
    """``datasets.load_dataset``, with one clear error when the Hub is needed and cannot be reached."""
    import datasets

    check_hub_dataset(dataset_name)
    try:
        return datasets.load_dataset(dataset_name, config_name, **kwargs)
    except ConnectionError as error:  # offline mode and nothing cached
        raise HubUnreachableError(
            f"--dataset-name {dataset_name}: not in the local datasets cache and the Hub cannot be "
            f"reached ({error}); {_OFFLINE_ALTERNATIVE}."
        ) from None


@dataclass
class ReadStats:
    """What `iter_text_lines` saw: lines, and lines whose bytes were not valid UTF-8 (decoded with U+FFFD)."""

    lines: int = 0
    invalid_utf8_lines: int = 0
    bytes: int = 0


class TextLineTooLongError(ValueError):
    """A line of a training text file longer than `MAX_LINE_BYTES`; the message names the file and the line."""


def iter_text_lines(paths: Sequence[str], stats: ReadStats | None = None) -> Iterator[str]:
    """The lines of ``paths`` (as `io_utils.iter_lines` splits them; a leading BOM dropped), decoded as UTF-8:
    invalid bytes become U+FFFD, counted and logged per file. ``stats.bytes``: the lines' bytes, breaks left out.

    A line holds a sentence or a paragraph: one of more than `io_utils.MAX_LINE_BYTES` (4 MiB) is a
    `TextLineTooLongError` naming the file and the line, raised once that many of its bytes are read (memory holds
    at most that and a block, never a whole multi-gigabyte line)."""
    stats = stats if stats is not None else ReadStats()
    for path in paths:
        invalid = 0
        with open(path, "rb") as handle:
            for number, raw in enumerate(_bounded_lines(handle, path)):
                if number == 0 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                stats.bytes += len(raw)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    line = raw.decode("utf-8", errors="replace")
                    invalid += 1
                stats.lines += 1
                yield line
        if invalid:
            logger.warning("%s: %d line(s) were not valid UTF-8; bad bytes were replaced by U+FFFD.", path, invalid)
        stats.invalid_utf8_lines += invalid


def _bounded_lines(handle: Any, path: str) -> Iterator[bytes]:
    try:
        yield from iter_lines(handle, max_line_bytes=MAX_LINE_BYTES)
    except LineTooLongError as error:
        raise TextLineTooLongError(
            f"text file {str(path)!r}: line {error.number:,} has more than {MAX_LINE_BYTES:,} bytes; a line holds one "
            "sentence or paragraph: break the text into lines."
        ) from None


#: `content_stamp` hashes this many blocks of this many bytes, spread evenly over the file (first and last included).
_STAMP_BLOCKS, _STAMP_BLOCK_BYTES = 16, 1 << 16


def content_stamp(path: str | os.PathLike) -> str:
    """What the datasets cache keys a text file by: its size, mtime, device, inode and ctime, and the sha256 of 16
    blocks of 64 KiB spread over it. A copy over it that keeps size and mtime (``cp -p``, ``rsync -t``, ``tar``)
    writes a new inode or, in place, a new ctime (which no user can set back); the blocks catch the rest that a
    sample can. About 1 MiB is read, whatever the file's size."""
    with open(path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        digest = hashlib.sha256()
        step = max(0, stat.st_size - _STAMP_BLOCK_BYTES) / max(1, _STAMP_BLOCKS - 1)
        for block in range(_STAMP_BLOCKS):
            handle.seek(round(block * step))
            digest.update(handle.read(_STAMP_BLOCK_BYTES))
    times = f"{stat.st_mtime_ns}:{stat.st_ctime_ns}"
    return f"{stat.st_size}:{times}:{stat.st_dev}:{stat.st_ino}:{digest.hexdigest()[:32]}"


def _text_generator(paths: list[str], stamps: list[str]) -> Iterator[dict[str, str]]:
    # ``stamps`` (`content_stamp` of each file) only feed the datasets cache fingerprint; a changed file re-reads.
    for line in iter_text_lines(paths):
        yield {"text": line}


def text_dataset_from_files(
    files: Sequence[str], *, streaming: bool = False, cache_dir: str | None = None, num_proc: int | None = None
):
    """A ``datasets`` dataset with one ``text`` row per line of ``files`` (see `iter_text_lines`)."""
    import datasets

    files = list(files)
    stamps = [content_stamp(f) for f in files]
    source = dict(
        features=datasets.Features({"text": datasets.Value("string")}), gen_kwargs={"paths": files, "stamps": stamps}
    )
    if streaming:
        return datasets.IterableDataset.from_generator(_text_generator, **source)
    num_proc = min(num_proc or 1, len(files))
    try:
        return datasets.Dataset.from_generator(
            _text_generator, **source, cache_dir=cache_dir, num_proc=num_proc if num_proc > 1 else None
        )
    except datasets.exceptions.DatasetGenerationError as error:  # datasets wraps what the generator raised
        message = _line_error(error)
        if message is not None:
            raise TextLineTooLongError(message) from None
        raise


def _line_error(error: BaseException) -> str | None:
    """The message of the `TextLineTooLongError` under datasets' wrapping of ``error``: its cause in this process,
    or, from a worker process (``num_proc``), the last line of the remote traceback that datasets passes on."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, TextLineTooLongError):
            return str(cause)
        prefix = f"{TextLineTooLongError.__module__}.{TextLineTooLongError.__name__}: "
        found = [line[len(prefix) :] for line in str(cause).splitlines() if line.startswith(prefix)]
        if found:
            return found[-1]
        cause = cause.__cause__
    return None


def load_raw_splits(
    files: Mapping[str, Sequence[str]] | None = None,
    *,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    text_column: str = "text",
    streaming: bool = False,
    validation_split_percentage: float = 0.0,
    seed: int = 42,
    cache_dir: str | None = None,
    num_proc: int | None = None,
) -> dict[str, Any]:
    """``train``/``validation``/``test`` with one ``text`` column: the expanded ``files`` of a split replace the Hub
    dataset's; without a validation split, a seeded ``validation_split_percentage`` % of training lines is held out."""
    files = dict(files or {})
    splits: dict[str, Any] = {}
    if dataset_name:
        hub = load_hub_dataset(dataset_name, dataset_config_name, cache_dir=cache_dir, streaming=streaming)
        for split in ("train", "validation", "test"):
            if split in hub:
                ds = hub[split]
                columns = ds.column_names  # None for a stream whose features are unknown
                if columns is not None and text_column not in columns:
                    raise ValueError(
                        f"--text-column {text_column!r} is not a column of {dataset_name} (columns: {columns})."
                    )
                ds = ds.select_columns([text_column])
                if text_column != "text":
                    ds = ds.rename_column(text_column, "text")
                splits[split] = ds
    for split, paths in files.items():
        if paths:
            splits[split] = text_dataset_from_files(paths, streaming=streaming, cache_dir=cache_dir, num_proc=num_proc)
    if "train" not in splits:
        raise ValueError(f"dataset {dataset_name!r} has no 'train' split; pass --train-file.")
    if "validation" not in splits and validation_split_percentage and validation_split_percentage > 0:
        if streaming:
            logger.warning("streaming: no validation split is carved out of the training data; pass --validation-file.")
        else:
            lines = len(splits["train"])
            held_out = math.ceil(lines * validation_split_percentage / 100.0)
            if held_out >= lines:
                raise ValueError(
                    f"the training data has {lines} line(s): too few to hold out {validation_split_percentage:g}% for "
                    "validation; pass --validation-file, or --validation-split-percentage 0 for no validation."
                )
            held = splits["train"].train_test_split(
                test_size=validation_split_percentage / 100.0, seed=seed, shuffle=True
            )
            splits["train"], splits["validation"] = held["train"].flatten_indices(), held["test"].flatten_indices()
    return splits


# ----------------------------------------------------------------------------------------------- vocabulary
def read_vocabulary_file(path: str | os.PathLike) -> list[str]:
    """The words of a vocabulary file, one per line (bilm-tf's ``!!!MAXTERMID`` line skipped). A line that would shift
    the ids of later words (empty, a repeated word, a special word after other words) is a `ValueError` naming it."""
    where, words, first_line = os.fspath(path), [], {}
    if not os.path.isfile(path):
        raise ValueError(f"vocabulary file {where!r} does not exist.")
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            word = line.rstrip("\n").rstrip("\r")
            if word == "!!!MAXTERMID":
                continue
            shifts = "would shift the id of every later word"
            if not word.strip():
                problem = f"is empty; every line must hold one word (an empty line {shifts})"
            elif word in first_line:
                problem = f"repeats the word {shown(word)} of line {first_line[word]} (a repeated word {shifts})"
            elif word in SPECIAL_WORDS and any(w not in SPECIAL_WORDS for w in words):
                problem = f"lists the special word {word!r} after other words; the special words come first (ids 0-3)"
            else:
                first_line[word] = number
                words.append(word)
                continue
            raise ValueError(f"vocabulary file {where!r}: line {number} {problem}.")
    return words


class Vocabulary:
    """Word vocabulary of the LM softmax: ``<pad>``, ``<S>``, ``</S>``, ``<UNK>`` (ids 0-3), then words (bilm-tf's
    ``!!!MAXTERMID`` skipped)."""

    def __init__(self, words: Iterable[str]):
        self.words: list[str] = list(SPECIAL_WORDS)
        self.index: dict[str, int] = {w: i for i, w in enumerate(self.words)}  # also what has been seen
        for word in words:
            if not word or word == "!!!MAXTERMID" or word in self.index:
                continue
            if any(ch.isspace() for ch in word):
                raise ValueError(f"vocabulary word {word!r} contains whitespace.")
            self.index[word] = len(self.words)
            self.words.append(word)

    def __len__(self) -> int:
        return len(self.words)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.words == other.words

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Vocabulary:
        """The vocabulary of a file, read strictly (`read_vocabulary_file`)."""
        return cls(read_vocabulary_file(path))

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_text(path, "".join(w + "\n" for w in self.words))

    def fingerprint(self) -> str:
        return hashlib.sha256("\n".join(self.words).encode("utf-8")).hexdigest()[:16]

    def ids(self, words: Sequence[str]) -> list[int]:
        get = self.index.get
        return [get(w, UNK_ID) for w in words]

    def char_table(self, max_characters_per_token: int = 50, characters: Sequence[str] | None = None) -> np.ndarray:
        """``(V, max_characters_per_token)`` character ids of every word as the tokenizer encodes it (bytes, or the
        Unicode ``characters``); row 0 (``<pad>``) is zeros; out-of-vocabulary words never use row 3."""
        alphabet = CharacterAlphabet(characters, max_characters_per_token)
        table = np.zeros((len(self.words), max_characters_per_token), dtype=np.int64)
        if len(self.words) > 4:
            table[4:] = alphabet.encode(self.words[4:])
        table[BOS_ID], table[EOS_ID] = alphabet.boundary_rows
        table[UNK_ID] = alphabet.encode([SPECIAL_WORDS[UNK_ID]])[0]
        return table


def characters_from_counts(word_counts: Counter, max_size: int) -> list[str]:
    """The ``max_size`` most frequent characters of the counted words (each occurrence of a word counts its
    characters; ties by the character itself, so the result does not depend on counting order)."""
    counts: Counter = Counter()
    for word, count in word_counts.items():
        if word not in SPECIAL_WORDS:
            for character in word:
                counts[character] += count
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [c for c, _ in ranked[:max_size]]


def count_words(texts: Iterable[Sequence[str]]) -> Counter:
    """Whitespace-word counts over batches of lines (one `Counter.update` per joined batch: the fast form)."""
    counts: Counter = Counter()
    for batch in texts:
        counts.update(" ".join(batch).split())
    return counts


def _count_shard(args: tuple[Any, int, int, int]) -> Counter:
    dataset, num_shards, index, batch_size = args
    shard = dataset.shard(num_shards=num_shards, index=index, contiguous=True)
    return count_words(b["text"] for b in shard.iter(batch_size=batch_size))


def count_dataset_words(dataset: Any, *, num_proc: int | None = None, batch_size: int = 10_000) -> Counter:
    """Word counts of a dataset's ``text`` column; map-style datasets are counted in ``num_proc`` processes."""
    import datasets

    if isinstance(dataset, datasets.IterableDataset) or not num_proc or num_proc <= 1 or len(dataset) < 10 * batch_size:
        return count_words(b["text"] for b in dataset.iter(batch_size=batch_size))
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with multiprocessing.get_context(method).Pool(num_proc) as pool:
        parts = pool.map(_count_shard, [(dataset, num_proc, i, batch_size) for i in range(num_proc)])
    total: Counter = Counter()
    for part in parts:
        total.update(part)
    return total


def vocabulary_from_counts(counts: Counter, *, max_size: int | None = None, min_count: int = 1) -> Vocabulary:
    """Most frequent words first (ties by the word); ``max_size`` counts the 4 special words."""
    if max_size is not None and max_size < 5:
        raise ValueError(f"--vocab-size must be at least 5 (4 special words + 1), got {max_size}.")
    items = [(w, c) for w, c in counts.items() if c >= min_count and w not in SPECIAL_WORDS]
    items.sort(key=lambda item: (-item[1], item[0]))
    if max_size is not None:
        items = items[: max_size - len(SPECIAL_WORDS)]
    return Vocabulary(w for w, _ in items)


def build_vocabularies(
    dataset: Any,
    *,
    words: bool = True,
    max_size: int | None = None,
    min_count: int = 1,
    max_characters: int | None = None,
    num_proc: int | None = None,
) -> tuple[Vocabulary | None, list[str] | None]:
    """From one count of the training words: the word vocabulary (``words``) and the ``max_characters`` character
    vocabulary, each None when not asked for."""
    counts = count_dataset_words(dataset, num_proc=num_proc)
    if not counts:
        raise ValueError("the training data contains no words: cannot build a vocabulary.")
    vocab = characters = None
    if words:
        vocab = vocabulary_from_counts(counts, max_size=max_size, min_count=min_count)
        total, covered = sum(counts.values()), sum(counts[w] for w in vocab.words[4:])
        numbers = (len(vocab), len(counts), total, 100.0 * covered / max(total, 1))
        logger.info(
            "vocabulary: %d words (%d types in the data, %d tokens); coverage of training tokens %.2f%%", *numbers
        )
    if max_characters is not None:
        characters = characters_from_counts(counts, max_characters)
        if not characters:
            raise ValueError("the training data contains no characters: cannot build a character vocabulary.")
        kept = set(characters)
        total = sum(c * len(w) for w, c in counts.items())
        covered = sum(c * sum(ch in kept for ch in w) for w, c in counts.items())
        coverage = 100.0 * covered / max(total, 1)
        logger.info(
            "character vocabulary: %d characters; coverage of training characters %.2f%%", len(characters), coverage
        )
    return vocab, characters


# ----------------------------------------------------------------------------------------------- tokenisation
def tokenize_batch(
    batch: dict[str, list[str]],
    *,
    word_to_id: dict[str, int],
    mode: str = "sentences",
    max_sentence_length: int = 100,
    window_size: int = 20,
) -> dict[str, list]:
    """A batch of lines as examples (module docstring); empty lines give none, and ``windows`` drops the batch's
    incomplete last window."""
    get = word_to_id.get
    out_ids: list[list[int]] = []
    out_oov: list[list[str]] = []
    if mode == "sentences":
        for line in batch["text"]:
            words = line.split()
            for start in range(0, len(words), max_sentence_length):
                piece = words[start : start + max_sentence_length]
                ids = [get(w, UNK_ID) for w in piece]
                out_ids.append(ids)
                out_oov.append([w for w, i in zip(piece, ids, strict=False) if i == UNK_ID])
    elif mode == "windows":
        stream_ids: list[int] = []
        stream_words: list[str] = []
        for line in batch["text"]:
            words = line.split()
            if not words:
                continue
            stream_words.append("<S>")
            stream_words.extend(words)
            stream_words.append("</S>")
            stream_ids.append(BOS_ID)
            stream_ids.extend(get(w, UNK_ID) for w in words)
            stream_ids.append(EOS_ID)
        usable = len(stream_ids) - len(stream_ids) % window_size
        for start in range(0, usable, window_size):
            ids = stream_ids[start : start + window_size]
            words = stream_words[start : start + window_size]
            out_ids.append(ids)
            out_oov.append([w for w, i in zip(words, ids, strict=False) if i == UNK_ID])
    else:
        raise ValueError(f"--batching must be one of {BATCHING_MODES}, got {mode!r}.")
    return {"word_ids": out_ids, "oov": out_oov, "length": [len(ids) for ids in out_ids]}


def tokenize_splits(
    splits: dict[str, Any],
    vocab: Vocabulary,
    *,
    mode: str = "sentences",
    max_sentence_length: int = 100,
    window_size: int = 20,
    num_proc: int | None = None,
    overwrite_cache: bool = False,
) -> dict[str, Any]:
    """`tokenize_batch` over every split with ``Dataset.map(batched=True)`` (cached for map-style datasets)."""
    import datasets

    fn_kwargs = dict(
        word_to_id=vocab.index, mode=mode, max_sentence_length=max_sentence_length, window_size=window_size
    )
    options = f"{_TOKENIZATION_VERSION}|{vocab.fingerprint()}|{mode}|{max_sentence_length}|{window_size}"
    features = datasets.Features(
        {
            "word_ids": datasets.Sequence(datasets.Value("int32")),
            "oov": datasets.Sequence(datasets.Value("string")),
            "length": datasets.Value("int32"),
        }
    )
    common = dict(batched=True, batch_size=1000, fn_kwargs=fn_kwargs, features=features)
    out = {}
    for split, ds in splits.items():
        if isinstance(ds, datasets.IterableDataset):
            out[split] = ds.map(tokenize_batch, remove_columns=["text"], **common)
            continue
        fingerprint = hashlib.sha256(f"{ds._fingerprint}|{options}".encode()).hexdigest()[:32]
        out[split] = ds.map(
            tokenize_batch,
            remove_columns=ds.column_names,
            **common,
            num_proc=num_proc if num_proc and num_proc > 1 and len(ds) > 10_000 else None,
            load_from_cache_file=not overwrite_cache,
            new_fingerprint=fingerprint,
            desc=f"Tokenising {split}",
        )
        if len(out[split]) == 0:
            raise ValueError(f"the {split} split contains no words after tokenisation.")
    return out
