"""Downloads from misbehaving servers (a local HTTP server on 127.0.0.1, `release_server`): a ``.part`` resumed from
another server or another version of the file, redirects, endless and trickling bodies, a stalled server, and two
downloads into one cache at once. Each test reproduces a reported failure."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest
from support import plant

from modeling_elmo import cli
from modeling_elmo.conversion import cache_folder, download
from modeling_elmo.conversion.download import DownloadError, download_file
from modeling_elmo.conversion.releases import fetch_release


def _convert_argv(server, tmp_path, *extra: str) -> list[str]:
    """`elmo convert` of the original release from ``server`` with the cache and output in ``tmp_path``."""
    cache, out = str(tmp_path / "cache"), str(tmp_path / "out")
    return ["convert", "--release", "original", "--base-url", server.url, "--cache-dir", cache, "--output", out, *extra]


@pytest.fixture(autouse=True)
def no_hub(monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise OSError("offline (test)")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)


def _host(server) -> str:
    return server.url.split("/models")[0]


def _cache(tmp_path, release) -> Path:
    return tmp_path / "cache" / release.name


def _interrupt(server, served, release, tmp_path, nbytes: int) -> Path:
    """A first run cut off after ``nbytes`` of the weights (every attempt); returns the ``.part`` it left."""
    server.drops[served["weights"]] = [nbytes]
    with pytest.raises(DownloadError):
        fetch_release(release, tmp_path / "cache", base_url=server.url, attempts=1, progress=False)
    part = _cache(tmp_path, release) / (release.filename("weights") + ".part")
    assert part.stat().st_size == nbytes
    return part


# ----------------------------------------------------------------------------------------------- resuming


def test_part_from_another_server_is_not_spliced_into_a_file_of_the_same_size(
    server, served, release, tmp_path, synthetic_files
):
    _interrupt(server, served, release, tmp_path, 15_000)
    other = bytes(b ^ 0xFF for b in synthetic_files[2])  # another file of the same size
    mirror = "/mirror/models/elmo"
    server.files[mirror + served["weights"].split("/models/elmo")[1]] = other
    server.files[mirror + served["options"].split("/models/elmo")[1]] = synthetic_files[1]
    server.requests.clear()
    fetched = fetch_release(release, tmp_path / "cache", base_url=_host(server) + mirror, progress=False)
    assert [r for p, r in server.requests if p.endswith("weights.hdf5")] == [None]  # started over, no Range
    assert fetched.paths["weights"].read_bytes() == other  # the other server's file whole, not a splice


def test_part_of_a_file_that_changed_on_the_server_is_replaced_not_continued(
    server, served, release, tmp_path, synthetic_files
):
    _interrupt(server, served, release, tmp_path, 15_000)
    changed = bytearray(synthetic_files[2])
    changed[20_000] ^= 0x01  # same size, one bit beyond the part: a splice would pass every size check
    server.files[served["weights"]] = bytes(changed)
    server.requests.clear()
    server.if_range.clear()
    download_file(
        release.url("weights", server.url),
        _cache(tmp_path, release) / release.filename("weights"),
        progress=False,
        attempts=1,
    )
    assert server.requests == [(served["weights"], "bytes=15000-")]
    assert server.if_range == [server.etag(synthetic_files[2])]  # the old version's ETag: the server sends it all
    assert (_cache(tmp_path, release) / release.filename("weights")).read_bytes() == bytes(changed)


def test_part_without_a_validator_is_started_over(server, served, release, tmp_path, synthetic_files):
    server.validators = False
    _interrupt(server, served, release, tmp_path, 15_000)
    server.requests.clear()
    fetched = fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
    assert server.requests_for(served["weights"]) == [None]
    assert fetched.paths["weights"].read_bytes() == synthetic_files[2]


def test_part_with_its_validator_resumes_with_if_range(server, served, release, tmp_path, synthetic_files):
    part = _interrupt(server, served, release, tmp_path, 15_000)
    record = json.loads(Path(str(part) + ".json").read_text())
    assert record["url"] == release.url("weights", server.url) and record["etag"] == server.etag(synthetic_files[2])
    server.requests.clear()
    server.if_range.clear()
    fetched = fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
    assert server.requests_for(served["weights"]) == ["bytes=15000-"]
    assert server.if_range == [server.etag(synthetic_files[2])]
    assert fetched.paths["weights"].read_bytes() == synthetic_files[2]
    assert sorted(p.name for p in _cache(tmp_path, release).iterdir()) == sorted(
        [
            release.filename("options"),
            release.filename("options") + ".source",
            release.filename("weights"),
            release.filename("weights") + ".source",
        ]
    )


# ----------------------------------------------------------------------------------------------- redirects


def test_redirect_is_followed_and_recorded_with_the_url_that_served_the_file(
    server, served, release, tmp_path, synthetic_files, caplog
):
    elsewhere = "/elsewhere/weights.hdf5"
    server.files[elsewhere] = synthetic_files[2]
    server.redirects[served["weights"]] = _host(server) + elsewhere
    with caplog.at_level(logging.WARNING, logger="modeling_elmo.conversion.download"):
        assert cli.main(_convert_argv(server, tmp_path)) == 0
    asked = release.url("weights", server.url)
    recorded = f"{_host(server)}{elsewhere} (redirected from {asked})"
    metadata = json.loads((tmp_path / "out" / "conversion_metadata.json").read_text())
    assert metadata["sources"]["weights"] == recorded
    assert (_cache(tmp_path, release) / (release.filename("weights") + ".source")).read_text().strip() == recorded
    assert f"redirected: {asked} -> {_host(server)}{elsewhere}" in caplog.text


# ----------------------------------------------------------------------------------------------- bounds and deadlines


def test_endless_body_without_content_length_is_cut_off_at_the_size_bound(server, served, release, tmp_path):
    server.endless.add(served["options"])
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        cli.main(_convert_argv(server, tmp_path, "--no-mirror"))
    message = str(exit_.value.code)
    assert message == (
        f"elmo convert: error: {release.filename('options')} from {release.url('options', server.url)}: "
        "the server sent more than 65,536, the most this file can have; the partial file was deleted."
    )
    assert time.monotonic() - started < 30
    assert sorted(p.name for p in _cache(tmp_path, release).iterdir()) == []


def test_trickling_server_meets_the_deadline_of_the_file(server, served, release, tmp_path, monkeypatch):
    server.trickle[served["options"]] = 0.2  # one byte every 0.2 s: each read arrives in time, the file never does
    monkeypatch.setattr(download, "DEADLINE_GRACE_SECONDS", 1.0)  # options.json: 1 s + 65,536 B at 100 kB/s
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        cli.main(_convert_argv(server, tmp_path))
    elapsed = time.monotonic() - started
    message = str(exit_.value.code)
    assert (
        message.startswith(
            f"elmo convert: error: cannot download {release.filename('options')} from "
            f"{release.url('options', server.url)}: timed out, the file did not arrive within its "
            "deadline of 2 s; "
        )
        and "\n" not in message
    ), message
    assert "bytes are kept in" in message and elapsed < 10


def test_stalled_server_is_reported_as_a_timeout(server, served, release, tmp_path):
    server.stall.add(served["options"])
    url = release.url("options", server.url)
    started = time.monotonic()
    with pytest.raises(DownloadError) as raised:
        download_file(url, tmp_path / "options.json", read_timeout=1.0, attempts=2, retry_wait=0, progress=False)
    assert str(raised.value) == (
        f"cannot download options.json from {url} (2 attempts): timed out: the server sent "
        "nothing for 1 s (after 0 bytes)."
    )
    assert time.monotonic() - started < 10


# ----------------------------------------------------------------------------------------------- one writer


def test_two_downloads_into_one_cache_take_turns_and_both_succeed(server, served, release, tmp_path, synthetic_files):
    server.trickle[served["weights"]] = 0.0  # sent byte by byte: the first download takes a while
    results, errors = [], []

    def fetch():
        try:
            results.append(fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.2)
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and len(results) == 2
    assert sorted(r.cached["weights"] for r in results) == [False, True]  # the second found the first's file
    assert len(server.requests_for(served["weights"])) == 1
    assert all(r.paths["weights"].read_bytes() == synthetic_files[2] for r in results)


# ------------------------------------------------------------------------------------------- whole-response deadline
@pytest.mark.parametrize("at_once", [0, len("HTTP/1.0 200 OK\r\n")], ids=["status line trickled", "headers trickled"])
def test_a_server_trickling_its_status_line_or_headers_meets_the_deadline_of_the_file(
    server, served, release, tmp_path, monkeypatch, at_once
):
    server.trickle_head[served["options"]] = (0.3, at_once)  # ~200 header bytes: a minute, each read in time
    monkeypatch.setattr(download, "DEADLINE_GRACE_SECONDS", 1.0)  # options.json: 1 s + 65,536 B at 100 kB/s
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        cli.main(_convert_argv(server, tmp_path, "--no-mirror"))
    elapsed = time.monotonic() - started
    message = str(exit_.value.code)
    assert message == (
        f"elmo convert: error: cannot download {release.filename('options')} from "
        f"{release.url('options', server.url)}: timed out, the file did not arrive within its "
        "deadline of 2 s."
    ), message
    assert elapsed < 10, elapsed
    assert len(server.requests_for(served["options"])) == 1
    assert not (tmp_path / "out").exists()


def test_the_whole_response_deadline_holds_through_an_http_proxy(server, served, release, tmp_path, monkeypatch):
    host = _host(server)
    monkeypatch.setenv("HTTP_PROXY", host)  # the test server answers as the proxy
    monkeypatch.setenv("NO_PROXY", "")
    server.trickle_head[served["options"]] = (0.3, 0)
    url = release.url("options", "http://elmo.invalid/models/elmo")
    started = time.monotonic()
    with pytest.raises(DownloadError, match="timed out, the file did not arrive within its deadline of 2 s"):
        download_file(url, tmp_path / "options.json", deadline=2, progress=False)
    assert time.monotonic() - started < 10
    assert server.requests_for(served["options"]) == [None]


def test_a_download_within_its_deadline_is_not_cut_short_by_the_deadline_guard(
    server, served, release, tmp_path, synthetic_files
):
    server.trickle_head[served["options"]] = (0.01, 0)
    url = release.url("options", server.url)
    download_file(url, tmp_path / "options.json", deadline=30, progress=False)
    assert (tmp_path / "options.json").read_bytes() == synthetic_files[1]


# ----------------------------------------------------------------------------------------------- planted links
def _planted_part(tmp_path, release, server, planted: str) -> tuple[Path, Path]:
    """A ``.part`` of the options planted in the cache as ``planted``, with a record naming the right URL; returns
    the ``.part`` and the file outside that a link points to."""
    folder = _cache(tmp_path, release)
    folder.mkdir(parents=True)
    part = folder / (release.filename("options") + ".part")
    victim = tmp_path / "other-user" / "thesis.txt"
    plant(part, planted, victim)
    record = {"url": release.url("options", server.url), "etag": '"x"', "last_modified": "x"}
    (folder / (part.name + ".json")).write_text(json.dumps(record))
    return part, victim


@pytest.mark.parametrize("planted", ["link to another user's file", "dangling link", "FIFO"])
def test_a_part_planted_in_a_shared_cache_is_refused_and_nothing_is_written_through_it(
    server, served, release, tmp_path, planted
):
    server.ignore_range = True
    part, victim = _planted_part(tmp_path, release, server, planted)
    with pytest.raises(SystemExit) as exit_:
        cli.main(_convert_argv(server, tmp_path))
    kind = "a FIFO" if planted == "FIFO" else "a symbolic link"
    assert str(exit_.value.code) == (
        f"elmo convert: error: the partial download {str(part)!r} is {kind}, not a "
        "regular file; refusing to use it (remove it if it is not yours to keep)."
    )
    assert os.path.lexists(part), "the planted entry is left for its owner to look at"
    assert [p.read_text() for p in victim.parent.iterdir()] == (
        ["another user's file"] if planted.startswith("link to") else []
    )
    assert server.requests == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["record", "cached file", "source record", "cache lock", "release folder"])
def test_links_planted_for_the_record_the_cached_file_the_lock_or_the_release_folder_are_refused(
    server, served, release, tmp_path, synthetic_files, where
):
    folder = _cache(tmp_path, release)
    outside = tmp_path / "outside"
    outside.mkdir()
    if where == "release folder":
        folder.parent.mkdir()
        folder.symlink_to(outside, target_is_directory=True)
        planted, what = folder, "the release cache folder"
    else:
        folder.mkdir(parents=True)
        planted, what = {
            "record": (folder / (release.filename("options") + ".part.json"), "the download record"),
            "cached file": (folder / release.filename("options"), "the cached file"),
            "source record": (folder / (release.filename("options") + ".source"), "the cached file's source record"),
            "cache lock": (folder.with_name(f".{folder.name}.lock"), "the cache's lock file"),
        }[where]
        planted.symlink_to(outside / "target")
        if where == "source record":  # beside a complete cached file, whose origin it would name
            (folder / release.filename("options")).write_bytes(synthetic_files[1])
    with pytest.raises(SystemExit) as exit_:
        cli.main(_convert_argv(server, tmp_path))
    message = str(exit_.value.code)
    assert message.startswith(f"elmo convert: error: {what} {str(planted)!r} is a symbolic link"), message
    assert "\n" not in message
    assert list(outside.iterdir()) == [] and server.requests == []


# ----------------------------------------------------------------------------------------------- the output
def test_a_file_put_into_the_output_during_the_download_is_kept_and_the_conversion_refused(
    server, served, release, tmp_path, monkeypatch
):
    from modeling_elmo.conversion import convert

    out = tmp_path / "out" / "new"
    original = convert.fetch_release

    def the_user_writes_meanwhile(*args, **kwargs):
        out.mkdir(parents=True)
        (out / "notes.txt").write_text("mine")
        return original(*args, **kwargs)

    monkeypatch.setattr(convert, "fetch_release", the_user_writes_meanwhile)
    with pytest.raises(SystemExit) as exit_:
        cli.main(
            [
                "convert",
                "--release",
                "original",
                "--base-url",
                server.url,
                "--cache-dir",
                str(tmp_path / "cache"),
                "--output",
                str(out),
            ]
        )
    # checked again once the files are in (and again when the folder is put in place: tests/conversion/test_convert.py)
    assert str(exit_.value.code) == (
        f"elmo convert: error: output folder '{out}' exists and is not empty; pass overwrite=True (--overwrite)."
    )
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.parent.iterdir()) == ["new"], "no temporary folder or lock left"


# ----------------------------------------------------------------------------------------- swapped folders, hard links
def test_a_cache_folder_swapped_for_a_link_while_the_server_delays_is_refused_and_nothing_lands_outside(
    server, served, release, tmp_path
):
    """X8: the folder is pinned when the lock is taken and checked again before every write."""
    folder = _cache(tmp_path, release)
    outside = tmp_path / "outside"
    outside.mkdir()
    server.trickle_head[served["options"]] = (0.01, 0)  # the answer takes a while to come

    def swap_once_asked():
        deadline = time.monotonic() + 60
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.005)
        folder.rename(folder.with_name("moved"))
        folder.symlink_to(outside, target_is_directory=True)

    swapper = threading.Thread(target=swap_once_asked)
    swapper.start()
    try:
        with pytest.raises(ValueError, match=r"the release cache folder '.*' was replaced \(by a link or another"):
            fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
    finally:
        swapper.join(60)
    assert folder.is_symlink() and list(outside.iterdir()) == []


def _written_names(release) -> list[str]:
    """Every name a download of ``release`` writes in its cache folder."""
    names = [release.filename(role) for role in ("options", "weights")]
    return [f"{n}{suffix}" for n in names for suffix in ("", ".part", ".part.json", ".source")]


#: `CacheFolder.check` runs at the lock (1), for each of the two files before the request, after the answer's headers,
#: before the final rename and before the source record is written (4 x 2), and once all is done (1).
_CHECKS = 10


@pytest.mark.parametrize("swapped_after", range(1, _CHECKS + 1))
def test_a_cache_folder_swapped_right_after_a_check_passed_never_receives_a_byte(
    server, served, release, tmp_path, synthetic_files, monkeypatch, swapped_after
):
    """X8: the folder is swapped for a link to another folder in the window between a check that passed and the
    write it guards, at each step of the download. Every write goes to the folder as it was opened (``dir_fd``), so
    the link's target is untouched; the download ends with one line at the next check, or (swapped after the last
    one) completes in the folder that was opened."""
    folder = _cache(tmp_path, release)
    folder.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in _written_names(release):  # another user's files under every name the download writes
        (outside / name).write_bytes(b"not yours: " + name.encode())
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    moved = folder.with_name("moved")
    checks = []
    real_check = cache_folder.CacheFolder.check

    def check_then_swap(self):
        checks.append(1)
        real_check(self)
        if len(checks) == swapped_after:  # the check passed; the folder is swapped before the write it guards
            folder.rename(moved)
            folder.symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(cache_folder.CacheFolder, "check", check_then_swap)
    if swapped_after < _CHECKS:
        with pytest.raises(ValueError) as raised:
            fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
        assert str(raised.value) == (
            f"the release cache folder {str(folder)!r} was replaced (by a link or another folder) while the download "
            "ran; nothing more is written there. Check who can write its parent folder, and run again."
        )
    else:
        fetched = fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
        assert fetched.paths["weights"] == folder / release.filename("weights")
        assert (moved / release.filename("options")).read_bytes() == synthetic_files[1]
        assert (moved / release.filename("weights")).read_bytes() == synthetic_files[2]
        assert (moved / (release.filename("weights") + ".source")).read_text() == (
            release.url("weights", server.url) + "\n"
        )
    assert len(checks) == swapped_after + (swapped_after < _CHECKS), "the next check stops the download"
    assert folder.is_symlink() and {p.name: p.read_bytes() for p in outside.iterdir()} == before
    # what was written before the swap is in the folder that was opened, complete or resumable, never a temporary
    assert not [p.name for p in moved.iterdir() if p.name.endswith(".tmp")]


def test_a_download_outside_a_cache_writes_in_its_folder_as_opened(server, served, release, tmp_path, monkeypatch):
    """`download_file` called on its own opens the destination's folder itself: swapped during the transfer, the
    folder that was opened receives the file, the link's target nothing."""
    folder, outside = tmp_path / "here", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    real_open = cache_folder.CacheFolder.open

    def open_then_swap(self, name, flags, what):
        fd = real_open(self, name, flags, what)
        if name.endswith(".part") and not folder.is_symlink():
            folder.rename(tmp_path / "moved")
            folder.symlink_to(outside, target_is_directory=True)
        return fd

    monkeypatch.setattr(cache_folder.CacheFolder, "open", open_then_swap)
    url = release.url("options", server.url)
    with pytest.raises(ValueError, match=r"^the release cache folder '.*here' was replaced"):
        download_file(url, folder / "options.json", progress=False)
    assert list(outside.iterdir()) == []
    part = tmp_path / "moved" / "options.json.part"
    assert part.read_bytes() == server.files[served["options"]], "kept, whole, for the next run"


