"""The helpers every tool shares: one sha256 of a file, one one-line error, one JSON reader."""

from __future__ import annotations

import hashlib
import json

import pytest

from modeling_elmo.utils import io_utils


@pytest.mark.parametrize("size", [0, 1, 6, 7, 8, 1000])
def test_sha256_of_file_equals_hashlib_over_the_whole_file_for_any_block_size(tmp_path, size):
    data = bytes(range(256)) * 4
    path = tmp_path / "data.bin"
    path.write_bytes(data[:size])
    for block_size in (1, 3, 7, 1 << 20):
        assert io_utils.sha256_of_file(path, block_size) == hashlib.sha256(data[:size]).hexdigest()


def test_error_line_joins_lines_bounds_the_length_and_names_the_type_on_request():
    error = ConnectionError("first line\n  second\tline\n")
    assert io_utils.error_line(error) == "first line second line"
    assert io_utils.error_line(error, named=True) == "ConnectionError: first line second line"
    assert io_utils.error_line(KeyError()) == "KeyError" and io_utils.error_line(KeyError(), named=True) == "KeyError"
    long = io_utils.error_line(ValueError("x" * 5000), limit=100)
    assert long == "x" * 100 + "... (5,000 characters in all)"
    assert io_utils.error_line("a plain\nmessage") == "a plain message"


def test_read_json_refuses_a_file_over_the_bound_before_reading_it(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"values": list(range(100))}))
    size = path.stat().st_size
    assert io_utils.read_json(path, "big", max_bytes=size) == {"values": list(range(100))}
    with pytest.raises(ValueError, match=rf"^big is {size:,} bytes, more than the {size - 1:,} a JSON file here"):
        io_utils.read_json(path, "big", max_bytes=size - 1)


@pytest.mark.parametrize(
    "content, problem",
    [(b"{not json", "is not valid JSON: Expecting property name"), (b"\xff\xfe{}", "is not valid JSON: 'utf-8'")],
)
def test_read_json_object_names_the_file_and_what_is_wrong_in_one_line(tmp_path, content, problem):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(ValueError) as excinfo:
        io_utils.read_json_object(path, "config")
    message = str(excinfo.value)
    assert message.startswith(f"config file {str(path)!r} {problem}") and "\n" not in message, message
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object, got list"):
        io_utils.read_json_object(path, "config")
    assert io_utils.read_json_object(tmp_path / "absent.json", "config") is None


def test_command_error_is_one_line_naming_the_command_with_exit_status_1():
    with pytest.raises(SystemExit) as excinfo:
        raise io_utils.command_error("convert", ValueError("options file 'o.json'\ndoes not exist."))
    assert excinfo.value.code == "elmo convert: error: options file 'o.json' does not exist."


def test_a_file_with_a_second_hard_link_is_read_but_never_written_through(tmp_path):
    import os

    victim = tmp_path / "victim.txt"
    victim.write_text("another user's file")
    planted = tmp_path / "download.part"
    os.link(victim, planted)
    os.close(io_utils.open_regular(planted, os.O_RDONLY, "the partial download"))  # reading changes nothing
    for flags in (os.O_WRONLY | os.O_APPEND, os.O_RDWR | os.O_CREAT, os.O_WRONLY | os.O_TRUNC):
        with pytest.raises(ValueError, match=r"is a hard link to another file \(2 names share it\); refusing"):
            io_utils.open_regular(planted, flags, "the partial download")
    assert victim.read_text() == "another user's file"


def test_a_lock_file_that_is_a_hard_link_is_refused_and_the_file_it_shares_is_unchanged(tmp_path):
    import os

    victim = tmp_path / "victim.txt"
    victim.write_text("another user's file")
    os.link(victim, tmp_path / "out.lock")
    with pytest.raises(ValueError, match="is a hard link to another file"):
        with io_utils.exclusive_lock(tmp_path / "out.lock", "busy", holder="elmo convert"):
            pytest.fail("the lock was taken")
    assert victim.read_text() == "another user's file"


def test_a_host_reachable_only_through_the_environments_proxy_is_reachable(monkeypatch):
    """Issue 35 (Minor): with ``http_proxy`` naming a working proxy and the host reachable only through it, the
    reachability probe said "cannot download"; it now connects where requests will (the proxy), and honours
    ``no_proxy``."""
    import socket
    import threading

    from modeling_elmo.utils.io_utils import host_reachable

    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()[0].close()), daemon=True)
    thread.start()
    url = "http://release.invalid/elmo/options.json"  # .invalid never resolves: only the proxy can reach it
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    try:
        assert not host_reachable(url, timeout=1.0)
        monkeypatch.setenv("http_proxy", f"127.0.0.1:{listener.getsockname()[1]}")
        monkeypatch.setenv("no_proxy", "release.invalid")
        assert not host_reachable(url, timeout=1.0) and accepted == []
        monkeypatch.delenv("no_proxy")
        assert host_reachable(url, timeout=1.0)
        thread.join(5)
        assert len(accepted) == 1
    finally:
        listener.close()
