"""What a command wrote into an output folder, so that it deletes only that.

A command that writes a whole folder at once (``elmo convert``, ``elmo push``) records the files it wrote in the
folder's manifest, ``.elmo-manifest.json`` (``{"command": ..., "files": [...]}``). Replacing the folder later
(``elmo convert --overwrite``, a second ``elmo push``) is allowed only when every file in it is recorded in a
manifest of the same command: `check_replaceable` refuses anything else and names the first file that is not the
command's (a user's notes, another model, a folder written by another command).

Temporary folders are named after their output and the process that made them (`temporary_prefix`); a run removes
the ones of processes that no longer exist (`remove_stale_temporaries`), so a run killed with ``kill -9`` leaves
nothing behind for longer than the next run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from .io_utils import atomic_write_text

__all__ = ["MANIFEST", "check_replaceable", "foreign_files", "read_manifest", "remove_stale_temporaries",
           "temporary_prefix", "write_manifest"]

MANIFEST = ".elmo-manifest.json"


def read_manifest(folder: str | os.PathLike) -> dict | None:
    """The manifest of ``folder``: ``{"command": str, "files": [str]}``, or `None` when there is none or it is not
    one (a manifest that cannot be read records nothing, so nothing is deleted on its word)."""
    path = Path(folder) / MANIFEST
    if not path.is_file() or path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not (isinstance(data, dict) and isinstance(data.get("command"), str) and isinstance(data.get("files"), list)
            and all(isinstance(name, str) for name in data["files"])):
        return None
    return data


def write_manifest(folder: str | os.PathLike, command: str, files: Iterable[str]) -> None:
    """Record that ``command`` wrote ``files`` (POSIX paths relative to ``folder``)."""
    names = sorted(set(files) - {MANIFEST})
    atomic_write_text(Path(folder) / MANIFEST, json.dumps({"command": command, "files": names}, indent=1) + "\n")


def _entries(folder: Path) -> list[str]:
    """Every file, link and empty folder below ``folder`` (links are not followed), as sorted POSIX paths."""
    found = []
    for root, dirs, files in os.walk(folder):
        base = Path(root)
        for name in files:
            found.append((base / name).relative_to(folder).as_posix())
        for name in list(dirs):
            path = base / name
            if path.is_symlink():
                found.append(path.relative_to(folder).as_posix())
            elif not any(path.iterdir()):
                found.append(path.relative_to(folder).as_posix() + "/")
    return sorted(found)


def foreign_files(folder: str | os.PathLike, command: str) -> list[str]:
    """The entries of ``folder`` that a previous run of ``command`` did not write (all of them when the folder
    has no manifest of ``command``)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    manifest = read_manifest(folder)
    recorded = set(manifest["files"]) if manifest and manifest["command"] == command else set()
    if manifest is not None and manifest["command"] == command:
        recorded.add(MANIFEST)
    return [name for name in _entries(folder) if name not in recorded]


def check_replaceable(folder: str | os.PathLike, command: str, what: str) -> None:
    """Raise `ValueError` unless ``folder`` is missing, empty, or holds only what a previous run of ``command``
    wrote (its manifest); the error names the first file that is not the command's. ``what`` names the folder in
    the message (``output folder 'out'``)."""
    folder = Path(folder)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ValueError(f"{what} exists and is not a folder.")
    foreign = foreign_files(folder, command)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        manifest = read_manifest(folder)
        whose = (f"it was written by {manifest['command']}" if manifest and manifest["command"] != command
                 else f"{command} did not write {foreign[0]!r}{more}")
        raise ValueError(f"{what} holds files that are not {command}'s ({whose}); nothing was deleted. Choose "
                         "another folder, or move those files away.")


def temporary_prefix(output: str | os.PathLike, kind: str) -> str:
    """The name prefix of a temporary folder of ``kind`` next to ``output``, tied to this process:
    ``.NAME.KIND-PID-``."""
    return f".{Path(output).name}.{kind}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temporaries(output: str | os.PathLike, kinds: Iterable[str]) -> list[Path]:
    """Remove the temporary folders of ``kinds`` next to ``output`` whose process no longer runs (a run killed
    before it could clean up); returns them. A folder of a live process (another run at work) is left alone."""
    output = Path(output)
    parent = output.parent
    if not parent.is_dir():
        return []
    pattern = re.compile(rf"\.{re.escape(output.name)}\.(?:{'|'.join(map(re.escape, kinds))})-(\d+)-[^/]*")
    removed = []
    for path in parent.iterdir():
        match = pattern.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink() and not _alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
