"""The checks a training checkpoint passes before it is resumed: its optimiser state (every parameter's, finite, of
the run's parameter groups), its schedule, and the random generators' states (`set_rng_state`); a checkpoint that
fails one is a `CheckpointError` naming what is wrong. Read by `modeling_elmo.pretraining.checkpoint`."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import torch

__all__ = ["CheckpointError", "check_optimizer_state", "check_scheduler_state", "rng_state", "set_rng_state"]


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: incomplete, from another run, or holding files this package never loads."""


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
