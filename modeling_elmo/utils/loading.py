"""Where a model comes from, and what every loader of the package checks before it reads one.

* A model location is a local folder or a Hub id. `check_model_location` decides which, without a request when it
  can: a location that looks like a path (``./x``, ``/x``, ``~/x``, ``a/b/c``, ``runs/x`` where ``runs/`` is a local
  folder, anything that is not a valid Hub id) and does not exist is a local error at once; a Hub id is looked for in
  the local cache in offline mode (``HF_HUB_OFFLINE=1``), and otherwise fails within seconds when the Hub cannot be
  reached (`HubUnreachableError`), instead of after the Hub client's retries.
* `refuse_pickled_weights` is the package's one guard against unpickling a model folder: every loader of folders
  from elsewhere (and the publisher) calls it.
* `check_config` is what the package's loaders and converters check in a config beyond its values (which `ElmoConfig`
  validates itself): a bound on the parameters it implies, checked before anything is allocated, and a warning for
  keys that look like a misspelt field.

Not part of the Hub code files.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from . import io_utils

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_PARAMETERS_LIMIT",
    "HubUnreachableError",
    "check_config",
    "check_model_location",
    "implied_num_parameters",
    "looks_like_local_path",
    "refuse_pickled_weights",
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
    from huggingface_hub import constants, is_offline_mode, try_to_load_from_cache

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


# ----------------------------------------------------------------------------------------------- configs
#: A model of more parameters than this (40 GB of float32; the largest released model has 94 M) cannot be what a
#: config or options file was meant to describe.
MAX_PARAMETERS_LIMIT = 10**10


def implied_num_parameters(config: Any) -> int:
    """How many parameters the model an `ElmoConfig` describes has (the language model's softmax included),
    computed from the sizes alone: nothing is allocated."""
    d_c, F, P, H = config.char_embedding_dim, config.num_char_cnn_filters, config.projection_dim, config.cell_size
    characters = config.num_characters * d_c + sum(w * d_c * n + n for w, n in config.char_cnn_filters)
    highways = config.num_highway_layers * 2 * (F * F + F)
    lstms = 2 * config.num_hidden_layers * (8 * H * P + 4 * H + H * P)
    words = config.word_input_vocab_size * config.word_input_dim if config.word_input_vocab_size else 0
    return characters + words + highways + config.token_features_size * P + P + lstms + config.vocab_size * (P + 1)


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, with a swap of two neighbouring characters counted as one edit."""
    previous2, previous = None, list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
            if previous2 is not None and i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        previous2, previous = previous, current
    return previous[-1]


def _close_field(key: str, fields: list[str]) -> str | None:
    """The field ``key`` is most likely a misspelling of: at most 2 edits away (1 for names of up to 6 characters),
    or the same words in another order; `None` when no field is that close."""
    allowed = 1 if len(key) <= 6 else 2
    best = min(fields, key=lambda name: (_edit_distance(key.lower(), name), name))
    if _edit_distance(key.lower(), best) <= allowed:
        return best
    words = sorted(key.lower().split("_"))
    return next((name for name in fields if sorted(name.split("_")) == words), None)


def check_config(config: Any, source: str = "the config") -> None:
    """Raise `ValueError` when ``config`` (an `ElmoConfig`) describes more than `MAX_PARAMETERS_LIMIT` parameters;
    log a warning for each key that is no ELMo field but is close to one (``hiden_size``: it is kept as an attribute
    and does not set ``hidden_size``)."""
    from transformers import PretrainedConfig

    from ..configuration_elmo import _ELMO_FIELDS

    implied = implied_num_parameters(config)
    if implied > MAX_PARAMETERS_LIMIT:
        raise ValueError(
            f"{source} describes a model of {implied:.3g} parameters (char_cnn_filters: "
            f"{config.num_char_cnn_filters:,} filters, projection_dim {config.projection_dim}, cell_size "
            f"{config.cell_size}, vocab_size {config.vocab_size}), more than the "
            f"{MAX_PARAMETERS_LIMIT:.0e} this package builds; the file is damaged or not meant for it."
        )
    fields = sorted(_ELMO_FIELDS)
    known = set(PretrainedConfig().to_dict()) | set(_ELMO_FIELDS)
    for key in sorted(set(config.to_dict()) - known):
        close = None if key.startswith("_") else _close_field(key, fields)
        if close is not None:
            logger.warning(
                f"{source} has the unknown field {key!r}: did you mean {close!r}? It is kept as an "
                f"attribute and does not set {close!r}."
            )
