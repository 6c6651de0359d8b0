"""A local HTTP server on 127.0.0.1 that serves a synthetic ELMo release, for the download tests and the README's
conversion example.

The server (stdlib ``http.server`` in a thread) serves tiny random files in the original layout
(``numpy_reference.write_original_files``) under the real release's names; the release table's ``original`` entry is
swapped for one whose options and parameter count fit them. It can drop a connection mid-body, answer with an error
status, or ignore ``Range``; every request it receives is recorded. Import the fixtures into a test module to use
them (``from release_server import release, served, server, synthetic_files``).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy_reference as ref  # noqa: E402
from modeling_elmo.releases import RELEASES, count_parameters  # noqa: E402


# ----------------------------------------------------------------------------------------------- the server
class ReleaseServer:
    """What the test server serves and how it misbehaves; ``requests`` records (path, Range header) per request."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.status: dict[str, int] = {}  # path -> status to answer instead of the file
        self.drops: dict[str, list[int]] = {}  # path -> per request, how many body bytes to send before hanging up
        self.ignore_range = False
        self.url = ""

    def requests_for(self, path: str) -> list[str | None]:
        return [rng for p, rng in self.requests if p == path]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: returning early closes it

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        state: ReleaseServer = self.server.state  # type: ignore[attr-defined]
        path, range_header = self.path, self.headers.get("Range")
        state.requests.append((path, range_header))
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
        self.end_headers()
        drops = state.drops.get(path)
        if drops:
            self.wfile.write(body[: drops.pop(0)])  # then hang up: the client sees a short body
            self.wfile.flush()
            return
        self.wfile.write(body)


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    state = ReleaseServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.state = state
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/models/elmo"
    try:
        yield state
    finally:
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
    return release.url(role, server.url)[len(server.url.split("/models")[0]):]


@pytest.fixture
def served(server, release, synthetic_files):
    """The server holding the synthetic release; returns {role: URL path}."""
    _, options_bytes, weights_bytes = synthetic_files
    paths = {"options": _path(server, release, "options"), "weights": _path(server, release, "weights")}
    server.files[paths["options"]] = options_bytes
    server.files[paths["weights"]] = weights_bytes
    return paths
