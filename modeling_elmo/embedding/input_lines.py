"""The input of ``elmo embed``, streamed: a text file of one sentence per line, read in chunks of consecutive lines
(`iter_chunks`), each line decoded as UTF-8 (invalid bytes replaced and counted) and bounded in bytes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from ..utils.io_utils import MAX_LINE_BYTES, MAX_SENTENCE_TOKENS, LineTooLongError, iter_lines, scan_lines


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


__all__ = ["Line", "count_lines", "iter_chunks"]
