"""The run's output folder: one run per folder (`check_output_folder` before anything is written, `run_lock` for the
whole run, `open_output_folder` once the inputs are good; ``--overwrite`` clears only the files a run writes), the
best validated weights, the snapshots of ``--save-at-minutes`` (each a model folder put in place whole), and the
final model written so that ``config.json`` comes last.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..folders.files import (
    TEMPORARY_FILE,
    atomic_output,
    atomic_write_text,
    make_folders,
    new_temporary,
    probe_writable,
    remove_empty_folders,
    remove_file,
    remove_temporary,
    remove_tree,
    replace,
)
from ..folders.locks import exclusive_lock
from ..folders.manifest import install_folder, recover_interrupted, write_manifest
from ..folders.run_folder import RunFolder, read_json_object
from .checkpoint import BEST_MODEL_FILE, LATEST, CheckpointManager
from .state import argument_identity, identity_differences, read_run_identity, write_run_identity

logger = logging.getLogger(__name__)

NEW, OVERWRITE, RESUME = "new", "overwrite", "resume"
_TMP_FINAL = ".tmp-final-model"
_ADVICE = (
    "resume it with --resume-from-checkpoint latest, start it afresh with --overwrite, or choose another --output-dir"
)


def data_file_arguments(args: Any) -> dict[str, Any]:
    """The data files a run was given: in ``run.json`` to tell a run on other files from a rerun (a resume checks
    the data fingerprint instead, so that a moved corpus can be resumed)."""
    return {name: getattr(args, name, None) for name in ("train_file", "validation_file", "test_file")}


def _data_file_differences(saved: dict[str, Any], args: Any) -> list[str]:
    recorded = saved.get("data_files")
    if not isinstance(recorded, dict):
        return []
    return [
        f"--{name.replace('_', '-')} {value!r} (the run's: {recorded.get(name)!r})"
        for name, value in data_file_arguments(args).items()
        if value != recorded.get(name)
    ]


@contextlib.contextmanager
def run_lock(run: RunFolder) -> Iterator[None]:
    """The main process's exclusive lock on ``RUN.lock`` beside the run folder (parents created for it, and removed
    again if left empty): a second run on the same folder is refused at once."""
    created = make_folders(run.root.absolute().parent)
    try:
        with exclusive_lock(
            run.root.with_name(run.root.name + ".lock"),
            f"another {{holder}} run is writing {str(run.root)!r}; wait for it to end, or choose another --output-dir.",
            holder="elmo pretrain",
        ):
            yield
    finally:
        remove_empty_folders(created)  # deepest first


def check_output_folder(args: Any, run: RunFolder) -> str:
    """How the run will use ``--output-dir`` (`NEW`, `OVERWRITE` or `RESUME`), decided without writing anything;
    raises `ValueError` with the reason and the way out."""
    root = run.root
    if root.exists() and not root.is_dir():
        raise ValueError(f"--output-dir {str(root)!r} is a file, not a folder.")
    ancestor = root
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"--output-dir {str(root)!r} cannot be created: {str(ancestor)!r} is a file.")
    try:  # permissions alone do not tell (root, read-only mounts): try
        probe_writable(ancestor)
    except OSError as error:
        raise ValueError(f"--output-dir {str(root)!r} cannot be written ({error.strerror or error}).") from None
    entries = run.entries()
    _, foreign = run.run_entries()
    holds_run = any(run.is_run_artefact(p.name) for p in entries)
    arguments = {"arguments": argument_identity(args)}
    if args.resume_from_checkpoint:
        differences = identity_differences(read_run_identity(run) or {}, arguments)
        if differences:
            raise ValueError(
                f"--output-dir {str(root)!r} holds a run with other arguments: {'; '.join(differences)}. "
                "Resume it with its own arguments, or start a new run (another --output-dir) from its model "
                "with --init-from-model."
            )
        return RESUME
    if foreign:
        raise ValueError(
            f"--output-dir {str(root)!r} holds files that pretraining does not write "
            f"({', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}); nothing was deleted: choose "
            "a new or empty folder, or move those files away."
        )
    if not holds_run:
        return NEW
    if args.overwrite:
        return OVERWRITE
    saved = read_run_identity(run)
    if saved is None and all(TEMPORARY_FILE.fullmatch(p.name) for p in entries if run.is_run_artefact(p.name)):
        # killed while it recorded itself (run.json being written): nothing of it to resume or to keep
        logger.info("%s holds only the temporary files of a run killed as it started; starting it again.", root)
        return OVERWRITE
    differences = saved and identity_differences(saved, arguments) + _data_file_differences(saved, args)
    if saved is None:
        what = "a run of an earlier version (no run.json)"
    elif differences:
        what = f"another run ({'; '.join(differences)})"
    elif run.has_model():
        what = "the finished model of a run with these arguments"
    elif CheckpointManager(run.checkpoints_dir).latest() is None or not (run.checkpoints_dir / LATEST).is_file():
        # stopped before its first checkpoint was complete (``latest`` is written last, atomically: without it no
        # checkpoint was ever finished): nothing to resume, and only this run's own files to replace
        logger.info("%s holds a run with these arguments stopped before its first checkpoint; starting it again.", root)
        return OVERWRITE
    else:
        what = "an unfinished run with these arguments"
    raise ValueError(f"--output-dir {str(root)!r} already holds {what}: {_ADVICE}.")


def open_output_folder(
    run: RunFolder, mode: str, identity: dict[str, Any], data_files: dict[str, Any] | None = None
) -> None:
    """Main process, once the inputs are good: clear (`OVERWRITE`, checked again), create, and record (with
    ``data_files``) or check the run's identity."""
    if mode == NEW and any(run.is_run_artefact(p.name) for p in run.entries()):
        raise ValueError(
            f"--output-dir {str(run.root)!r} was written by another run since this one started; {_ADVICE}."
        )
    if mode == OVERWRITE:
        _, foreign = run.run_entries()
        if foreign:
            raise ValueError(
                f"--output-dir {str(run.root)!r} holds files that pretraining does not write "
                f"({', '.join(foreign[:5])}); nothing was deleted."
            )
        run.remove_run_files()
        logger.info("--overwrite: cleared the previous run from %s", run.root)
    run.root.mkdir(parents=True, exist_ok=True)
    CheckpointManager(run.checkpoints_dir).recover()  # what a run killed while saving a checkpoint left
    saved = read_run_identity(run) if mode == RESUME else None
    if saved is not None:
        differences = identity_differences(saved, identity)
        if differences:
            raise ValueError(f"cannot resume the run in {str(run.root)!r}: {'; '.join(differences)}.")
    else:
        write_run_identity(run, {**identity, "data_files": data_files} if data_files is not None else identity)
    with contextlib.suppress(OSError):
        remove_tree(run.root / _TMP_FINAL)  # the final model being saved when the run was killed (`run_entries`)