@pytest.mark.parametrize("cached", [False, True], ids=["downloaded", "found in the cache"])
def test_a_cache_folder_swapped_for_a_link_to_other_release_files_once_fetched_still_converts_the_checked_files(
    server, served, release, tmp_path, synthetic_files, monkeypatch, cached
):
    """X8: the conversion reads the release's files after the cache's lock is released. Right after `fetch_release`
    returns, the folder is swapped for a link to another copy of the release (valid files, other weights, which
    would pass every check): the conversion reads the files that were checked, held open since, and converts them."""
    import hashlib

    import numpy_reference as ref
    import torch
    from safetensors.torch import load_file

    from modeling_elmo.conversion import convert

    folder = _cache(tmp_path, release)
    impostor = tmp_path / "impostor"
    made = ref.write_original_files(impostor, synthetic_files[0], seed=12)
    for role, path in zip(("options", "weights"), made, strict=True):
        Path(path).rename(impostor / release.filename(role))
    if cached:
        fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
    real_fetch = convert.fetch_release

    def fetch_then_swap(*args, **kwargs):
        fetched = real_fetch(*args, **kwargs)
        folder.rename(tmp_path / "moved")
        folder.symlink_to(impostor, target_is_directory=True)
        return fetched

    monkeypatch.setattr(convert, "fetch_release", fetch_then_swap)
    out = tmp_path / "out"
    cache_dir = str(tmp_path / "cache")
    assert (
        cli.main(
            [
                "convert",
                "--release",
                "original",
                "--base-url",
                server.url,
                "--cache-dir",
                cache_dir,
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert folder.is_symlink()
    metadata = json.loads((out / "conversion_metadata.json").read_text())
    assert metadata["sha256"] == {
        release.filename(role): hashlib.sha256(data).hexdigest()
        for role, data in (("options", synthetic_files[1]), ("weights", synthetic_files[2]))
    }
    config = convert.convert_config(dict(synthetic_files[0]))
    genuine = convert.convert_state_dict(tmp_path / "moved" / release.filename("weights"), config)
    other = convert.convert_state_dict(impostor / release.filename("weights"), config)
    written = load_file(out / "model.safetensors")
    assert set(genuine) <= set(written)
    # exact by construction: the conversion copies and reshapes the HDF5 arrays (no arithmetic), in this process
    assert all(torch.equal(written[name], genuine[name]) for name in genuine)
    assert not torch.equal(written["char_encoder.projection.weight"], other["char_encoder.projection.weight"])


def test_a_damaged_cached_weight_file_read_through_its_open_descriptor_is_named_by_its_cache_path(
    server, served, release, tmp_path, synthetic_files
):
    """The conversion reads the cached files through the descriptors held open since the check; a weight file that
    passes the size check but is no HDF5 is still named by its path in the cache, not by ``/proc/self/fd/N``."""
    folder = _cache(tmp_path, release)
    folder.mkdir(parents=True)
    (folder / release.filename("options")).write_bytes(synthetic_files[1])
    weights = folder / release.filename("weights")
    weights.write_bytes(b"\0" * len(synthetic_files[2]))  # a plausible size, no HDF5 signature
    with pytest.raises(SystemExit) as exit_:
        cli.main(_convert_argv(server, tmp_path))
    message = str(exit_.value.code)
    assert message.startswith(f"elmo convert: error: weights file {str(weights)!r} cannot be read as HDF5"), message
    assert "/proc/" not in message and "\n" not in message
    assert server.requests == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("planted", ["FIFO", "folder", "hard link"])
def test_a_fifo_a_folder_or_a_hard_link_at_the_cache_lock_is_refused_naming_it(
    server, served, release, tmp_path, planted
):
    """The ``.<release>.lock`` file beside the cache folder is opened without following a link (a link there:
    `test_links_planted_for_the_record_the_cached_file_the_lock_or_the_release_folder_are_refused`), must be a regular
    file (a FIFO is not waited on) and have one name (a hard link to another user's file is not opened for writing)."""
    folder = _cache(tmp_path, release)
    folder.mkdir(parents=True)
    lock = folder.with_name(f".{folder.name}.lock")
    victim = tmp_path / "victim"
    victim.write_text("another user's file")
    if planted == "FIFO":
        os.mkfifo(lock)
        problem = "is a FIFO, not a regular file"
    elif planted == "folder":
        lock.mkdir()
        problem = "is a folder, not a regular file"
    else:
        os.link(victim, lock)
        problem = "is a hard link to another file (2 names share it)"
    with pytest.raises(SystemExit) as exit_:
        cli.main(_convert_argv(server, tmp_path))
    message = str(exit_.value.code)
    assert message.startswith(f"elmo convert: error: the cache's lock file {str(lock)!r} {problem}; refusing"), message
    assert "\n" not in message
    assert victim.read_text() == "another user's file"
    assert server.requests == [] and list(folder.iterdir()) == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("same_file_system", [True, False], ids=["renamed", "copied across file systems"])
def test_a_file_staged_outside_the_cache_is_installed_in_the_folder_as_opened(tmp_path, monkeypatch, same_file_system):
    """The Hub mirror's file (staged outside the cache, since the Hub client writes by path) reaches the folder that
    was opened, even once its path leads elsewhere; across file systems through a fresh temporary, none left."""
    import errno

    folder, outside = tmp_path / "cache", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    staged = tmp_path / "staging" / "weights.hdf5"
    staged.parent.mkdir()
    staged.write_bytes(b"w" * 3_000_000)
    cache = cache_folder.CacheFolder(folder)
    folder.rename(tmp_path / "moved")
    folder.symlink_to(outside, target_is_directory=True)
    if not same_file_system:
        real_replace = os.replace

        def across(src, dst, **where):
            if where.get("src_dir_fd") is None:
                raise OSError(errno.EXDEV, "Invalid cross-device link")
            return real_replace(src, dst, **where)

        monkeypatch.setattr(download.os, "replace", across)
    try:
        cache.install(staged, "weights.hdf5")
    finally:
        cache.close()
    assert os.listdir(tmp_path / "moved") == ["weights.hdf5"] and list(outside.iterdir()) == []
    assert (tmp_path / "moved" / "weights.hdf5").read_bytes() == b"w" * 3_000_000


def test_an_atomic_write_in_the_cache_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "x.source").write_text("old\n")
    cache = cache_folder.CacheFolder(folder)

    def blocks():
        yield b"new"
        raise OSError(28, "No space left on device")

    try:
        with pytest.raises(OSError, match="No space left"):
            cache.write_atomic("x.source", blocks())
    finally:
        cache.close()
    assert os.listdir(folder) == ["x.source"] and (folder / "x.source").read_text() == "old\n"


@pytest.mark.parametrize("server_resumes", [True, False], ids=["server honours Range", "server ignores Range"])
def test_a_part_that_is_a_hard_link_to_another_file_never_changes_that_file(
    server, served, release, tmp_path, synthetic_files, server_resumes
):
    """X9, X10: the `.part` name is reused to resume, so a hard link there is refused where it would be written; a
    download that starts over writes a new file under the name."""
    server.ignore_range = not server_resumes
    folder = _cache(tmp_path, release)
    folder.mkdir(parents=True)
    victim = tmp_path / "other-user" / "notes.txt"
    victim.parent.mkdir()
    victim.write_bytes(synthetic_files[1][:40])  # looks like the start of the file
    part = folder / (release.filename("options") + ".part")
    os.link(victim, part)
    record = {"url": release.url("options", server.url), "etag": server.etag(synthetic_files[1])}
    record["last_modified"] = "Wed, 01 Feb 2018 00:00:00 GMT"
    (folder / (part.name + ".json")).write_text(json.dumps(record))
    if server_resumes:
        with pytest.raises(ValueError) as raised:
            fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
        assert str(raised.value) == (
            f"the partial download {str(part)!r} is a hard link to another file (2 names share it); refusing to "
            "write through it (remove it if it is not yours to keep)."
        )
    else:
        fetched = fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
        assert fetched.paths["options"].read_bytes() == synthetic_files[1]
    assert victim.read_bytes() == synthetic_files[1][:40] and os.stat(victim).st_nlink == (2 if server_resumes else 1)


def test_a_lock_held_by_another_process_is_waited_for_with_a_line_naming_it_and_then_given_up(
    server, served, release, tmp_path, monkeypatch, caplog
):
    """A shared `flock` held on the cache's lock (another user's process): a line says who holds it, and the wait
    ends with one line after `LOCK_WAIT_SECONDS`."""
    import fcntl

    folder = _cache(tmp_path, release)
    folder.mkdir(parents=True)
    lock = folder.with_name(f".{folder.name}.lock")
    monkeypatch.setattr(cache_folder, "LOCK_WAIT_SECONDS", 1.0)
    with open(lock, "w") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_SH)
        with caplog.at_level(logging.WARNING), pytest.raises(DownloadError) as raised:
            fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
    holder = f"process {os.getpid()} of user "
    assert f"waiting for {holder}" in caplog.text and "(shared lock)" in caplog.text
    assert str(raised.value).startswith(f"gave up after 1 s waiting for {holder}")
    assert f"which holds {lock}, the lock of the release cache {folder}" in str(raised.value)
    assert server.requests == []


def test_a_download_record_is_written_without_a_temporary_a_kill_could_leave(
    server, served, release, tmp_path, synthetic_files, monkeypatch
):
    """The ``.part.json`` record is created where the old one was just removed (``O_EXCL``, flushed), not renamed
    from a temporary: a run killed just after writing it leaves the record and no ``.NAME.part.json.TOKEN.tmp``
    that nothing could prove to be the download's; the next run ends with the cache it would have written."""
    from modeling_elmo.folders import files

    real, renamed = files.replace, []

    def replace(source, target, **where):
        if ".part.json" in os.fspath(target):
            renamed.append(target)
        real(source, target, **where)

    monkeypatch.setattr(files, "replace", replace)
    part = _interrupt(server, served, release, tmp_path, 15_000)
    assert renamed == [] and Path(str(part) + ".json").is_file()
    assert not [p.name for p in _cache(tmp_path, release).iterdir() if files.TEMPORARY_FILE.fullmatch(p.name)]
