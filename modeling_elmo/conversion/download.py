"""Downloading a large file over HTTP into a local cache, resumably: the client under `elmo convert --release`.

`download_file` streams a URL into ``<file>.part`` and gives it its final name only once it is complete and
checked. When the connection drops, the next attempt (in this call or the next one) resumes at the end of the
``.part`` with an HTTP ``Range`` request, sent with ``If-Range`` and the validator (``ETag``/``Last-Modified``)
recorded beside it (``<file>.part.json``), so that a file changed on the server is never spliced onto the old
bytes. One deadline bounds the whole file (a server trickling a byte at a time is cut off), a bound on the bytes
stops a server sending too much, and every failure is a `DownloadError` of one line naming the file and the URL.

The cache helpers (`make_cache_folder`, `cache_lock`, `CacheFolder`, `read_origin`) keep a cache folder real (no
link followed), one writer at a time, written only relative to the folder opened at the lock (``dir_fd``: a folder
swapped for a link never receives a byte), and the source of every cached file beside it (``<file>.source``). The
release catalogues (`modeling_elmo.conversion.releases`, `modeling_elmo.conversion.efml_releases`) say what to download
and check it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..folders.files import (
    atomic_write_bytes,
    check_regular_or_absent,
    exclusive_lock,
    open_regular,
    remove_file,
    replace,
)
from ..utils.io_utils import error_line

logger = logging.getLogger(__name__)

DEFAULT_ATTEMPTS = 3
_CHUNK = 1 << 20
#: A download record (``<file>.part.json``: a URL and two headers) is far below this; the rest is not read.
_RECORD_MAX_BYTES = 64 * 1024


class DownloadError(OSError):
    """A release file could not be fetched, or failed a check; the message names the file and its source."""


# ----------------------------------------------------------------------------------------------- the cache
def origin_path(path: Path) -> Path:
    """The small text file that records where a cached file was downloaded from (``<name>.source``)."""
    return path.with_name(path.name + ".source")


def make_cache_folder(folder: Path) -> Path:
    """Create a release's cache folder (and its parents) if needed; return it. The folder itself must be a real
    folder: a link planted there would send every download elsewhere (a `ValueError` naming it)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DownloadError(f"cannot create the release cache folder {folder}: {error.strerror or error}.") from None
    if folder.is_symlink():
        raise ValueError(
            f"the release cache folder {str(folder)!r} is a symbolic link; refusing to download "
            "through it (remove it, or give another --cache-dir)."
        )
    return folder


def read_origin(path: Path, default: str, cache: CacheFolder | None = None) -> str:
    """Where the cached file ``path`` came from, as its ``.source`` record says (at most 4 KB of it), else
    ``default`` (read in ``cache``, the pinned folder, where given). The record must be a regular file: a link or a
    FIFO planted there is refused, naming it."""
    origin = origin_path(path)
    where = cache.fd if cache is not None else None
    if not check_regular_or_absent(origin, "the cached file's source record", folder_fd=where):
        return default
    with os.fdopen(open_regular(origin, os.O_RDONLY, "the cached file's source record", folder_fd=where), "rb") as f:
        return " ".join(f.read(4096).decode("utf-8", "replace").split()) or default


def part_path(path: str | os.PathLike) -> Path:
    """Where an unfinished download of ``path`` is kept (``<name>.part``, next to it)."""
    path = Path(path)
    return path.with_name(path.name + ".part")


