"""Atomic, rotating training checkpoints that load without unpickling anything.

Layout under ``<output_dir>/checkpoints/``: ``step_00001000/`` holds ``trainer_state.json`` (`TrainingState`, the
run's identity, every process's data position), ``model.safetensors``, ``optimizer.safetensors`` + ``optimizer.json``
(its tensors, and the rest of its state dict), ``scheduler.json``, ``scaler.json`` (fp16), ``rng_state_<R>.safetensors``
+ ``.json`` (process R's random generators), ``best_model.safetensors`` (--load-best-model-at-end), ``vocab.txt`` and
``char_vocab.json``; ``latest`` names the newest complete one.

Checkpoints are untrusted input: only safetensors and JSON are read, and a folder holding any other file (a pickle
such as accelerate's ``custom_checkpoint_0.pkl``) is refused, naming the files. A checkpoint is written into a fresh
temporary folder beside it (`modeling_elmo.folders.files.new_temporary`: ``.step_N.checkpoint-PID-TOKEN/content``),
recorded in its manifest (``.elmo-manifest.json``: every file's size and sha256) once every process is done, and put
in place whole (`modeling_elmo.folders.manifest.install_folder`: one of the same step is moved aside and deleted only
once the new one has its name); only then is ``latest`` replaced and old ones deleted, so a kill or a full disk leaves
``latest`` naming a complete checkpoint. Whatever a killed save left is finished or undone by the next run
(`CheckpointManager.recover`), and a checkpoint is deleted only where its manifest proves every file in it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from ..folders.files import atomic_write_text, follow_umask, new_temporary, remove_temporary, remove_tree
from ..folders.manifest import (
    MANIFEST,
    foreign_files,
    install_folder,
    read_manifest,
    recover_interrupted,
    write_manifest,
)
from ..folders.run_folder import CHECKPOINT_FILE, read_json_object  # the layout, which --overwrite may delete
from ..utils.io_utils import check_safetensors_header
from .checkpoint_checks import (  # noqa: F401  (importable from here, as before)
    OPTIMIZER_STATES,
    CheckpointError,
    _cut,
    check_optimizer_state,
    check_scheduler_state,
    rng_state,
    set_rng_state,
)
from .state import MAX_COUNT, TrainingState, shown_count

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
LATEST = "latest"
MODEL_FILE = "model.safetensors"
BEST_MODEL_FILE = "best_model.safetensors"
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")


# ----------------------------------------------------------------------------------------------- state <-> files
def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path))
    follow_umask(path)  # safetensors writes 0600


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing.")
    try:
        check_safetensors_header(path)
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    return load_file(str(path))


def _read_json(path: Path) -> dict[str, Any]:
    data = read_json_object(path, "checkpoint")
    if data is None:
        raise CheckpointError(f"checkpoint file {path} is missing.")
    return data


def optimizer_to_files(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split an optimiser state dict into tensors (``state.<param>.<name>``) and a JSON-able rest."""
    tensors, state = {}, {}
    for param, entries in state_dict["state"].items():
        state[str(param)] = {}
        for name, value in entries.items():
            if torch.is_tensor(value):
                key = f"state.{param}.{name}"
                tensors[key] = value
                state[str(param)][name] = {"tensor": key}
            else:
                state[str(param)][name] = value
    return tensors, {"state": state, "param_groups": state_dict["param_groups"]}


