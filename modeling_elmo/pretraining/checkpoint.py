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

import contextlib
import json
import logging
import math
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

from ..folders.files import atomic_write_text, follow_umask, remove_tree, replace
from ..folders.run_folder import CHECKPOINT_FILE, read_json_object  # the layout, which --overwrite may delete
from ..utils.io_utils import check_safetensors_header
from .state import MAX_COUNT, TrainingState, shown_count

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


def _cut(value: Any) -> str:
    from ..utils.config_checks import shown

    return shown(value)


#: Optimiser group fields that say how the update is computed on this machine, not what it computes.
_IMPLEMENTATION_FIELDS = frozenset({"foreach", "fused", "capturable", "differentiable"})


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: Optimiser states that are sums of squares: a negative value would make the update NaN.
_NON_NEGATIVE_STATES = frozenset({"exp_avg_sq", "max_exp_avg_sq", "sum"})


def _update_count(value: float, global_step: int) -> bool:
    """Whether ``value`` can be an optimiser's count of updates at ``global_step``: a whole number in [0, global_step]
    (Adam's bias correction divides by ``1 - beta ** step``: 1.5 or 0.25 would scale every update, silently)."""
    return 0 <= value <= global_step and float(value).is_integer()


#: The key of ``trainer_state.json`` listing the parameters that have an optimiser state (absent before it existed).
OPTIMIZER_STATES = "optimizer_states"


def check_optimizer_state(
    optimizer: torch.optim.Optimizer, loaded: dict[str, Any], global_step: int, recorded: Any = None
) -> None:
    """Refuse an optimiser state that would train another model than the run's: its groups' hyperparameters must be
    the run's (all but the learning rate, which the schedule sets), each state tensor must have its parameter's shape
    (only ``step`` may be a scalar, a whole number at most ``global_step``: a scalar moment would broadcast over its
    parameter and train NaN), every value must be finite and sums of squares non-negative, and the parameters with a
    state those ``recorded`` in ``trainer_state.json`` where it records them. `CheckpointError` names the first wrong
    one."""
    own = optimizer.param_groups
    groups = loaded["param_groups"]
    if len(groups) != len(own):
        raise CheckpointError(f"optimizer.json has {len(groups)} parameter groups; the run's optimiser has {len(own)}.")
    params: dict[int, torch.Tensor] = {}
    index = 0
    for number, (saved, mine) in enumerate(zip(groups, own, strict=True)):
        ids = saved.get("params")
        expected = list(range(index, index + len(mine["params"])))
        if ids != expected:
            raise CheckpointError(
                f"optimizer.json: group {number} holds parameters {_cut(ids)}; the run's are {_cut(expected)}."
            )
        params.update(zip(expected, mine["params"], strict=True))
        index += len(expected)
        for key, value in saved.items():
            if key in ("params", *_IMPLEMENTATION_FIELDS):
                continue
            if key not in mine:
                raise CheckpointError(f"optimizer.json: group {number} has an unknown field {_cut(key)}.")
            if key == "lr":
                if not (_finite_number(value) and value >= 0):
                    raise CheckpointError(f"optimizer.json: group {number} has learning rate {_cut(value)}.")
            elif value != mine[key] or type(value) is not type(mine[key]):
                raise CheckpointError(
                    f"optimizer.json: group {number} has {key} {_cut(value)}; the run's arguments give "
                    f"{_cut(mine[key])}."
                )
    if recorded is not None:
        if not (isinstance(recorded, list) and all(type(p) is int for p in recorded)):
            raise CheckpointError(f"trainer_state.json: malformed {OPTIMIZER_STATES} {_cut(recorded)}.")
        missing, extra = sorted(set(recorded) - set(loaded["state"])), sorted(set(loaded["state"]) - set(recorded))
        if missing or extra:
            raise CheckpointError(
                f"optimizer.json holds the state of {len(loaded['state'])} parameters, but the checkpoint recorded "
                f"{len(recorded)}: " + (f"missing {_cut(missing)}" if missing else f"not recorded {_cut(extra)}") + "."
            )
    for param, entries in loaded["state"].items():
        if param not in params:
            raise CheckpointError(f"optimizer.json holds a state for parameter {param}; the model has {len(params)}.")
        shape = tuple(params[param].shape)
        for name, value in entries.items():
            if torch.is_tensor(value):
                if not (name == "step" and value.dim() == 0) and tuple(value.shape) != shape:
                    raise CheckpointError(
                        f"optimizer state {name!r} of parameter {param} has shape {tuple(value.shape)}; the "
                        f"parameter's is {shape}."
                    )
                if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                    raise CheckpointError(f"optimizer state {name!r} of parameter {param} holds non-finite values.")
                if name in _NON_NEGATIVE_STATES and bool((value < 0).any()):
                    raise CheckpointError(f"optimizer state {name!r} of parameter {param} holds negative values.")
                if name == "step" and not _update_count(float(value.reshape(-1)[0]), global_step):
                    raise CheckpointError(
                        f"optimizer state 'step' of parameter {param} is {float(value.reshape(-1)[0]):g}, not a whole "
                        f"number in [0, {global_step}] (the checkpoint's update)."
                    )
            elif not _finite_number(value) or (name == "step" and not _update_count(value, global_step)):
                raise CheckpointError(f"optimizer state {name!r} of parameter {param} is {_cut(value)}.")


