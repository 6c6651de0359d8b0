"""The four released English ELMo models, and fetching their original files.

`RELEASES` is the one table of what AllenNLP published: for each release its name, its S3 folder and file names,
its ``options.json`` (hence every tensor shape), its parameter count, the figures published with it (SRL F1,
constituency-parsing F1, language-model perplexity where one was published, training data), a Hugging Face Hub
mirror where one is known, and the expected size and sha256 of each file where known. No sha256 is known today
(AllenNLP published none); the table has a slot per file, and a digest put there is enforced on every download
and every reuse of a cached file.

`fetch_release` downloads a release's ``options.json`` and ``weights.hdf5`` into a local cache:

* the files come from ``<base URL>/<folder>/elmo_<folder>_options.json`` and ``..._weights.hdf5``; the base URL is
  `DEFAULT_BASE_URL` (AllenNLP's S3 bucket), or the ``ELMO_RELEASES_BASE_URL`` environment variable, or the
  ``base_url`` argument (``elmo convert --base-url``), in increasing priority;
* the cache is ``$HF_HOME/modeling_elmo/releases/<release>/`` (``~/.cache/huggingface/...`` by default), or
  ``cache_dir``. A file carries its final name only once it is complete and checked, so a file found there is
  used again without any request;
* a download is written to ``<file>.part``. When the connection drops, the download continues from the end of the
  ``.part`` file with an HTTP ``Range`` request (a few times within one call, and again in the next call);
* every file is checked before it gets its final name: its size against the ``Content-Length`` the server
  announced, against the size known for it (if any) and against a plausibility bound (``weights.hdf5`` must hold
  the release's parameters as float32 plus a little HDF5 bookkeeping), and its sha256 where one is known;
* when the primary server fails and the release has a Hub mirror, the file is fetched from the mirror with
  ``huggingface_hub.hf_hub_download`` and goes through the same checks.

Every failure is a `DownloadError` whose message is one line naming the file, where it came from and what was
wrong.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..utils.io_utils import atomic_write_text, check_regular_or_absent, open_regular
from .original_format import config_summary, convert_config, expected_dataset_shapes

logger = logging.getLogger(__name__)

#: AllenNLP's S3 bucket; ``https://s3-us-west-2.amazonaws.com/allennlp/models/elmo`` serves the same files.
DEFAULT_BASE_URL = "https://allennlp.s3.amazonaws.com/models/elmo"
#: Environment variable that replaces `DEFAULT_BASE_URL` (a local mirror, a test server).
BASE_URL_ENV = "ELMO_RELEASES_BASE_URL"
FILE_ROLES = ("options", "weights")
#: A released ``options.json`` is a few hundred bytes; anything above this is not one.
OPTIONS_MAX_BYTES = 64 * 1024
#: HDF5 bookkeeping allowed on top of a weight file's float32 payload: a fixed part plus a fraction of the payload.
HDF5_OVERHEAD_BYTES = 1 << 20
HDF5_OVERHEAD_FRACTION = 0.01
DEFAULT_ATTEMPTS = 3
_CHUNK = 1 << 20


class DownloadError(OSError):
    """A release file could not be fetched, or failed a check; the message names the file and its source."""


# ----------------------------------------------------------------------------------------------- the table
@dataclasses.dataclass(frozen=True)
class HubMirror:
    """A Hugging Face Hub repository holding a copy of a release's files (``role -> file name in the repo``)."""

    repo_id: str
    filenames: Mapping[str, str]
    revision: str | None = None


