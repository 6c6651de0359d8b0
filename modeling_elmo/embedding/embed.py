"""Bulk ELMo feature export to HDF5: the ``elmo embed`` command.

A port of the removed ``allennlp elmo`` command (AllenNLP v0.9). The input is a text file with one sentence per line,
already tokenised and split on whitespace (or, with ``raw_text``, split by the tokenizer's pre-tokenizer). The output
is an HDF5 file in the old command's layout:

* one float32 dataset per input line, key ``str(line_index)`` (0-based), of shape ``(L + 1, tokens, 2P)`` for
  ``--all``, or ``(tokens, 2P)`` for ``--top`` (the last layer) and ``--average`` (the mean of the L + 1 layers);
* a dataset ``sentence_to_index`` of shape ``(1,)`` and variable-length string type holding a JSON object
  ``{sentence text: key}`` (a repeated sentence keeps the key of its last line), unless ``forget_sentences`` or
  ``use_sentence_keys`` is set.

With ``use_sentence_keys`` the sentence text itself is the key; lines containing ``/``, blank lines, the names
``.`` and ``sentence_to_index`` and repeated sentences are refused before any work starts.

How a run proceeds (see `embed_file`):

* The input is streamed, never read whole. It is cut into chunks of ``chunk_size`` consecutive lines; within a chunk
  the sentences are sorted by length (longest first) and batched, which saves padding; every sentence is still
  written under its own line index.
* Each finished chunk is written atomically to ``OUTPUT.partial/chunk-NNNNNNNN.h5``. When all chunks exist, they are
  merged into ``OUTPUT`` (written under a temporary name in the same folder, then renamed), and ``OUTPUT.partial`` is
  removed. ``OUTPUT`` therefore only ever exists complete; a killed run leaves ``OUTPUT.partial`` behind, and
  ``resume=True`` embeds only the chunks that are missing there (at most one chunk of work per process is lost).
  The merge needs disk space for a second copy of the output while it runs.
* Under ``accelerate launch`` every process embeds the chunks ``k`` with ``k % num_processes == process_index``, and
  the main process merges. A run may be resumed with a different number of processes.
* Blank lines give an empty array, ``(L + 1, 0, 2P)`` for ``--all`` or ``(0, 2P)`` otherwise (the old command raised
  an error). Invalid UTF-8 bytes are replaced by U+FFFD and the affected lines are counted and reported.
* The model runs under `torch.inference_mode()` and stateless, so a sentence's vectors depend on nothing but the
  sentence (not on its batch, the sort order or the number of processes). The command loads it with
  `modeling_elmo.embedding.inference.load_elmo_model`, which refuses weights that do not match ``config.json``.
* While a run works on ``OUTPUT``, its (main) process holds an exclusive `fcntl.flock` on ``OUTPUT.lock``; a second
  run on the same output stops at once. The lock file is removed at the end; a killed run's lock is released by
  the operating system.
* Refused before anything is written, each with one line naming the path: an output that is the input (also
  through a link), a binary input (a NUL byte in its first 64 KiB), an output folder that is missing, is a file or
  is not writable, and an output that is a folder.

The running of the model (`ElmoEmbedder`, `make_batches`) lives in `modeling_elmo.embedding.inference`; this module is
the command around it: files, chunks, HDF5, resuming, processes and the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import h5py
import numpy as np
import torch
from tqdm.auto import tqdm

from ..utils.io_utils import (
    MAX_LINE_BYTES,
    MAX_SENTENCE_TOKENS,
    LineTooLongError,
    command_error,
    error_line,
    exclusive_lock,
    iter_lines,
    read_json_object,
    scan_lines,
)
from ..utils.launch import LaunchError, check_process_count, launched_processes, use_cpu_backend
from ..utils.loading import without_transformers_progress_bars
from .inference import DTYPES, ElmoEmbedder, check_compute_dtype, load_elmo_tokenizer, make_batches
from .partial_folder import PartialRecords, proven_names, remove_proven, unproven_entries

logger = logging.getLogger(__name__)

LAYER_MODES = ("all", "top", "average")
SENTENCE_TO_INDEX = "sentence_to_index"
RUN_FILE = "run.json"
DEFAULT_BATCH_SIZE = 64
DEFAULT_CHUNK_SIZE = 10_000
#: Settings that must not change between a killed run and its resumption (they change the chunks' contents).
#: ``input_sha256`` hashes the whole input; ``model_weights_sha256`` the weights the model runs with (`ElmoEmbedder.
#: weights_fingerprint`: a model whose weights were replaced under the same path is another model).
RESUME_KEYS = (
    "input_size",
    "input_sha256",
    "mode",
    "model",
    "model_weights_sha256",
    "chunk_size",
    "raw_text",
    "forget_sentences",
    "use_sentence_keys",
    "num_layers",
    "output_size",
)


class Embedder(Protocol):
    """What `embed_file` needs from a model: the layer count, the vector size and a batch function."""

    num_layers: int  # L + 1
    output_size: int  # 2P

    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """All layers of each non-empty sentence: float32 arrays ``(num_layers, len(sentence), output_size)``."""


@dataclasses.dataclass
class EmbedReport:
    """What a run did. Counts of lines cover the whole input; ``embedded_lines`` only this process's new work."""

    output_file: str
    num_lines: int = 0
    embedded_lines: int = 0
    resumed_lines: int = 0
    num_tokens: int = 0
    blank_lines: int = 0
    invalid_utf8_lines: int = 0
    first_invalid_utf8_line: int | None = None
    seconds: float = 0.0
    merged: bool = False

    @property
    def sentences_per_second(self) -> float:
        return self.embedded_lines / self.seconds if self.seconds > 0 else float("nan")


