"""Small file and network helpers shared by the tools (not part of the Hub code files)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike, busy: str) -> Iterator[None]:
    """Hold an exclusive `fcntl.flock` on the file ``path`` while the block runs; raise `ValueError` with the
    message ``busy`` at once if another process holds it.

    The operating system releases the lock when its process dies, so a killed run never leaves a stale lock. The
    file is removed when the block ends. A process that opened the file just before an earlier holder removed it
    would lock a deleted file: the lock is only taken once it is on the file at the path.
    """
    import fcntl

    path = Path(path)
    while True:
        try:
            handle = open(path, "ab")
        except OSError as error:
            raise ValueError(f"cannot create the lock file {str(path)!r}: {error.strerror}.") from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ValueError(busy) from None
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(current, os.fstat(handle.fileno())):
            break
        handle.close()  # removed (and maybe re-created) by the process that held it: lock the file at the path
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.stat(path), os.fstat(handle.fileno())):
                path.unlink()  # while still locked, so no other process can be holding this file
        handle.close()


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub endpoint (``HF_ENDPOINT``) opens within ``timeout`` seconds."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def is_within(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether ``path`` lies inside ``folder`` or is it (both resolved: links followed)."""
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
        return True
    except ValueError:
        return False


def read_json_object(path: str | os.PathLike, what: str, *, required: bool = False) -> dict[str, Any] | None:
    """The JSON object in ``path``: `None` when there is no such file (a `ValueError` with ``required``); a
    `ValueError` naming ``what`` and the file when it is not valid JSON or not an object."""
    path = Path(path)
    if not path.is_file():
        if required:
            raise ValueError(f"{what} file {str(path)!r} does not exist.")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{what} file {str(path)!r} is not valid JSON: {error}.") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} file {str(path)!r} must hold a JSON object, got {type(data).__name__}.")
    return data
