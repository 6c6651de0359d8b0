"""The run's output folder: one run per folder, the best validated weights, and the final model written atomically.

* `check_output_folder` runs before anything is written: the path must be a folder that can be created and
  written, and a folder that already holds a run is refused unless the run is resumed (with the same arguments) or
  ``--overwrite`` is given, which clears the run's files (and only those: a folder holding files that pretraining
  does not write is never cleared).
* `open_output_folder` runs once the inputs are known good: it clears (``--overwrite``), creates the folder and
  records the run's identity in ``run.json``.
* `save_final_model` writes the model folder so that it becomes loadable at once: ``config.json``, the file every
  loader looks for first, is removed before and moved in last.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..io_utils import atomic_write_text
from ..run_folder import RunFolder, read_json_object
from .state import argument_identity, identity_differences, read_run_identity, write_run_identity

logger = logging.getLogger(__name__)

NEW, OVERWRITE, RESUME = "new", "overwrite", "resume"
_TMP_FINAL = ".tmp-final-model"
_ADVICE = ("resume it with --resume-from-checkpoint latest, start it afresh with --overwrite, or choose another "
           "--output-dir")


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
        os.rmdir(tempfile.mkdtemp(prefix=".elmo-write-probe-", dir=ancestor))
    except OSError as error:
        raise ValueError(f"--output-dir {str(root)!r} cannot be written ({error.strerror or error}).") from None
    entries = run.entries()
    foreign = [p.name for p in entries if not run.is_run_artefact(p.name)]
    holds_run = any(run.is_run_artefact(p.name) for p in entries)
    if args.resume_from_checkpoint:
        saved = read_run_identity(run)
        differences = identity_differences(saved or {}, {"arguments": argument_identity(args)})
        if differences:
            raise ValueError(f"--output-dir {str(root)!r} holds a run with other arguments: {'; '.join(differences)}. "
                             "Resume it with its own arguments, or start a new run (another --output-dir) from its model "
                             "with --init-from-model.")
        return RESUME
    if foreign:
        raise ValueError(f"--output-dir {str(root)!r} holds files that pretraining does not write "
                         f"({', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}); choose a new or empty folder.")
    if not holds_run:
        return NEW
    if args.overwrite:
        return OVERWRITE
    saved = read_run_identity(run)
    if saved is None:
        what = "a run of an earlier version (no run.json)"
    elif identity_differences(saved, {"arguments": argument_identity(args)}):
        what = f"another run ({'; '.join(identity_differences(saved, {'arguments': argument_identity(args)}))})"
    elif run.has_model():
        what = "the finished model of a run with these arguments"
    else:
        what = "an unfinished run with these arguments"
    raise ValueError(f"--output-dir {str(root)!r} already holds {what}: {_ADVICE}.")


def open_output_folder(run: RunFolder, mode: str, identity: dict[str, Any]) -> None:
    """Main process, once the inputs are known good: clear (`OVERWRITE`), create, and record or check the run's
    identity (arguments, model, data and vocabulary)."""
    if mode == OVERWRITE:
        for path in run.entries():
            if run.is_run_artefact(path.name):
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        logger.info("--overwrite: cleared the previous run from %s", run.root)
    run.root.mkdir(parents=True, exist_ok=True)
    saved = read_run_identity(run) if mode == RESUME else None
    if saved is not None:
        differences = identity_differences(saved, identity)
        if differences:
            raise ValueError(f"cannot resume the run in {str(run.root)!r}: {'; '.join(differences)}.")
    else:
        write_run_identity(run, identity)
    shutil.rmtree(run.root / _TMP_FINAL, ignore_errors=True)


# ----------------------------------------------------------------------------------------------- best model
class BestModel:
    """The best validated weights so far (`RunFolder.best_model_dir`): ``model.safetensors`` and ``best.json``
    (step, perplexity), each replaced atomically; every checkpoint links to the weights, so a resume restores them."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.weights = self.folder / "model.safetensors"
        self.info = self.folder / "best.json"

    def save(self, model: torch.nn.Module, step: int, perplexity: float) -> None:
        from safetensors.torch import save_model

        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / ".model.safetensors.tmp"
        save_model(model, str(tmp))
        os.replace(tmp, self.weights)
        atomic_write_text(self.info, json.dumps({"step": step, "perplexity": perplexity}) + "\n")

    def restore(self, checkpoint: Path, step: int, perplexity: float) -> None:
        """Put back the best weights a checkpoint links to (a resume from it)."""
        from .checkpoint import BEST_MODEL_FILE

        source = Path(checkpoint) / BEST_MODEL_FILE
        if not source.is_file():
            raise ValueError(f"checkpoint {str(checkpoint)!r} records a best model at update {step} but holds no {BEST_MODEL_FILE}.")
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / ".model.safetensors.tmp"
        shutil.copyfile(source, tmp)
        os.replace(tmp, self.weights)
        atomic_write_text(self.info, json.dumps({"step": step, "perplexity": perplexity}) + "\n")

    def load_into(self, model: torch.nn.Module, step: int) -> None:
        from safetensors.torch import load_model

        info = read_json_object(self.info, "best model") or {}
        if info.get("step") != step or not self.weights.is_file():
            raise ValueError(f"the best model of update {step} is not in {str(self.folder)!r} (found: {info or 'nothing'}).")
        load_model(model, str(self.weights), strict=True)


# ----------------------------------------------------------------------------------------------- final model
def save_final_model(model: torch.nn.Module, vocab_path: Path, run: RunFolder, characters: list[str] | None = None) -> None:
    """``save_pretrained`` (model, tokenizer with vocab.txt, code files, full auto_map) into the run folder so that
    the model appears at once: the files are written into a temporary folder, the old ``config.json`` is removed,
    every other file is moved in with `os.replace`, and ``config.json`` comes last. A kill at any moment leaves
    either the complete model or a folder without ``config.json`` (not a model; the checkpoints are intact)."""
    from .. import ElmoTokenizer, save_model_folder

    tmp = run.root / _TMP_FINAL
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tokenizer = ElmoTokenizer(vocab_file=str(vocab_path), split_pattern="whitespace", characters=characters,
                                  max_characters_per_token=model.config.max_characters_per_token)
        save_model_folder(model, tokenizer, tmp)
        run.config_file.unlink(missing_ok=True)
        for item in sorted(tmp.iterdir()):
            if item.name != RunFolder.CONFIG:
                os.replace(item, run.root / item.name)
        os.replace(tmp / RunFolder.CONFIG, run.config_file)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
