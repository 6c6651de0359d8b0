"""Where the package's data folders are: the one lookup for presets, recipes, accelerate configs, model cards and
the packaged corpora.

A checkout keeps ``configuration/`` and ``model_cards/`` at the repository's top level; `pip install` (editable or a
wheel) makes them the package data ``modeling_elmo.configuration`` and ``modeling_elmo.model_cards``. `data_folder`
answers the installed package's folder where there is one, and otherwise the top-level folder next to the package,
so that the tools and the tests also work from a checkout that is on ``PYTHONPATH`` but not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["DATA_FOLDERS", "PACKAGE_DIR", "data_folder"]

#: The ``modeling_elmo`` folder.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: The data folders and the file each one must hold (a folder of that name without it is not the package's).
DATA_FOLDERS = {
    "configuration": "elmo-tiny.json",
    "model_cards": "pretrained.md",
    "corpora": "austen-emma/README.md",
}


def _installed(name: str) -> list[Path]:
    """The folders of the package data ``modeling_elmo.NAME`` that the import system knows (none in a checkout)."""
    try:
        spec = importlib.util.find_spec(f"modeling_elmo.{name}")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(location) for location in spec.submodule_search_locations]


def data_folder(name: str) -> Path:
    """The folder of the package data ``name`` (one of `DATA_FOLDERS`): installed, or a checkout's top-level folder.

    Raises `ValueError` in one line when neither holds it.
    """
    if name not in DATA_FOLDERS:
        raise ValueError(f"no package data folder {name!r} (one of {', '.join(DATA_FOLDERS)}).")
    marker = DATA_FOLDERS[name]
    candidates = [*_installed(name), PACKAGE_DIR / name, PACKAGE_DIR.parent / name]
    for folder in candidates:
        if (folder / marker).is_file():
            return folder
    raise ValueError(
        f"the package data {name}/ was found neither in the installed package (modeling_elmo.{name}) nor next to "
        f"the package ({PACKAGE_DIR.parent / name}): install the package (`pip install -e .` in a checkout, or the "
        "wheel), or run from a complete checkout."
    )
