"""Pretraining recipes and model presets: the packaged ``configuration/`` folder (presets, ``recipes/``,
``accelerate/``, found installed or in a checkout by `modeling_elmo.utils.package_data`), the packaged corpora of
``--train-file builtin:NAME``, and the YAML recipe reader (`load_recipe`: keys of `PretrainingArguments`, values of
each field's kind, no aliases, a bounded size; one line naming the recipe and the key for anything else).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import yaml

from ..utils.config_checks import shown
from ..utils.io_utils import error_line
from ..utils.package_data import data_folder
from .options import ARGUMENT_NAMES, PretrainingArguments

#: ``--train-file builtin:NAME`` (or ``builtin:NAME/SPLIT``) names a corpus shipped in `modeling_elmo.corpora`.
BUILTIN_PREFIX = "builtin:"
BUILTIN_SPLITS = ("train", "validation", "test")


# ----------------------------------------------------------------------------------------------- packaged files
def configuration_files() -> Path:
    """The ``configuration/`` folder (presets, ``recipes/``, ``accelerate/``): installed or a checkout's
    (`utils.package_data.data_folder`)."""
    return data_folder("configuration")


def preset_names() -> list[str]:
    return sorted(
        p.name[:-5] for p in configuration_files().iterdir() if p.name.startswith("elmo-") and p.name.endswith(".json")
    )


def recipe_names() -> list[str]:
    return sorted(p.name[:-5] for p in (configuration_files() / "recipes").iterdir() if p.name.endswith(".yaml"))


def read_model_preset(name_or_path: str) -> dict[str, Any]:
    """The config dict of a preset name (``elmo-tiny`` or ``tiny``) or of a ``config.json`` path."""
    if os.path.isfile(name_or_path):
        text = Path(name_or_path).read_text(encoding="utf-8")
    else:
        stem = name_or_path[:-5] if name_or_path.endswith(".json") else name_or_path
        found = [configuration_files() / f"{n}.json" for n in (stem, f"elmo-{stem}")]
        found = [p for p in found if p.is_file()]
        if not found:
            raise ValueError(
                f"--model-config {name_or_path!r} is neither a file nor a preset ({', '.join(preset_names())})."
            )
        text = found[0].read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"--model-config {name_or_path!r} is not valid JSON ({error}).") from None
    if not isinstance(data, dict):
        raise ValueError(f"--model-config {name_or_path!r} must hold a JSON object.")
    return data


def recipe_path(name_or_path: str) -> Any:
    """A recipe file path, or the packaged recipe of that name (``quickstart``)."""
    if os.path.isfile(name_or_path):
        return Path(name_or_path)
    stem = name_or_path[:-5] if name_or_path.endswith(".yaml") else name_or_path
    packaged = configuration_files() / "recipes" / f"{stem}.yaml"
    if os.sep not in name_or_path and packaged.is_file():
        return packaged
    raise ValueError(
        f"--config: recipe {name_or_path!r} is neither a file nor a packaged recipe ({', '.join(recipe_names())})."
    )


def builtin_corpus_file(spec: str, default_split: str) -> str:
    """The file of ``builtin:NAME`` (split ``default_split``) or ``builtin:NAME/SPLIT``."""
    name, _, split = spec[len(BUILTIN_PREFIX) :].partition("/")
    split = split or default_split
    corpora = data_folder("corpora")
    available = sorted(p.name for p in corpora.iterdir() if (p / "README.md").is_file())
    if name not in available:
        raise ValueError(f"{spec!r}: no packaged corpus {name!r} (packaged: {', '.join(available)}).")
    if split not in BUILTIN_SPLITS:
        raise ValueError(f"{spec!r}: unknown split {split!r} (one of {', '.join(BUILTIN_SPLITS)}).")
    return str(corpora / name / f"{split}.txt")


# ----------------------------------------------------------------------------------------------- recipes
def load_recipe(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML recipe (a path or a packaged recipe name); keys may use ``-`` or ``_``. Raises `ValueError`
    naming an unknown key."""
    source = recipe_path(os.fspath(path))
    if source.stat().st_size > MAX_RECIPE_BYTES:
        raise ValueError(
            f"recipe {os.fspath(path)!r} has {source.stat().st_size:,} bytes; a recipe is a few option values "
            f"(at most {MAX_RECIPE_BYTES:,} bytes)."
        )
    try:
        data = yaml.load(source.read_text(encoding="utf-8"), Loader=_RecipeLoader) or {}  # noqa: S506 (safe, no alias)
    except (yaml.YAMLError, RecursionError) as error:  # RecursionError: nested deeper than the parser follows
        raise ValueError(f"recipe {os.fspath(path)!r} is not valid YAML ({error_line(str(error))}).") from None
    except _AliasError as error:
        raise ValueError(
            f"recipe {os.fspath(path)!r} uses the YAML alias *{shown(str(error))[1:-1]}: recipes take plain "
            "values (an alias can expand a small file into billions of values); write the value out."
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"recipe {os.fspath(path)!r} must be a mapping of option names to values.")
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in ARGUMENT_NAMES:
            raise ValueError(f"recipe {os.fspath(path)!r}: unknown key {shown(key)}.")
        if name in ("train_file", "validation_file", "test_file") and isinstance(value, str):
            value = [value]
        wanted = _recipe_value_kind(name)
        if wanted.startswith("a string") and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # `dataset_config_name: 2019`
        if not _is_of_kind(value, wanted):
            raise ValueError(
                f"recipe {os.fspath(path)!r}: {key} must be {wanted}, got {shown(value)} (a {type(value).__name__})."
            )
        out[name] = value
    return out


#: The largest recipe file read (the packaged ones have a few hundred bytes).
MAX_RECIPE_BYTES = 1 << 20


class _AliasError(Exception):
    """A recipe used a YAML alias (carries its anchor's name)."""


class _RecipeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses aliases (``*name``) before composing anything from them: a few hundred bytes of
    nested aliases ("billion laughs") expand into gigabytes of values."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise _AliasError(self.peek_event().anchor)
        return super().compose_node(parent, index)


def _recipe_value_kind(name: str) -> str:
    """What a recipe value of option ``name`` must be, in words, from the field's annotation."""
    annotation = str(next(f.type for f in dataclasses.fields(PretrainingArguments) if f.name == name))
    kind = (
        "a list of file names"
        if annotation.startswith("list")
        else "true or false"
        if annotation.startswith("bool")
        else "an integer"
        if annotation.startswith("int")
        else "a number"
        if annotation.startswith("float")
        else "a string"
    )
    return f"{kind} or null" if "None" in annotation else kind


def _is_of_kind(value: Any, kind: str) -> bool:
    """Whether a recipe value fits; a string does for any single value (argparse converts it as a flag's text)."""
    if value is None:
        return kind.endswith(" or null")
    if kind.startswith("a list"):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if isinstance(value, str):
        return True
    if kind.startswith("true"):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind.startswith("an integer"):
        return isinstance(value, int)
    if kind.startswith("a number"):
        return isinstance(value, (int, float))
    return isinstance(value, str)
