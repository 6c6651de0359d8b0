"""Small file and network helpers shared by the tools (not part of the Hub code files)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO


def current_umask() -> int:
    """The process's file-mode creation mask (read from ``/proc`` where it can be, so that it is never changed)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike, *, folder: bool = False) -> None:
    """Give ``path`` the mode a new file (``folder``: a new folder) gets under the umask: `tempfile` makes its files
    0600 and its folders 0700, which would hide a shared model folder's weights from the users who can read the
    rest of it."""
    os.chmod(path, (0o777 if folder else 0o666) & ~current_umask())


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that ``path`` is either the old file or the complete new one, never a part.

    The data go to a unique temporary file in the same folder (mode as the umask says, like any new file), are
    flushed to disk, and replace ``path`` with `os.replace` (atomic on one file system). On any error the temporary
    file is removed and the error raised.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    import stat

    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_regular_or_absent(path: str | os.PathLike, what: str, *, folder_fd: int | None = None) -> bool:
    """Whether ``path`` is a regular file (`False` when nothing is there); a link (even to a regular file) or
    anything else is a `ValueError` naming it, so that the package never writes through, or trusts, a planted
    link. With ``folder_fd``, ``path``'s name is looked up in that open folder (its parent by identity, not by its
    path); messages still name ``path``."""
    import stat

    try:
        if folder_fd is None:
            mode = os.lstat(path).st_mode
        else:
            mode = os.stat(Path(path).name, dir_fd=folder_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(mode):
        raise ValueError(
            f"{what} {str(path)!r} is {_kind(mode)}, not a regular file; refusing to use it (remove it "
            "if it is not yours to keep)."
        )
    return True


def open_regular(path: str | os.PathLike, flags: int, what: str, *, folder_fd: int | None = None) -> int:
    """``os.open(path, flags)`` that never follows a link and never blocks (a FIFO, a device), and refuses anything
    but a regular file with a `ValueError` naming it, and for writing a file with more than one hard link (writing
    would change the file under its other name); returns the file descriptor. ``flags`` may hold ``O_CREAT``
    (a new file gets the umask's mode). An `OSError` of another kind (no permission...) is raised as it is.
    With ``folder_fd``, ``path``'s name is opened in that open folder (``dir_fd``: its parent by identity, however
    its path was changed meanwhile); messages still name ``path``."""
    import errno
    import stat

    name, where = (path, {}) if folder_fd is None else (Path(path).name, {"dir_fd": folder_fd})
    try:
        # O_TRUNC would empty the file before it is checked: it is applied once the file passed (below)
        fd = os.open(name, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666, **where)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO):  # a link; a FIFO without a reader (write-only open)
            check_regular_or_absent(path, what, folder_fd=folder_fd)
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ValueError(
            f"{what} {str(path)!r} is {_kind(info.st_mode)}, not a regular file; refusing to use it (remove it "
            "if it is not yours to keep)."
        )
    if flags & (os.O_WRONLY | os.O_RDWR) and info.st_nlink > 1:
        os.close(fd)
        raise ValueError(
            f"{what} {str(path)!r} is a hard link to another file ({info.st_nlink} names share it); refusing to "
            "write through it (remove it if it is not yours to keep)."
        )
    if flags & os.O_TRUNC:
        os.ftruncate(fd, 0)
    return fd


@contextlib.contextmanager
def exclusive_lock(
    path: str | os.PathLike, busy: str, unwritable: str | None = None, *, holder: str | None = None
) -> Iterator[None]:
    """Hold an exclusive `fcntl.flock` on the file ``path`` while the block runs; raise `ValueError` with the
    message ``busy`` at once if another process holds it (and, when the file cannot be created, one starting with
    ``unwritable``).

    ``holder`` (a command, ``elmo push``) is written into the lock file while it is held, and ``{holder}`` in the
    ``busy`` message of a process that finds the lock taken becomes the holder's name as the file says it (several
    commands share a lock when they write the same output): the line names the command in the way.

    The lock file is opened without following a link and without blocking (`open_regular`): a link planted there
    (to a file outside, or dangling) or a FIFO is refused with one line naming it, nothing is created through it.
    The operating system releases the lock when its process dies, so a killed run never leaves a stale lock. The
    file is removed when the block ends. A process that opened the file just before an earlier holder removed it
    would lock a deleted file: the lock is only taken once it is on the file at the path.
    """
    import fcntl

    path = Path(path)
    while True:
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT, "lock file")
        except ValueError as error:
            raise ValueError(f"{unwritable}: {error}" if unwritable else str(error)) from None
        except OSError as error:
            if unwritable is None:
                raise ValueError(f"cannot create the lock file {str(path)!r}: {error.strerror}.") from None
            raise ValueError(f"{unwritable}: {error.strerror} ({str(path)!r}).") from None
        handle = os.fdopen(fd, "rb")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            named = _lock_holder(handle.fileno()) or "elmo"
            handle.close()
            raise ValueError(busy.replace("{holder}", named)) from None
        try:
            current = os.lstat(path)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(current, os.fstat(handle.fileno())):
            break
        handle.close()  # removed (and maybe re-created) by the process that held it: lock the file at the path
    if holder is not None:
        os.ftruncate(handle.fileno(), 0)
        os.pwrite(handle.fileno(), holder.encode("utf-8"), 0)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.lstat(path), os.fstat(handle.fileno())):
                path.unlink()  # while still locked, so no other process can be holding this file
        handle.close()


def _lock_holder(fd: int) -> str:
    """The command a lock file names (`exclusive_lock`'s ``holder``): its first 100 bytes, printable ASCII only."""
    try:
        text = os.pread(fd, 100, 0).decode("ascii", "replace")
    except OSError:
        return ""
    return text if re.fullmatch(r"[A-Za-z0-9 ._-]+", text) else ""


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


def sha256_of_file(path: str | os.PathLike, block_size: int = 1 << 20) -> str:
    """The hex sha256 of a file's bytes, read in blocks of ``block_size``."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(block_size):
            digest.update(block)
    return digest.hexdigest()


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