# ---------------------------------------------------------------------------------------------------- input


def count_lines(path: str | os.PathLike) -> int:
    """Number of lines of a file, read in binary blocks: ``\n``, ``\r\n`` and a lone ``\r`` end a line, and a last
    line without a line break counts (`modeling_elmo.utils.io_utils.iter_lines`)."""
    return scan_lines(path)[0]


def _decode(raw: bytes, index: int) -> tuple[str, bool]:
    try:
        text, bad = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, bad = raw.decode("utf-8", errors="replace"), True
    if index == 0 and text.startswith("\ufeff"):  # a UTF-8 byte-order mark is not part of the first sentence
        text = text[1:]
    return text.strip(), bad


Line = tuple[int, str, bool]  # (line index, stripped text, had invalid UTF-8)


@contextlib.contextmanager
def _refusing_long_lines(path: Path) -> Iterator[None]:
    try:
        yield
    except LineTooLongError as error:
        raise ValueError(
            f"input file {str(path)!r}: line {error.number - 1} has more than {MAX_LINE_BYTES:,} bytes; a line is "
            f"one sentence, embedded whole (at most {MAX_LINE_BYTES:,} bytes and {MAX_SENTENCE_TOKENS:,} tokens)."
        ) from None


def iter_chunks(path: Path, chunk_size: int, wanted: Callable[[int], bool]) -> Iterator[tuple[int, list[Line]]]:
    """Stream ``(chunk_index, [(line_index, text, had_invalid_utf8), ...])`` for the chunks ``wanted`` accepts.

    Lines of other chunks are read but not decoded; at most one chunk is held in memory.
    """
    with open(path, "rb") as handle, _refusing_long_lines(path):
        chunk: list[Line] = []
        chunk_index = 0
        take = wanted(0)
        for index, raw in enumerate(iter_lines(handle, max_line_bytes=MAX_LINE_BYTES)):
            k = index // chunk_size
            if k != chunk_index:
                if take:
                    yield chunk_index, chunk
                chunk, chunk_index, take = [], k, wanted(k)
            if take:
                chunk.append((index, *_decode(raw, index)))
        if take and chunk:
            yield chunk_index, chunk


def _check_sentence_keys(path: Path, tokenize: Callable[[str], list[str]]) -> None:
    """Refuse inputs whose sentences cannot be HDF5 keys (``use_sentence_keys``): '/', blank, '.', duplicates."""
    seen: dict[str, int] = {}
    for _, lines in iter_chunks(path, DEFAULT_CHUNK_SIZE, lambda k: True):
        for index, key, _ in lines:
            if not tokenize(key):
                raise ValueError(f"--use-sentence-keys: line {index} is blank and cannot be a key.")
            if "/" in key or key in (".", SENTENCE_TO_INDEX):
                raise ValueError(
                    f"--use-sentence-keys: line {index} ({key[:80]!r}) cannot be an HDF5 key "
                    "(it contains '/' or is '.' or 'sentence_to_index'); use line-number keys."
                )
            if key in seen:
                raise ValueError(
                    f"--use-sentence-keys: line {index} repeats the sentence of line {seen[key]} "
                    f"({key[:80]!r}); keys must be unique, use line-number keys."
                )
            seen[key] = index


# ---------------------------------------------------------------------------------------------------- layers


def _select_layers(layers: np.ndarray, mode: str) -> np.ndarray:
    if mode == "all":
        return layers
    if mode == "top":
        return layers[-1]
    return layers.mean(axis=0)


# ---------------------------------------------------------------------------------------------------- files


def _partial_dir(output: Path) -> Path:
    return output.with_name(output.name + ".partial")


def _lock_path(output: Path) -> Path:
    return output.with_name(output.name + ".lock")