@dataclasses.dataclass(frozen=True)
class Release:
    """One released model: where its files are, what they must contain, and what its authors published about it.

    ``options`` is the release's ``options.json``; every tensor shape of its ``weights.hdf5`` follows from it.
    ``num_parameters`` counts the values stored in ``weights.hdf5`` (the published count); ``sha256`` and
    ``sizes`` map a file role (``options``/``weights``) to the expected digest and byte count, or to ``None``
    when unknown.
    """

    name: str
    folder: str
    options: Mapping[str, Any]
    num_parameters: int
    published_parameters: str
    srl_f1: float
    constituency_parsing_f1: float
    perplexity: float | None
    perplexity_note: str
    training_data: str
    mirror: HubMirror | None = None
    sha256: Mapping[str, str | None] = dataclasses.field(default_factory=lambda: dict.fromkeys(FILE_ROLES))
    sizes: Mapping[str, int | None] = dataclasses.field(default_factory=lambda: dict.fromkeys(FILE_ROLES))

    def filename(self, role: str) -> str:
        """The published file name of ``role`` (``options`` or ``weights``)."""
        if role not in FILE_ROLES:
            raise ValueError(f"file role must be one of {FILE_ROLES}, got {role!r}.")
        return f"elmo_{self.folder}_{role}.{'json' if role == 'options' else 'hdf5'}"

    def url(self, role: str, base_url: str | None = None) -> str:
        """Where ``role`` is published, under ``base_url`` (default: `resolve_base_url`)."""
        return f"{resolve_base_url(base_url)}/{self.folder}/{self.filename(role)}"

    def published_figures(self) -> dict[str, Any]:
        """The figures published with the release, as they go into the model card and the conversion metadata."""
        return {
            "parameters": self.published_parameters,
            "parameters_in_weight_file": self.num_parameters,
            "srl_f1": self.srl_f1,
            "constituency_parsing_f1": self.constituency_parsing_f1,
            "lm_perplexity": self.perplexity if self.perplexity is not None else "not published",
            "lm_perplexity_note": self.perplexity_note,
            "training_data": self.training_data,
        }


#: The character CNN of all four releases: 2048 filters of widths 1 to 7.
RELEASED_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
_ONE_BILLION_WORDS = "1B Word Benchmark (about 800 M tokens of news)"


def released_options(dim: int, projection_dim: int, n_highway: int) -> dict[str, Any]:
    """The inference ``options.json`` of a released English model with these sizes (all else is shared)."""
    return {
        "lstm": {
            "dim": dim,
            "projection_dim": projection_dim,
            "n_layers": 2,
            "cell_clip": 3,
            "proj_clip": 3,
            "use_skip_connections": True,
        },
        "char_cnn": {
            "activation": "relu",
            "embedding": {"dim": 16},
            "filters": [list(f) for f in RELEASED_FILTERS],
            "max_characters_per_token": 50,
            "n_characters": 262,
            "n_highway": n_highway,
        },
    }


def count_parameters(options: Mapping[str, Any]) -> int:
    """How many values a ``weights.hdf5`` matching ``options`` stores (the released models' parameter count)."""
    return sum(math.prod(shape) for shape in expected_dataset_shapes(convert_config(dict(options))).values())


_NO_PERPLEXITY = "no perplexity was published for this release"
RELEASES: dict[str, Release] = {
    release.name: release
    for release in (
        Release(
            name="small",
            folder="2x1024_128_2048cnn_1xhighway",
            options=released_options(1024, 128, 1),
            num_parameters=13_593_296,
            published_parameters="13.6 M",
            srl_f1=83.62,
            constituency_parsing_f1=93.12,
            perplexity=None,
            perplexity_note=_NO_PERPLEXITY,
            training_data=_ONE_BILLION_WORDS,
        ),
        Release(
            name="medium",
            folder="2x2048_256_2048cnn_1xhighway",
            options=released_options(2048, 256, 1),
            num_parameters=28_027_728,
            published_parameters="28.0 M",
            srl_f1=84.04,
            constituency_parsing_f1=93.60,
            perplexity=None,
            perplexity_note=_NO_PERPLEXITY,
            training_data=_ONE_BILLION_WORDS,
        ),
        Release(
            name="original",
            folder="2x4096_512_2048cnn_2xhighway",
            options=released_options(4096, 512, 2),
            num_parameters=93_600_848,
            published_parameters="93.6 M",
            srl_f1=84.63,
            constituency_parsing_f1=93.85,
            perplexity=39.7,
            perplexity_note="on the 1B Word Benchmark held-out data, averaging the forward and backward "
            "perplexities the way bilm-tf does (the mean of the two losses, a geometric mean)",
            training_data=_ONE_BILLION_WORDS,
            mirror=HubMirror(
                "lysandre/elmo-2x4096_512_2048cnn_2xhighway", {"options": "options.json", "weights": "weights.hdf5"}
            ),
        ),
        Release(
            name="original-5.5b",
            folder="2x4096_512_2048cnn_2xhighway_5.5B",
            options=released_options(4096, 512, 2),
            num_parameters=93_600_848,
            published_parameters="93.6 M",
            srl_f1=84.93,
            constituency_parsing_f1=94.01,
            perplexity=None,
            perplexity_note=_NO_PERPLEXITY,
            training_data="Wikipedia (1.9 B tokens) and WMT 2008-2012 news crawl (3.6 B tokens)",
        ),
    )
}


