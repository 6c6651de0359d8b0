"""``elmo upgrade FOLDER``: a model folder saved by an earlier version of this package, rewritten in place in
today's format, so that transformers (and the folder's own code, with ``trust_remote_code=True``) load it as it is.

Two formats of earlier versions are upgraded:

* ``config.json`` without ``projection_dim``: ``hidden_size`` then held the per-direction projection P; it becomes
  ``projection_dim: P, hidden_size: 2 * P`` (the width of ``last_hidden_state``).
* LSTM parameters saved while the LSTM transforms were bare parameters (``...layers.L.weight_ih``, ``bias``,
  ``weight_hh``, ``weight_hr``): renamed ``input_transform.weight``, ``input_transform.bias``,
  ``recurrent_transform.weight``, ``projection.weight`` (`LEGACY_KEY_MAPPING`), in ``model.safetensors`` or in each
  shard that ``model.safetensors.index.json`` lists, and in the index.

A checkpoint holding an older name and its current name is refused (`check_no_legacy_clash`): it mixes two models.
Each file is replaced atomically (the weights first, ``config.json`` last), so an interrupted upgrade leaves every file
whole and running the command again finishes it; a folder already in today's format is left as it is. The files are
read without following a link, and a file with another name (a hard link) is refused: its other name would change too.
The shipped model files read today's format only; the package's own loaders refuse an older folder with a line
naming this command.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..folders.files import atomic_write_bytes
from ..folders.opening import open_regular
from ..utils.earlier_formats import check_no_legacy_clash, renamed_legacy_key, upgraded_config
from ..utils.io_utils import check_safetensors_header

COMMAND = "elmo upgrade"


def _read(path: Path, what: str) -> bytes:
    """The bytes of ``path``: a regular file of one name (no link followed), else a one-line `ValueError`."""
    fd = open_regular(path, os.O_RDONLY, what, alone=True)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _renamed_safetensors(path: Path) -> bytes | None:
    """The bytes of the safetensors file ``path`` with its older LSTM names renamed (the tensors' bytes and offsets
    as they are), or `None` when it holds none; a damaged file is the one line of `check_safetensors_header`."""
    data = _read(path, "weights file")
    header = check_safetensors_header(path)
    if not check_no_legacy_clash(header, f"the weights file {str(path)!r}"):
        return None
    tensors = data[8 + int.from_bytes(data[:8], "little") :]
    text = json.dumps({renamed_legacy_key(key): entry for key, entry in header.items()}).encode()
    text += b" " * (-len(text) % 8)  # the tensors' start stays 8-byte aligned, as the safetensors writer keeps it
    return len(text).to_bytes(8, "little") + text + tensors


def planned_changes(folder: str | os.PathLike) -> list[tuple[Path, bytes, str]]:
    """What upgrading ``folder`` writes: (file, its new bytes, what changes), weights first, ``config.json`` last;
    empty for a folder in today's format. Raises a one-line `ValueError` for what it cannot upgrade."""
    folder = Path(folder)
    config_path = folder / "config.json"
    if not folder.is_dir() or not os.path.lexists(config_path):
        raise ValueError(f"{str(folder)!r} is not a model folder (no config.json in it).")
    try:
        config = json.loads(_read(config_path, "config file"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"the config file {str(config_path)!r} is not valid JSON ({error}).") from None
    if not isinstance(config, dict) or config.get("model_type") != "elmo":
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise ValueError(f"{str(folder)!r} does not hold an ELMo model (model_type {found!r}, not 'elmo').")
    changes = []
    index_path = folder / "model.safetensors.index.json"
    if os.path.lexists(index_path):
        try:
            index = json.loads(_read(index_path, "weights index"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            raise ValueError(f"the weights index {str(index_path)!r} is not valid JSON ({error}).") from None
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"the weights index {str(index_path)!r} has no weight_map of file names.")
        for shard in sorted(set(weight_map.values())):
            if Path(shard).name != shard:
                raise ValueError(f"the weights index {str(index_path)!r} names {shard!r}, not a file of the folder.")
            if (renamed := _renamed_safetensors(folder / shard)) is not None:
                changes.append((folder / shard, renamed, "the older LSTM parameter names renamed"))
        if check_no_legacy_clash(weight_map, f"the weights index {str(index_path)!r}"):
            index["weight_map"] = {renamed_legacy_key(key): shard for key, shard in weight_map.items()}
            text = json.dumps(index, indent=2, sort_keys=True) + "\n"
            changes.append((index_path, text.encode(), "the older LSTM parameter names renamed"))
    elif os.path.lexists(folder / "model.safetensors"):
        if (renamed := _renamed_safetensors(folder / "model.safetensors")) is not None:
            changes.append((folder / "model.safetensors", renamed, "the older LSTM parameter names renamed"))
    if (upgraded := upgraded_config(config)) is not None:
        sizes = f"projection_dim {upgraded['projection_dim']!r}, hidden_size {upgraded.get('hidden_size')!r}"
        text = json.dumps(upgraded, indent=2, sort_keys=True) + "\n"
        changes.append((config_path, text.encode(), f"hidden_size held the projection: now {sizes}"))
    return changes


def upgrade_folder(folder: str | os.PathLike, *, dry_run: bool = False) -> list[str]:
    """Upgrade ``folder`` in place (`planned_changes`, each file replaced atomically); returns one line per file
    changed (or that would change, with ``dry_run``)."""
    lines = []
    for path, data, what in planned_changes(folder):
        if not dry_run:
            atomic_write_bytes(path, data)
        lines.append(f"{path.name}: {what}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="elmo upgrade",
        description="Rewrite a model folder saved by an earlier version of this package in today's format, in place "
        "(config.json's sizes, the LSTM parameter names); a folder in today's format is left as it is.",
    )
    parser.add_argument("folder", help="the model folder (config.json, model.safetensors)")
    parser.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    args = parser.parse_args(argv)
    try:
        lines = upgrade_folder(args.folder, dry_run=args.dry_run)
    except (OSError, ValueError) as error:
        from ..utils.io_utils import command_error

        raise command_error("upgrade", error) from None
    verb = "would change" if args.dry_run else "changed"
    for line in lines:
        print(f"{COMMAND}: {verb} {line}")
    if not lines:
        print(f"{COMMAND}: {args.folder} is already in today's format; nothing changed")
    return 0