def _check_paths(input_path: Path, output: Path) -> None:
    """Refuse, before anything is written, inputs and outputs that cannot work (each error names the path)."""
    if not input_path.exists():
        raise ValueError(f"input file {str(input_path)!r} does not exist.")
    if not input_path.is_file():
        raise ValueError(f"input {str(input_path)!r} is not a file.")
    _check_text_file(input_path)
    parent = output.parent
    if not parent.exists():
        raise ValueError(f"output folder {str(parent)!r} does not exist.")
    if not parent.is_dir():
        raise ValueError(f"the output's folder {str(parent)!r} is a file, not a folder.")
    if output.is_dir():
        raise ValueError(f"output path {str(output)!r} is a folder; give a file name.")
    if output.exists() and os.path.samefile(input_path, output):
        raise ValueError(
            f"output {str(output)!r} is the input file {str(input_path)!r}; writing it would destroy "
            "the input. Choose another output."
        )


def _check_text_file(path: Path, block_size: int = 1 << 16) -> None:
    """Refuse a binary file: a NUL byte in the first block (UTF-8 text has none; invalid UTF-8 alone is accepted)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(block_size)
    except OSError as error:
        raise ValueError(f"cannot read input file {str(path)!r}: {error.strerror}.") from None
    offset = head.find(b"\0")
    if offset >= 0:
        raise ValueError(
            f"input file {str(path)!r} is not text: it has a NUL byte at offset {offset} (a binary "
            "file, or UTF-16 text; elmo embed reads UTF-8 text, one sentence per line)."
        )


def _output_lock(output: Path) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock on ``OUTPUT.lock`` while the block runs (`io_utils.exclusive_lock`): another run writing
    the same output is refused at once, and a killed run leaves no stale lock."""
    path = _lock_path(output)
    return exclusive_lock(
        path,
        busy=f"another {{holder}} run is writing {str(output)!r} (it holds {str(path)!r}); "
        "wait for it to end, or choose another output.",
        unwritable=f"cannot write next to the output {str(output)!r}",
        holder="elmo embed",
    )


def _chunk_path(partial: Path, chunk_index: int) -> Path:
    return partial / f"chunk-{chunk_index:08d}.h5"


class _GuardedFile:
    """A binary file for h5py's file-object driver that survives a failed write.

    When the HDF5 library's write fails inside its own calls (a full disk), h5py cannot close the file any more:
    every later flush fails again, and the objects' clean-up at exit crashes the interpreter. Through this wrapper
    the first failed write is recorded and every later one is dropped as if it had succeeded, so the file always
    closes; `check` raises the recorded error (the file is then deleted by its owner: its content is incomplete).
    """

    def __init__(self, destination: Path, opened: tuple[int, Path]):
        """The new file ``opened`` (descriptor, path: a fresh unique name, `PartialRecords.writing`, never a name
        someone could have planted as a link or a hard link to another file), meant to become ``destination``."""
        fd, self.path = opened
        self.destination = destination
        self.handle = os.fdopen(fd, "w+b")
        self.error: OSError | None = None

    def check(self, doing: str) -> None:
        if self.error is not None:
            code = self.error.errno
            detail = os.strerror(code) if code else str(self.error)
            raise OSError(code or 0, f"{doing} {str(self.destination)!r} failed: {detail}")

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if self.error is None:
            try:
                self.handle.write(data)
            except OSError as error:
                self.error = error
        return size

    def flush(self) -> None:
        if self.error is None:
            try:
                self.handle.flush()
            except OSError as error:
                self.error = error

    def truncate(self, size: int | None = None) -> int:
        if self.error is None:
            try:
                return self.handle.truncate(size)
            except OSError as error:
                self.error = error
        return size if size is not None else self.handle.tell()

    def read(self, size: int = -1) -> bytes:
        return self.handle.read(size)

    def readinto(self, buffer: Any) -> int:
        return self.handle.readinto(buffer)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.handle.seek(offset, whence)

    def tell(self) -> int:
        return self.handle.tell()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.handle.close()


@contextlib.contextmanager
def _hdf5_writer(
    destination: Path, records: PartialRecords, doing: str, *, keep: bool
) -> Iterator[tuple[h5py.File, _GuardedFile]]:
    """A new HDF5 file written through a `_GuardedFile` under a fresh name in the run's ``.partial`` folder
    (`PartialRecords.writing`: recorded, and with ``keep`` recorded once finished), renamed to ``destination`` once
    the block completes and every byte reached the disk, removed otherwise: nothing is ever written through a name
    that existed before. A failed write is raised as one `OSError` (with its errno: 28 for a full disk) that names
    ``destination``."""
    with records.writing(destination, keep=keep) as opened:
        guard = _GuardedFile(destination, opened)
        with _guarded(guard, doing) as h5:
            yield h5, guard


