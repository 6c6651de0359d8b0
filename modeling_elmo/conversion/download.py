"""Downloading a large file over HTTP into a local cache, resumably: the client under `elmo convert --release`.

`download_file` streams a URL into ``<file>.part`` and gives it its final name only once it is complete and
checked. When the connection drops, the next attempt (in this call or the next one) resumes at the end of the
``.part`` with an HTTP ``Range`` request, sent with ``If-Range`` and the validator (``ETag``/``Last-Modified``)
recorded beside it (``<file>.part.json``), so that a file changed on the server is never spliced onto the old
bytes. One deadline bounds the whole file (a server trickling a byte at a time is cut off), a bound on the bytes
stops a server sending too much, and every failure is a `DownloadError` of one line naming the file and the URL.

The files land in a cache folder (`modeling_elmo.conversion.cache_folder`: kept real, one writer at a time). The
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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..utils.io_utils import error_line
from .cache_folder import CacheFolder, DownloadError, part_path, part_record_path, source_of

logger = logging.getLogger(__name__)

DEFAULT_ATTEMPTS = 3
_CHUNK = 1 << 20
#: A download record (``<file>.part.json``: a URL and two headers) is far below this; the rest is not read.
_RECORD_MAX_BYTES = 64 * 1024


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
        return source_of(self.url, self.final_url)


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
    record_path = part_record_path(part)
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
                        data = json.dumps(record).encode("utf-8")
                        cache.write_new(part_record_path(part).name, data, "the download record")
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
        done = Download(path=destination, url=url, final_url=final_url)
        cache.write_origin(name, done.source)  # before the record goes: a kill between is finished from the record
        cache.remove(part_record_path(part).name)
        return done
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
    "Download",
    "DownloadError",
    "download_file",
]
