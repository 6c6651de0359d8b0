"""Atomic, rotating training checkpoints that load without unpickling anything.

Layout under ``<output_dir>/checkpoints/``: ``step_00001000/`` holds ``trainer_state.json`` (`TrainingState`, the
run's identity, every process's data position), ``model.safetensors``, ``optimizer.safetensors`` + ``optimizer.json``
(its tensors, and the rest of its state dict), ``scheduler.json``, ``scaler.json`` (fp16), ``rng_state_<R>.safetensors``
+ ``.json`` (process R's random generators), ``best_model.safetensors`` (--load-best-model-at-end), ``vocab.txt`` and
``char_vocab.json``; ``latest`` names the newest complete one.

Checkpoints are untrusted input: only safetensors and JSON are read, and a folder holding any other file (a pickle
such as accelerate's ``custom_checkpoint_0.pkl``) is refused, naming the files. A checkpoint is written into
``.tmp-step_N`` and renamed once every process is done; only then is ``latest`` replaced and old ones deleted, so a
kill or a full disk leaves ``latest`` naming a complete checkpoint (one of the same step is replaced).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError

from ..folders.run_folder import CHECKPOINT_FILE, read_json_object  # the layout, which --overwrite may delete
from ..utils.io_utils import atomic_write_text, check_safetensors_header, follow_umask
from .state import TrainingState

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
LATEST = "latest"
MODEL_FILE = "model.safetensors"
BEST_MODEL_FILE = "best_model.safetensors"
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: incomplete, from another run, or holding files this package never loads."""


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
    state = {}
    for param, entries in meta["state"].items():
        state[int(param)] = {
            name: tensors[value["tensor"]] if isinstance(value, dict) and "tensor" in value else value
            for name, value in entries.items()
        }
    groups = [
        dict(group, betas=tuple(group["betas"])) if "betas" in group else dict(group) for group in meta["param_groups"]
    ]
    return {"state": state, "param_groups": groups}


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """This process's random generators: torch (and CUDA) as tensors, Python and numpy as JSON."""
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors.update({f"cuda.{i}": t for i, t in enumerate(torch.cuda.get_rng_state_all())})
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return tensors, {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted((k for k in tensors if k.startswith("cuda.")), key=lambda k: int(k[5:]))]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


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
    atomic_write_text(folder / STATE_FILE, json.dumps(trainer_state, indent=1, sort_keys=True))


def check_checkpoint_files(folder: Path) -> None:
    """Refuse a checkpoint folder holding anything but the files `write_training_files` writes (pickles above all)."""
    from ..utils.loading import refuse_pickled_weights

    refuse_pickled_weights(folder)
    unknown = sorted(p.name for p in folder.iterdir() if not (p.is_file() and CHECKPOINT_FILE.fullmatch(p.name)))
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
        raise CheckpointError(f"checkpoint {str(folder)!r}: {error}") from None
    positions = data.get("positions")
    if not (
        isinstance(positions, list)
        and all(isinstance(p, list) and len(p) == 2 and all(type(v) is int and v >= 0 for v in p) for p in positions)
        and positions
    ):
        raise CheckpointError(f"checkpoint {str(folder)!r}: malformed data positions {positions!r}.")
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
    model.load_state_dict(weights, strict=True)
    optimizer.load_state_dict(
        optimizer_from_files(_load_tensors(folder / "optimizer.safetensors"), _read_json(folder / "optimizer.json"))
    )
    scheduler.load_state_dict(_read_json(folder / "scheduler.json"))
    if scaler is not None and (folder / "scaler.json").is_file():
        scaler.load_state_dict(_read_json(folder / "scaler.json"))
    rng = folder / f"rng_state_{rank}"
    if rng.with_suffix(".safetensors").is_file():
        set_rng_state(_load_tensors(rng.with_suffix(".safetensors")), _read_json(rng.with_suffix(".json")))
    else:
        logger.warning(
            "checkpoint %s has no random state of process %d: its random streams start afresh.", folder, rank
        )
    return saved


# ----------------------------------------------------------------------------------------------- the folder
#: What a failed write raises: `OSError`, or safetensors' `SafetensorError` (e.g. "No space left on device").
WRITE_ERRORS = (OSError, SafetensorError)


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
    def save(self, accelerator: Any, step: int, write: Callable[[Path], None]) -> Path | None:
        """Save on every process (collective): ``write(folder)`` writes this process's files. Returns the folder, or
        `None` if writing failed anywhere (logged, naming the checkpoint that stays valid)."""
        name = f"step_{step:08d}"
        final, tmp = self.root / name, self.root / f".tmp-{name}"
        error = ""
        if accelerator.is_main_process:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                if tmp.exists():
                    shutil.rmtree(tmp)
                tmp.mkdir()
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc}"
        accelerator.wait_for_everyone()
        if not error:
            try:
                write(tmp)
            except WRITE_ERRORS as exc:  # safetensors reports a full disk as its own error type
                error = f"{type(exc).__name__}: {exc}"
        failed = torch.tensor([1.0 if error else 0.0], device=accelerator.device)
        failed = accelerator.reduce(failed, reduction="sum") if accelerator.num_processes > 1 else failed
        if float(failed.item()) > 0:
            if accelerator.is_main_process:
                shutil.rmtree(tmp, ignore_errors=True)
                why, previous = error or "failed on another process", self.latest() or "(none yet)"
                message = "could not write checkpoint %s (%s); nothing was lost: the latest checkpoint is still %s."
                logger.error(message, final, why, previous)
            accelerator.wait_for_everyone()
            return None
        if accelerator.is_main_process:
            try:
                self._commit(tmp, final)
            except OSError as exc:
                message = "could not finish checkpoint %s (%s); the latest checkpoint is still %s."
                logger.error(message, final, exc, self.latest())
                shutil.rmtree(tmp, ignore_errors=True)
                accelerator.wait_for_everyone()
                return None
            self._rotate(keep=final)
        accelerator.wait_for_everyone()
        return final

    def _commit(self, tmp: Path, final: Path) -> None:
        old = self.root / f".old-{final.name}"
        if final.exists():  # never keep a checkpoint of this step from before: the new one replaces it
            logger.warning("replacing the existing checkpoint %s.", final)
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        atomic_write_text(self.root / LATEST, final.name + "\n")
        shutil.rmtree(old, ignore_errors=True)

    def _rotate(self, keep: Path) -> None:
        found = self.checkpoints()
        for old in found[: max(0, len(found) - self.keep_last)]:
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)
        for stale in [*self.root.glob(".tmp-step_*"), *self.root.glob(".old-step_*")]:
            shutil.rmtree(stale, ignore_errors=True)