@contextlib.contextmanager
def _guarded(guard: _GuardedFile, doing: str) -> Iterator[h5py.File]:
    """`_hdf5_writer`'s HDF5 file on ``guard``: flushed to disk, closed; a failed write raised naming it."""
    try:
        try:
            h5 = h5py.File(guard, "w")
            try:
                yield h5
            finally:
                h5.close()
            guard.flush()
            if guard.error is None:
                os.fsync(guard.handle.fileno())
        except Exception as error:  # after a dropped write, HDF5 may fail reading back what it wrote: report the write
            if guard.error is None:
                if not isinstance(error, OSError):
                    raise
                guard.error = error
        guard.check(doing)
    finally:
        guard.close()


def write_chunk(
    path: Path,
    lines: list[Line],
    embedder: Embedder,
    *,
    mode: str,
    tokenize: Callable[[str], list[str]],
    batch_size: int,
    max_batch_tokens: int | None,
    use_sentence_keys: bool,
    forget_sentences: bool,
    progress: Any = None,
    records: PartialRecords | None = None,
) -> int:
    """Embed one chunk of lines into the HDF5 file ``path`` (atomically); return its number of tokens.

    A failed write (a full disk: ``OSError`` with errno ``ENOSPC``) removes the unfinished chunk file and raises a
    one-line `OSError`; the chunks finished before it stay.
    """
    tokens = [tokenize(text) for _, text, _ in lines]
    for (index, _, _), sentence in zip(lines, tokens, strict=True):
        if len(sentence) > MAX_SENTENCE_TOKENS:
            raise ValueError(
                f"input line {index} holds {len(sentence):,} tokens; a line is one sentence, embedded whole (at "
                f"most {MAX_SENTENCE_TOKENS:,} tokens)."
            )
    keys = [text if use_sentence_keys else str(index) for index, text, _ in lines]
    empty_shape = (embedder.num_layers, 0, embedder.output_size) if mode == "all" else (0, embedder.output_size)
    doing = "writing the chunk"
    records = records if records is not None else PartialRecords(path.parent)
    with _hdf5_writer(path, records, doing, keep=True) as (h5, guard):
        for j, t in enumerate(tokens):
            if not t:
                h5.create_dataset(keys[j], data=np.zeros(empty_shape, dtype=np.float32))
        if progress is not None:
            progress.update(sum(1 for t in tokens if not t))
        for batch in make_batches([len(t) for t in tokens], batch_size, max_batch_tokens):
            outputs = embedder.embed_batch([tokens[j] for j in batch])
            for j, layers in zip(batch, outputs, strict=False):
                expected = (embedder.num_layers, len(tokens[j]), embedder.output_size)
                if layers.shape != expected:
                    raise RuntimeError(
                        f"embedder returned shape {layers.shape} for line {lines[j][0]}, expected {expected}."
                    )
                h5.create_dataset(keys[j], data=_select_layers(layers, mode).astype(np.float32, copy=False))
            guard.check(doing)  # stop at the first failed write, not at the end of the chunk
            if progress is not None:
                progress.update(len(batch))
        if not forget_sentences and not use_sentence_keys:
            mapping = {
                text: key for (_, text, _), key in zip(lines, keys, strict=False)
            }  # later lines win, as in AllenNLP
            h5.create_dataset(SENTENCE_TO_INDEX, data=[json.dumps(mapping)], dtype=h5py.string_dtype())
        invalid = [index for index, _, bad in lines if bad]
        num_tokens = sum(len(t) for t in tokens)
        h5.attrs["num_lines"] = len(lines)
        h5.attrs["blank_lines"] = sum(1 for t in tokens if not t)
        h5.attrs["invalid_utf8_lines"] = len(invalid)
        h5.attrs["first_invalid_utf8_line"] = invalid[0] if invalid else -1
        h5.attrs["num_tokens"] = num_tokens
    return num_tokens


