"""What earlier versions of this package saved in another format than today's, and how today reads it: the
``config.json`` sizes of before ``projection_dim`` and the LSTM parameter names of before the LSTM transforms were
modules. The shipped model files read today's format only; ``elmo upgrade FOLDER``
(`modeling_elmo.conversion.upgrade`) rewrites an older folder, and the package's loaders refuse one with a line
naming that command (`upgrade_hint`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: Keys of folders saved while the LSTM transforms were bare parameters -> today's keys (regex -> replacement).
LEGACY_KEY_MAPPING = {
    r"_layers\.(\d+)\.weight_ih$": r"_layers.\1.input_transform.weight",
    r"_layers\.(\d+)\.bias$": r"_layers.\1.input_transform.bias",
    r"_layers\.(\d+)\.weight_hh$": r"_layers.\1.recurrent_transform.weight",
    r"_layers\.(\d+)\.weight_hr$": r"_layers.\1.projection.weight",
}


def renamed_legacy_key(key: str) -> str:
    """``key`` with an older LSTM parameter name replaced by today's (`LEGACY_KEY_MAPPING`); other keys unchanged."""
    for pattern, replacement in LEGACY_KEY_MAPPING.items():
        key = re.sub(pattern, replacement, key)
    return key


def legacy_keys(keys: Iterable[object]) -> list[str]:
    """The keys among ``keys`` that are older LSTM parameter names, sorted."""
    return sorted(key for key in keys if isinstance(key, str) and renamed_legacy_key(key) != key)


def check_no_legacy_clash(keys: Iterable[object], source: str) -> bool:
    """Whether ``keys`` (a checkpoint's tensor names) hold older LSTM names; `ValueError` where one of them and its
    current name are both there: renaming would keep one or the other tensor, a mix of two models."""
    keys = {key for key in keys if isinstance(key, str)}
    older = legacy_keys(keys)
    clash = next((key for key in older if renamed_legacy_key(key) in keys), None)
    if clash is not None:
        raise ValueError(
            f"{source} holds both {clash!r} (an older LSTM parameter name) and {renamed_legacy_key(clash)!r} (its "
            "current name): it mixes two checkpoints; keep one of the two tensors."
        )
    return bool(older)


def upgrade_hint(folder: str | os.PathLike) -> str:
    """The end of the line with which the package's loaders refuse a folder in an earlier version's format."""
    return f"the folder was saved by an earlier version of this package: run `elmo upgrade {os.fspath(folder)}` once"


def upgraded_config(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The config dict in today's meaning where it was saved before ``projection_dim`` (``hidden_size`` held P),
    else `None`. A dict is of that format when it has ``hidden_size`` and no ``projection_dim`` and was written by
    ``save_pretrained`` (it names a ``transformers_version``): today's ``save_pretrained`` writes both sizes."""
    if "projection_dim" in config or "hidden_size" not in config or "transformers_version" not in config:
        return None
    upgraded = dict(config)
    upgraded["projection_dim"] = size = upgraded.pop("hidden_size")
    if isinstance(size, int) and not isinstance(size, bool):
        upgraded["hidden_size"] = 2 * size
    return upgraded
