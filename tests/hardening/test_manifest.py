"""`modeling_elmo.folders.manifest`: a folder may be replaced by a command only when everything in it is recorded in
that command's manifest, as it wrote it (size and sha256); the output is checked again at the moment it is replaced, and
one command at a time holds it; what a killed run left beside the output (proven ours by a marker file, never by a
name) is finished or undone by the next command on it, with a line."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys

import pytest
from support import left_by_a_killed_run, lock_held_elsewhere, plant

from modeling_elmo.folders import manifest as manifest_module
from modeling_elmo.folders.manifest import (
    ASIDE,
    MANIFEST,
    TEMPORARY_MARKER,
    check_replaceable,
    foreign_files,
    install_folder,
    new_temporary,
    output_lock,
    read_manifest,
    recover_interrupted,
    write_manifest,
)
from modeling_elmo.folders.output_folder import write_folder_atomically


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


def _left_by_a_killed_run(monkeypatch, output, kind, command="elmo convert", *, content=True):
    return left_by_a_killed_run(output, kind, command, content=content)


def _users_own_folders(tmp_path):
    """Folders of the user beside the output whose names look like temporaries (L7, L8)."""
    folders = {
        ".out.old-2023-12-31": "my backup of December",
        ".out.staging-1999-draft": "my draft",
        ".out.converting-999999999-abc": "named like one, no marker",
    }
    for name, text in folders.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text(text)
    return folders


def _assert_users_folders_intact(tmp_path, folders):
    for name, text in folders.items():
        assert (tmp_path / name / "notes.txt").read_text() == text, name


def test_only_temporaries_proven_ours_by_their_marker_are_ever_removed(tmp_path, monkeypatch):
    out = tmp_path / "out"
    users = _users_own_folders(tmp_path)
    ours = _left_by_a_killed_run(monkeypatch, out, "converting")
    (ours / "model.safetensors").write_bytes(b"whole")
    write_manifest(ours, "elmo convert", ["model.safetensors"])  # killed once its files were recorded
    half = _left_by_a_killed_run(monkeypatch, out, "converting")
    (half / "model.safetensors").write_bytes(b"half")  # killed before: nothing proves all of it is the run's
    forged = {}  # a marker that proves nothing: a link, a hard link, another output's, another process's
    for label in ("link", "hard link", "other output", "other process"):
        folder = tmp_path / f".out.converting-999999999-{label.replace(' ', '')}"
        folder.mkdir()
        record = {"command": "elmo convert", "kind": "converting", "output": "out", "pid": 999_999_999}
        if label == "other output":
            record["output"] = "other"
        if label == "other process":
            record["pid"] = 7
        (folder / "notes.txt").write_text(label)
        marker = folder / TEMPORARY_MARKER
        if label == "link":
            (tmp_path / "elsewhere.json").write_text(json.dumps(record))
            marker.symlink_to(tmp_path / "elsewhere.json")
        else:
            marker.write_text(json.dumps(record))
        if label == "hard link":
            os.link(marker, tmp_path / "second-name.json")
        forged[folder.name] = label
    mine = new_temporary(out, "converting", "elmo convert")  # this process's own, at work: left alone
    said = recover_interrupted(out)
    assert f"removed the unfinished output of an interrupted elmo convert run: {str(ours.parent)!r}." in said
    assert (
        f"{str(half.parent)!r}, the unfinished output of an interrupted elmo convert run, holds 'model.safetensors', "
        "which no record of it lists; it was left alone: remove it yourself if it is not yours."
    ) in said
    old_format = tmp_path / ".out.converting-999999999-otherprocess"  # pid 7: an earlier version's marker
    assert (
        f"{str(old_format)!r} looks like a temporary folder of an interrupted elmo convert run, but its marker is of "
        "an earlier version, which does not prove it; it was left alone: remove it yourself if it is not yours."
    ) in said
    assert len(said) == 3, said
    assert not ours.parent.exists() and mine.is_dir() and (half / "model.safetensors").read_bytes() == b"half"
    _assert_users_folders_intact(tmp_path, users)
    for name, label in forged.items():
        assert (tmp_path / name / "notes.txt").read_text() == label


def test_an_earlier_output_moved_aside_by_a_killed_run_is_put_back_with_a_line(tmp_path, monkeypatch, caplog):
    out = tmp_path / "out"
    users = _users_own_folders(tmp_path)
    aside = _left_by_a_killed_run(monkeypatch, out, ASIDE, content=False)
    earlier = _folder(tmp_path, "model.bin")
    write_manifest(earlier, "elmo convert", ["model.bin"])
    os.rename(earlier, aside)  # killed right after moving the earlier output aside (L4)
    unfinished = _left_by_a_killed_run(monkeypatch, out, "converting")
    (unfinished / "model.bin").write_text("new")
    write_manifest(unfinished, "elmo convert", ["model.bin"])  # killed once its files were recorded
    with caplog.at_level(logging.WARNING), output_lock(out, "elmo convert"):
        pass
    assert (out / "model.bin").read_text() == "x" and not foreign_files(out, "elmo convert")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", *users])
    assert f"elmo convert was interrupted while replacing '{out}': the earlier output" in caplog.text
    assert "is back in place" in caplog.text
    _assert_users_folders_intact(tmp_path, users)


def test_a_swap_killed_after_the_new_output_took_the_name_is_finished_with_a_line(tmp_path, monkeypatch):
    out = tmp_path / "out"
    aside = _left_by_a_killed_run(monkeypatch, out, ASIDE, content=False)
    earlier = _folder(tmp_path, "model.bin")
    write_manifest(earlier, "elmo convert", ["model.bin"])  # an output is moved aside only once it proved replaceable
    os.rename(earlier, aside)
    new = tmp_path / "new"
    new.mkdir()
    (new / "model.bin").write_text("new")
    write_manifest(new, "elmo convert", ["model.bin"])
    os.rename(new, out)
    (said,) = recover_interrupted(out)
    assert said.startswith(f"elmo convert was interrupted after replacing '{out}': the earlier output it had replaced")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and (out / "model.bin").read_text() == "new"


def test_an_earlier_output_is_kept_aside_when_the_name_holds_something_else(tmp_path, monkeypatch):
    out = tmp_path / "out"
    aside = _left_by_a_killed_run(monkeypatch, out, ASIDE, content=False)
    os.rename(_folder(tmp_path, "model.bin"), aside)
    out.mkdir()
    (out / "notes.txt").write_text("the user's, made since")
    for _ in range(2):  # said again on every run until the user decides; nothing deleted
        (said,) = recover_interrupted(out)
        assert f"the earlier output is kept in {str(aside)!r}; nothing was deleted" in said
    assert (aside / "model.bin").read_text() == "x" and (out / "notes.txt").read_text() == "the user's, made since"


def _moved_aside_by_a_killed_run(tmp_path, out, command="elmo convert"):
    """An earlier output of ``command`` (its manifest, as `install_folder` requires) moved aside by a killed swap."""
    aside = left_by_a_killed_run(out, ASIDE, command, content=False)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "model.bin").write_text("earlier")
    write_manifest(earlier, command, ["model.bin"])
    os.rename(earlier, aside)
    return aside


def test_an_earlier_output_moved_aside_comes_back_when_the_name_holds_an_empty_folder(tmp_path):
    """Attacker pass on L4-L6: a script's ``mkdir -p out`` between the killed swap and the next run is no output; the
    earlier output was deleted as if the swap had finished."""
    out = tmp_path / "out"
    _moved_aside_by_a_killed_run(tmp_path, out)
    out.mkdir()
    (said,) = recover_interrupted(out)
    assert "is back in place" in said
    assert (out / "model.bin").read_text() == "earlier" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("holder", ["a manifest recording nothing", "another command's output", "no manifest"])
def test_an_earlier_output_is_removed_only_once_a_complete_output_of_its_command_holds_the_name(tmp_path, holder):
    out = tmp_path / "out"
    aside = _moved_aside_by_a_killed_run(tmp_path, out)
    out.mkdir()
    if holder == "a manifest recording nothing":
        write_manifest(out, "elmo convert", [])
    else:
        (out / "model.bin").write_text("new")
        if holder == "another command's output":
            write_manifest(out, "elmo push", ["model.bin"])
    for _ in range(2):
        (said,) = recover_interrupted(out)
        assert f"the earlier output is kept in {str(aside)!r}; nothing was deleted" in said
    assert (aside / "model.bin").read_text() == "earlier"


def test_files_added_to_an_earlier_output_moved_aside_are_kept_with_a_line(tmp_path):
    """A user who found the aside folder after the kill and put notes into it: the finished swap must not delete them
    with the earlier output."""
    out = tmp_path / "out"
    aside = _moved_aside_by_a_killed_run(tmp_path, out)
    (aside / "notes.txt").write_text("the user's, written since")
    new = tmp_path / "new"
    new.mkdir()
    (new / "model.bin").write_text("new")
    write_manifest(new, "elmo convert", ["model.bin"])
    os.rename(new, out)
    (said,) = recover_interrupted(out)
    assert "the earlier output holds 'notes.txt', which it did not write" in said and "nothing was deleted" in said
    assert (aside / "notes.txt").exists() and (aside / "model.bin").read_text() == "earlier"


def test_a_copy_of_a_temporary_under_another_name_is_the_users(tmp_path):
    """``cp -a .out.old-PID-xxxxxxxx .out.old-PID-mybackup``: the copy carries the marker but not its own name."""
    out = tmp_path / "out"
    aside = _moved_aside_by_a_killed_run(tmp_path, out)
    backup = aside.parent.with_name(aside.parent.name.rsplit("-", 1)[0] + "-mybackup")
    shutil.copytree(aside.parent, backup)
    new = tmp_path / "new"
    new.mkdir()
    (new / "model.bin").write_text("new")
    write_manifest(new, "elmo convert", ["model.bin"])
    os.rename(new, out)
    removed, left = sorted(recover_interrupted(out), key=lambda line: str(backup) in line)
    assert str(aside) in removed and str(backup) not in removed
    assert left == (
        f"{str(backup)!r} looks like a temporary folder of an interrupted elmo convert run, but its marker names "
        "another folder, process or token than its name; it was left alone: remove it yourself if it is not yours."
    )
    assert (backup / "content" / "model.bin").read_text() == "earlier" and not aside.parent.exists()


def test_a_killed_runs_temporaries_are_recovered_even_under_this_processs_own_id(tmp_path):
    """In a container every run may have the same small process id: a run is told by its marker's random token."""
    out = tmp_path / "out"
    aside = left_by_a_killed_run(out, ASIDE, "elmo push", content=False, pid=os.getpid())
    os.rename(_folder(tmp_path, "model.bin"), aside)
    (said,) = recover_interrupted(out)
    assert "elmo push was interrupted while replacing" in said and (out / "model.bin").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_file_put_in_place_of_the_aside_folder_is_kept_with_a_line(tmp_path):
    out = tmp_path / "out"
    aside = left_by_a_killed_run(out, ASIDE, "elmo convert", content=False)
    aside.write_text("not a folder")
    (said,) = recover_interrupted(out)
    assert "holds something it did not put there" in said and aside.read_text() == "not a folder"


