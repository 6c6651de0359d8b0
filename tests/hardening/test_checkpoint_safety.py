"""Training checkpoints by the file-safety rules: each is written in a temporary folder of a fresh unique name beside
it (`modeling_elmo.folders.files.new_temporary`), recorded in its manifest and put in place whole; what a killed save
left is finished or undone by the next run (`CheckpointManager.recover`); rotation deletes only what a manifest
proves."""

from __future__ import annotations

import json
import logging
import os

import pytest
from support import left_by_a_killed_run

from modeling_elmo.folders import files
from modeling_elmo.folders.manifest import ASIDE, MANIFEST, read_manifest
from modeling_elmo.pretraining.checkpoint import COMMAND, CheckpointManager


class _OneProcess:
    is_main_process, num_processes, device = True, 1, "cpu"

    def wait_for_everyone(self) -> None:
        pass


def _writer(version: str, seen: list):
    def write(folder):
        seen.append(folder)
        (folder / "trainer_state.json").write_text(json.dumps({"version": version}))
        (folder / "model.safetensors").write_bytes(version.encode())

    return write


def test_each_checkpoint_is_written_under_a_fresh_unique_name_and_recorded(tmp_path):
    manager, seen = CheckpointManager(tmp_path / "checkpoints", keep_last=5), []
    for step in (4, 8, 8):
        assert (
            manager.save(_OneProcess(), step, _writer(f"v{step}", seen))
            == tmp_path / "checkpoints" / f"step_{step:08d}"
        )
    names = [folder.parent.name for folder in seen]
    assert len(set(names)) == 3 and all(
        files.temporary_folder_pattern(f"step_{s:08d}").fullmatch(n) for s, n in zip((4, 8, 8), names, strict=True)
    )
    assert all(folder.name == "content" for folder in seen)
    assert sorted(p.name for p in manager.root.iterdir()) == ["latest", "step_00000004", "step_00000008"]
    manifest = read_manifest(manager.root / "step_00000008")
    assert manifest["command"] == COMMAND and sorted(manifest["files"]) == ["model.safetensors", "trainer_state.json"]


def test_a_swap_killed_after_the_earlier_checkpoint_was_moved_aside_is_undone_by_the_next_run(tmp_path, caplog):
    manager = CheckpointManager(tmp_path / "checkpoints")
    final = manager.save(_OneProcess(), 4, _writer("v1", []))
    kept = {p.name: p.read_bytes() for p in final.iterdir()}
    aside = left_by_a_killed_run(final, ASIDE, COMMAND, content=False)
    os.rename(final, aside)  # killed right after moving the earlier checkpoint aside
    with caplog.at_level(logging.WARNING):
        (said,) = manager.recover()
    assert "is back in place" in said and {p.name: p.read_bytes() for p in final.iterdir()} == kept
    assert sorted(p.name for p in manager.root.iterdir()) == ["latest", "step_00000004"]


def test_a_swap_killed_after_the_new_checkpoint_took_its_name_is_finished_by_the_next_run(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints")
    final = manager.save(_OneProcess(), 4, _writer("v1", []))
    newer = CheckpointManager(tmp_path / "elsewhere").save(_OneProcess(), 4, _writer("v2", []))
    aside = left_by_a_killed_run(final, ASIDE, COMMAND, content=False)
    os.rename(final, aside)
    os.rename(newer, final)  # killed once the new checkpoint had its name, before the earlier one was deleted
    (said,) = manager.recover()
    assert said == (
        f"{COMMAND} was interrupted after replacing {str(final)!r}: the earlier output it had replaced "
        f"({str(aside)!r}) was removed, as that run would have done."
    )
    assert (final / "model.safetensors").read_bytes() == b"v2" and not aside.parent.exists()


def test_rotation_keeps_a_checkpoint_that_its_manifest_does_not_prove_with_one_line(tmp_path, caplog):
    manager = CheckpointManager(tmp_path / "checkpoints", keep_last=1)
    first = manager.save(_OneProcess(), 4, _writer("v1", []))
    (first / MANIFEST).unlink()  # a checkpoint of an earlier version: nothing records its files
    with caplog.at_level(logging.WARNING):
        manager.save(_OneProcess(), 8, _writer("v2", []))
    assert (first / "model.safetensors").read_bytes() == b"v1"
    assert f"{str(first)!r} holds files that no record of elmo pretrain lists" in caplog.text
    third = manager.save(_OneProcess(), 12, _writer("v3", []))
    assert not (manager.root / "step_00000008").exists() and third.is_dir() and first.is_dir()


def test_an_earlier_versions_temporary_checkpoint_folder_is_left_alone_with_one_line(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints")
    old = manager.root / ".tmp-step_00000008"
    old.mkdir(parents=True)
    (old / "model.safetensors").write_bytes(b"mine?")
    (said,) = manager.recover()
    assert said == (
        f"{str(old)!r} looks like a checkpoint being written or replaced by an earlier version of elmo pretrain, "
        "which recorded nothing to prove its files; it was left alone: remove it yourself if it is not yours."
    )
    assert (old / "model.safetensors").read_bytes() == b"mine?"


@pytest.mark.slow  # trains
def test_a_run_killed_while_it_recorded_itself_is_started_again_by_the_same_command(tmp_path):
    """Killed while ``run.json`` was being written (only its temporary is in the output folder): the same command
    again starts the run afresh instead of refusing the folder as an earlier version's run."""
    from support import random_corpus, tiny_pretrain_args

    from modeling_elmo.cli import main

    corpus = random_corpus(tmp_path / "corpus.txt", seed=1, words=30, lines=40, longest=8)
    out = tmp_path / "out"
    out.mkdir()
    (out / f".run.json.{'0' * 16}.tmp").write_text('{"arguments": {"learn')  # the kill cut it short
    assert main(["pretrain", *tiny_pretrain_args(corpus, out, "--max-steps", "2", checkpointing_steps=2)]) == 0
    assert (out / "run.json").is_file() and (out / "model.safetensors").is_file()
    assert not (out / f".run.json.{'0' * 16}.tmp").exists()


@pytest.mark.slow  # trains
def test_a_run_killed_before_its_first_checkpoint_was_pointed_to_is_started_again(tmp_path):
    """Killed after its first checkpoint took its name but before ``latest`` named it: no checkpoint was ever
    finished, so the same command starts the run again (as for a run stopped before its first checkpoint)."""
    from support import random_corpus, tiny_pretrain_args

    from modeling_elmo.cli import main

    corpus = random_corpus(tmp_path / "corpus.txt", seed=1, words=30, lines=40, longest=8)
    out = tmp_path / "out"
    args = ["pretrain", *tiny_pretrain_args(corpus, out, "--max-steps", "4", checkpointing_steps=2)]
    assert main([*args, "--stop-after-steps", "2"]) == 0
    (out / "checkpoints" / "latest").unlink()
    assert (out / "checkpoints" / "step_00000002").is_dir()
    assert main(args) == 0 and (out / "model.safetensors").is_file()
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_00000004"
