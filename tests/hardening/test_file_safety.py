"""`modeling_elmo.folders`, the one home of every file-system change of the package: the naming of temporaries and
atomic writes (`files`), the lock (`locks`), the link rule of the opener (`opening`), and the deletion rule of what a
killed run left (a marker that names its folder and token, a process proven gone, content exactly as recorded); and
that no module outside `modeling_elmo.folders.files` renames or removes anything itself."""

from __future__ import annotations

import ast
import json
import logging
import os
from pathlib import Path

import numpy_reference as ref
import pytest
from support import left_by_a_killed_run

import modeling_elmo
from modeling_elmo.conversion.convert import main as convert_main
from modeling_elmo.folders import files, locks, opening
from modeling_elmo.folders.manifest import ASIDE, TEMPORARY_MARKER, recover_interrupted, write_manifest

PACKAGE = Path(modeling_elmo.__file__).parent
#: The modules allowed to make the calls that change the file system: the file-safety modules of
#: `modeling_elmo.folders` that do (the opener and the lock change nothing but through `files`).
_ALLOWED = {PACKAGE / "folders" / "files.py"}
#: The calls that change the file system, allowed in `_ALLOWED` only.
_MUTATIONS = {("os", "replace"), ("os", "rename"), ("os", "unlink"), ("os", "remove"), ("os", "rmdir")}
_MUTATIONS |= {("shutil", "rmtree"), ("shutil", "move")}
#: Method names that change the file system whatever they are called on (``Path.unlink``, ``Path.rmdir``,
#: ``Path.rename``, ``Path.replace`` with a path argument).
_METHODS = {"unlink", "rmdir", "rename"}