@pytest.mark.parametrize("planted", ["aside content", "aside folder", "marker"])
def test_a_link_planted_in_a_temporary_is_never_followed(tmp_path, monkeypatch, planted):
    out = tmp_path / "out"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.txt").write_text("another user's work")
    aside = _left_by_a_killed_run(monkeypatch, out, ASIDE, content=False)
    if planted == "aside content":
        aside.symlink_to(victim, target_is_directory=True)
    elif planted == "aside folder":
        os.unlink(aside.parent / TEMPORARY_MARKER)
        os.rmdir(aside.parent)
        aside.parent.symlink_to(victim, target_is_directory=True)
    else:
        os.unlink(aside.parent / TEMPORARY_MARKER)
        (aside.parent / TEMPORARY_MARKER).symlink_to(victim / "thesis.txt")
    recover_interrupted(out)
    assert not os.path.lexists(out)  # nothing put in place from a link
    assert [p.name for p in victim.iterdir()] == ["thesis.txt"]
    assert (victim / "thesis.txt").read_text() == "another user's work"


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
    busy = f"another elmo convert run is writing '{out}' \\(it holds '{out}.lock'\\)"
    with lock_held_elsewhere(out, "elmo convert"), pytest.raises(ValueError, match=busy):
        with output_lock(out, "elmo convert"):
            pass
    with output_lock(out, "elmo convert"), output_lock(out, "elmo convert"):  # re-entrant within one call chain
        assert (tmp_path / "new" / "out.lock").is_file()
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == []


def test_a_command_losing_the_lock_race_names_the_command_that_holds_it(tmp_path):
    out = tmp_path / "out"
    with lock_held_elsewhere(out, "elmo push"):
        with pytest.raises(ValueError, match=f"^another elmo push run is writing '{out}'"):
            with output_lock(out, "elmo convert"):
                pass


@pytest.mark.parametrize("output", [".", "/", "..", "out/.."])
def test_an_output_naming_the_current_folder_or_the_root_is_refused_in_words(tmp_path, monkeypatch, output):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as raised:
        with output_lock(output, "elmo convert"):
            pytest.fail("the lock was taken")
    assert str(raised.value).startswith(f"output folder {output!r} names the current folder, its parent or the root")
    assert "empty name" not in str(raised.value) and list(tmp_path.iterdir()) == []


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


# ----------------------------------------------------------------------------------------------- killed at each step
_KILLED_AT_STEP_K = """
import os, signal, sys
from pathlib import Path
from modeling_elmo.folders.manifest import output_lock
from modeling_elmo.folders.output_folder import COMMAND, write_folder_atomically

out, kill_at, steps = Path(sys.argv[1]), int(sys.argv[2]), [0]

def counted(name):
    real = getattr(os, name)
    def step(*args, **kwargs):
        steps[0] += 1
        if steps[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return step

def fill(folder):
    (folder / "model.bin").write_text("new")
    (folder / "sub").mkdir()
    (folder / "sub" / "a.txt").write_text("new a")
    for name in ("open", "mkdir", "rename", "replace", "unlink", "rmdir"):  # every step of the swap from here on
        setattr(os, name, counted(name))

with output_lock(out, COMMAND):
    write_folder_atomically(out, fill, overwrite=True)
print("finished after", steps[0], "steps")
"""


