"""What every loader of the package checks in a model's weights before and after it loads them: the safetensors
headers against the shapes the config implies (before anything is allocated), transformers' loading info (nothing
missing, unexpected or of another shape), and finite values. What the loaders check in the config is
`modeling_elmo.utils.config_checks`.

Not part of the Hub code files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from .earlier_formats import check_no_legacy_clash, legacy_keys, upgrade_hint

#: How many tensor names an error message lists before it says "and N more".
_LISTED = 8


def _listed(names: Sequence[str]) -> str:
    names = sorted(names)
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return ", ".join(names[:_LISTED]) + more


def check_loading_info(
    location: str,
    info: dict[str, Any],
    *,
    ignore_missing: tuple[str, ...] = (),
    ignore_unexpected: tuple[str, ...] = (),
) -> None:
    """Raise `ValueError` naming the tensors when ``from_pretrained``'s loading info (with
    ``ignore_mismatched_sizes=True``) shows missing weights, unexpected ones or other shapes than the config implies
    (weights whose names start with ``ignore_missing`` / ``ignore_unexpected`` aside)."""
    missing = sorted(k for k in info.get("missing_keys") or () if not k.startswith(ignore_missing))
    unexpected = sorted(k for k in info.get("unexpected_keys") or () if not k.startswith(ignore_unexpected))
    mismatched = sorted(info.get("mismatched_keys") or ())
    problems = []
    if missing:
        problems.append(f"{len(missing)} biLM weight(s) missing ({_listed(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected tensor(s) ({_listed(unexpected)})")
    if mismatched:
        shapes = [f"{key} {tuple(saved)} vs {tuple(wanted)}" for key, saved, wanted in mismatched]
        problems.append(
            f"{len(mismatched)} tensor(s) with another shape than config.json implies, saved vs "
            f"expected ({_listed(shapes)})"
        )
    if problems:
        advice = f"; {upgrade_hint(location)}" if legacy_keys(unexpected) else ". Refusing to run a partly random model"
        raise ValueError(
            f"the weights of model {location!r} do not match its config.json: {'; '.join(problems)}{advice}."
        )


def check_safetensors_files(folder: str | os.PathLike) -> dict[str, Any]:
    """`modeling_elmo.utils.io_utils.check_safetensors_header` for every ``*.safetensors`` file of ``folder``: a
    truncated or damaged file is a one-line `ValueError` before anything is allocated for it. Returns the tensors that
    the model's weight files (``model.safetensors``, or the shards its ``model.safetensors.index.json`` lists) declare,
    name -> header entry."""
    from .io_utils import check_safetensors_header, read_json_object

    headers = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".safetensors") and os.path.isfile(path):
            headers[name] = check_safetensors_header(path)
    index = read_json_object(os.path.join(folder, "model.safetensors.index.json"), "weights index")
    weight_map = (index or {}).get("weight_map")
    shards = (
        {v for v in weight_map.values() if isinstance(v, str)}
        if isinstance(weight_map, dict)
        else {"model.safetensors"}
    )
    return {
        key: entry for shard in sorted(shards) for key, entry in headers.get(shard, {}).items() if key != "__metadata__"
    }


def check_weights_fit_config(
    folder: str | os.PathLike,
    model_class: type,
    config: Any,
    *,
    ignore_missing: tuple[str, ...] = (),
    ignore_unexpected: tuple[str, ...] = (),
) -> None:
    """Compare the parameter shapes ``config`` implies for ``model_class`` with the tensors the safetensors headers
    of ``folder`` declare, before anything is allocated: the model is built on the meta device (shapes, no
    memory). A `config.json` declaring 16384-wide layers beside a small ``model.safetensors`` is then the one-line
    `ValueError` of `check_loading_info` instead of an allocation of tens of GB."""
    declared = check_safetensors_files(folder)
    check_no_legacy_clash(declared, f"model {os.fspath(folder)!r}")
    if not any(
        os.path.isfile(os.path.join(folder, name)) for name in ("model.safetensors", "model.safetensors.index.json")
    ):
        return  # no weights at all: from_pretrained says so
    prefix = f"{model_class.base_model_prefix}." if model_class.base_model_prefix else ""

    def key(name: str) -> str:  # transformers adds or strips the base model's prefix as the classes need
        return name[len(prefix) :] if prefix and name.startswith(prefix) else name

    held = sum(1 for name in declared if not key(name).startswith(ignore_unexpected))
    layers, highways = config.num_hidden_layers, config.num_highway_layers
    needed = 2 * layers + highways + len(config.char_cnn_filters)  # each at least one tensor: counted, not built
    if held < needed:
        raise ValueError(
            f"the weights of model {os.fspath(folder)!r} do not match its config.json: its {layers} LSTM layer(s) "
            f"per direction, {highways} highway layer(s) and {len(config.char_cnn_filters)} character filter(s) need "
            f"at least {needed:,} tensors; the weights hold {held:,}. Refusing to run a partly random model."
        )
    with torch.device("meta"):
        model = model_class(config)
    state = model.state_dict()  # once: every call builds the whole mapping anew
    wanted = {key(name): tuple(tensor.shape) for name, tensor in state.items()}
    saved = {key(name): tuple(int(n) for n in entry["shape"]) for name, entry in declared.items()}
    with_prefix = {name: f"{prefix}{name}" if prefix and f"{prefix}{name}" in state else name for name in wanted}
    info = {
        "missing_keys": [with_prefix[name] for name in wanted if name not in saved],
        "unexpected_keys": [name for name in declared if key(name) not in wanted],  # as the file names them
        "mismatched_keys": [
            (with_prefix[name], saved[name], shape)
            for name, shape in wanted.items()
            if name in saved and saved[name] != shape
        ],
    }
    check_loading_info(os.fspath(folder), info, ignore_missing=ignore_missing, ignore_unexpected=ignore_unexpected)


def refuse_nonfinite_weights(model: torch.nn.Module, location: str) -> None:
    """Raise `ValueError` naming the tensors of ``model`` that hold NaN or an infinity (every output would be NaN)."""
    bad = [
        name
        for name, tensor in model.state_dict().items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        raise ValueError(
            f"the weights of model {location!r} hold NaN or infinite values in {len(bad)} tensor(s) "
            f"({_listed(bad)}); every vector computed from them would be NaN. Refusing to run it."
        )


__all__ = ["check_loading_info", "check_safetensors_files", "check_weights_fit_config", "refuse_nonfinite_weights"]