class CacheFolder:
    """A cache folder opened once, without following a link, and held open: every file in it is created, written,
    renamed and removed relative to that open folder (``dir_fd``), never through its path, so a folder swapped for a
    link or another folder after it was opened never receives a byte (what is written lands in the folder that was
    opened, wherever it now is). `check` says whether the path still leads to it, so that a download stops with a
    line instead of finishing in a folder no one will look in. Names are file names in the folder (no ``/``)."""

    def __init__(self, path: str | os.PathLike, *, follow_link: bool = False, parent_fd: int | None = None) -> None:
        self.path = Path(path)
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow_link else os.O_NOFOLLOW)
        try:  # with ``parent_fd``, the folder's name is opened in that open parent
            self.fd = os.open(self.path if parent_fd is None else self.path.name, flags, dir_fd=parent_fd)
        except OSError as error:
            raise ValueError(
                f"the release cache folder {str(self.path)!r} is not a folder of its own ({error.strerror or error}); "
                "refusing to download through it (remove it, or give another --cache-dir)."
            ) from None
        self._identity = os.fstat(self.fd)
        self._follow = follow_link

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def check(self) -> None:
        """Raise a `ValueError` when the folder's path no longer leads to the folder that was opened."""
        try:
            current = os.stat(self.path) if self._follow else os.lstat(self.path)
        except OSError:
            current = None
        if current is None or not os.path.samestat(current, self._identity):
            raise ValueError(
                f"the release cache folder {str(self.path)!r} was replaced (by a link or another folder) while the "
                "download ran; nothing more is written there. Check who can write its parent folder, and run again."
            )

    def shown(self, name: str) -> Path:
        """The path a message names for ``name``."""
        return self.path / name

    def open_file(self, name: str, what: str = "the cached file") -> OpenedFile:
        """``name`` in the opened folder, opened for reading (no link followed, a regular file) and held open."""
        return OpenedFile(self.shown(name), self.open(name, os.O_RDONLY, what))

    def reading_path(self, name: str) -> Path:
        """A path that reads ``name`` in the opened folder wherever it now is (Linux's ``/proc/self/fd``), for
        readers that take a path (a checksum); elsewhere the path itself."""
        proc = Path(f"/proc/self/fd/{self.fd}")
        return proc / name if proc.is_dir() else self.path / name

    def is_regular_or_absent(self, name: str, what: str) -> bool:
        """`io_utils.check_regular_or_absent` of ``name`` in the opened folder."""
        return check_regular_or_absent(self.shown(name), what, folder_fd=self.fd)

    def open(self, name: str, flags: int, what: str) -> int:
        """`io_utils.open_regular` of ``name`` in the opened folder."""
        return open_regular(self.shown(name), flags, what, folder_fd=self.fd)

    def size(self, name: str) -> int:
        """Bytes of ``name`` (0 when it is absent)."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_size
        except FileNotFoundError:
            return 0

    def remove(self, name: str) -> None:
        """Remove ``name`` (a link there is removed, never followed); nothing there is fine."""
        remove_file(name, dir_fd=self.fd)

    def replace(self, source: str, name: str) -> None:
        replace(source, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def discard_part(self, name: str) -> None:
        """Remove the unfinished download of ``name`` and its record."""
        part = part_path(name).name
        self.remove(part)
        self.remove(_record_path(Path(part)).name)

    def write_atomic(self, name: str, data: bytes | Iterator[bytes]) -> None:
        """Write ``data`` (bytes, or blocks of them) to a fresh temporary in the folder, flush it to disk and give it
        the name ``name`` (`files.atomic_write_bytes`: ``name`` is the old file or the whole new one); the temporary
        is removed on any error."""
        atomic_write_bytes(self.shown(name), data, dir_fd=self.fd)

    def install(self, source: Path, name: str) -> None:
        """Move the finished file ``source`` (outside the folder, in a private staging folder) into the folder as
        ``name``: renamed where both are on one file system, else copied to a fresh temporary first."""
        import errno

        try:
            replace(source, name, dst_dir_fd=self.fd)
            return
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
        with open(source, "rb") as handle:
            self.write_atomic(name, iter(lambda: handle.read(_CHUNK), b""))


class OpenedFile:
    """A cache file held open (`CacheFolder.open_file`, under the cache's lock): `reading_path` reads that very file,
    whatever its name or its folder's path lead to later (a folder swapped for a link to other files, a newer
    download renamed over the name), so what is checked and what is read later are the same bytes. ``path`` is the
    name messages use. Close it (or use it as a context manager) when done."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd

    @property
    def reading_path(self) -> Path:
        """A path that opens this file itself (Linux's ``/proc/self/fd/N``), for readers that take a path (h5py,
        zipfile, a checksum); elsewhere the path itself."""
        proc = Path("/proc/self/fd")
        return proc / str(self.fd) if self.fd >= 0 and proc.is_dir() else self.path

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OpenedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: How long a download waits for another process holding the release cache's lock before it gives up with a line.
LOCK_WAIT_SECONDS = 1800.0


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[CacheFolder]:
    """Hold an exclusive `fcntl.flock` on ``.<release>.lock`` beside the release's cache folder (the file stays; a
    lock dies with its process); yield the folder, opened (`CacheFolder`). The lock file is opened without following
    a link and must be a regular file of one name: a link, a FIFO, a folder or a hard link to another file planted
    there is a `ValueError` naming it, and nothing is opened through it. The lock and the folder are both opened in
    their parent folder, opened once.

    A second download of the same release into the same cache waits for the first one and then finds its files
    complete in the cache, instead of writing the same ``.part`` at the same time. While it waits it says for whom
    (the process and user holding the lock, where the system tells), and after `LOCK_WAIT_SECONDS` it gives up with
    a `DownloadError` naming them: a lock held by another user's process (shared or not) never blocks for ever.

    The cache folder is opened once here (without following a link), and every file in it is written relative to
    that open folder: a folder swapped for a link or another folder while a server delayed its answer never receives
    a byte, and `CacheFolder.check` (called before each step) stops the download with a `ValueError` naming it.
    """
    path = folder.with_name(f".{folder.name}.lock")
    with contextlib.ExitStack() as stack:
        try:  # the folder and its lock are opened in one open parent: siblings, however the parent's path changes
            parent = os.open(folder.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            raise DownloadError(f"cannot open the release cache folder {folder}: {error.strerror or error}.") from None
        stack.callback(os.close, parent)
        cache = CacheFolder(folder, parent_fd=parent)
        stack.callback(cache.close)
        stack.enter_context(
            exclusive_lock(  # never through a link, a FIFO, a folder or a hard link: a `ValueError` naming it
                path,
                f"another process holds {path}",
                lambda error: DownloadError(
                    f"cannot write in the release cache folder {folder}: {error.strerror or error}."
                ),
                what="the cache's lock file",
                folder_fd=parent,
                wait=LOCK_WAIT_SECONDS,
                waiting_for=f"the lock of the release cache {folder}",
                gave_up=lambda holders: DownloadError(
                    f"gave up after {LOCK_WAIT_SECONDS:.0f} s waiting for {holders}, which holds {path}, the "
                    f"lock of the release cache {folder}; wait for it to end, or give another --cache-dir."
                ),
                keep_file=True,
            )
        )
        cache.check()
        yield cache


# ----------------------------------------------------------------------------------------------- HTTP
class _Transient(Exception):
    """A failure worth another attempt (a dropped connection, a short body, a 5xx answer)."""


def _total_from_content_range(value: str | None) -> tuple[int | None, int | None]:
    """``bytes 100-199/1000`` -> (100, 1000); ``bytes */1000`` -> (None, 1000)."""
    match = re.fullmatch(r"\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*", value or "")
    if not match:
        return None, None
    start = int(match.group(1)) if match.group(1) is not None else None
    total = int(match.group(2)) if match.group(2) != "*" else None
    return start, total


@dataclasses.dataclass
class Download:
    """A finished download: where the file is, the URL asked for, and the URL that answered after redirects."""

    path: Path
    url: str
    final_url: str

    @property
    def source(self) -> str:
        """The URL that served the file, with the one asked for when a redirect led elsewhere."""
        return self.url if self.final_url == self.url else f"{self.final_url} (redirected from {self.url})"


def _record_path(part: Path) -> Path:
    """The record of what a ``.part`` file holds: its URL and the server's validator (``<name>.part.json``)."""
    return part.with_name(part.name + ".json")


def _validator(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers that identify one version of a resource: a strong ``ETag`` and ``Last-Modified``."""
    found = {}
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):  # a weak ETag cannot be used with If-Range
        found["etag"] = etag
    if headers.get("Last-Modified"):
        found["last_modified"] = headers["Last-Modified"]
    return found


def _resumable_offset(cache: CacheFolder, part: Path, url: str) -> tuple[int, dict[str, str]]:
    """How many bytes of ``part`` (in ``cache``) may be resumed from ``url``, and the validator to send with
    ``If-Range``.

    A ``.part`` counts only when its record names the same URL and a validator of the server's file: a ``.part``
    from another URL (another ``--base-url``) or from a server that gave no validator is discarded, since splicing
    two files of the same size would pass every size check.
    """
    record_path = _record_path(part)
    cache.is_regular_or_absent(record_path.name, "the download record")
    if not cache.is_regular_or_absent(part.name, "the partial download"):
        cache.remove(record_path.name)
        return 0, {}
    try:
        with os.fdopen(cache.open(record_path.name, os.O_RDONLY, "the download record"), "rb") as handle:
            record = json.loads(handle.read(_RECORD_MAX_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        record = None
    if (
        not isinstance(record, dict)
        or record.get("url") != url
        or not (record.get("etag") or record.get("last_modified"))
    ):
        why = (
            "it has no record of its source"
            if not isinstance(record, dict)
            else f"it came from {record.get('url')}"
            if record.get("url") != url
            else "its server gave no ETag or Last-Modified to check it against"
        )
        logger.info("discarding %s (%s); downloading %s from the start", part, why, url)
        cache.remove(part.name)
        cache.remove(record_path.name)
        return 0, {}
    return cache.size(part.name), {k: record[k] for k in ("etag", "last_modified") if record.get(k)}


class _Deadline:
    """The one deadline of a whole download: once it passes, every connection the download opened is shut down, so
    a read that is waiting returns at once, however the server trickles its status line, headers or body (a socket
    timeout bounds each read only, and a server sending a byte per read never meets it)."""

    def __init__(self, seconds: float) -> None:
        import threading

        self._sockets: list[Any] = []
        self._lock = threading.Lock()
        self._expired = threading.Event()
        self._timer = threading.Timer(max(0.0, seconds), self._expire) if math.isfinite(seconds) else None
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def track(self, sock: Any) -> None:
        with self._lock:
            self._sockets.append(sock)
        if self._expired.is_set():  # connected after the deadline passed
            self._expire()

    def _expire(self) -> None:
        import socket

        self._expired.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    @property
    def expired(self) -> bool:
        """Whether the deadline passed (what a connection returned since may have been cut short by it)."""
        return self._expired.is_set()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def session(self) -> Any:
        """A `requests.Session` whose every new connection (redirects included) is tracked by this deadline."""
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.connection import HTTPConnection, HTTPSConnection
        from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

        deadline = self

        def tracked(connection_class: type) -> type:
            class Tracked(connection_class):
                def connect(self) -> None:
                    super().connect()
                    deadline.track(self.sock)

            return Tracked

        pools = {
            "http": type("Pool", (HTTPConnectionPool,), {"ConnectionCls": tracked(HTTPConnection)}),
            "https": type("Pool", (HTTPSConnectionPool,), {"ConnectionCls": tracked(HTTPSConnection)}),
        }

        class Adapter(HTTPAdapter):
            def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
                super().init_poolmanager(*args, **kwargs)
                self.poolmanager.pool_classes_by_scheme = pools

            def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
                manager = super().proxy_manager_for(proxy, **kwargs)
                if not proxy.lower().startswith("socks"):  # a SOCKS proxy brings its own connection classes
                    manager.pool_classes_by_scheme = pools
                return manager

        session = requests.Session()
        for prefix in ("http://", "https://"):
            session.mount(prefix, Adapter())
        return session


#: Slowest average transfer rate a download may keep up (bytes/s); with `DEADLINE_GRACE_SECONDS` it sets the deadline
#: of a file from its largest plausible size.
MIN_AVERAGE_RATE = 100_000
DEADLINE_GRACE_SECONDS = 120.0
READ_TIMEOUT_SECONDS = 120.0


def download_file(
    url: str,
    destination: str | os.PathLike,
    *,
    check_size: Callable[[int], str | None] | None = None,
    check_complete: Callable[[Path], None] | None = None,
    max_bytes: int | None = None,
    deadline: float | None = None,
    read_timeout: float = READ_TIMEOUT_SECONDS,
    attempts: int = DEFAULT_ATTEMPTS,
    retry_wait: float = 1.0,
    progress: bool = True,
    session: Any = None,
    cache: CacheFolder | None = None,
) -> Download:
    """Download ``url`` to ``destination`` through ``<destination>.part``, resuming a ``.part`` left by an earlier
    attempt with an HTTP ``Range`` request.

    The ``.part`` and its record (``.part.json``) are opened without following links and must be regular files: a
    link or a FIFO planted there is refused with a `ValueError` naming it, nothing is written through it.
    A ``.part`` is resumed only from the URL it came from, and only with ``If-Range`` and the ``ETag`` (or
    ``Last-Modified``) the server gave for it: a server whose file changed answers with the whole new file, which
    then replaces the ``.part``; a ``.part`` without such a record is started over. Redirects are followed and the
    URL that finally answered is returned (`Download.final_url`).

    ``check_size(total)`` returns why a file of ``total`` bytes cannot be the right one (or ``None``); it is asked
    about the size the server announces (before the body is read) and about the finished file. ``max_bytes``
    bounds the file while it streams (a server that sends more, with or without a ``Content-Length``, is cut off
    at once). ``deadline`` is the most seconds the whole file may take, over all attempts, status lines and
    headers included: when it passes, the connection is shut down whatever the server is sending (default: from
    ``max_bytes`` at `MIN_AVERAGE_RATE`, plus `DEADLINE_GRACE_SECONDS`; none without ``max_bytes``; a ``session``
    passed in is not tracked, only the body is checked against the deadline then); a server that sends nothing for
    ``read_timeout`` seconds times out the attempt. ``check_complete(part)`` may raise for a finished file (a sha256
    check). Every file is written relative to the destination's folder as it was opened at the start (``cache``,
    `cache_lock`'s, else the folder is opened here): a folder swapped meanwhile never receives a byte, and
    ``cache.check()``, called before each step, stops the download with a `ValueError` naming it. A dropped
    connection, a body shorter than announced, a timeout and HTTP 5xx/429 answers lead to another attempt, up to
    ``attempts`` in all (waiting ``retry_wait * attempt`` seconds in between); the ``.part`` file is kept for the
    next call when all fail. A file that fails a check is deleted.
    Raises `DownloadError` naming the file and the URL.
    """
    import requests
    import urllib3
    from tqdm.auto import tqdm

    destination = Path(destination)
    part = part_path(destination)
    name = destination.name
    own_cache = cache is None
    if cache is None:
        destination.parent.mkdir(parents=True, exist_ok=True)
        cache = CacheFolder(destination.parent, follow_link=True)
    elif cache.path != destination.parent:
        raise ValueError(f"{destination} is not in the cache folder {cache.path}")
    if deadline is None and max_bytes is not None:
        deadline = DEADLINE_GRACE_SECONDS + max_bytes / MIN_AVERAGE_RATE
    started = time.monotonic()

    def remaining() -> float:
        return math.inf if deadline is None else deadline - (time.monotonic() - started)

    def past_deadline() -> DownloadError:
        kept = cache.size(part.name)
        resume = f"; {kept:,} bytes are kept in {part} and the next run resumes from there" if kept else ""
        return DownloadError(
            f"cannot download {name} from {url}: timed out, the file did not arrive within its "
            f"deadline of {deadline:,.0f} s{resume}."
        )

    guard = _Deadline(remaining())
    own_session = session is None
    session = guard.session() if own_session else session
    try:
        last_problem = "no attempt was made"
        final_url = url
        for attempt in range(1, max(1, attempts) + 1):
            if remaining() <= 0:
                raise past_deadline()
            cache.check()
            offset, validator = _resumable_offset(cache, part, url)
            headers = {"Accept-Encoding": "identity", "User-Agent": "modeling_elmo"}
            if offset:
                headers["Range"] = f"bytes={offset}-"
                headers["If-Range"] = validator.get("etag") or validator["last_modified"]
            total: int | None = None
            try:
                timeout = (min(30.0, remaining()), min(read_timeout, remaining()))
                with session.get(url, headers=headers, stream=True, timeout=timeout) as response:
                    if guard.expired:  # headers cut short by the deadline: not an answer
                        raise past_deadline()
                    status = response.status_code
                    final_url = response.url or url
                    if response.history:
                        hops = " -> ".join([r.url for r in response.history] + [final_url])
                        logger.warning("%s: redirected: %s", name, hops)
                    if status == 416 and offset:  # the .part already holds everything the server has (or more)
                        _, total = _total_from_content_range(response.headers.get("Content-Range"))
                        if total == offset:
                            break
                        cache.discard_part(name)
                        raise _Transient(f"the server refused to resume at byte {offset:,}; starting again")
                    if status in (429,) or status >= 500:
                        raise _Transient(f"HTTP {status} {response.reason}")
                    if status not in (200, 206):
                        raise DownloadError(f"cannot download {name} from {url}: HTTP {status} {response.reason}.")
                    served = _validator(response.headers)
                    if status == 206:
                        start, total = _total_from_content_range(response.headers.get("Content-Range"))
                        changed = served and any(validator.get(k) not in (None, v) for k, v in served.items())
                        if start != offset or changed:
                            cache.discard_part(name)  # another version of the file (a server that ignored If-Range)
                            raise _Transient(
                                f"the server's file changed or it resumed at byte {start} instead of "
                                f"{offset:,}; starting again"
                            )
                        mode = "ab"
                    else:
                        if offset:
                            logger.info(
                                "%s: the file changed on the server or it cannot resume; downloading from the start",
                                url,
                            )
                        offset, mode = 0, "wb"
                        length = response.headers.get("Content-Length")
                        total = int(length) if length and length.isdigit() else None
                    if total is not None and check_size is not None:
                        problem = check_size(total)
                        if problem:
                            raise DownloadError(f"{name} at {url}: the server announces {problem}.")
                    cache.check()  # the answer may have been held back while the folder was swapped
                    if mode == "wb":  # what the .part will hold: the next attempt resumes only the same file
                        cache.discard_part(name)  # a new file under the name, never one linked to another file
                        record = {"url": url, "final_url": final_url, **served}
                        cache.write_atomic(_record_path(part).name, json.dumps(record).encode("utf-8"))
                    limit = min(
                        total if total is not None else math.inf, max_bytes if max_bytes is not None else math.inf
                    )
                    received = offset
                    flags = os.O_WRONLY | (os.O_APPEND if mode == "ab" else os.O_CREAT | os.O_EXCL)
                    with (
                        os.fdopen(cache.open(part.name, flags, "the partial download"), mode) as handle,
                        tqdm(
                            total=total,
                            initial=offset,
                            unit="B",
                            unit_scale=True,
                            unit_divisor=1024,
                            desc=name,
                            disable=not progress,
                        ) as bar,
                    ):
                        for block in _body_blocks(response):
                            received += len(block)
                            if received > limit:
                                handle.close()
                                cache.discard_part(name)
                                bound = (
                                    f"more than the {total:,} announced"
                                    if total is not None and total <= limit
                                    else f"more than {max_bytes:,}, the most this file can have"
                                )
                                raise DownloadError(
                                    f"{name} from {url}: the server sent {bound}; the partial file was deleted."
                                )
                            handle.write(block)
                            bar.update(len(block))
                            if remaining() <= 0:
                                handle.flush()
                                raise past_deadline()
                        handle.flush()
                        os.fsync(handle.fileno())
                if guard.expired:  # a body cut short by the deadline
                    raise past_deadline()
                received = cache.size(part.name)
                if total is not None and received < total:
                    raise _Transient(f"the connection closed after {received:,} of {total:,} bytes")
                break
            except (_Transient, requests.RequestException, urllib3.exceptions.HTTPError) as error:
                received = cache.size(part.name)
                if isinstance(error, _Transient):
                    last_problem = str(error)
                elif _is_timeout(error):
                    last_problem = (
                        f"timed out: the server sent nothing for {read_timeout:g} s (after {received:,} bytes)"
                    )
                elif total is not None and received < total:  # the body stopped short: a dropped connection
                    last_problem = f"the connection broke after {received:,} of {total:,} bytes"
                else:
                    last_problem = error_line(error, 200, named=True)
                logger.info("%s: attempt %d of %d failed: %s", url, attempt, attempts, last_problem)
                if remaining() <= 0:  # the deadline shut the connection down
                    raise past_deadline()
                if attempt < attempts and retry_wait > 0:
                    time.sleep(min(retry_wait * attempt, max(0.0, remaining())))
        else:
            kept = cache.size(part.name)
            resume = f"; {kept:,} bytes are kept in {part} and the next run resumes from there" if kept else ""
            raise DownloadError(f"cannot download {name} from {url} ({attempts} attempts): {last_problem}{resume}.")
        try:
            size = cache.size(part.name)
            problem = check_size(size) if check_size is not None else None
            if problem:
                raise DownloadError(f"{name} downloaded from {url} has {problem}.")
            if check_complete is not None:
                check_complete(cache.reading_path(part.name))  # the file in the opened folder, wherever it is
        except DownloadError:
            cache.discard_part(name)
            raise
        cache.check()
        cache.replace(part.name, name)
        cache.remove(_record_path(part).name)
        return Download(path=destination, url=url, final_url=final_url)
    finally:
        guard.cancel()
        if own_session:
            session.close()
        if own_cache:
            cache.close()


def _is_timeout(error: BaseException) -> bool:
    """Whether a requests/urllib3 error (or one it wraps) is a timeout."""
    import requests
    import urllib3

    seen = set()
    while isinstance(error, BaseException) and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
            return True
        if error.args and isinstance(error.args[0], BaseException):
            error = error.args[0]
        else:
            error = getattr(error, "reason", None) or error.__context__
    return False


def _body_blocks(response: Any):
    """The body as it arrives, undecoded, in blocks of at most 1 MiB.

    ``read1`` hands over whatever one read returned, so when the connection breaks every byte received so far
    has been written (``iter_content`` drops the last, incomplete block, up to its size).
    """
    raw = response.raw
    if hasattr(raw, "read1"):
        while block := raw.read1(_CHUNK, decode_content=False):
            yield block
    else:  # urllib3 < 2.3
        yield from response.iter_content(chunk_size=64 * 1024)


__all__ = [
    "DEFAULT_ATTEMPTS",
    "CacheFolder",
    "Download",
    "DownloadError",
    "OpenedFile",
    "cache_lock",
    "download_file",
    "make_cache_folder",
    "origin_path",
    "part_path",
    "read_origin",
]