def _mutations(path: Path) -> list[str]:
    """``FILE:LINE: CALL`` for each call in ``path`` that renames or removes something."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imported = {}  # `from os import replace as r` -> r: ("os", "replace")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil"):
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module, alias.name)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        call = None
        if isinstance(function, ast.Attribute):
            if isinstance(function.value, ast.Name) and (function.value.id, function.attr) in _MUTATIONS:
                call = f"{function.value.id}.{function.attr}"
            elif function.attr in _METHODS:
                call = f".{function.attr}()"
            elif isinstance(function.value, ast.Name) and function.value.id in ("dataclasses", "copy"):
                pass  # dataclasses.replace: a new object, no file
            elif function.attr == "replace" and node.args and not isinstance(node.args[0], ast.Constant):
                # str.replace takes two strings; Path.replace one path: a call with a non-literal argument
                if len(node.args) == 1 and not node.keywords:
                    call = ".replace(path)"
        elif isinstance(function, ast.Name) and imported.get(function.id) in _MUTATIONS:
            call = "{}.{}".format(*imported[function.id])
        if call:
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {call}")
    return found


def test_no_file_mutation_outside_the_file_safety_module():
    """Every rename and removal of the package goes through `modeling_elmo.folders.files` (read with `ast`, so a
    comment or a string does not count and an alias does); the allowed modules are exactly those of
    `modeling_elmo.folders` that make such calls, each of them does."""
    outside = [found for path in sorted(PACKAGE.rglob("*.py")) if path not in _ALLOWED for found in _mutations(path)]
    assert outside == [], "file-system changes outside modeling_elmo/folders/files.py:\n" + "\n".join(outside)
    assert all(path.parent == PACKAGE / "folders" and _mutations(path) for path in _ALLOWED)


def test_the_scan_finds_each_kind_of_call_it_forbids(tmp_path, monkeypatch):
    """The scan is not blind: each forbidden form in a module is listed."""
    module = PACKAGE / "_scan_probe_for_the_test.py"
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: _PROBE if self == module else "")
    assert [line.split(": ", 1)[1] for line in _mutations(module)] == [
        "os.replace",
        "shutil.rmtree",
        ".unlink()",
        ".rmdir()",
        "os.rename",
        ".replace(path)",
    ]


_PROBE = """
import os, shutil
from os import rename as move_it
os.replace(a, b)
shutil.rmtree(c)
Path(d).unlink(missing_ok=True)
d.rmdir()
move_it(a, b)
p.replace(target)
"x".replace("a", "b")
"""


# ----------------------------------------------------------------------------------------------- names, writes
def test_temporaries_of_files_have_one_name_with_a_fresh_random_part(tmp_path):
    seen = set()
    for _ in range(3):
        with files.atomic_output(tmp_path / "model.safetensors") as temporary:
            match = files.TEMPORARY_FILE.fullmatch(temporary.name)
            assert match and match.group("name") == "model.safetensors" and len(match.group("token")) == 16
            seen.add(temporary.name)
            temporary.write_bytes(b"w")
    assert len(seen) == 3 and sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")

    def blocks():
        yield b"new"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        files.atomic_write_bytes(target, blocks())
    assert os.listdir(tmp_path) == ["a.json"] and target.read_text() == "old"
    with pytest.raises(RuntimeError), files.atomic_output(target, suffix=".png") as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("the writer failed")
    assert os.listdir(tmp_path) == ["a.json"] and target.read_text() == "old"


def test_folders_made_for_a_write_are_removed_again_only_while_empty(tmp_path):
    created = files.make_folders(tmp_path / "a" / "b" / "c")
    assert created == [tmp_path / "a" / "b" / "c", tmp_path / "a" / "b", tmp_path / "a"]
    (tmp_path / "a" / "mine.txt").write_text("mine")
    files.remove_empty_folders(created)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["mine.txt"]


def test_a_folder_this_process_did_not_make_is_never_removed_as_its_own(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir()
    with pytest.raises(ValueError, match="is not a folder this process made; refusing to remove it"):
        files.remove_own_folder(folder)
    assert folder.is_dir()
    own = files.new_private_folder("x", "mirror", tmp_path)
    assert files.temporary_folder_pattern("x").fullmatch(own.name)
    files.remove_own_folder(own)
    assert not own.exists()


# ----------------------------------------------------------------------------------------------- the opener
def test_a_hard_link_is_refused_for_reading_alone_as_for_writing(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("another user's file")
    inside = tmp_path / "folder" / "vocab.txt"
    inside.parent.mkdir()
    os.link(outside, inside)
    os.close(opening.open_regular(inside, os.O_RDONLY, "the file"))  # a plain read of one's own file: allowed
    with pytest.raises(ValueError) as raised:
        opening.open_regular(inside, os.O_RDONLY, "the model folder's file", alone=True)
    assert str(raised.value) == (
        f"the model folder's file {str(inside)!r} is a hard link (2 names share the file, which may lie outside "
        "the folder); refusing to read it through this name, as a symbolic link out of the folder is refused. "
        "Copy the file in if it belongs there."
    )
    with pytest.raises(ValueError, match="is a hard link to another file .2 names share it.; refusing to write"):
        opening.open_regular(inside, os.O_WRONLY, "the file")
    assert outside.read_text() == "another user's file"


# ----------------------------------------------------------------------------------------------- the lock
def test_the_lock_waits_saying_for_whom_and_then_gives_up_in_one_line(tmp_path, caplog):
    import fcntl

    lock = tmp_path / "x.lock"
    with open(lock, "w") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        with caplog.at_level(logging.WARNING), pytest.raises(TimeoutError, match="^gave up on process"):
            with locks.exclusive_lock(
                lock,
                "busy",
                wait=0.5,
                waiting_for="the lock of the test",
                gave_up=lambda holders: TimeoutError(f"gave up on {holders}"),
                keep_file=True,
            ):
                pytest.fail("the lock was taken")
    assert f"waiting for process {os.getpid()} of user " in caplog.text
    assert f"which holds {lock}, the lock of the test (giving up after 0 s)" in caplog.text
    with locks.exclusive_lock(lock, "busy", holder="elmo test"):  # free again: taken, and removed at the end
        assert lock.read_text() == "elmo test"
    assert not lock.exists()


# ----------------------------------------------------------------------------------------------- processes
def test_a_process_is_gone_only_when_its_id_is_free_or_belongs_to_a_later_start():
    start = files.process_start_time(os.getpid())
    assert isinstance(start, int)
    assert files.process_is_gone(os.getpid(), start) is False
    assert files.process_is_gone(os.getpid(), start + 1) is True  # the id was reused by this process
    assert files.process_is_gone(999_999_999, start) is True
    assert files.process_is_gone(os.getpid(), None) is None  # cannot tell: treated as running
    assert files.process_is_gone("42", start) is None


# ----------------------------------------------------------------------------------------------- the deletion rule
def _small_release(tmp_path: Path) -> tuple[str, str]:
    """A tiny model in the original release format (options.json, weights.hdf5) for ``elmo convert``."""
    folder = tmp_path / "release"
    folder.mkdir()
    options_path, weights_path = ref.write_original_files(folder, ref.tiny_options(), seed=0)
    return str(options_path), str(weights_path)


def _old_format_temporary(parent: Path, name: str, record: dict, content: dict[str, str]) -> Path:
    """A folder holding a marker of an earlier version (no token, folder or start time) and ``content``."""
    folder = parent / name
    (folder / "content").mkdir(parents=True)
    (folder / TEMPORARY_MARKER).write_text(json.dumps(record))
    for relative, text in content.items():
        (folder / "content" / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / "content" / relative).write_text(text)
    return folder


def test_a_temporary_whose_process_still_runs_or_cannot_be_told_is_left_alone(tmp_path, monkeypatch):
    out = tmp_path / "out"
    running = files.new_temporary(out, "converting", "elmo convert")  # this process's: it runs
    files._MADE.discard(os.fspath(running.parent))
    monkeypatch.setattr(files, "_run_token", lambda: "a later run")  # seen from another run
    (running / "model.bin").write_text("being written")
    write_manifest(running, "elmo convert", ["model.bin"])
    assert recover_interrupted(out) == [] and (running / "model.bin").is_file()
    monkeypatch.setattr(files, "process_start_time", lambda pid: None)  # no /proc to tell
    (said,) = recover_interrupted(out)
    assert said == (
        f"{str(running.parent)!r} looks like a temporary folder of an interrupted elmo convert run, but whether its "
        f"process {os.getpid()} has ended cannot be told (its start time cannot be read); it was left alone: remove "
        "it yourself if it is not yours."
    )
    assert (running / "model.bin").read_text() == "being written"


def test_l10_a_users_folder_with_a_marker_of_the_earlier_format_survives_a_convert(tmp_path, caplog):
    """L10: ``out/.res.converting-42-keepme/`` holding an earlier version's marker and ``content/mine.txt``."""
    options_path, weights_path = _small_release(tmp_path)
    parent = tmp_path / "out"
    parent.mkdir()
    record = {"command": "elmo convert", "kind": "converting", "output": "res", "pid": 42}
    users = _old_format_temporary(parent, ".res.converting-42-keepme", record, {"mine.txt": "mine"})
    with caplog.at_level(logging.WARNING):
        assert (
            convert_main(["--options", options_path, "--weights", weights_path, "--output", str(parent / "res")]) == 0
        )
    assert (users / "content" / "mine.txt").read_text() == "mine"
    lines = [r.getMessage() for r in caplog.records if str(users) in r.getMessage()]
    assert lines == [
        f"{str(users)!r} looks like a temporary folder of an interrupted elmo convert run, but its marker is of an "
        "earlier version, which does not prove it; it was left alone: remove it yourself if it is not yours."
    ]
    assert "removed the unfinished output" not in caplog.text


