"""`modeling_elmo.folders.manifest`: a folder may be replaced by a command only when everything in it is recorded in
that command's manifest, as it wrote it (size and sha256); the output is checked again at the moment it is replaced, and
one command at a time holds it; temporary folders of processes that no longer run are removed, those of live ones
kept."""

from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest
from support import plant

from modeling_elmo.folders.manifest import (
    MANIFEST,
    check_replaceable,
    foreign_files,
    install_folder,
    output_lock,
    read_manifest,
    remove_stale_temporaries,
    temporary_prefix,
    write_manifest,
)


def _folder(tmp_path, *names):
    folder = tmp_path / "out"
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    return folder


def test_a_folder_holding_only_its_recorded_files_may_be_replaced(tmp_path):
    folder = _folder(tmp_path, "a.json", "plots/b.png")
    write_manifest(folder, "elmo push", ["a.json", "plots/b.png"])
    digest = hashlib.sha256(b"x").hexdigest()
    assert read_manifest(folder) == {
        "command": "elmo push",
        "files": {"a.json": {"bytes": 1, "sha256": digest}, "plots/b.png": {"bytes": 1, "sha256": digest}},
    }
    assert foreign_files(folder, "elmo push") == []
    check_replaceable(folder, "elmo push", "output folder 'out'")
    check_replaceable(tmp_path / "missing", "elmo push", "output folder 'missing'")


@pytest.mark.parametrize(
    "extra,manifest,message",
    [
        (["notes.txt"], ("elmo push", ["a.json"]), "elmo push did not write 'notes.txt'"),
        (["sub/deep/notes.txt"], ("elmo push", ["a.json"]), "elmo push did not write 'sub/deep/notes.txt'"),
        ([], ("elmo convert", ["a.json"]), "it was written by elmo convert"),
        ([], None, "elmo push did not write 'a.json'"),
    ],
)
def test_anything_not_recorded_by_the_same_command_is_refused_naming_it(tmp_path, extra, manifest, message):
    folder = _folder(tmp_path, "a.json", *extra)
    if manifest:
        write_manifest(folder, *manifest)
    with pytest.raises(ValueError, match=message):
        check_replaceable(folder, "elmo push", "output folder 'out'")


def test_an_empty_subfolder_and_a_link_are_entries_too(tmp_path):
    folder = _folder(tmp_path, "a.json")
    (folder / "empty").mkdir()
    (folder / "link").symlink_to(tmp_path)
    write_manifest(folder, "elmo push", ["a.json"])
    assert foreign_files(folder, "elmo push") == ["empty/", "link"]


def test_a_manifest_that_is_not_one_records_nothing(tmp_path):
    folder = _folder(tmp_path, "a.json")
    (folder / MANIFEST).write_text(json.dumps({"command": "elmo push", "files": "a.json"}))
    assert read_manifest(folder) is None
    assert foreign_files(folder, "elmo push") == [MANIFEST, "a.json"]


def test_only_the_temporary_folders_of_dead_processes_are_removed(tmp_path):
    output = tmp_path / "out"
    mine = tmp_path / (temporary_prefix(output, "staging") + "abc")
    dead = tmp_path / ".out.staging-999999999-abc"
    other_kind = tmp_path / ".out.backup-999999999-abc"
    other_output = tmp_path / ".other.staging-999999999-abc"
    for path in (mine, dead, other_kind, other_output):
        path.mkdir()
    assert mine.name.startswith(f".out.staging-{os.getpid()}-")
    assert remove_stale_temporaries(output, ["staging", "old"]) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (mine, other_kind, other_output))


# ----------------------------------------------------------------------------------------------- records, not names
def test_a_recorded_file_the_user_edited_is_the_users_and_is_refused_naming_it(tmp_path):
    folder = _folder(tmp_path, "README.md", "a.json")
    write_manifest(folder, "elmo convert", ["README.md", "a.json"])
    (folder / "README.md").write_text("my own notes on this model")
    assert foreign_files(folder, "elmo convert") == ["README.md"]
    with pytest.raises(ValueError, match="'README.md' differs from what elmo convert wrote: changed since"):
        check_replaceable(folder, "elmo convert", "output folder 'out'")


def test_a_manifest_listing_a_file_the_command_did_not_write_never_makes_it_replaceable(tmp_path):
    folder = _folder(tmp_path, "a.json")
    write_manifest(folder, "elmo convert", ["a.json"])
    (folder / "notes.txt").write_text("the user's notes")
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"]["notes.txt"] = {"bytes": 1, "sha256": hashlib.sha256(b"x").hexdigest()}  # a forged record
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="'notes.txt' differs from what elmo convert wrote"):
        check_replaceable(folder, "elmo convert", "output folder 'out'")
    (folder / MANIFEST).write_text(json.dumps({"command": "elmo convert", "files": ["a.json", "notes.txt"]}))
    with pytest.raises(ValueError, match="its manifest lists 'a.json' .and 1 more. without a size and sha256"):
        check_replaceable(folder, "elmo convert", "output folder 'out'")
    assert (folder / "notes.txt").read_text() == "the user's notes"


