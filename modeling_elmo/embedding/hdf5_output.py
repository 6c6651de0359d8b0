"""The HDF5 files of ``elmo embed``: each chunk of lines embedded into its own file (`write_chunk`), the chunks merged
in line order into the output (`merge_chunks`), both written atomically through a file object that survives a failed
write (a full disk) so that the file always closes and the failure is one line naming it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import h5py
import numpy as np

from ..utils.io_utils import MAX_SENTENCE_TOKENS
from .inference import make_batches
from .input_lines import Line
from .partial_folder import PartialRecords

SENTENCE_TO_INDEX = "sentence_to_index"


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


def _select_layers(layers: np.ndarray, mode: str) -> np.ndarray:
    if mode == "all":
        return layers
    if mode == "top":
        return layers[-1]
    return layers.mean(axis=0)


def chunk_path(partial: Path, chunk_index: int) -> Path:
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
            with h5py.File(chunk_path(partial, k), "r") as src:
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


def is_embed_output(path: Path) -> bool:
    """Whether ``path`` is an HDF5 file that `merge_chunks` wrote (its root carries the run's attributes)."""
    with open(path, "rb") as handle:
        if handle.read(8) != b"\x89HDF\r\n\x1a\n":
            return False
    try:
        with h5py.File(path, "r") as h5:
            return {"layers", "model", "num_lines"} <= set(h5.attrs)
    except (OSError, ValueError):
        return False


__all__ = [
    "SENTENCE_TO_INDEX",
    "EmbedReport",
    "Embedder",
    "chunk_path",
    "is_embed_output",
    "merge_chunks",
    "write_chunk",
]