def test_l11_a_backup_with_an_earlier_formats_aside_marker_survives_convert_overwrite(tmp_path, caplog):
    """L11: the user's backup copy ``.three.old-44-keepme/content`` of a conversion, with a marker of kind ``old``
    of the earlier format; ``elmo convert --overwrite``."""
    options_path, weights_path = _small_release(tmp_path)
    out = tmp_path / "three"
    args = ["--options", options_path, "--weights", weights_path, "--output", str(out)]
    assert convert_main(args) == 0
    backup = tmp_path / ".three.old-44-keepme"
    (backup / "content").mkdir(parents=True)
    for path in out.iterdir():
        (backup / "content" / path.name).write_bytes(path.read_bytes())
    (backup / TEMPORARY_MARKER).write_text(
        json.dumps({"command": "elmo convert", "kind": ASIDE, "output": "three", "pid": 44})
    )
    kept = {p.name: p.read_bytes() for p in (backup / "content").iterdir()}
    with caplog.at_level(logging.WARNING):
        assert convert_main([*args, "--overwrite"]) == 0
    assert {p.name: p.read_bytes() for p in (backup / "content").iterdir()} == kept
    assert f"{str(backup)!r} looks like a temporary folder of an interrupted elmo convert run" in caplog.text
    assert "remove it yourself if it is not yours" in caplog.text and "as that run would have done" not in caplog.text