def optimizer_from_files(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    """The optimiser state dict that `optimizer_to_files` split; raises `CheckpointError` where the files are not of
    that form (a tensor named that is not there, a state that is not a mapping)."""
    if not (isinstance(meta.get("state"), dict) and isinstance(meta.get("param_groups"), list)):
        raise CheckpointError("optimizer.json is not an optimiser state (no 'state' mapping and 'param_groups' list).")
    state = {}
    for param, entries in meta["state"].items():
        if not (isinstance(entries, dict) and param.isdecimal()):
            raise CheckpointError(f"optimizer.json: malformed state of parameter {_cut(param)}.")
        state[int(param)] = {}
        for name, value in entries.items():
            if isinstance(value, dict):
                if value.get("tensor") not in tensors:
                    raise CheckpointError(f"optimizer.json names tensor {_cut(value)}, which is not in its file.")
                value = tensors[value["tensor"]]
            state[int(param)][name] = value
    groups = []
    for group in meta["param_groups"]:
        if not isinstance(group, dict):
            raise CheckpointError(f"optimizer.json: malformed parameter group {_cut(group)}.")
        groups.append(dict(group, betas=tuple(group["betas"])) if isinstance(group.get("betas"), list) else dict(group))
    return {"state": state, "param_groups": groups}


def write_training_files(
    folder: Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    scaler: Any,
    rank: int,
    is_main: bool,
    trainer_state: dict[str, Any],
    vocab_text: str,
    best_model: Path | None = None,
    char_vocab_text: str | None = None,
) -> None:
    """Write one process's share of a checkpoint into ``folder``: the main process writes the shared files, every
    process its random generators."""
    tensors, meta = rng_state()
    _save_tensors(tensors, folder / f"rng_state_{rank}.safetensors")
    atomic_write_text(folder / f"rng_state_{rank}.json", json.dumps(meta))
    if not is_main:
        return
    from safetensors.torch import save_model

    save_model(model, str(folder / MODEL_FILE))
    follow_umask(folder / MODEL_FILE)
    tensors, meta = optimizer_to_files(optimizer.state_dict())
    _save_tensors(tensors, folder / "optimizer.safetensors")
    atomic_write_text(folder / "optimizer.json", json.dumps(meta))
    atomic_write_text(folder / "scheduler.json", json.dumps(scheduler.state_dict()))
    if scaler is not None:
        atomic_write_text(folder / "scaler.json", json.dumps(scaler.state_dict()))
    if best_model is not None:
        try:  # a hard link costs no space; the best weights are replaced by a new file, never rewritten in place
            os.link(best_model, folder / BEST_MODEL_FILE)
        except OSError:
            shutil.copyfile(best_model, folder / BEST_MODEL_FILE)
    atomic_write_text(folder / "vocab.txt", vocab_text)
    if char_vocab_text is not None:
        atomic_write_text(folder / "char_vocab.json", char_vocab_text)
    # which parameters have an optimiser state, kept apart from optimizer.json: a state dropped there (a parameter's
    # moments and count restarting at zero on resume) is found by the comparison in `check_optimizer_state`
    trainer_state = {**trainer_state, OPTIMIZER_STATES: sorted(int(param) for param in meta["state"])}
    atomic_write_text(folder / STATE_FILE, json.dumps(trainer_state, indent=1, sort_keys=True))


def check_checkpoint_files(folder: Path) -> None:
    """Refuse a checkpoint folder holding anything but the files `write_training_files` writes (pickles above all)."""
    from ..utils.loading import refuse_pickled_weights

    refuse_pickled_weights(folder)
    unknown = sorted(
        p.name
        for p in folder.iterdir()
        if not (p.is_file() and (CHECKPOINT_FILE.fullmatch(p.name) or p.name == MANIFEST))
    )
    if unknown:
        raise CheckpointError(
            f"checkpoint {str(folder)!r} holds files that are not part of a checkpoint of this package: "
            f"{', '.join(unknown)}. "
            "They are never loaded (a pickle, such as accelerate's custom_checkpoint_0.pkl, could run arbitrary code); "
            "remove them to resume, or start a new run from a saved model with --init-from-model."
        )


def read_trainer_state(folder: Path) -> dict[str, Any]:
    """``trainer_state.json`` of a checkpoint, checked: its `TrainingState`, identity and data positions."""
    data = _read_json(Path(folder) / STATE_FILE)
    if data.get("format") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {str(folder)!r} has format {data.get('format')!r}, not {FORMAT_VERSION} (a "
            "checkpoint of an earlier version cannot be resumed; start from a saved model with --init-from-model)."
        )
    try:
        data["state"] = TrainingState.from_dict(data.get("state") or {})
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"checkpoint {str(folder)!r}: {STATE_FILE}: {error}") from None
    positions = data.get("positions")
    if not (
        isinstance(positions, list)
        and all(isinstance(p, list) and len(p) == 2 and all(type(v) is int and v >= 0 for v in p) for p in positions)
        and positions
    ):
        shown = repr(positions) if len(repr(positions)) < 200 else f"{repr(positions)[:200]}..."
        raise CheckpointError(f"checkpoint {str(folder)!r}: {STATE_FILE}: malformed data positions {shown}.")
    for rank, position in enumerate(positions):
        for index, (what, value) in enumerate(zip(("epoch", "batch"), position, strict=True)):
            if value > MAX_COUNT:
                raise CheckpointError(
                    f"checkpoint {str(folder)!r}: {STATE_FILE}: positions[{rank}][{index}] (the {what} of process "
                    f"{rank}) is {shown_count(value)}, above {MAX_COUNT:,}."
                )
    return data