def check_scheduler_state(scheduler: Any, saved: dict[str, Any], global_step: int) -> None:
    """Refuse a ``scheduler.json`` that is not the run's schedule at ``global_step``: only the fields the scheduler
    writes, each of its type, the base learning rates of the run's arguments, the position of the checkpoint."""
    fresh = scheduler.state_dict()
    unknown = sorted(set(saved) - set(fresh))
    if unknown:
        raise CheckpointError(f"scheduler.json has fields {_cut(unknown)} that the run's scheduler does not write.")
    for key, value in saved.items():
        mine = fresh[key]
        same_kind = type(value) is type(mine) or (_finite_number(value) and isinstance(mine, float))
        if not same_kind or (isinstance(value, float) and not math.isfinite(value)):
            raise CheckpointError(f"scheduler.json: {key} is {_cut(value)}, not a value of its kind.")
        if key in ("base_lrs", "lr_lambdas") and value != mine:
            raise CheckpointError(
                f"scheduler.json: {key} is {_cut(value)}; the run's arguments give {_cut(mine)} (resume with the run's "
                "own arguments, or start a new run)."
            )
        if isinstance(value, list) and not all(v is None or _finite_number(v) or isinstance(v, dict) for v in value):
            raise CheckpointError(f"scheduler.json: {key} is {_cut(value)}, not a list of numbers.")
    step_field = "last_step" if "last_step" in fresh else "last_epoch"
    if saved.get(step_field) != global_step:
        raise CheckpointError(
            f"scheduler.json: {step_field} is {_cut(saved.get(step_field))}, but the checkpoint is at update "
            f"{global_step}."
        )
    for key in ("anchor_progress", "anchor_clock", "progress_per_update"):
        if key in saved and not 0 <= saved[key] <= 1:
            raise CheckpointError(f"scheduler.json: {key} is {_cut(saved[key])}, not in [0, 1].")
    if "anchor_step" in saved and not 0 <= saved["anchor_step"] <= global_step:
        raise CheckpointError(f"scheduler.json: anchor_step is {saved['anchor_step']}, after update {global_step}.")


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


def _words(values: Any, count: int, bound: int) -> bool:
    return isinstance(values, list) and len(values) == count and all(type(v) is int and 0 <= v < bound for v in values)


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Restore the generators `rng_state` saved; raises `CheckpointError` (nothing restored) for a state that is not
    of their form."""
    own = torch.get_rng_state()
    for key, value in tensors.items():
        if not (key == "torch" or (key.startswith("cuda.") and key[5:].isdecimal())):
            raise CheckpointError(f"random state file holds an unknown tensor {_cut(key)}.")
        if value.dtype != torch.uint8 or value.dim() != 1 or (key == "torch" and value.shape != own.shape):
            raise CheckpointError(f"random state {key!r} has dtype {value.dtype} and shape {tuple(value.shape)}.")
    if "torch" not in tensors:
        raise CheckpointError("random state file holds no 'torch' generator state.")
    python, numpy_state = meta.get("python"), meta.get("numpy")
    if not (
        isinstance(python, list)
        and len(python) == 3
        and python[0] == 3
        and _words(python[1], 625, 1 << 32)
        and python[1][-1] <= 624
        and (python[2] is None or _finite_number(python[2]))
    ):
        raise CheckpointError(f"random state 'python' is {_cut(python)}, not a Mersenne Twister state.")
    if not (
        isinstance(numpy_state, list)
        and len(numpy_state) == 5
        and numpy_state[0] == "MT19937"
        and _words(numpy_state[1], 624, 1 << 32)
        and type(numpy_state[2]) is int
        and 0 <= numpy_state[2] <= 624
        and numpy_state[3] in (0, 1)
        and _finite_number(numpy_state[4])
    ):
        raise CheckpointError(f"random state 'numpy' is {_cut(numpy_state)}, not a Mersenne Twister state.")
    try:
        torch.set_rng_state(tensors["torch"])
    except RuntimeError as error:
        raise CheckpointError(f"random state 'torch' is not a generator state ({error}).") from None
    cuda = [tensors[k] for k in sorted((k for k in tensors if k.startswith("cuda.")), key=lambda k: int(k[5:]))]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss = python
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = numpy_state
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
    # which parameters have an optimiser state, kept apart from optimizer.json: a state dropped there (a parameter's
    # moments and count restarting at zero on resume) is found by the comparison in `check_optimizer_state`
    trainer_state = {**trainer_state, OPTIMIZER_STATES: sorted(int(param) for param in meta["state"])}
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


def _remove_quietly(folder: Path) -> None:
    """Remove a checkpoint folder of the run's own ``checkpoints/`` (`files.remove_tree`); one that cannot be
    removed stays (the next save tries again)."""
    with contextlib.suppress(OSError):
        remove_tree(folder)


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
                if os.path.lexists(tmp):
                    remove_tree(tmp)
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
                _remove_quietly(tmp)
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
                _remove_quietly(tmp)
                accelerator.wait_for_everyone()
                return None
            self._rotate(keep=final)
        accelerator.wait_for_everyone()
        return final

    def _commit(self, tmp: Path, final: Path) -> None:
        old = self.root / f".old-{final.name}"
        if final.exists():  # never keep a checkpoint of this step from before: the new one replaces it
            logger.warning("replacing the existing checkpoint %s.", final)
            _remove_quietly(old)
            replace(final, old)
        replace(tmp, final)
        atomic_write_text(self.root / LATEST, final.name + "\n")
        _remove_quietly(old)

    def _rotate(self, keep: Path) -> None:
        found = self.checkpoints()
        for old in found[: max(0, len(found) - self.keep_last)]:
            if old != keep:
                _remove_quietly(old)
        for stale in [*self.root.glob(".tmp-step_*"), *self.root.glob(".old-step_*")]:
            _remove_quietly(stale)