def test_a_forged_marker_of_the_current_format_on_a_live_or_named_folder_proves_nothing(tmp_path):
    """Attacker pass on the rule: a marker copied from a real temporary into a folder of another name, or with its
    token edited to match, but naming a process that still runs (this one, started when it started)."""
    out = tmp_path / "out"
    real = left_by_a_killed_run(out, ASIDE, "elmo convert", content=False).parent
    record = json.loads((real / TEMPORARY_MARKER).read_text())
    forged = tmp_path / f".out.old-{os.getpid()}-{'f' * 16}"
    (forged / "content").mkdir(parents=True)
    (forged / "content" / "mine.txt").write_text("mine")
    start = files.process_start_time(os.getpid())
    record.update(folder=forged.name, token="f" * 16, pid=os.getpid(), start=start)
    (forged / TEMPORARY_MARKER).write_text(json.dumps(record))
    said = recover_interrupted(out)
    assert not any(str(forged) in line for line in said)  # a running process's: not touched, nothing to say
    assert (forged / "content" / "mine.txt").read_text() == "mine" and not out.exists()


def test_l12_a_users_folder_with_an_earlier_formats_staging_marker_survives_push(tmp_path, caplog):
    """L12: ``.pub.staging-45-keepme/content/README.md`` beside ``elmo push --output-dir pub``."""
    from support.hub import _push

    model = _tiny_model_folder(tmp_path)
    record = {"command": "elmo push", "kind": "staging", "output": "pub", "pid": 45}
    users = _old_format_temporary(tmp_path, ".pub.staging-45-keepme", record, {"README.md": "my card draft"})
    with caplog.at_level(logging.WARNING):
        assert _push(model, tmp_path / "pub") == 0
    assert (users / "content" / "README.md").read_text() == "my card draft"
    assert (
        f"{str(users)!r} looks like a temporary folder of an interrupted elmo push run, but its marker is of an "
        "earlier version, which does not prove it; it was left alone: remove it yourself if it is not yours."
    ) in caplog.text


# ----------------------------------------------------------------------------------------------- the link rule
def _tiny_model_folder(tmp_path: Path) -> Path:
    import shutil

    from support.hub import PNG, _tiny_config

    from modeling_elmo import ElmoForBidirectionalLM, ElmoTokenizer, save_model_folder

    words = tmp_path / "words.txt"
    words.write_text("\n".join(f"w{i}" for i in range(20)) + "\n")
    tokenizer = ElmoTokenizer(vocab_file=str(words))
    config = _tiny_config(vocab_size=tokenizer.vocab_size, architectures=["ElmoForBidirectionalLM"])
    save_model_folder(ElmoForBidirectionalLM(config), tokenizer, tmp_path / "lm")
    (tmp_path / "lm" / "perplexity.png").write_bytes(PNG)
    shutil.rmtree(tmp_path / "lm" / ".cache", ignore_errors=True)
    return tmp_path / "lm"


