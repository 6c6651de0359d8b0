"""Where a model comes from, and what every loader of the package checks before it reads one.

* A model location is a local folder or a Hub id. `check_model_location` decides which, without a request when it
  can: a location that looks like a path (``./x``, ``/x``, ``~/x``, ``a/b/c``, ``runs/x`` where ``runs/`` is a local
  folder, anything that is not a valid Hub id) and does not exist is a local error at once; a Hub id is looked for in
  the local cache in offline mode (``HF_HUB_OFFLINE=1``), and otherwise fails within seconds when the Hub cannot be
  reached (`HubUnreachableError`), instead of after the Hub client's retries.
* `refuse_pickled_weights` is the package's one guard against unpickling a model folder: every loader of folders
  from elsewhere (and the publisher) calls it.
* What the loaders check in a model's config is `modeling_elmo.utils.config_checks`.

Not part of the Hub code files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from . import io_utils

logger = logging.getLogger(__name__)

__all__ = [
    "HubUnreachableError",
    "check_model_location",
    "looks_like_local_path",
    "refuse_pickled_weights",
    "without_transformers_progress_bars",
]


class HubUnreachableError(ValueError):
    """Something had to come from the Hugging Face Hub, the Hub cannot be reached, and there is no local copy."""


# ----------------------------------------------------------------------------------------------- locations
def looks_like_local_path(location: str) -> bool:
    """Whether ``location`` can only be meant as a local path: it starts with ``.``, ``/`` or ``~``, holds a
    backslash, more than one ``/`` or a trailing one, its first component is a local folder, or it is not a valid
    Hub id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if location.startswith((".", "/", "~")) or "\\" in location or location.endswith("/") or location.count("/") > 1:
        return True
    if os.sep != "/" and os.sep in location:
        return True
    if "/" in location and os.path.isdir(location.split("/", 1)[0]):
        return True
    try:
        validate_repo_id(location)
    except HFValidationError:
        return True
    return False


def check_model_location(location: str | os.PathLike, what: str = "model", filename: str = "config.json") -> bool:
    """Return True for an existing local path, False for a Hub id worth asking for; otherwise raise at once.

    Raises `ValueError` ``"<what> '<location>' does not exist (no such folder)"`` for a missing local-looking path,
    or for a Hub id that is not in the local cache in offline mode; `HubUnreachableError` (within seconds: one TCP
    connection attempt) for a Hub id when the Hub cannot be reached.
    """
    from huggingface_hub import constants, try_to_load_from_cache

    from .compat import is_offline_mode

    location = os.fspath(location)
    if os.path.exists(location):
        return True
    if looks_like_local_path(location):
        raise ValueError(f"{what} {location!r} does not exist (no such folder)")
    if is_offline_mode():
        if not isinstance(try_to_load_from_cache(location, filename), str):
            raise ValueError(
                f"{what} {location!r} does not exist: no such folder, and no Hub model of that name in "
                "the local cache (offline mode, HF_HUB_OFFLINE=1)."
            )
        return False
    if not io_utils.hub_reachable():
        raise HubUnreachableError(
            f"{what} {location!r} is not a local folder, and the Hugging Face Hub ({constants.ENDPOINT}) cannot be "
            "reached to download it: check the path, or set HF_HUB_OFFLINE=1 to use a copy in the local cache."
        )
    return False


# ----------------------------------------------------------------------------------------------- pickles
#: Weight files that would be unpickled by a loader (arbitrary code execution): refused everywhere.
_PICKLED_WEIGHTS = re.compile(r"(pytorch_model.*\.bin|.*\.(pt|pth|ckpt)|pytorch_model\.bin\.index\.json)")
#: Files of a training run that are pickles but are never loaded nor uploaded here.
_TRAINING_STATE = re.compile(
    r"(optimizer|scheduler|scaler|rng_state.*|training_args|random_states_\d+)\.(pt|pth|bin|pkl)"
)


def refuse_pickled_weights(folder: str | os.PathLike) -> None:
    """Raise `ValueError` if ``folder`` holds weights that only a pickle loader can read.

    ``pytorch_model.bin`` (and ``*.pt``/``*.pth``/``*.ckpt`` files other than a training run's optimizer,
    scheduler and RNG states) are pickles: loading one runs whatever code its author put in it. This package
    loads and publishes ``model.safetensors`` only. A path that is not a folder (a Hub id) passes.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    found = sorted(
        p.name
        for p in folder.iterdir()
        if p.is_file() and _PICKLED_WEIGHTS.fullmatch(p.name) and not _TRAINING_STATE.fullmatch(p.name)
    )
    if found:
        raise ValueError(
            f"{folder} holds pickled weights {found}: loading a pickle can run arbitrary code, so this package "
            "refuses it and loads safetensors only. If you trust the file, convert it once in a trusted "
            "environment (load it, then `model.save_pretrained(folder)` writes model.safetensors) and remove the "
            "pickle."
        )


@contextlib.contextmanager
def without_transformers_progress_bars() -> Iterator[None]:
    """transformers' "Loading weights" bars off while a command that draws its own progress (or none) loads a model."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()
