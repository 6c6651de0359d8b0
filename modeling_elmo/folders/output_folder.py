"""Writing a converted model folder safely: check the location first (never over the inputs, never over files
another command wrote), hold a lock beside it for the whole conversion, fill a temporary sibling, record what was
written (`modeling_elmo.folders.manifest`), rename it into place after checking the output again.

Shared by the converters (`modeling_elmo.conversion.convert`, `modeling_elmo.conversion.convert_efml`): a folder with
the final name is always complete, and a failure leaves nothing behind.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..utils.io_utils import is_within
from .files import make_folders, probe_writable, remove_empty_folders, remove_temporary
from .manifest import (
    check_output_name,
    check_replaceable,
    install_folder,
    new_temporary,
    output_lock,
    write_manifest,
)

_Function = TypeVar("_Function", bound=Callable)

#: The command whose manifest a converted folder carries (`modeling_elmo.folders.manifest`).
COMMAND = "elmo convert"


def check_output_dir(
    output_dir: str | os.PathLike, overwrite: bool = False, inputs: tuple[str | os.PathLike, ...] = ()
) -> Path:
    """Raise `ValueError` unless a conversion can write ``output_dir``; return it as a `Path`. Writes nothing.

    Refused: an output folder that holds one of ``inputs`` (replacing it would delete them); an existing file; an
    existing non-empty folder unless ``overwrite``, and with ``overwrite`` a folder holding anything but the files of
    an earlier conversion (its manifest, `modeling_elmo.folders.manifest`; the error names the first other file); a path
    under a file; a location where the nearest existing folder does not let us create anything (tried with a
    temporary folder that is removed at once, so read-only folders and file systems are caught however permissions
    are set up).
    """
    output_dir = Path(output_dir)
    shown = str(output_dir)
    for source in inputs:
        if is_within(Path(source), output_dir):
            raise ValueError(
                f"output folder {shown!r} holds the input file {str(source)!r}; writing the output would "
                "delete it. Choose another output folder."
            )
    if output_dir.is_dir() and any(output_dir.iterdir()):
        if not overwrite:
            raise ValueError(f"output folder {shown!r} exists and is not empty; pass overwrite=True (--overwrite).")
        check_replaceable(output_dir, COMMAND, f"output folder {shown!r}")
    return check_output_location(output_dir)


def check_output_location(output_dir: str | os.PathLike) -> Path:
    """Raise `ValueError` unless the folder ``output_dir`` (new or not) can be created or written where it is;
    return it as a `Path`. Writes nothing (see `check_output_dir`)."""
    output_dir = Path(output_dir)
    shown = str(output_dir)
    check_output_name(output_dir, COMMAND)
    if output_dir.is_symlink():  # replacing it would replace the link, not fill the folder it points to
        raise ValueError(f"output {shown!r} is a symbolic link; give the folder it points to, or a new name.")
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"output {shown!r} exists and is not a folder.")
    ancestor = output_dir.absolute().parent
    while not ancestor.exists() and not ancestor.is_symlink() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"output folder {shown!r} cannot be created: {str(ancestor)!r} is a file, not a folder.")
    try:
        probe_writable(ancestor)
    except OSError as error:
        raise ValueError(
            f"output folder {shown!r} cannot be written: nothing can be created in {str(ancestor)!r} "
            f"({error.strerror or error})."
        ) from None
    return output_dir


def locks_output(function: _Function) -> _Function:
    """Run a converter (a function with an ``output_dir`` argument) holding the lock of its output
    folder (`modeling_elmo.folders.manifest.output_lock`): a second conversion into the same folder is refused at once
    with one line. The output's location is checked (`check_output_location`, writing nothing) before the lock is
    taken; the function checks the rest (`check_output_dir`)."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def locked(*args, **kwargs):
        output_dir = signature.bind(*args, **kwargs).arguments["output_dir"]
        with output_lock(check_output_location(output_dir), COMMAND):
            return function(*args, **kwargs)

    return locked  # type: ignore[return-value]


def check_atol(atol: float) -> None:
    """Raise `ValueError` unless ``atol`` (the largest accepted difference to the reference) is a finite number > 0:
    NaN would fail every comparison, and a negative one could never be met."""
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not (math.isfinite(atol) and atol > 0):
        raise ValueError(
            f"--atol must be a finite number > 0 (the largest accepted difference to the reference), got {atol!r}."
        )


def write_folder_atomically(output_dir: Path, fill: Callable[[Path], None], *, overwrite: bool = False) -> Path:
    """Let ``fill(folder)`` write a fresh temporary folder next to ``output_dir``, record its files in a manifest,
    then rename it into place (`modeling_elmo.folders.manifest.install_folder`: an output that appeared meanwhile is
    never replaced; with ``overwrite``, an earlier conversion's, checked again file by file at that moment), so a folder
    with the final name is always complete. On any failure the temporary folder and any parent folders
    this call created are removed, and a file-system error becomes a `ValueError` naming ``output_dir``."""
    parent = output_dir.resolve().parent
    created: list[Path] = []
    staging: Path | None = None
    try:
        created = make_folders(parent)
        staging = new_temporary(parent / output_dir.name, "converting", COMMAND)
        fill(staging)
        write_manifest(staging, COMMAND, (p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file()))
        install_folder(staging, output_dir, COMMAND, overwrite=overwrite)
    except BaseException as error:
        if staging is not None:
            remove_temporary(staging)
        remove_empty_folders(created)  # deepest first; only the empty folders this call made
        if isinstance(error, OSError):
            raise ValueError(f"cannot write the output folder {str(output_dir)!r}: {error}") from None
        raise
    remove_temporary(staging)  # the marker left in its folder once the output took the payload
    return output_dir


__all__ = [
    "COMMAND",
    "check_atol",
    "check_output_dir",
    "check_output_location",
    "locks_output",
    "write_folder_atomically",
]