@pytest.mark.parametrize("name", ["vocab.txt", "perplexity.png"], ids=["X13", "X14"])
def test_a_hard_link_in_the_model_folder_is_refused_by_push_as_a_symbolic_link_is(tmp_path, name):
    """X13, X14: a file of the model folder that is a hard link to a file outside it (``elmo push --dry-run``)."""
    from support.hub import _refused

    model = _tiny_model_folder(tmp_path)
    outside = tmp_path / "outside" / name
    outside.parent.mkdir()
    outside.write_bytes((model / name).read_bytes())  # plausible content: another user's file of that kind
    (model / name).unlink()
    os.link(outside, model / name)
    message = _refused(model, tmp_path / "out", f"the model folder's file {str(model / name)!r} is a hard link")
    assert "2 names share the file, which may lie outside the folder" in message
    assert outside.read_bytes() and not (tmp_path / "out").exists()


def test_a_link_inside_the_model_folder_to_a_hard_link_is_refused_too(tmp_path):
    """Attacker pass on X14: ``perplexity.png`` a link to ``real.png`` in the folder, itself a hard link outside."""
    from support.hub import _refused

    model = _tiny_model_folder(tmp_path)
    outside = tmp_path / "outside.png"
    outside.write_bytes((model / "perplexity.png").read_bytes())
    os.link(outside, model / "real.png")
    (model / "perplexity.png").unlink()
    (model / "perplexity.png").symlink_to("real.png")
    _refused(model, tmp_path / "out", f"the model folder's file {str(model / 'real.png')!r} is a hard link")


# ----------------------------------------------------------------------------------------------- elmo embed
def _interrupted_embed(tmp_path: Path):
    """An ``elmo embed`` run killed after its first chunks (chunks of 2 lines, killed in the third)."""
    from support.embedding import FakeEmbedder, run

    lines = [f"w{i} x{i}" for i in range(9)]
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, lines=lines, embedder=FakeEmbedder(fail_after_batches=2), chunk_size=2, batch_size=2)
    return lines, tmp_path / "out.h5.partial"


def test_l9_resume_keeps_the_users_files_in_the_partial_folder_and_says_so(tmp_path, caplog):
    """L9: the user put ``notes.tmp``, ``notes.txt`` and ``mine/keep.txt`` into ``OUT.partial`` of an interrupted
    run; ``--resume`` finishes the output, deletes none of them, and one line names the folder."""
    from support.embedding import FakeEmbedder, read_h5, run

    lines, partial = _interrupted_embed(tmp_path)
    (partial / "notes.tmp").write_text("my temporary notes")
    (partial / "notes.txt").write_text("my notes")
    (partial / "mine").mkdir()
    (partial / "mine" / "keep.txt").write_text("keep me")
    with caplog.at_level(logging.WARNING):
        report, out = run(tmp_path, lines=lines, embedder=FakeEmbedder(), chunk_size=2, resume=True)
    assert report.resumed_lines == 4 and len(read_h5(out)) == len(lines) + 1
    assert (partial / "notes.tmp").read_text() == "my temporary notes"
    assert (partial / "notes.txt").read_text() == "my notes" and (
        partial / "mine" / "keep.txt"
    ).read_text() == "keep me"
    assert sorted(p.name for p in partial.iterdir()) == ["mine", "notes.tmp", "notes.txt"]  # the run's own are gone
    lines_said = [r.getMessage() for r in caplog.records if str(partial) in r.getMessage()]
    assert lines_said == [
        f"{out}: {str(partial)!r} was kept: it holds mine/, notes.tmp, notes.txt, which no record of elmo embed "
        "lists; remove it yourself if it is not yours."
    ]


