"""Small file-reading and network helpers shared by the tools (not part of the Hub code files)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

# Writing, locking and opening files live in `modeling_elmo.folders` (files, locks, opening); these names stay
# importable from here.
from ..folders.files import atomic_write_bytes, atomic_write_text, current_umask, follow_umask  # noqa: F401
from ..folders.locks import exclusive_lock  # noqa: F401
from ..folders.opening import check_regular_or_absent, open_regular, sha256_of_file  # noqa: F401


def host_reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the host of ``url`` opens within ``timeout`` seconds (one attempt, no retries):
    to the proxy that the environment names for it instead (``http_proxy``, ``https_proxy``, ``all_proxy``, unless
    ``no_proxy`` exempts the host), as requests, which downloads it, will connect."""
    from urllib.parse import urlparse

    from requests.utils import get_environ_proxies, prepend_scheme_if_needed, select_proxy

    try:
        proxy = select_proxy(url, get_environ_proxies(url))
        parsed = urlparse(prepend_scheme_if_needed(proxy, "http") if proxy else url)
        if not parsed.hostname:
            return False
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub endpoint (``HF_ENDPOINT``) opens within ``timeout`` seconds."""
    from huggingface_hub import constants

    return host_reachable(constants.ENDPOINT, timeout)


def is_within(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether ``path`` lies inside ``folder`` or is it (both resolved: links followed)."""
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
        return True
    except ValueError:
        return False


#: The largest JSON file the tools read (configs, metadata, results, checkpoint state are far smaller).
JSON_MAX_BYTES = 100_000_000


def read_json(path: str | os.PathLike, shown: str, *, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """The JSON value in the file ``path``. A file larger than ``max_bytes``, not UTF-8 or not valid JSON (nested
    too deep included, which `json` lets escape as a `RecursionError`) is a one-line `ValueError` that starts with
    ``shown`` (the file as the message names it)."""
    path = Path(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise ValueError(f"{shown} is {size:,} bytes, more than the {max_bytes:,} a JSON file here may have.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise ValueError(f"{shown} is not valid JSON: {error_line(error, 200)}.") from None


def read_json_object(path: str | os.PathLike, what: str, *, required: bool = False) -> dict[str, Any] | None:
    """The JSON object in ``path``: `None` when there is no such file (a `ValueError` with ``required``); a
    `ValueError` naming ``what`` and the file when it is not valid JSON or not an object (`read_json`)."""
    path = Path(path)
    if not path.is_file():
        if required:
            raise ValueError(f"{what} file {str(path)!r} does not exist.")
        return None
    data = read_json(path, f"{what} file {str(path)!r}")
    if not isinstance(data, dict):
        raise ValueError(f"{what} file {str(path)!r} must hold a JSON object, got {type(data).__name__}.")
    return data


#: The JSON files of a model folder that transformers reads when it loads the model or its tokenizer.
MODEL_JSON_FILES = (
    "config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.json",
    "model.safetensors.index.json",
    "generation_config.json",
)


def check_json_files(folder: str | os.PathLike) -> None:
    """Raise a `ValueError` naming the file unless each of `MODEL_JSON_FILES` in ``folder`` is valid JSON, read here
    before transformers reads it (its readers let a file nested 200,000 deep escape as a `RecursionError`)."""
    for path in (Path(folder) / name for name in MODEL_JSON_FILES):
        if path.is_file():
            read_json(path, f"{path.name} in {str(folder)!r}")


def error_line(error: BaseException | str, limit: int = 1000, *, named: bool = False) -> str:
    """``error`` as one line of at most about ``limit`` characters (``named``: after its exception type, for a
    library's error whose message alone does not say what failed): a safety net for a message quoting a hostile
    value whole or nesting a whole chain of errors (the messages themselves quote a few dozen characters of a
    value, paths in full)."""
    kind = type(error).__name__
    text = " ".join(str(error).split())
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text):,} characters in all)"
    if named:
        return f"{kind}: {text}" if text else kind
    return text or kind


def command_error(command: str, error: BaseException | str) -> SystemExit:
    """What ends ``elmo COMMAND`` on bad input: the one line ``elmo COMMAND: error: ...`` (`error_line`), exit
    status 1. ``raise command_error("convert", error) from None``."""
    return SystemExit(f"elmo {command}: error: {error_line(error)}")


#: A line break in a text file: ``\n`` (Unix), ``\r\n`` (Windows) or a lone ``\r`` (old Mac OS).
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


#: The longest line that `elmo embed` and `elmo evaluate` read as one sentence (or record), and the most tokens of
#: one sentence: a sentence is embedded whole, so a longer one would need memory out of proportion to a batch.
MAX_LINE_BYTES = 4 << 20
MAX_SENTENCE_TOKENS = 100_000


class LineTooLongError(ValueError):
    """A line of more bytes than its reader takes (`iter_lines`' ``max_line_bytes``); ``number`` counts from 1."""

    def __init__(self, number: int, limit: int):
        super().__init__(f"line {number} has more than {limit:,} bytes")
        self.number, self.limit = number, limit