# ------------------------------------------------------------------------------------------- the moment of replacing
def _staging(tmp_path, command="elmo convert"):
    staging = tmp_path / ".out.converting-1-x"
    staging.mkdir()
    (staging / "model.bin").write_text("new")
    write_manifest(staging, command, ["model.bin"])
    return staging


def test_an_output_that_appeared_while_the_command_worked_is_never_replaced(tmp_path):
    staging = _staging(tmp_path)
    out = _folder(tmp_path, "notes.txt")  # created by the user after the start-up check
    with pytest.raises(
        ValueError,
        match=r"output folder '.*out' appeared while elmo convert worked and is not empty "
        r"\(it holds 'notes.txt'\); nothing was replaced",
    ):
        install_folder(staging, out, "elmo convert", overwrite=False)
    with pytest.raises(ValueError, match="elmo convert did not write 'notes.txt'"):
        install_folder(staging, out, "elmo convert", overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (staging / "model.bin").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.converting-1-x", "out"]  # no temporary left


def test_an_empty_or_missing_output_and_an_earlier_runs_own_output_are_replaced(tmp_path):
    out = tmp_path / "out"
    install_folder(_staging(tmp_path), out, "elmo convert", overwrite=False)
    assert (out / "model.bin").read_text() == "new"
    staging = _staging(tmp_path)
    (staging / "model.bin").write_text("newer")
    write_manifest(staging, "elmo convert", ["model.bin"])
    install_folder(staging, out, "elmo convert", overwrite=True)
    assert (out / "model.bin").read_text() == "newer" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_file_added_after_the_check_is_found_once_the_output_is_moved_aside_and_kept(tmp_path, monkeypatch):
    from modeling_elmo.folders import manifest as manifest_module

    out = tmp_path / "out"
    install_folder(_staging(tmp_path), out, "elmo convert", overwrite=False)
    checks = []
    original = manifest_module.check_replaceable

    def user_writes_after_the_first_check(folder, command, what):
        original(folder, command, what)
        checks.append(folder)
        if len(checks) == 1:
            (out / "notes.txt").write_text("written just now")

    monkeypatch.setattr(manifest_module, "check_replaceable", user_writes_after_the_first_check)
    with pytest.raises(ValueError, match="elmo convert did not write 'notes.txt'"):
        install_folder(_staging(tmp_path), out, "elmo convert", overwrite=True)
    assert (out / "notes.txt").read_text() == "written just now" and (out / "model.bin").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.converting-1-x", "out"]


# ----------------------------------------------------------------------------------------------- one writer
def test_a_second_command_on_a_held_output_is_refused_at_once(tmp_path):
    out = tmp_path / "new" / "out"
    held, release = threading.Event(), threading.Event()

    def hold():
        with output_lock(out, "elmo convert"):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(30)
        busy = f"another elmo convert run is writing '{out}' \\(it holds '{out}.lock'\\)"
        with pytest.raises(ValueError, match=busy):
            with output_lock(out, "elmo convert"):
                pass
    finally:
        release.set()
        thread.join(30)
    with output_lock(out, "elmo convert"), output_lock(out, "elmo convert"):  # re-entrant within one call chain
        assert (tmp_path / "new" / "out.lock").is_file()
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == []


@pytest.mark.parametrize("planted", ["link to a file outside", "dangling link", "FIFO"])
def test_a_lock_planted_as_a_link_or_fifo_is_refused_in_one_line_and_nothing_is_written_outside(tmp_path, planted):
    out = tmp_path / "out"
    lock = tmp_path / "out.lock"
    outside = tmp_path / "elsewhere" / "victim.txt"
    kind = plant(lock, planted, outside)
    with pytest.raises(ValueError) as raised:
        with output_lock(out, "elmo convert"):
            pytest.fail("the lock was taken")
    assert str(raised.value) == (
        f"cannot write next to the output folder '{out}': lock file '{lock}' is {kind}, not "
        "a regular file; refusing to use it (remove it if it is not yours to keep)."
    )
    assert os.path.lexists(lock) and not out.exists()
    assert [p.read_text() for p in outside.parent.iterdir()] == (
        ["another user's file"] if planted == "link to a file outside" else []
    )


def test_an_output_replaced_by_a_link_meanwhile_is_refused_and_the_links_folder_untouched(tmp_path):
    staging = _staging(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "thesis.txt").write_text("another user's work")
    (tmp_path / "out").symlink_to(elsewhere, target_is_directory=True)
    for overwrite in (False, True):
        with pytest.raises(ValueError, match=r"output folder '.*out' is now a link; nothing was replaced"):
            install_folder(staging, tmp_path / "out", "elmo convert", overwrite=overwrite)
    assert (tmp_path / "out").is_symlink() and [p.name for p in elsewhere.iterdir()] == ["thesis.txt"]