def _write_earlier_output(out):
    def fill(folder):
        (folder / "model.bin").write_text("old")
        (folder / "notes").mkdir()
        (folder / "notes" / "b.txt").write_text("old b")

    write_folder_atomically(out, fill)


@pytest.mark.slow
def test_a_swap_killed_at_any_step_is_finished_or_undone_by_the_next_run_and_nothing_else_is_touched(tmp_path, caplog):
    """L4-L8: `kill -9` before each file-system step of replacing an output (the manifest, the aside folder and its
    marker, each rename, each removal): the next run (here one that then fails) finds either the earlier output or the
    new one complete under the output's name, says so when it had to finish or undo something, leaves no temporary,
    and never touches the user's folders named like temporaries."""
    out = tmp_path / "out"
    users = _users_own_folders(tmp_path)
    outcomes = []
    for kill_at in range(1, 200):
        if out.exists():
            shutil.rmtree(out)
        _write_earlier_output(out)
        done = subprocess.run(
            [sys.executable, "-c", _KILLED_AT_STEP_K, str(out), str(kill_at)], capture_output=True, text=True
        )
        if done.returncode == 0:
            assert "finished after" in done.stdout
            break
        assert done.returncode == -signal.SIGKILL, done.stderr
        moved_aside = any(p.name.startswith(".out.old-") and (p / "content").exists() for p in tmp_path.iterdir())
        caplog.clear()

        def fails(folder):
            raise ValueError("the next run fails late")

        with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="fails late"):
            with output_lock(out, "elmo convert"):  # as `elmo convert` runs it
                write_folder_atomically(out, fails, overwrite=True)
        kept = (out / "model.bin").read_text()
        assert kept in ("old", "new"), kill_at
        assert not foreign_files(out, "elmo convert"), kill_at  # complete, as its command wrote it
        for left in [p for p in tmp_path.iterdir() if p.name.startswith(".out.converting-") and p.name not in users]:
            # killed before the new folder's files were recorded: nothing proves all of it is the run's, so it is
            # left alone with one line naming it (and the user removes it, as the line says)
            assert f"{str(left)!r}, the unfinished output of an interrupted elmo convert run, holds" in caplog.text
            assert "it was left alone: remove it yourself if it is not yours." in caplog.text, kill_at
            assert (left / "content" / "model.bin").read_text() == "new", kill_at
            shutil.rmtree(left)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", *users]), kill_at
        if moved_aside:
            assert "was interrupted" in caplog.text, kill_at
        outcomes.append(kept)
        _assert_users_folders_intact(tmp_path, users)
    else:
        pytest.fail("the swap never finished")
    assert (out / "model.bin").read_text() == "new"
    assert "old" in outcomes and "new" in outcomes and len(outcomes) > 10  # killed before and after the swap
    _assert_users_folders_intact(tmp_path, users)
