"""Small file and network helpers shared by the tools (not part of the Hub code files)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that ``path`` is either the old file or the complete new one, never a part.

    The data go to a unique temporary file in the same folder, are flushed to disk, and replace ``path`` with
    `os.replace` (atomic on one file system). On any error the temporary file is removed and the error raised.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
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


def host_reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the host of ``url`` opens within ``timeout`` seconds (one attempt, no retries)."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    if not parsed.hostname:
        return False
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub endpoint (``HF_ENDPOINT``) opens within ``timeout`` seconds."""
    from huggingface_hub import constants

    return host_reachable(constants.ENDPOINT, timeout)


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
