"""What a command wrote into an output folder, so that it deletes only that.

A command that writes a whole folder at once (``elmo convert``, ``elmo push``) records the files it wrote in the
folder's manifest, ``.elmo-manifest.json`` (``{"command": ..., "files": {name: {"bytes": ..., "sha256": ...}}}``).
Replacing the folder later (``elmo convert --overwrite``, a second ``elmo push``) is allowed only when every file in
it is recorded in a manifest of the same command with its size and sha256: `check_replaceable` refuses anything
else and names the first file that is not the command's (a user's notes, another model, a folder written by another
command, a file the command wrote and the user then edited, a file a manifest lists but whose record does not match).

While a command writes a folder it holds a lock beside it (`output_lock`), and it puts the new folder in place with
`install_folder`, which checks the output again at that moment: whatever appeared there meanwhile is never replaced.

Temporary folders are named after their output and the process that made them (`temporary_prefix`); a run removes
the ones of processes that no longer exist (`remove_stale_temporaries`), so a run killed with ``kill -9`` leaves
nothing behind for longer than the next run.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..utils.io_utils import atomic_write_text, exclusive_lock, read_json, sha256_of_file

__all__ = [
    "MANIFEST",
    "check_replaceable",
    "file_record",
    "foreign_files",
    "install_folder",
    "output_lock",
    "read_manifest",
    "remove_stale_temporaries",
    "temporary_prefix",
    "write_manifest",
]

MANIFEST = ".elmo-manifest.json"


def file_record(path: str | os.PathLike) -> dict | None:
    """``{"bytes": size, "sha256": hex digest}`` of the regular file ``path``; `None` for a link or anything that is
    not a regular file (never followed)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return {"bytes": info.st_size, "sha256": sha256_of_file(path)}


def _is_record(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("bytes"), int)
        and isinstance(value.get("sha256"), str)
        and len(value) == 2
    )


def read_manifest(folder: str | os.PathLike) -> dict | None:
    """The manifest of ``folder``: ``{"command": str, "files": {name: {"bytes": int, "sha256": str}}}``, or `None`
    when there is none or it is not one (a manifest that cannot be read records nothing, so nothing is deleted on its
    word). A manifest of an earlier version lists names only: they map to `None` (no record, so never replaced)."""
    path = Path(folder) / MANIFEST
    if not path.is_file() or path.is_symlink():
        return None
    try:
        data = read_json(path, "the manifest")
    except (OSError, ValueError):
        return None
    if not (isinstance(data, dict) and isinstance(data.get("command"), str)):
        return None
    files = data.get("files")
    if isinstance(files, list) and all(isinstance(name, str) for name in files):
        files = dict.fromkeys(files)
    if not (isinstance(files, dict) and all(value is None or _is_record(value) for value in files.values())):
        return None
    return {"command": data["command"], "files": files}


def write_manifest(folder: str | os.PathLike, command: str, files: Iterable[str]) -> None:
    """Record that ``command`` wrote ``files`` (POSIX paths relative to ``folder``), each with its size and sha256
    as it is now."""
    folder = Path(folder)
    records = {name: file_record(folder / name) for name in sorted(set(files) - {MANIFEST})}
    atomic_write_text(folder / MANIFEST, json.dumps({"command": command, "files": records}, indent=1) + "\n")


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
    """The entries of ``folder`` that a previous run of ``command`` did not write, as it wrote them: all of them when
    the folder has no manifest of ``command``; otherwise those its manifest does not list, and those whose size or
    sha256 differ from its record (edited since, or listed but not the command's) or that it lists without one."""
    folder = Path(folder)
    if not folder.is_dir() or folder.is_symlink():
        return []
    manifest = read_manifest(folder)
    own = manifest is not None and manifest["command"] == command
    recorded = manifest["files"] if own else {}
    foreign = []
    for name in _entries(folder):
        if name == MANIFEST and own:
            continue
        record = recorded.get(name)
        if record is None or file_record(folder / name) != record:
            foreign.append(name)
    return foreign


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
        if manifest and manifest["command"] != command:
            whose = f"it was written by {manifest['command']}"
        elif manifest and manifest["files"].get(foreign[0]) is not None:
            whose = f"{foreign[0]!r}{more} differs from what {command} wrote: changed since"
        elif manifest and foreign[0] in manifest["files"]:
            whose = f"its manifest lists {foreign[0]!r}{more} without a size and sha256 to check it against"
        else:
            whose = f"{command} did not write {foreign[0]!r}{more}"
        raise ValueError(
            f"{what} holds files that are not {command}'s ({whose}); nothing was deleted. Choose "
            "another folder, or move those files away."
        )


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