def iter_lines(handle: BinaryIO, block_size: int = 1 << 20, max_line_bytes: int | None = None) -> Iterator[bytes]:
    """The lines of a binary file, without their line breaks, streamed in blocks of ``block_size`` bytes.

    ``\\n``, ``\\r\\n`` and a lone ``\\r`` all end a line (a ``\\r\\n`` split across two blocks counts once); a
    last line without a line break counts, an empty file has no lines. Memory holds one block and one line; a block
    without ``\\r`` is split at C speed. With ``max_line_bytes``, a longer line raises `LineTooLongError` as soon as
    that many of its bytes are read (memory then holds at most one block more).
    """
    pieces: list[bytes] = []  # the start of a line that continues in the next block
    held = 0  # bytes in pieces
    number = 0  # lines yielded
    after_cr = False  # the previous block ended with "\r": a "\n" starting this block belongs to it
    while block := handle.read(block_size):
        if after_cr and block.startswith(b"\n"):
            block = block[1:]
        after_cr = block.endswith(b"\r")
        parts = _LINE_BREAK.split(block) if b"\r" in block else block.split(b"\n")
        if len(parts) == 1:  # no line break in this block
            if parts[0]:
                pieces.append(parts[0])
                held += len(parts[0])
                if max_line_bytes is not None and held > max_line_bytes:
                    raise LineTooLongError(number + 1, max_line_bytes)
            continue
        if pieces:
            parts[0] = b"".join(pieces) + parts[0]
        if max_line_bytes is not None:
            for offset, part in enumerate(parts[:-1]):
                if len(part) > max_line_bytes:
                    raise LineTooLongError(number + offset + 1, max_line_bytes)
        number += len(parts) - 1
        yield from parts[:-1]
        pieces = [parts[-1]] if parts[-1] else []
        held = len(parts[-1])
        if max_line_bytes is not None and held > max_line_bytes:
            raise LineTooLongError(number + 1, max_line_bytes)
    if pieces:
        yield b"".join(pieces)


def scan_lines(path: str | os.PathLike, block_size: int = 1 << 20) -> tuple[int, str]:
    """``(number of lines, sha256 of the bytes)`` of a file in one streamed pass; lines as `iter_lines` counts
    them."""
    digest, count, after_cr, last = hashlib.sha256(), 0, False, b""
    with open(path, "rb") as handle:
        while block := handle.read(block_size):
            digest.update(block)
            count += block.count(b"\n") + block.count(b"\r") - block.count(b"\r\n")
            if after_cr and block.startswith(b"\n"):
                count -= 1  # "\r" | "\n" across the blocks: one break, already counted with the "\r"
            after_cr = block.endswith(b"\r")
            last = block[-1:]
    return count + (last not in (b"", b"\n", b"\r")), digest.hexdigest()


#: Bytes per value of the dtypes a safetensors header may name.
_SAFETENSORS_ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}
#: The largest header the safetensors format allows.
SAFETENSORS_MAX_HEADER = 100_000_000


def check_safetensors_header(path: str | os.PathLike) -> dict[str, Any]:
    """Raise `ValueError` unless ``path`` is a complete safetensors file: an 8-byte header length within the file
    and the format's bound, a JSON header, and tensors whose declared dtype x shape fill exactly their byte ranges,
    which lie inside the file and cover its data section. Nothing but the header is read; returns the header.

    This catches a truncated download, a damaged file and a header that declares more than the file holds before
    any memory is allocated for the tensors.
    """
    import math

    shown = str(path)
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ValueError(f"weights file {shown!r} is not a safetensors file: it has {size} bytes (truncated?).")
        length = int.from_bytes(head, "little")
        if length > min(SAFETENSORS_MAX_HEADER, size - 8):
            raise ValueError(
                f"weights file {shown!r} is damaged or truncated: its header claims {length:,} bytes, "
                f"the file has {size:,}."
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        header = None
    if not isinstance(header, dict):
        raise ValueError(f"weights file {shown!r} is damaged: its header is not a JSON object.")
    data_size = size - 8 - length
    end_of_data = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            itemsize = _SAFETENSORS_ITEMSIZE[entry["dtype"]]
            shape = [int(n) for n in entry["shape"]]
            begin, end = (int(n) for n in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"weights file {shown!r} is damaged: tensor {name!r} has a malformed entry {str(entry)[:80]}."
            ) from None
        if any(n < 0 for n in shape) or not 0 <= begin <= end:
            raise ValueError(
                f"weights file {shown!r} is damaged: tensor {name!r} has shape {shape} at bytes {begin}-{end}."
            )
        if math.prod(shape) * itemsize != end - begin:
            raise ValueError(
                f"weights file {shown!r} is damaged: tensor {name!r} declares shape {shape} "
                f"({entry['dtype']}) but {end - begin:,} bytes."
            )
        if end > data_size:
            raise ValueError(
                f"weights file {shown!r} is truncated: tensor {name!r} ends at byte {end:,} of the data, "
                f"the file holds {data_size:,} bytes of data."
            )
        end_of_data = max(end_of_data, end)
    if end_of_data != data_size:
        raise ValueError(
            f"weights file {shown!r} is damaged: {data_size - end_of_data:,} bytes after the last "
            "tensor belong to none."
        )
    return header