def load_checkpoint(
    folder: Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, scaler: Any, rank: int
) -> dict[str, Any]:
    """Restore the model, optimiser, schedule, scaler and this process's random generators from ``folder``; returns
    its checked ``trainer_state.json``."""
    folder = Path(folder)
    saved = read_trainer_state(folder)
    check_checkpoint_files(folder)
    weights = _load_tensors(folder / MODEL_FILE)
    own = model.state_dict()
    if set(weights) != set(own) or any(weights[k].shape != own[k].shape for k in own):
        raise CheckpointError(f"checkpoint {str(folder)!r} holds weights of another model shape.")
    bad = sorted(k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all()))
    if bad:
        raise CheckpointError(f"checkpoint {str(folder)!r} holds non-finite weights ({_cut(bad)}).")
    try:
        optimizer_state = optimizer_from_files(
            _load_tensors(folder / "optimizer.safetensors"), _read_json(folder / "optimizer.json")
        )
        check_optimizer_state(optimizer, optimizer_state, saved["state"].global_step, saved.get(OPTIMIZER_STATES))
        scheduler_state = _read_json(folder / "scheduler.json")
        check_scheduler_state(scheduler, scheduler_state, saved["state"].global_step)
        rng = folder / f"rng_state_{rank}"
        rng_files = None
        if rng.with_suffix(".safetensors").is_file():
            rng_files = _load_tensors(rng.with_suffix(".safetensors")), _read_json(rng.with_suffix(".json"))
    except CheckpointError as error:
        raise CheckpointError(f"checkpoint {str(folder)!r}: {error}") from None
    model.load_state_dict(weights, strict=True)
    optimizer.load_state_dict(optimizer_state)
    scheduler.load_state_dict(scheduler_state)
    if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):  # the schedule, not the file, sets the rates
        lambdas = zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)
        rates = [base * fn(scheduler.last_epoch) for base, fn in lambdas]
        for group, rate in zip(optimizer.param_groups, rates, strict=True):
            group["lr"] = rate
        scheduler._last_lr = rates
    if scaler is not None and (folder / "scaler.json").is_file():
        scaler.load_state_dict(_read_json(folder / "scaler.json"))
    if rng_files is not None:
        try:
            set_rng_state(*rng_files)
        except CheckpointError as error:
            raise CheckpointError(f"checkpoint {str(folder)!r}: {error}") from None
    else:
        logger.warning(
            "checkpoint %s has no random state of process %d: its random streams start afresh.", folder, rank
        )
    return saved


# ----------------------------------------------------------------------------------------------- the folder
#: What a failed write raises: `OSError`, or safetensors' `SafetensorError` (e.g. "No space left on device").
WRITE_ERRORS = (OSError, SafetensorError)


#: The command named in a checkpoint's manifest and in the marker of the folder it is written in.
COMMAND = "elmo pretrain"
#: A temporary folder beside a checkpoint (`new_temporary`): ``.step_N.KIND-PID-TOKEN``.
_TEMPORARY_DIR = re.compile(r"\.(step_\d+)\.[a-z]+-\d+-[A-Za-z0-9_]+")
#: The temporary folders of an earlier version (``.tmp-step_N``, ``.old-step_N``): nothing proves what is in them.
_EARLIER_TEMPORARY_DIR = re.compile(r"\.(tmp|old)-step_\d+")


def _proven(folder: Path) -> bool:
    """Whether ``folder`` is a checkpoint the package wrote, as it wrote it: its manifest (``elmo pretrain``'s)
    lists every file in it with its size and sha256 (`modeling_elmo.folders.manifest.foreign_files`)."""
    manifest = read_manifest(folder)
    if not (manifest and manifest["command"] == COMMAND and manifest["files"]):
        return False
    return not foreign_files(folder, COMMAND)


def _remove_proven(folder: Path) -> None:
    """Delete the checkpoint ``folder`` where its manifest proves every file in it; otherwise it is kept with one
    line naming it. One that cannot be removed stays (the next save tries again)."""
    if not _proven(folder):
        logger.warning(
            "%r holds files that no record of %s lists (a checkpoint of an earlier version, or files added since); "
            "it was kept: remove it yourself if it is not needed.",
            str(folder),
            COMMAND,
        )
        return
    with contextlib.suppress(OSError):
        remove_tree(folder)  # its files first, its manifest last


def _shared(accelerator: Any, value: Any) -> Any:
    """``value`` of the main process, on every process (the temporary folder's name holds a fresh random part)."""
    if getattr(accelerator, "num_processes", 1) <= 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]