# ----------------------------------------------------------------------------------------------- best model
class BestModel:
    """The best validated weights so far and ``best.json`` (step, perplexity), replaced atomically; checkpoints link
    to the weights, so a resume restores them."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.weights, self.info = self.folder / "model.safetensors", self.folder / "best.json"

    def save(self, model: torch.nn.Module, step: int, perplexity: float) -> None:
        from safetensors.torch import save_model

        self._replace(lambda tmp: save_model(model, str(tmp)), step, perplexity)

    def restore(self, checkpoint: Path, step: int, perplexity: float) -> None:
        source = Path(checkpoint) / BEST_MODEL_FILE
        if not source.is_file():
            raise ValueError(
                f"checkpoint {str(checkpoint)!r} records a best model at update {step} but holds no {BEST_MODEL_FILE}."
            )
        self._replace(lambda tmp: shutil.copyfile(source, tmp), step, perplexity)

    def _replace(self, write: Any, step: int, perplexity: float) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_output(self.weights) as tmp:
            write(tmp)
        atomic_write_text(self.info, json.dumps({"step": step, "perplexity": perplexity}) + "\n")

    def load_into(self, model: torch.nn.Module, step: int) -> None:
        from safetensors.torch import load_model

        info = read_json_object(self.info, "best model") or {}
        if info.get("step") != step or not self.weights.is_file():
            raise ValueError(
                f"the best model of update {step} is not in {str(self.folder)!r} (found: {info or 'nothing'})."
            )
        load_model(model, str(self.weights), strict=True)


# ----------------------------------------------------------------------------------------------- model folders
def write_model_folder(model: torch.nn.Module, vocab_path: Path, folder: Path, characters: list[str] | None) -> None:
    """``save_pretrained`` of the model and its tokenizer (the run's vocabulary) and the code files into ``folder``."""
    from .. import ElmoTokenizer, save_model_folder

    tokenizer = ElmoTokenizer(
        vocab_file=str(vocab_path),
        split_pattern="whitespace",
        characters=characters,
        max_characters_per_token=model.config.max_characters_per_token,
    )
    save_model_folder(model, tokenizer, folder)


#: The command named in the markers of the snapshots' temporary folders (`modeling_elmo.folders.manifest`).
SNAPSHOT_COMMAND = "elmo pretrain"


def recover_snapshots(run: RunFolder, minutes: list[float]) -> None:
    """Remove what a run killed while writing the snapshot of each of ``minutes`` left (proven by its marker)."""
    for mark in minutes:
        if run.snapshot_dir(mark).parent.is_dir():
            recover_interrupted(run.snapshot_dir(mark))


def save_snapshot(
    model: torch.nn.Module, vocab_path: Path, run: RunFolder, minutes: float, info: dict[str, Any], characters=None
) -> Path:
    """The model folder ``snapshots/minutes-M`` with ``snapshot.json`` (``info``), written in a fresh temporary folder
    beside it and renamed into place whole; raises `ValueError` when the name is taken (a snapshot is never
    rewritten) or the files cannot be written."""
    target = run.snapshot_dir(minutes)
    target.parent.mkdir(parents=True, exist_ok=True)
    recover_interrupted(target)
    staging = new_temporary(target, "snapshot", SNAPSHOT_COMMAND)
    try:
        write_model_folder(model, vocab_path, staging, characters)
        atomic_write_text(staging / RunFolder.SNAPSHOT_INFO, json.dumps(info, sort_keys=True) + "\n")
        write_manifest(staging, SNAPSHOT_COMMAND, (p.relative_to(staging).as_posix() for p in staging.rglob("*")))
        install_folder(staging, target, SNAPSHOT_COMMAND, overwrite=False)
    except OSError as error:
        raise ValueError(f"cannot write the snapshot {str(target)!r}: {error.strerror or error}") from None
    finally:
        remove_temporary(staging)
    return target


def save_final_model(
    model: torch.nn.Module, vocab_path: Path, run: RunFolder, characters: list[str] | None = None
) -> None:
    """``save_pretrained`` (model, tokenizer, code files) into a temporary folder, then moved in with ``config.json``
    removed first and moved in last: a kill leaves the complete model or a folder that is no model."""
    tmp = run.root / _TMP_FINAL
    with contextlib.suppress(OSError):
        remove_tree(tmp)
    try:
        write_model_folder(model, vocab_path, tmp, characters)
        remove_file(run.config_file)
        for item in sorted(tmp.iterdir()):
            if item.name != RunFolder.CONFIG:
                replace(item, run.root / item.name)
        replace(tmp / RunFolder.CONFIG, run.config_file)
    finally:
        with contextlib.suppress(OSError):
            remove_tree(tmp)
