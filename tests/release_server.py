"""A local HTTP server on 127.0.0.1 that serves a synthetic ELMo release, for the download tests and the README's
conversion example.

The server (stdlib ``http.server`` in a thread) serves tiny random files in the original layout
(``numpy_reference.write_original_files``) under the real release's names; the release table's ``original`` entry is
swapped for one whose options and parameter count fit them. Like S3 it sends an ``ETag`` and a ``Last-Modified`` and
honours ``If-Range``. It can drop a connection mid-body, answer with an error status, ignore ``Range``, redirect,
send a body without end (and no ``Content-Length``), trickle a byte at a time (of the body, or of the status line
and headers), or stall; every request it receives is
recorded. Import the fixtures into a test module to use
them (``from release_server import release, served, server, synthetic_files``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy_reference as ref  # noqa: E402

from modeling_elmo.conversion.releases import RELEASES, count_parameters  # noqa: E402


# ----------------------------------------------------------------------------------------------- the server
class ReleaseServer:
    """What the test server serves and how it misbehaves; ``requests`` records (path, Range header) per request."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.status: dict[str, int] = {}  # path -> status to answer instead of the file
        self.drops: dict[str, list[int]] = {}  # path -> per request, how many body bytes to send before hanging up
        self.ignore_range = False
        self.validators = True  # send ETag and Last-Modified (and honour If-Range)
        self.redirects: dict[str, str] = {}  # path -> URL to answer 302 with
        self.endless: set[str] = set()  # paths answered with an endless body and no Content-Length
        self.trickle: dict[str, float] = {}  # path -> seconds to wait before each byte of the body
        self.stall: set[str] = set()  # paths whose body never comes (the headers do)
        # path -> (seconds to wait before each byte of the status line and headers, bytes sent at once before that)
        self.trickle_head: dict[str, tuple[float, int]] = {}
        self.if_range: list[str | None] = []  # the If-Range header of each request
        self.stopping = threading.Event()
        self.url = ""

    @staticmethod
    def etag(data: bytes) -> str:
        return '"' + hashlib.sha256(data).hexdigest()[:32] + '"'

    def requests_for(self, path: str) -> list[str | None]:
        return [rng for p, rng in self.requests if p == path]


LAST_MODIFIED = "Wed, 01 Feb 2018 00:00:00 GMT"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: returning early closes it

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        state: ReleaseServer = self.server.state  # type: ignore[attr-defined]
        # a request through a proxy names the whole URL: this server also serves as that proxy
        path, range_header = urlsplit(self.path).path if "://" in self.path else self.path, self.headers.get("Range")
        state.requests.append((path, range_header))
        state.if_range.append(self.headers.get("If-Range"))
        if path in state.trickle_head:
            self._trickle_head(state, state.files[path], *state.trickle_head[path])
            return
        if path in state.redirects:
            self.send_response(302)
            self.send_header("Location", state.redirects[path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path in state.endless:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            block = b" " * 65536
            try:
                while not state.stopping.is_set():
                    self.wfile.write(block)
            except OSError:  # the client hung up
                pass
            return
        if path in state.status:
            self.send_response(state.status[path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = state.files.get(path)
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
        start = 0
        if_range = self.headers.get("If-Range")
        if if_range is not None and (not state.validators or if_range not in (state.etag(data), LAST_MODIFIED)):
            match = None  # the file changed since the validator: send all of it (RFC 9110, If-Range)
        if match and not state.ignore_range:
            start = int(match.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        if state.validators:
            self.send_header("ETag", state.etag(data))
            self.send_header("Last-Modified", LAST_MODIFIED)
        self.end_headers()
        if path in state.stall:
            state.stopping.wait(600)
            return
        if path in state.trickle:
            try:
                for i in range(len(body)):
                    if state.stopping.wait(state.trickle[path]):
                        return
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
            except OSError:
                pass
            return
        drops = state.drops.get(path)
        if drops:
            self.wfile.write(body[: drops.pop(0)])  # then hang up: the client sees a short body
            self.wfile.flush()
            return
        self.wfile.write(body)

    def _trickle_head(self, state: ReleaseServer, data: bytes, wait: float, at_once: int) -> None:
        """Answer with ``data``, its status line and headers sent one byte every ``wait`` seconds after the first
        ``at_once`` bytes."""
        head = (
            f"HTTP/1.0 200 OK\r\nContent-Length: {len(data)}\r\nContent-Type: application/octet-stream\r\n"
            f"ETag: {state.etag(data)}\r\nLast-Modified: {LAST_MODIFIED}\r\n\r\n"
        ).encode("ascii")
        try:
            self.wfile.write(head[:at_once])
            self.wfile.flush()
            for i in range(at_once, len(head)):
                if state.stopping.wait(wait):
                    return
                self.wfile.write(head[i : i + 1])
                self.wfile.flush()
            self.wfile.write(data)
        except OSError:  # the client hung up
            pass


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    state = ReleaseServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.state = state
    # shutdown() waits for the loop's next poll: 0.5 s by default, paid by every test that uses the server
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/models/elmo"
    try:
        yield state
    finally:
        state.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


# ----------------------------------------------------------------------------------------------- the release
@pytest.fixture(scope="module")
def synthetic_files(tmp_path_factory):
    """Tiny original-format files: (options dict, options bytes, weights bytes)."""
    options = ref.tiny_options()
    options_path, weights_path = ref.write_original_files(tmp_path_factory.mktemp("synthetic"), options, seed=11)
    return options, Path(options_path).read_bytes(), Path(weights_path).read_bytes()


@pytest.fixture
def release(synthetic_files, monkeypatch):
    """The table's ``original`` entry with the synthetic files' options and parameter count, put in the table."""
    options = synthetic_files[0]
    synthetic = dataclasses.replace(RELEASES["original"], options=options, num_parameters=count_parameters(options))
    monkeypatch.setitem(RELEASES, "original", synthetic)
    return synthetic


def _path(server: ReleaseServer, release, role: str) -> str:
    return release.url(role, server.url)[len(server.url.split("/models")[0]) :]


@pytest.fixture
def served(server, release, synthetic_files):
    """The server holding the synthetic release; returns {role: URL path}."""
    _, options_bytes, weights_bytes = synthetic_files
    paths = {"options": _path(server, release, "options"), "weights": _path(server, release, "weights")}
    server.files[paths["options"]] = options_bytes
    server.files[paths["weights"]] = weights_bytes
    return paths