def test_embed_overwrite_deletes_only_what_its_records_list_as_it_is(tmp_path):
    """Minor row: files merely named like a chunk or ``run.json`` (or a chunk changed since) are not the run's:
    ``--overwrite`` refuses the folder naming them and deletes nothing; without them it deletes the run's own."""
    from support.embedding import FakeEmbedder, run

    lines, partial = _interrupted_embed(tmp_path)
    own = sorted(p.name for p in partial.iterdir())
    assert "chunk-00000000.h5" in own and "run.json" in own
    (partial / "chunk-00000007.h5").write_bytes(b"named like a chunk")
    with open(partial / "chunk-00000001.h5", "ab") as handle:  # a chunk the user changed since: not as recorded
        handle.write(b"my appendix")
    changed = (partial / "chunk-00000001.h5").read_bytes()
    with pytest.raises(ValueError) as raised:
        run(tmp_path, lines=lines, embedder=FakeEmbedder(), chunk_size=2, overwrite=True)
    assert str(raised.value) == (
        f"{str(partial)!r} holds what an interrupted elmo embed run does not write (chunk-00000001.h5, "
        "chunk-00000007.h5); --overwrite never deletes it. Move it away."
    )
    assert sorted(p.name for p in partial.iterdir()) == sorted([*own, "chunk-00000007.h5"])
    assert (partial / "chunk-00000001.h5").read_bytes() == changed
    (partial / "chunk-00000007.h5").unlink()
    (partial / "chunk-00000001.h5").unlink()
    run(tmp_path, lines=lines, embedder=FakeEmbedder(), chunk_size=2, overwrite=True)
    assert not partial.exists() and (tmp_path / "out.h5").is_file()


def test_resume_never_takes_or_replaces_a_file_merely_named_like_a_chunk(tmp_path):
    """A file named like a chunk that the run has not finished yet: never merged as one, never replaced."""
    from support.embedding import FakeEmbedder, run

    lines, partial = _interrupted_embed(tmp_path)
    (partial / "chunk-00000003.h5").write_bytes(b"not a chunk of this run")
    with pytest.raises(ValueError) as raised:
        run(tmp_path, lines=lines, embedder=FakeEmbedder(), chunk_size=2, resume=True)
    assert str(raised.value).startswith(f"{str(partial / 'chunk-00000003.h5')!r} is there, and no record of elmo embed")
    assert (partial / "chunk-00000003.h5").read_bytes() == b"not a chunk of this run"
    assert not (tmp_path / "out.h5").exists()


# ----------------------------------------------------------------------------------------------- elmo convert
def test_a_mistyped_source_is_named_even_after_a_killed_runs_output_was_put_back(tmp_path, caplog):
    """Minor row: a killed ``elmo convert --overwrite`` had moved the earlier output aside, so ``out`` seemed free;
    the next convert, with a mistyped source, puts the earlier output back (one line) and names the source."""
    options_path, weights_path = _small_release(tmp_path)
    out = tmp_path / "out"
    assert convert_main(["--options", options_path, "--weights", weights_path, "--output", str(out)]) == 0
    aside = left_by_a_killed_run(out, ASIDE, "elmo convert", content=False)
    os.rename(out, aside)
    mistyped = str(tmp_path / "release" / "option.json")
    with caplog.at_level(logging.WARNING), pytest.raises(SystemExit) as exit_:
        convert_main(["--options", mistyped, "--weights", weights_path, "--output", str(out)])
    assert exit_.value.code == f"elmo convert: error: options file {mistyped!r} does not exist."
    assert "is back in place" in caplog.text and (out / "config.json").is_file()


def test_a_records_file_killed_while_written_again_leaves_a_temporary_its_records_name(tmp_path, caplog):
    """A kill between writing the records' next version and its rename leaves ``.RECORDS.TOKEN.tmp``, the name the
    records gave in advance: ``--overwrite`` and ``--resume`` remove it as the run's own; a file of another content
    under that name stays (and ``--overwrite`` refuses the folder)."""
    from support.embedding import FakeEmbedder, read_h5, run

    lines, partial = _interrupted_embed(tmp_path)
    records = partial / ".elmo-embed-records-0.json"
    following = json.loads(records.read_text())["next"]
    assert files.TEMPORARY_FILE.fullmatch(following).group("name") == records.name
    (partial / following).write_bytes(records.read_bytes())  # the next version, killed before its rename
    with caplog.at_level(logging.WARNING):
        report, out = run(tmp_path, lines=lines, embedder=FakeEmbedder(), chunk_size=2, resume=True)
    assert report.resumed_lines == 4 and len(read_h5(out)) == len(lines) + 1 and not partial.exists()
    assert "was kept" not in caplog.text

    out.unlink()
    lines, partial = _interrupted_embed(tmp_path)
    following = json.loads(records.read_text())["next"]
    (partial / following).write_text("my notes, under a name that happens to be the records' next one")
    with pytest.raises(ValueError, match=rf"holds what an interrupted elmo embed run does not write \({following}\)"):
        run(tmp_path, lines=lines, embedder=FakeEmbedder(), chunk_size=2, overwrite=True)
    assert (partial / following).read_text().startswith("my notes")
    (partial / following).unlink()
    (partial / following).write_bytes(b"")  # created, killed before a byte was written: nothing to lose
    run(tmp_path, lines=lines, embedder=FakeEmbedder(), chunk_size=2, overwrite=True)
    assert not partial.exists() and out.is_file()


