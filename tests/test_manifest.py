"""`modeling_elmo.manifest`: a folder may be replaced by a command only when everything in it is recorded in that
command's manifest; temporary folders of processes that no longer run are removed, those of live ones kept."""

from __future__ import annotations

import json
import os

import pytest

from modeling_elmo.manifest import (
    MANIFEST,
    check_replaceable,
    foreign_files,
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
    assert read_manifest(folder) == {"command": "elmo push", "files": ["a.json", "plots/b.png"]}
    assert foreign_files(folder, "elmo push") == []
    check_replaceable(folder, "elmo push", "output folder 'out'")
    check_replaceable(tmp_path / "missing", "elmo push", "output folder 'missing'")


@pytest.mark.parametrize("extra,manifest,message", [
    (["notes.txt"], ("elmo push", ["a.json"]), "elmo push did not write 'notes.txt'"),
    (["sub/deep/notes.txt"], ("elmo push", ["a.json"]), "elmo push did not write 'sub/deep/notes.txt'"),
    ([], ("elmo convert", ["a.json"]), "it was written by elmo convert"),
    ([], None, "elmo push did not write 'a.json'"),
])
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
