"""`elmo convert --release` without a network: one connection attempt, then one line naming what works offline
(local files with --options/--weights, another --base-url, the cache folder), not a string of retries."""

from __future__ import annotations

import socket
import time

import pytest

from modeling_elmo.conversion import convert
from modeling_elmo.conversion.download import DownloadError
from modeling_elmo.conversion.releases import get_release, release_cache_dir
from modeling_elmo.utils import io_utils


@pytest.fixture
def closed_url():
    """A local URL nothing listens on (connections are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/elmo"


def test_an_unreachable_release_server_fails_at_once_naming_the_offline_alternatives(tmp_path, closed_url):
    started = time.monotonic()
    with pytest.raises(DownloadError) as error:
        convert.convert_release(
            "small", tmp_path / "out", cache_dir=tmp_path / "cache", base_url=closed_url, progress=False
        )
    assert time.monotonic() - started < 2
    message = str(error.value)
    folder = release_cache_dir(get_release("small"), tmp_path / "cache")
    assert message.startswith(f"cannot download release 'small': {closed_url} cannot be reached. ")
    for alternative in (
        "--options OPTIONS.json --weights WEIGHTS.hdf5",
        "--base-url URL",
        f"cache folder {folder}",
        "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5",
    ):
        assert alternative in message
    assert not (tmp_path / "out").exists() and not any(folder.glob("*.part"))


def test_offline_mode_rules_out_the_hub_mirror_and_says_so(tmp_path, closed_url):
    # the tests run with HF_HUB_OFFLINE=1; `original` has a Hub mirror
    with pytest.raises(
        DownloadError,
        match=r"and the Hub mirror \S+ is off in offline mode \(HF_HUB_OFFLINE=1\)\. "
        r"Offline, convert local copies with --options",
    ):
        convert.check_release_reachable(get_release("original"), tmp_path / "cache", base_url=closed_url)


def test_a_cached_release_needs_no_connection(tmp_path, closed_url, monkeypatch):
    release = get_release("small")
    folder = release_cache_dir(release, tmp_path / "cache")
    folder.mkdir(parents=True)
    for role in ("options", "weights"):
        (folder / release.filename(role)).write_bytes(b"x")
    monkeypatch.setattr(io_utils, "host_reachable", lambda *a, **k: pytest.fail("probed the network"))
    convert.check_release_reachable(release, tmp_path / "cache", base_url=closed_url)
    monkeypatch.undo()
    with pytest.raises(DownloadError):  # --force-download must download again
        convert.check_release_reachable(release, tmp_path / "cache", base_url=closed_url, force_download=True)


def test_the_command_line_says_it_in_one_line(tmp_path, closed_url):
    with pytest.raises(SystemExit) as exit_info:
        convert.main(
            [
                "--release",
                "medium",
                "--output",
                str(tmp_path / "out"),
                "--cache-dir",
                str(tmp_path / "c"),
                "--base-url",
                closed_url,
            ]
        )
    line = str(exit_info.value.code)
    assert "\n" not in line and line.startswith("elmo convert: error: cannot download release 'medium': ")
    assert "--options" in line and "--base-url" in line and len(line) < 600