#: The locks this process holds on output folders, by thread: a command that calls another one for the same folder
#: (``convert_release`` -> ``convert``) holds the lock once.
_HELD: set[tuple[str, int]] = set()


@contextlib.contextmanager
def output_lock(output: str | os.PathLike, command: str) -> Iterator[None]:
    """Hold an exclusive lock on ``OUTPUT.lock`` beside the output folder while ``command`` writes it
    (`io_utils.exclusive_lock`: a link or FIFO there is refused, a killed run leaves no stale lock): a second run
    for the same folder is refused at once with one line. Missing parent folders are created for it and removed
    again when the block fails and leaves them empty."""
    output = Path(output)
    lock = output.with_name(output.name + ".lock")
    key = (os.path.abspath(lock), threading.get_ident())
    if key in _HELD:
        yield
        return
    created, parent = [], output.absolute().parent
    while not parent.exists() and not parent.is_symlink():
        created.append(parent)
        parent = parent.parent
    try:
        for folder in reversed(created):
            folder.mkdir()
    except OSError as error:
        raise ValueError(f"cannot create the output folder {str(output)!r}: {error.strerror or error}.") from None
    try:
        with exclusive_lock(
            lock,
            f"another {command} run is writing {str(output)!r} (it holds {str(lock)!r}); wait "
            "for it to end, or choose another output folder.",
            unwritable=f"cannot write next to the output folder {str(output)!r}",
        ):
            _HELD.add(key)
            try:
                yield
            finally:
                _HELD.discard(key)
    except BaseException:
        for folder in created:  # deepest first; only the empty folders made here
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def install_folder(staging: str | os.PathLike, output: str | os.PathLike, command: str, *, overwrite: bool) -> None:
    """Move the complete folder ``staging`` to ``output``, deciding from what ``output`` holds at this moment.

    The rename succeeds at once where ``output`` is missing or an empty folder (the file system refuses to rename a
    folder onto a non-empty one). Otherwise ``output`` is replaced only with ``overwrite`` and only when it holds
    nothing but ``command``'s own files (`check_replaceable`, sizes and sha256 included): it is moved aside into a
    fresh temporary folder, checked again there (where nobody else writes), moved back and refused if anything
    else appeared, and deleted only once ``staging`` has its name. Raises `ValueError` naming the folder and the
    first file that is not the command's; ``staging`` is left to the caller to remove.
    """
    staging, output = Path(staging), Path(output)
    what = f"output folder {str(output)!r}"
    try:
        os.rename(staging, output)
        return
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise
    if output.is_symlink() or not output.is_dir():
        raise ValueError(f"{what} is now {'a link' if output.is_symlink() else 'a file'}; nothing was replaced.")
    if not overwrite:
        first = sorted(_entries(output))[:1] or ["?"]
        raise ValueError(
            f"{what} appeared while {command} worked and is not empty (it holds {first[0]!r}); nothing "
            "was replaced. Move those files away, or choose another folder."
        )
    check_replaceable(output, command, what)
    retired = Path(tempfile.mkdtemp(prefix=temporary_prefix(output, "old"), dir=output.parent))
    old = retired / "old"
    os.rename(output, old)
    try:
        check_replaceable(old, command, what)
    except ValueError:
        try:
            os.rename(old, output)
        except OSError:
            raise ValueError(
                f"{what} changed while {command} replaced it; nothing was deleted: its files are kept in {str(old)!r}."
            ) from None
        os.rmdir(retired)
        raise
    try:
        os.rename(staging, output)
    except OSError:
        raise ValueError(
            f"{what} appeared again while {command} replaced it; nothing was deleted: the previous "
            f"output is kept in {str(old)!r}."
        ) from None
    shutil.rmtree(retired, ignore_errors=True)