@pytest.mark.parametrize("role", ["options", "weights"])
def test_a_hard_link_given_to_convert_is_refused_as_a_symbolic_link_is(tmp_path, role):
    """``elmo convert --options/--weights``: an input that is a hard link (``st_nlink > 1``: the same bytes are
    another file, maybe another user's) or a symbolic link is refused in one line naming it; nothing is written."""
    options_path, weights_path = _small_release(tmp_path)
    given = {"options": options_path, "weights": weights_path}
    outside = tmp_path / "elsewhere" / Path(given[role]).name
    outside.parent.mkdir()
    os.link(given[role], outside)  # the release's file now has two names
    args = ["--options", options_path, "--weights", weights_path, "--output", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_:
        convert_main(args)
    assert exit_.value.code == (
        f"elmo convert: error: {role} file {given[role]!r} is a hard link (2 names share the file, which may lie "
        "outside the folder); refusing to read it through this name, as a symbolic link out of the folder is "
        "refused. Copy the file in if it belongs there."
    )
    os.unlink(given[role])
    os.symlink(outside, given[role])
    with pytest.raises(SystemExit) as exit_:
        convert_main(args)
    assert exit_.value.code == (
        f"elmo convert: error: {role} file {given[role]!r} is a symbolic link, not a regular file; refusing to use "
        "it (remove it if it is not yours to keep)."
    )
    assert not (tmp_path / "out").exists() and outside.is_file()
    os.unlink(given[role])
    os.rename(outside, given[role])  # one name again: converted
    assert convert_main(args) == 0 and (tmp_path / "out" / "config.json").is_file()


@pytest.mark.parametrize("command, kind", [("elmo convert", "converting"), ("elmo push", "staging")])
def test_a_staging_folder_killed_before_its_manifest_was_written_is_left_alone_in_one_line(
    tmp_path, caplog, command, kind
):
    """A run killed while it filled its staging folder, before the manifest that records the files: nothing proves
    the files are the run's (a user may have put one there), so the next run on that output deletes nothing and
    says, in one line, which folder it left and what to do."""
    out = tmp_path / "out"
    payload = left_by_a_killed_run(out, kind, command)
    (payload / "config.json").write_text("{}")  # what the run had written when it was killed
    (payload / "model.safetensors").write_bytes(b"half a model")
    with caplog.at_level(logging.WARNING):
        said = recover_interrupted(out)
    assert said == [
        f"{str(payload.parent)!r}, the unfinished output of an interrupted {command} run, holds 'config.json' (and 1 "
        "more), which no record of it lists; it was left alone: remove it yourself if it is not yours."
    ]
    assert [r.getMessage() for r in caplog.records] == said
    assert sorted(p.name for p in payload.iterdir()) == ["config.json", "model.safetensors"]
    assert (payload.parent / TEMPORARY_MARKER).is_file()
    write_manifest(payload, command, ["config.json", "model.safetensors"])  # recorded: the run's own, removed
    (said,) = recover_interrupted(out)
    assert said == f"removed the unfinished output of an interrupted {command} run: {str(payload.parent)!r}."
    assert not payload.parent.exists()