def merge_chunks(
    partial: Path,
    output: Path,
    num_chunks: int,
    *,
    settings: dict[str, Any],
    report: EmbedReport,
    records: PartialRecords | None = None,
) -> None:
    """Copy the chunk files, in line order, into one HDF5 file written atomically at ``output`` (under a fresh name
    in ``partial`` until it is complete)."""
    mapping: dict[str, str] = {}
    write_mapping = not settings["forget_sentences"] and not settings["use_sentence_keys"]
    first_invalid = None
    doing = "merging the chunks into"
    records = records if records is not None else PartialRecords(partial)
    with _hdf5_writer(output, records, doing, keep=False) as (dst, guard):
        for k in range(num_chunks):
            with h5py.File(_chunk_path(partial, k), "r") as src:
                for key in src:
                    if key == SENTENCE_TO_INDEX:
                        continue
                    if key in dst:
                        raise ValueError(f"key {key!r} occurs twice in the input.")
                    src.copy(src[key], dst, name=key)
                if write_mapping:
                    mapping.update(json.loads(src[SENTENCE_TO_INDEX][0]))
                report.blank_lines += int(src.attrs["blank_lines"])
                report.invalid_utf8_lines += int(src.attrs["invalid_utf8_lines"])
                if first_invalid is None and int(src.attrs["first_invalid_utf8_line"]) >= 0:
                    first_invalid = int(src.attrs["first_invalid_utf8_line"])
            guard.check(doing)
        if write_mapping:
            dst.create_dataset(SENTENCE_TO_INDEX, data=[json.dumps(mapping)], dtype=h5py.string_dtype())
        dst.attrs["layers"] = settings["mode"]
        dst.attrs["model"] = settings["model"]
        dst.attrs["num_lines"] = report.num_lines
    report.first_invalid_utf8_line = first_invalid


# ---------------------------------------------------------------------------------------------------- driver


class _Processes:
    """Rank, world size and barrier; single-process unless running under `accelerate launch`/torchrun."""

    def __init__(self) -> None:
        self.state = None
        if launched_processes() > 1:
            from accelerate import PartialState

            self.state = PartialState(cpu=use_cpu_backend())
            try:
                check_process_count(self.state.num_processes, self.state.distributed_type)
            except LaunchError as error:
                raise command_error("embed", error) from None
        self.index = self.state.process_index if self.state else 0
        self.count = self.state.num_processes if self.state else 1

    @property
    def is_main(self) -> bool:
        return self.index == 0

    @property
    def device(self) -> torch.device | None:
        return self.state.device if self.state else None

    def wait(self) -> None:
        if self.state is not None:
            self.state.wait_for_everyone()