class CheckpointManager:
    def __init__(self, root: str | os.PathLike, keep_last: int = 2):
        self.root = Path(root)
        self.keep_last = max(1, keep_last)

    # ------------------------------------------------------------------ reading
    def checkpoints(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        found = [
            p for p in self.root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name) and (p / STATE_FILE).is_file()
        ]
        return sorted(found, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))

    def latest(self) -> Path | None:
        pointer = self.root / LATEST
        if pointer.is_file():
            name = pointer.read_text(encoding="utf-8").strip()
            candidate = self.root / name
            if name and _STEP_DIR.match(name) and (candidate / STATE_FILE).is_file():
                return candidate
            message = "%s names %r, which is not a complete checkpoint; using the newest complete one."
            logger.warning(message, pointer, name)
        found = self.checkpoints()
        return found[-1] if found else None

    def resolve(self, spec: str) -> Path:
        """``latest`` or a path to a checkpoint folder; raises `ValueError` if there is none."""
        if spec == LATEST:
            path = self.latest()
            if path is None:
                raise CheckpointError(f"--resume-from-checkpoint latest: no checkpoint in {str(self.root)!r}.")
            return path
        path = Path(spec)
        if not (path / STATE_FILE).is_file():
            raise CheckpointError(f"--resume-from-checkpoint {spec!r} is not a checkpoint folder (no {STATE_FILE}).")
        return path

    @staticmethod
    def read_state(path: str | os.PathLike) -> dict[str, Any]:
        return _read_json(Path(path) / STATE_FILE)

    # ------------------------------------------------------------------ writing
    def recover(self) -> list[str]:
        """Finish or undo what a run killed while saving a checkpoint left (`recover_interrupted` on each checkpoint
        a proven temporary folder belongs to: the earlier checkpoint back in place, or an unfinished one removed
        where its manifest proves it); a temporary folder of an earlier version is left alone with one line. Main
        process, under the run's lock. Returns the lines said."""
        said: list[str] = []
        names = set()
        for entry in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            match = _TEMPORARY_DIR.fullmatch(entry.name)
            if match:
                names.add(match.group(1))
            elif _EARLIER_TEMPORARY_DIR.fullmatch(entry.name) and entry.is_dir():
                line = (
                    f"{str(entry)!r} looks like a checkpoint being written or replaced by an earlier version of "
                    "elmo pretrain, which recorded nothing to prove its files; it was left alone: remove it yourself "
                    "if it is not yours."
                )
                logger.warning("%s", line)
                said.append(line)
        for name in sorted(names):
            said += recover_interrupted(self.root / name)
        return said

    def save(self, accelerator: Any, step: int, write: Callable[[Path], None]) -> Path | None:
        """Save on every process (collective): ``write(folder)`` writes this process's files. Returns the folder, or
        `None` if writing failed anywhere (logged, naming the checkpoint that stays valid)."""
        final = self.root / f"step_{step:08d}"
        staging, error = None, ""
        if accelerator.is_main_process:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                recover_interrupted(final)
                staging = new_temporary(final, "checkpoint", COMMAND)
            except (OSError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"
        staging = _shared(accelerator, staging)
        accelerator.wait_for_everyone()
        if not error and staging is not None:
            try:
                write(staging)
            except WRITE_ERRORS as exc:  # safetensors reports a full disk as its own error type
                error = f"{type(exc).__name__}: {exc}"
        elif not error:
            error = "failed on another process"
        failed = torch.tensor([1.0 if error else 0.0], device=accelerator.device)
        failed = accelerator.reduce(failed, reduction="sum") if accelerator.num_processes > 1 else failed
        if float(failed.item()) > 0:
            if accelerator.is_main_process:
                if staging is not None:
                    with contextlib.suppress(OSError):
                        remove_temporary(staging)
                why, previous = error or "failed on another process", self.latest() or "(none yet)"
                message = "could not write checkpoint %s (%s); nothing was lost: the latest checkpoint is still %s."
                logger.error(message, final, why, previous)
            accelerator.wait_for_everyone()
            return None
        if accelerator.is_main_process:
            try:
                self._commit(staging, final)
            except (OSError, ValueError) as exc:
                message = "could not finish checkpoint %s (%s); the latest checkpoint is still %s."
                logger.error(message, final, exc, self.latest())
                with contextlib.suppress(OSError):
                    remove_temporary(staging)
                accelerator.wait_for_everyone()
                return None
            self._rotate(keep=final)
        accelerator.wait_for_everyone()
        return final

    def _commit(self, staging: Path, final: Path) -> None:
        """Record the checkpoint written in ``staging`` and put it in place as ``final`` (one of the same step from
        before is replaced: moved aside, and deleted only once the new one has its name), then point ``latest`` at
        it."""
        write_manifest(staging, COMMAND, (p.name for p in staging.iterdir() if p.is_file()))
        if final.exists():  # never keep a checkpoint of this step from before: the new one replaces it
            logger.warning("replacing the existing checkpoint %s.", final)
        try:
            install_folder(staging, final, COMMAND, overwrite=True)
        finally:
            remove_temporary(staging)  # its marker and folder (the checkpoint itself has its name by now)
        atomic_write_text(self.root / LATEST, final.name + "\n")

    def _rotate(self, keep: Path) -> None:
        found = self.checkpoints()
        for old in found[: max(0, len(found) - self.keep_last)]:
            if old != keep:
                _remove_proven(old)