def get_release(name: str) -> Release:
    """The `Release` called ``name``; an unknown name is a `ValueError` listing the known ones."""
    if name not in RELEASES:
        raise ValueError(f"unknown release {name!r}; the releases are {', '.join(RELEASES)}.")
    return RELEASES[name]


# ----------------------------------------------------------------------------------------------- locations
def resolve_base_url(base_url: str | None = None) -> str:
    """``base_url``, else ``$ELMO_RELEASES_BASE_URL``, else `DEFAULT_BASE_URL` (without a trailing slash)."""
    url = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    if not re.match(r"^https?://[^/]", url):
        raise ValueError(f"base URL {url!r} must start with http:// or https:// and name a host.")
    return url.rstrip("/")


def default_cache_dir() -> Path:
    """``$HF_HOME/modeling_elmo/releases`` (huggingface_hub's default home when ``HF_HOME`` is unset)."""
    from huggingface_hub import constants

    return Path(os.path.expanduser(os.environ.get("HF_HOME") or constants.HF_HOME)) / "modeling_elmo" / "releases"


def release_cache_dir(release: Release, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder that caches ``release``'s files: ``<cache_dir or default_cache_dir()>/<release name>``."""
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / release.name


def _origin_path(path: Path) -> Path:
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


def read_origin(path: Path, default: str) -> str:
    """Where the cached file ``path`` came from, as its ``.source`` record says (at most 4 KB of it), else
    ``default``. The record must be a regular file: a link or a FIFO planted there is refused, naming it."""
    origin = _origin_path(path)
    if not check_regular_or_absent(origin, "the cached file's source record"):
        return default
    with os.fdopen(open_regular(origin, os.O_RDONLY, "the cached file's source record"), "rb") as handle:
        return " ".join(handle.read(4096).decode("utf-8", "replace").split()) or default


def part_path(path: str | os.PathLike) -> Path:
    """Where an unfinished download of ``path`` is kept (``<name>.part``, next to it)."""
    path = Path(path)
    return path.with_name(path.name + ".part")


# ----------------------------------------------------------------------------------------------- checks
def weights_size_bounds(num_parameters: int) -> tuple[int, int]:
    """The smallest and largest plausible ``weights.hdf5`` size in bytes for ``num_parameters`` float32 values."""
    payload = 4 * num_parameters
    return payload, payload + HDF5_OVERHEAD_BYTES + int(HDF5_OVERHEAD_FRACTION * payload)


def size_problem(release: Release, role: str, size: int) -> str | None:
    """Why ``size`` bytes cannot be ``release``'s ``role`` file, or ``None`` if it can."""
    known = release.sizes.get(role)
    if known is not None and size != known:
        return f"{size:,} bytes where the release's file has {known:,}"
    if role == "options":
        if size == 0 or size > OPTIONS_MAX_BYTES:
            return f"{size:,} bytes, not a plausible size for an options.json (1 to {OPTIONS_MAX_BYTES:,})"
        return None
    low, high = weights_size_bounds(release.num_parameters)
    if size < low:
        return (
            f"{size:,} bytes, too small for the release's {release.num_parameters:,} float32 parameters "
            f"({low:,} bytes at least)"
        )
    if size > high:
        return (
            f"{size:,} bytes, too large for the release's {release.num_parameters:,} float32 parameters "
            f"({high:,} bytes at most)"
        )
    return None


def sha256_of(path: str | os.PathLike) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def options_problem(release: Release, data: bytes) -> str | None:
    """Why ``data`` is not ``release``'s ``options.json`` (not JSON, unreadable options, another model's sizes)."""
    try:
        options = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        return f"no valid JSON ({error})"
    try:
        got = convert_config(options)
    except (ValueError, TypeError, KeyError) as error:
        return f"options this package cannot read ({error})"
    want = convert_config(dict(release.options))

    def architecture(config: Any) -> tuple:
        return (
            expected_dataset_shapes(config),
            config.cell_clip,
            config.proj_clip,
            config.use_skip_connections,
            config.char_cnn_activation,
            config.max_characters_per_token,
        )

    if architecture(got) != architecture(want):
        return (
            f"the options of another model ({config_summary(got)}; release {release.name!r} has {config_summary(want)})"
        )
    return None


def check_file(release: Release, role: str, path: Path, where: str) -> None:
    """Raise `DownloadError` unless ``path`` has a plausible (or the known) size, the known sha256 and, for the
    options, the release's sizes."""
    problem = size_problem(release, role, path.stat().st_size)
    if problem:
        raise DownloadError(f"{release.filename(role)} from {where} has {problem}.")
    expected = release.sha256.get(role)
    if expected:
        actual = sha256_of(path)
        if actual != expected.lower():
            raise DownloadError(
                f"{release.filename(role)} from {where} has sha256 {actual}, the release's file has {expected.lower()}."
            )
    if role == "options":
        problem = options_problem(release, path.read_bytes())
        if problem:
            raise DownloadError(f"{release.filename(role)} from {where} holds {problem}.")


# ----------------------------------------------------------------------------------------------- HTTP download
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


def _resumable_offset(part: Path, url: str) -> tuple[int, dict[str, str]]:
    """How many bytes of ``part`` may be resumed from ``url``, and the validator to send with ``If-Range``.

    A ``.part`` counts only when its record names the same URL and a validator of the server's file: a ``.part``
    from another URL (another ``--base-url``) or from a server that gave no validator is discarded, since splicing
    two files of the same size would pass every size check.
    """
    record_path = _record_path(part)
    check_regular_or_absent(record_path, "the download record")
    if not check_regular_or_absent(part, "the partial download"):
        record_path.unlink(missing_ok=True)
        return 0, {}
    try:
        with os.fdopen(open_regular(record_path, os.O_RDONLY, "the download record"), "rb") as handle:
            record = json.loads(handle.read(OPTIONS_MAX_BYTES).decode("utf-8"))
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
        part.unlink()
        record_path.unlink(missing_ok=True)
        return 0, {}
    return part.stat().st_size, {k: record[k] for k in ("etag", "last_modified") if record.get(k)}


def _discard_part(part: Path) -> None:
    part.unlink(missing_ok=True)
    _record_path(part).unlink(missing_ok=True)


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
    ``read_timeout`` seconds times out the attempt. ``check_complete(part)`` may raise for a
    finished file (a sha256 check). A dropped connection, a body shorter than announced, a timeout and HTTP 5xx/429
    answers lead to another attempt, up to ``attempts`` in all (waiting ``retry_wait * attempt`` seconds in
    between); the ``.part`` file is kept for the next call when all fail. A file that fails a check is deleted.
    Raises `DownloadError` naming the file and the URL.
    """
    import requests
    import urllib3
    from tqdm.auto import tqdm

    destination = Path(destination)
    part = part_path(destination)
    name = destination.name
    if deadline is None and max_bytes is not None:
        deadline = DEADLINE_GRACE_SECONDS + max_bytes / MIN_AVERAGE_RATE
    started = time.monotonic()

    def remaining() -> float:
        return math.inf if deadline is None else deadline - (time.monotonic() - started)

    def past_deadline() -> DownloadError:
        kept = part.stat().st_size if part.exists() else 0
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
            offset, validator = _resumable_offset(part, url)
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
                        _discard_part(part)
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
                            _discard_part(part)  # another version of the file (a server that ignored If-Range)
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
                    if mode == "wb":  # what the .part will hold: the next attempt resumes only the same file
                        record = {"url": url, "final_url": final_url, **served}
                        atomic_write_text(_record_path(part), json.dumps(record))
                    limit = min(
                        total if total is not None else math.inf, max_bytes if max_bytes is not None else math.inf
                    )
                    received = offset
                    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "ab" else os.O_TRUNC)
                    with (
                        os.fdopen(open_regular(part, flags, "the partial download"), mode) as handle,
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
                                _discard_part(part)
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
                received = part.stat().st_size
                if total is not None and received < total:
                    raise _Transient(f"the connection closed after {received:,} of {total:,} bytes")
                break
            except (_Transient, requests.RequestException, urllib3.exceptions.HTTPError) as error:
                received = part.stat().st_size if part.exists() else 0
                if isinstance(error, _Transient):
                    last_problem = str(error)
                elif _is_timeout(error):
                    last_problem = (
                        f"timed out: the server sent nothing for {read_timeout:g} s (after {received:,} bytes)"
                    )
                elif total is not None and received < total:  # the body stopped short: a dropped connection
                    last_problem = f"the connection broke after {received:,} of {total:,} bytes"
                else:
                    last_problem = _one_line(error)
                logger.info("%s: attempt %d of %d failed: %s", url, attempt, attempts, last_problem)
                if remaining() <= 0:  # the deadline shut the connection down
                    raise past_deadline()
                if attempt < attempts and retry_wait > 0:
                    time.sleep(min(retry_wait * attempt, max(0.0, remaining())))
        else:
            kept = part.stat().st_size if part.exists() else 0
            resume = f"; {kept:,} bytes are kept in {part} and the next run resumes from there" if kept else ""
            raise DownloadError(f"cannot download {name} from {url} ({attempts} attempts): {last_problem}{resume}.")
        try:
            size = part.stat().st_size
            problem = check_size(size) if check_size is not None else None
            if problem:
                raise DownloadError(f"{name} downloaded from {url} has {problem}.")
            if check_complete is not None:
                check_complete(part)
        except DownloadError:
            _discard_part(part)
            raise
        os.replace(part, destination)
        _record_path(part).unlink(missing_ok=True)
        return Download(path=destination, url=url, final_url=final_url)
    finally:
        guard.cancel()
        if own_session:
            session.close()


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


def _one_line(error: Exception) -> str:
    """A short one-line description of an exception (requests' messages nest the whole urllib3 chain)."""
    text = " ".join(str(error).split())
    kind = type(error).__name__
    if len(text) > 200:
        text = text[:200] + "..."
    return f"{kind}: {text}" if text else kind


# ----------------------------------------------------------------------------------------------- releases
@dataclasses.dataclass
class FetchedRelease:
    """Where a release's files are now (``paths``), where they came from (``sources``, a URL or ``hf://``), and
    which were already in the cache (``cached``)."""

    release: Release
    paths: dict[str, Path]
    sources: dict[str, str]
    cached: dict[str, bool]


def _fetch_from_mirror(release: Release, role: str, destination: Path) -> str:
    """Fetch ``role`` from the release's Hub mirror into ``destination`` (checked); return its ``hf://`` address."""
    import huggingface_hub

    mirror = release.mirror
    filename = mirror.filenames[role]
    where = f"hf://{mirror.repo_id}/{filename}"
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.mirror-", dir=destination.parent))
    try:
        fetched = Path(
            huggingface_hub.hf_hub_download(mirror.repo_id, filename, revision=mirror.revision, local_dir=staging)
        )
    except Exception as error:  # the Hub client raises many kinds (offline, HTTP, auth, file system)
        shutil.rmtree(staging, ignore_errors=True)
        raise DownloadError(f"the Hub mirror {where} failed: {_one_line(error)}") from None
    try:
        check_file(release, role, fetched, where)
        os.replace(fetched, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return where


def fetch_release(
    release: Release | str,
    cache_dir: str | os.PathLike | None = None,
    *,
    base_url: str | None = None,
    force_download: bool = False,
    use_mirror: bool = True,
    attempts: int = DEFAULT_ATTEMPTS,
    retry_wait: float = 1.0,
    progress: bool = True,
    deadlines: Mapping[str, float] | None = None,
) -> FetchedRelease:
    """Make sure ``release``'s ``options.json`` and ``weights.hdf5`` are in the cache, checked; return where.

    A file already in the cache (see `release_cache_dir`) is checked again (size, sha256 where known) and used
    without any request, unless ``force_download`` (which also discards a ``.part`` file; the cached file is
    replaced only once the new download is complete). Otherwise the file is downloaded from
    ``release.url(role, base_url)`` with `download_file`; if that fails and ``use_mirror`` and the release has a
    Hub mirror, from the mirror. Where each file came from is kept next to it (``<name>.source``; the URL that
    answered, with the one asked for when a redirect led elsewhere). While it works, the call holds a lock on the
    release's cache folder: a second call for the same cache waits for it. A file may take at most
    ``deadlines[role]`` seconds (default: see `download_file`). Raises `DownloadError` (one line: file, source,
    problem).
    """
    release = get_release(release) if isinstance(release, str) else release
    folder = make_cache_folder(release_cache_dir(release, cache_dir))
    with _cache_lock(folder):
        return _fetch_locked(
            release,
            folder,
            base_url=base_url,
            force_download=force_download,
            use_mirror=use_mirror,
            attempts=attempts,
            retry_wait=retry_wait,
            progress=progress,
            deadlines=deadlines or {},
        )


@contextlib.contextmanager
def _cache_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive `fcntl.flock` on ``.<release>.lock`` beside the release's cache folder (the file stays; a
    lock dies with its process).

    A second download of the same release into the same cache waits for the first one and then finds its files
    complete in the cache, instead of writing the same ``.part`` at the same time.
    """
    import fcntl

    path = folder.with_name(f".{folder.name}.lock")
    try:
        handle = os.fdopen(open_regular(path, os.O_RDWR | os.O_CREAT, "the cache's lock file"), "rb")
    except OSError as error:
        raise DownloadError(f"cannot write in the release cache folder {folder}: {error.strerror or error}.") from None
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.warning("another process is downloading into %s; waiting for it to finish", folder)
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def max_size(release: Release, role: str) -> int:
    """The most bytes ``release``'s ``role`` file can have (its known size, else the plausibility bound)."""
    known = release.sizes.get(role)
    if known is not None:
        return known
    return OPTIONS_MAX_BYTES if role == "options" else weights_size_bounds(release.num_parameters)[1]


def _fetch_locked(
    release: Release,
    folder: Path,
    *,
    base_url: str | None,
    force_download: bool,
    use_mirror: bool,
    attempts: int,
    retry_wait: float,
    progress: bool,
    deadlines: Mapping[str, float],
) -> FetchedRelease:
    paths, sources, cached = {}, {}, {}
    for role in FILE_ROLES:
        destination = folder / release.filename(role)
        url = release.url(role, base_url)
        if force_download:  # the cached file stays until the new one replaces it
            _discard_part(part_path(destination))
        elif check_regular_or_absent(destination, "the cached file"):
            try:
                check_file(release, role, destination, f"the cache ({destination})")
            except DownloadError as error:
                raise DownloadError(f"{error} Delete it or rerun with --force-download.") from None
            sources[role] = read_origin(destination, url)
            paths[role], cached[role] = destination, True
            logger.info("using the cached %s", destination)
            continue
        try:
            downloaded = download_file(
                url,
                destination,
                attempts=attempts,
                retry_wait=retry_wait,
                progress=progress,
                check_size=lambda size, role=role: size_problem(release, role, size),
                check_complete=lambda path, role=role, url=url: check_file(release, role, path, url),
                max_bytes=max_size(release, role),
                deadline=deadlines.get(role),
            )
            sources[role] = downloaded.source
        except DownloadError as error:
            if not (use_mirror and release.mirror is not None and role in release.mirror.filenames):
                raise
            logger.info("%s; trying the Hub mirror %s", error, release.mirror.repo_id)
            try:
                sources[role] = _fetch_from_mirror(release, role, destination)
            except DownloadError as mirror_error:
                raise DownloadError(f"{str(error).rstrip('.')}; {mirror_error}") from None
            _discard_part(part_path(destination))  # an unfinished primary download is of no use now
        atomic_write_text(_origin_path(destination), sources[role] + "\n")
        paths[role], cached[role] = destination, False
    return FetchedRelease(release=release, paths=paths, sources=sources, cached=cached)


__all__ = [
    "BASE_URL_ENV",
    "DEFAULT_BASE_URL",
    "DownloadError",
    "FetchedRelease",
    "HubMirror",
    "RELEASES",
    "Release",
    "count_parameters",
    "default_cache_dir",
    "Download",
    "download_file",
    "fetch_release",
    "get_release",
    "release_cache_dir",
    "released_options",
    "resolve_base_url",
    "size_problem",
    "weights_size_bounds",
]