def embed_file(
    input_file: str | os.PathLike,
    output_file: str | os.PathLike,
    embedder: Embedder | Callable[[], Embedder],
    *,
    mode: str,
    model_name: str = "",
    batch_size: int = DEFAULT_BATCH_SIZE,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_batch_tokens: int | None = None,
    tokenize: Callable[[str], list[str]] = str.split,
    raw_text: bool = False,
    forget_sentences: bool = False,
    use_sentence_keys: bool = False,
    overwrite: bool = False,
    resume: bool = False,
    show_progress: bool = True,
    processes: _Processes | None = None,
) -> EmbedReport:
    """Embed every line of ``input_file`` into the HDF5 file ``output_file`` (see the module docstring).

    Args:
        embedder: an `Embedder` (e.g. `ElmoEmbedder`), or a function building one (called once the arguments have
            been checked, so bad arguments fail before a model is loaded).
        mode: ``"all"``, ``"top"`` or ``"average"``.
        model_name: recorded in the output's attributes and checked on resume.
        tokenize: splits a line into words (``str.split`` for pre-tokenised text).
        raw_text: only recorded (it must match on resume); pass the matching ``tokenize``.
        chunk_size: lines per chunk: the sorting buffer and the unit of resumable work.
        max_batch_tokens: also cap a batch's padded token count (bounds memory on very long lines).
        overwrite: replace an existing output (and discard an interrupted run's ``OUTPUT.partial``).
        resume: continue an interrupted run from ``OUTPUT.partial`` (starts afresh if there is none).

    Returns:
        an `EmbedReport`. Counts over the whole input are filled in on the process that merged.
    """
    if mode not in LAYER_MODES:
        raise ValueError(f"mode must be one of {LAYER_MODES}, got {mode!r}.")
    processes = processes or _Processes()
    for name, value in (("batch_size", batch_size), ("chunk_size", chunk_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    if max_batch_tokens is not None and (not isinstance(max_batch_tokens, int) or max_batch_tokens < 1):
        raise ValueError(f"max_batch_tokens must be a positive integer or None, got {max_batch_tokens!r}.")
    if overwrite and resume:
        raise ValueError("overwrite and resume exclude each other.")
    input_path, output = Path(input_file), Path(output_file)
    _check_paths(input_path, output)
    # Only the main process writes OUTPUT, OUTPUT.partial's run file and the merge; it holds the lock for the run.
    with _output_lock(output) if processes.is_main else contextlib.nullcontext():
        return _embed_locked(
            input_path,
            output,
            embedder,
            processes,
            mode=mode,
            model_name=model_name,
            batch_size=batch_size,
            chunk_size=chunk_size,
            max_batch_tokens=max_batch_tokens,
            tokenize=tokenize,
            raw_text=raw_text,
            forget_sentences=forget_sentences,
            use_sentence_keys=use_sentence_keys,
            overwrite=overwrite,
            resume=resume,
            show_progress=show_progress,
        )


def _embed_locked(
    input_path: Path,
    output: Path,
    embedder: Embedder | Callable[[], Embedder],
    processes: _Processes,
    *,
    mode: str,
    model_name: str,
    batch_size: int,
    chunk_size: int,
    max_batch_tokens: int | None,
    tokenize: Callable[[str], list[str]],
    raw_text: bool,
    forget_sentences: bool,
    use_sentence_keys: bool,
    overwrite: bool,
    resume: bool,
    show_progress: bool,
) -> EmbedReport:
    partial = _partial_dir(output)
    if partial.is_symlink() or (os.path.lexists(partial) and not partial.is_dir()):  # --resume would work through it
        raise ValueError(
            f"{str(partial)!r}, where an interrupted run's chunks are kept, is "
            f"{'a symbolic link' if partial.is_symlink() else 'not a folder'}; elmo embed never reads or writes "
            "through one. Remove it if it is not yours to keep."
        )
    if output.exists() and not overwrite:
        raise ValueError(f"output file {str(output)!r} already exists; pass --overwrite to replace it.")
    if overwrite:
        _check_replaceable(output, partial)
    if partial.exists() and not (overwrite or resume):
        raise ValueError(
            f"{str(partial)!r} holds an interrupted run; pass --resume to continue it or --overwrite to start again."
        )
    if use_sentence_keys:
        _check_sentence_keys(input_path, tokenize)

    if callable(embedder) and not hasattr(embedder, "embed_batch"):
        embedder = embedder()
    num_lines, input_sha256 = scan_lines(input_path)  # one streamed pass: the line count and a hash of every byte
    settings = {
        "input_size": input_path.stat().st_size,
        "input_sha256": input_sha256,
        "mode": mode,
        "model": model_name,
        "model_weights_sha256": getattr(embedder, "weights_fingerprint", None),
        "chunk_size": chunk_size,
        "raw_text": raw_text,
        "forget_sentences": forget_sentences,
        "use_sentence_keys": use_sentence_keys,
        "num_layers": embedder.num_layers,
        "output_size": embedder.output_size,
    }
    num_chunks = math.ceil(num_lines / chunk_size)
    report = EmbedReport(output_file=str(output), num_lines=num_lines)

    processes.wait()  # every process has checked the paths before the main one creates or removes anything
    if processes.is_main:
        _prepare_partial(partial, settings, resume=resume)
    processes.wait()
    if resume:  # every process checks the recorded settings itself
        _check_resumable(partial, settings)

    records = PartialRecords(partial, processes.index)
    mine = [k for k in range(num_chunks) if k % processes.count == processes.index]
    recorded = proven_names(partial)  # a file merely named like a chunk is not one
    done = {k for k in mine if _chunk_path(partial, k).name in recorded}
    lines_of = lambda k: min(chunk_size, num_lines - k * chunk_size)  # noqa: E731
    report.resumed_lines = sum(lines_of(k) for k in done)
    todo = set(mine) - done
    if num_lines == 0:
        logger.warning("input file %s is empty; the output holds no sentences.", input_path)
    start = time.perf_counter()
    with tqdm(
        total=sum(lines_of(k) for k in mine),
        initial=report.resumed_lines,
        unit="sent",
        dynamic_ncols=True,
        disable=not (show_progress and processes.is_main),
        desc="elmo embed",
    ) as progress:
        for k, lines in iter_chunks(input_path, chunk_size, lambda k: k in todo):
            report.num_tokens += write_chunk(
                _chunk_path(partial, k),
                lines,
                embedder,
                mode=mode,
                tokenize=tokenize,
                batch_size=batch_size,
                max_batch_tokens=max_batch_tokens,
                use_sentence_keys=use_sentence_keys,
                forget_sentences=forget_sentences,
                progress=progress,
                records=records,
            )
            report.embedded_lines += len(lines)
    report.seconds = time.perf_counter() - start
    processes.wait()
    if processes.is_main:
        recorded = proven_names(partial)
        missing = [k for k in range(num_chunks) if _chunk_path(partial, k).name not in recorded]
        if missing:
            raise RuntimeError(f"chunks {missing[:10]} of {partial} are missing after embedding.")
        merge_chunks(partial, output, num_chunks, settings=settings, report=report, records=records)
        left = remove_proven(partial)
        if left:
            logger.warning(
                "%s: %r was kept: it holds %s, which no record of elmo embed lists; remove it yourself if it is "
                "not yours.",
                output,
                str(partial),
                ", ".join(left[:5]) + (f" (and {len(left) - 5} more)" if len(left) > 5 else ""),
            )
        report.merged = True
        if report.invalid_utf8_lines:
            logger.warning(
                "%d line(s) of %s held invalid UTF-8 (replaced by U+FFFD), the first is line %d.",
                report.invalid_utf8_lines,
                input_path,
                report.first_invalid_utf8_line,
            )
    return report


def _is_embed_output(path: Path) -> bool:
    """Whether ``path`` is an HDF5 file that `merge_chunks` wrote (its root carries the run's attributes)."""
    with open(path, "rb") as handle:
        if handle.read(8) != b"\x89HDF\r\n\x1a\n":
            return False
    try:
        with h5py.File(path, "r") as h5:
            return {"layers", "model", "num_lines"} <= set(h5.attrs)
    except (OSError, ValueError):
        return False


def _check_replaceable(output: Path, partial: Path) -> None:
    """``--overwrite`` replaces only what an earlier ``elmo embed`` wrote: an output that is not a regular file (a
    device such as ``/dev/null``, a FIFO) or not an HDF5 file of elmo embed, and a ``.partial`` folder that is not an
    interrupted run's (its record, chunk files), are refused naming them."""
    if os.path.lexists(output) and not output.is_symlink() and not output.is_file():
        raise ValueError(
            f"output {str(output)!r} exists and is not a regular file (a device or a FIFO); elmo embed "
            "never replaces one. Choose another output."
        )
    if output.is_file() and not _is_embed_output(output):
        raise ValueError(
            f"output {str(output)!r} exists and is not an HDF5 file written by elmo embed; --overwrite "
            "replaces only those. Choose another output."
        )
    if os.path.lexists(partial):
        foreign = [partial.name] if partial.is_symlink() or not partial.is_dir() else unproven_entries(partial)
        if foreign:
            raise ValueError(
                f"{str(partial)!r} holds what an interrupted elmo embed run does not write "
                f"({', '.join(foreign[:5])}); --overwrite never deletes it. Move it away."
            )


def _prepare_partial(partial: Path, settings: dict[str, Any], *, resume: bool) -> None:
    """Main process: start ``partial`` (the run record, recorded), or continue the interrupted run in it
    (``resume``: what the killed run was writing is removed where its records prove it); with ``--overwrite``
    the interrupted run's files are removed first, only those its records list as they are
    (`partial_folder.remove_proven`: `_check_replaceable` refused anything else)."""
    if partial.exists() and not resume:  # overwrite: discard the interrupted run
        left = remove_proven(partial)
        if left:  # appeared since the check
            raise ValueError(
                f"{str(partial)!r} holds what an interrupted elmo embed run does not write ({', '.join(left[:5])}); "
                "--overwrite never deletes it. Move it away."
            )
    if partial.exists():
        _check_resumable(partial, settings)
        if RUN_FILE not in proven_names(partial):
            raise ValueError(
                f"{str(partial)!r} holds no record of elmo embed proving its {RUN_FILE} (a run of an earlier version, "
                "or files that are not a run's); nothing was deleted: remove it yourself if it is not yours, then "
                "run again."
            )
        remove_proven(partial, temporaries_only=True)  # what the killed run was writing
        return
    partial.mkdir()
    PartialRecords(partial).write_text(partial / RUN_FILE, json.dumps(settings, indent=2))


def _check_resumable(partial: Path, settings: dict[str, Any]) -> None:
    run_file = partial / RUN_FILE
    if not run_file.is_file():
        raise ValueError(
            f"{str(partial)!r} has no {RUN_FILE}; it is not an interrupted `elmo embed` run. "
            "Pass --overwrite to start again."
        )
    recorded = read_json_object(run_file, "run", required=True)
    changed = [k for k in RESUME_KEYS if recorded.get(k) != settings[k]]
    if changed:

        def describe(key: str) -> str:
            if key in ("input_sha256", "model_weights_sha256") and key not in recorded:
                return f"{key} was not recorded (a run of an earlier version)"
            if key in ("input_size", "input_sha256"):
                return f"the input file changed ({key}: {recorded.get(key)!r} -> {settings[key]!r})"
            if key == "model_weights_sha256":
                return (
                    f"the model's weights changed (sha256 {str(recorded.get(key))[:16]}... -> "
                    f"{str(settings[key])[:16]}...)"
                )
            return f"{key}: {recorded.get(key)!r} -> {settings[key]!r}"

        detail = ", ".join(describe(k) for k in changed if not (k == "input_size" and "input_sha256" in changed))
        raise ValueError(
            f"cannot resume {str(partial)!r}: settings differ from the interrupted run ({detail}). "
            "Pass --overwrite to start again."
        )


# ---------------------------------------------------------------------------------------------------- CLI


def build_parser(prog: str = "elmo embed") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        description="Write ELMo layer activations for every line of a text file to an HDF5 file (the layout of "
        "the old `allennlp elmo` command). Run under `accelerate launch` to use several GPUs/nodes.",
    )
    parser.add_argument("input_file", help="text file, one sentence per line (whitespace-tokenised unless --raw-text)")
    parser.add_argument("output_file", help="HDF5 file to write")
    parser.add_argument("--model", required=True, help="folder or Hub id of an ELMo model (ElmoModel or a head)")
    layers = parser.add_mutually_exclusive_group(required=True)
    layers.add_argument(
        "--all",
        dest="mode",
        action="store_const",
        const="all",
        help="write all L+1 layers: (L+1, tokens, 2P) per sentence",
    )
    layers.add_argument(
        "--top", dest="mode", action="store_const", const="top", help="write the top layer: (tokens, 2P)"
    )
    layers.add_argument(
        "--average",
        dest="mode",
        action="store_const",
        const="average",
        help="write the mean of the L+1 layers: (tokens, 2P)",
    )
    parser.add_argument(
        "--raw-text",
        action="store_true",
        help="split lines with the tokenizer's pre-tokenizer instead of on whitespace",
    )
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences per forward pass")
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=None,
        help="also cap the padded tokens per batch (bounds memory with very long lines)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=DEFAULT_CHUNK_SIZE,
        help="lines sorted by length together; also the unit of work that --resume keeps",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="e.g. cpu, cuda, cuda:1 (default: cuda if available; under accelerate: its device)",
    )
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="compute dtype (bfloat16: a GPU or a CPU with native bf16; float16: a GPU); the file is always float32",
    )
    parser.add_argument("--forget-sentences", action="store_true", help="do not write the sentence_to_index dataset")
    parser.add_argument(
        "--use-sentence-keys",
        action="store_true",
        help="key each dataset by its sentence instead of its line number (refuses '/' and repeats)",
    )
    run = parser.add_mutually_exclusive_group()
    run.add_argument("--overwrite", action="store_true", help="replace an existing output or interrupted run")
    run.add_argument("--resume", action="store_true", help="continue the interrupted run in OUTPUT.partial")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``elmo embed``: every refused input ends the command with one line ``elmo embed: error: ...`` (exit 1)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    processes = _Processes()
    device = processes.device or torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if processes.count > 1 and args.device is not None:
        logger.warning("--device %s ignored: accelerate assigns %s to this process.", args.device, device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise command_error("embed", f"--device {args.device} asked for a GPU, but torch sees none.")
    dtype = DTYPES[args.dtype]
    try:
        check_compute_dtype(device, dtype, f"--dtype {args.dtype} on {device}")
    except ValueError as error:
        raise command_error("embed", error) from None

    def load() -> ElmoEmbedder:  # called by embed_file once the paths have been checked
        with without_transformers_progress_bars():
            return ElmoEmbedder.from_pretrained(args.model, device=device, dtype=dtype, words=False)

    try:
        tokenize: Callable[[str], list[str]] = str.split
        if args.raw_text:
            tokenize = load_elmo_tokenizer(args.model, words=False).split_words
        report = embed_file(
            args.input_file,
            args.output_file,
            load,
            mode=args.mode,
            model_name=args.model,
            batch_size=args.batch_size,
            chunk_size=args.chunk_size,
            max_batch_tokens=args.max_batch_tokens,
            tokenize=tokenize,
            raw_text=args.raw_text,
            forget_sentences=args.forget_sentences,
            use_sentence_keys=args.use_sentence_keys,
            overwrite=args.overwrite,
            resume=args.resume,
            show_progress=not args.no_progress,
            processes=processes,
        )
    except (ValueError, FloatingPointError) as err:  # bad input, or a model whose vectors are not finite
        raise command_error("embed", err) from None
    except OSError as err:  # e.g. the disk filled up: finished chunks stay in OUTPUT.partial
        partial = _partial_dir(Path(args.output_file))
        kept = len(list(partial.glob("chunk-*.h5"))) if partial.is_dir() else 0
        hint = (
            f"; {kept} finished chunk(s) are kept in {str(partial)!r}: rerun with --resume to continue from them"
            if kept
            else ""
        )
        raise command_error("embed", f"{error_line(err)}{hint}.") from None
    if report.merged:
        print(
            f"elmo embed: wrote {report.num_lines} sentences to {report.output_file} "
            f"({report.embedded_lines} embedded now at {report.sentences_per_second:.1f} sentences/s on this "
            f"process, {report.resumed_lines} resumed; {report.blank_lines} blank, "
            f"{report.invalid_utf8_lines} with invalid UTF-8).",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
