"""Writing a model folder safely: check the location first, fill a temporary sibling, rename it into place.

Shared by the converters (`modeling_elmo.convert`, `modeling_elmo.convert_efml`): a folder with the final name is
always complete, and a failure leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def sha256_of_file(path: str | os.PathLike) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_output_dir(output_dir: str | os.PathLike, overwrite: bool = False) -> Path:
    """Raise `ValueError` unless a conversion can write ``output_dir``; return it as a `Path`. Writes nothing.

    Refused: an existing file; an existing non-empty folder unless ``overwrite``; a path under a file; a location
    where the nearest existing folder does not let us create anything (tried with a temporary folder that is
    removed at once, so read-only folders and file systems are caught however permissions are set up).
    """
    output_dir = Path(output_dir)
    shown = str(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"output {shown!r} exists and is not a folder.")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not overwrite:
        raise ValueError(f"output folder {shown!r} exists and is not empty; pass overwrite=True (--overwrite).")
    ancestor = output_dir.absolute().parent
    while not ancestor.exists() and not ancestor.is_symlink() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"output folder {shown!r} cannot be created: {str(ancestor)!r} is a file, not a folder.")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".elmo-convert-check-", dir=ancestor))
    except OSError as error:
        raise ValueError(
            f"output folder {shown!r} cannot be written: nothing can be created in {str(ancestor)!r} "
            f"({error.strerror or error})."
        ) from None
    return output_dir


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; return the ones created, deepest last."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir()
    return list(reversed(missing))


def write_folder_atomically(output_dir: Path, fill: Callable[[Path], None]) -> Path:
    """Let ``fill(folder)`` write a fresh temporary folder next to ``output_dir``, then rename it into place
    (replacing an existing ``output_dir``), so a folder with the final name is always complete. On any failure the
    temporary folder and any parent folders this call created are removed, and a file-system error becomes a
    `ValueError` naming ``output_dir``."""
    parent = output_dir.resolve().parent
    created: list[Path] = []
    staging: Path | None = None
    try:
        created = _make_parents(parent)
        staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.converting-", dir=parent))
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp makes it private; the result should look like any new folder
        fill(staging)
        if output_dir.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.old-", dir=parent))
            os.replace(output_dir, retired / "old")
            os.replace(staging, output_dir)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, output_dir)
    except BaseException as error:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        for folder in reversed(created):  # deepest first; only the empty folders this call made
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(error, OSError):
            raise ValueError(f"cannot write the output folder {str(output_dir)!r}: {error}") from None
        raise
    return output_dir


__all__ = ["check_output_dir", "sha256_of_file", "write_folder_atomically"]
