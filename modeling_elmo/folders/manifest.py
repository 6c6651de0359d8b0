"""What a command wrote into an output folder, so that it deletes only that.

A command that writes a whole folder at once (``elmo convert``, ``elmo push``) records the files it wrote in the
folder's manifest, ``.elmo-manifest.json`` (``{"command": ..., "files": {name: {"bytes": ..., "sha256": ...}}}``).
Replacing the folder later (``elmo convert --overwrite``, a second ``elmo push``) is allowed only when every file in
it is recorded in a manifest of the same command with its size and sha256: `check_replaceable` refuses anything
else and names the first file that is not the command's (a user's notes, another model, a folder written by another
command, a file the command wrote and the user then edited, a file a manifest lists but whose record does not match).

While a command writes a folder it holds a lock beside it (`output_lock`), and it puts the new folder in place with
`install_folder`, which checks the output again at that moment: whatever appeared there meanwhile is never replaced.

Every temporary folder beside the output (the folder being written, the earlier output moved aside while the new one
takes its name) gets a fresh unique name and a marker file inside it that says what it is for (`new_temporary`). A
run killed with ``kill -9`` at any step leaves folders that the next command on the same output finishes or undoes
as soon as it holds the lock (`recover_interrupted`), with one line each: the earlier output goes back to its name,
or, when the new one had already taken it, is removed as the killed run would have done. A folder beside the output
without our marker (``out/.sk.old-2023-12-31/``, however it is named) is never touched.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..utils.io_utils import read_json
from .files import (
    ASIDE,
    CONTENT,
    MANIFEST,
    TEMPORARY_MARKER,
    atomic_write_text,
    make_folders,
    new_temporary,
    prove_temporary,
    remove_empty_folder,
    remove_empty_folders,
    remove_temporary,
    rename,
    temporary_folder_pattern,
)
from .locks import exclusive_lock
from .opening import sha256_of_file

__all__ = [
    "ASIDE",
    "CONTENT",
    "MANIFEST",
    "TEMPORARY_MARKER",
    "check_output_name",
    "check_replaceable",
    "file_record",
    "foreign_files",
    "install_folder",
    "new_temporary",
    "output_lock",
    "read_manifest",
    "recover_interrupted",
    "remove_temporary",
    "save_manifest",
    "write_manifest",
]

logger = logging.getLogger(__name__)


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
    """The manifest of ``folder``: ``{"command": str, "files": {name: {"bytes": int, "sha256": str}}}`` (with
    ``pending`` and ``temporaries`` where a run was writing, `save_manifest`), or `None`
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
    extra = {}
    for key in ("pending", "temporaries"):  # what a run was writing when it was killed (`save_manifest`)
        value = data.get(key)
        if isinstance(value, dict) and value and all(isinstance(k, str) and _is_record(v) for k, v in value.items()):
            extra[key] = value
    return {"command": data["command"], "files": files, **extra}


def write_manifest(folder: str | os.PathLike, command: str, files: Iterable[str]) -> None:
    """Record that ``command`` wrote ``files`` (POSIX paths relative to ``folder``), each with its size and sha256
    as it is now."""
    folder = Path(folder)
    records = {name: file_record(folder / name) for name in sorted(set(files) - {MANIFEST})}
    atomic_write_text(folder / MANIFEST, json.dumps({"command": command, "files": records}, indent=1) + "\n")


def save_manifest(
    folder: str | os.PathLike,
    command: str,
    records: dict[str, dict | None],
    *,
    pending: dict[str, dict] | None = None,
    temporaries: dict[str, dict] | None = None,
) -> None:
    """Write the manifest of ``folder`` with the given ``records`` (name: size and sha256, as recorded before), and
    what a run is writing: ``pending`` (name: the record of the file about to take that name; until the run ends,
    either record proves the file) and ``temporaries`` (the temporary files being written, each with its record:
    one a killed run leaves is the run's exactly when it is as recorded)."""
    data = {"command": command, "files": dict(sorted(records.items()))}
    if pending:
        data["pending"] = dict(sorted(pending.items()))
    if temporaries:
        data["temporaries"] = dict(sorted(temporaries.items()))
    atomic_write_text(Path(folder) / MANIFEST, json.dumps(data, indent=1) + "\n")


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


def _only_commands_files(folder: Path, command: str) -> list[str]:
    """The files of ``folder`` that ``command`` did not write as they are (`foreign_files`); empty folders do not
    count (what a removal killed half-way leaves, `files.remove_tree`; they hold nothing to lose)."""
    return [name for name in foreign_files(folder, command) if not name.endswith("/")]


def recover_interrupted(output: str | os.PathLike) -> list[str]:
    """Finish or undo what runs killed while writing ``output`` left beside it; return the lines said (each also
    logged as a warning). Called by `output_lock`, so by every command before it looks at ``output``.

    Only folders that `files.prove_temporary` proves a killed run's (its marker names the folder and its token, its
    process has ended) are looked at; one whose marker proves less is left alone with a line. An earlier output
    moved aside (`ASIDE`) goes back to its name when that is free or an empty folder (the swap is undone: ``mkdir
    -p out`` before the next run is no output); when a complete output of the same command holds the name (its
    manifest, every file as recorded: the swap had finished), the earlier one is removed as the swap would have,
    provided it still holds only that command's files; otherwise it is kept where it is and the line says where.
    Any other temporary (a folder being written) is removed when it holds nothing, or exactly what its manifest
    records; otherwise it is left alone with a line."""
    output = Path(output)
    parent = output.absolute().parent
    said: list[str] = []
    try:
        entries = sorted(parent.iterdir())
    except OSError:
        return said
    for folder in entries:
        record, line = prove_temporary(folder, output)
        if record is None:
            if line is None:
                _remove_if_empty_temporary(folder, output)
        else:
            try:
                line = _recover_one(output, record["command"], record["kind"], folder / CONTENT)
            except OSError as error:
                raise ValueError(
                    f"cannot finish or undo what an interrupted {record['command']} run left in {str(folder)!r}: "
                    f"{error.strerror or error}; nothing was deleted."
                ) from None
        if line:
            logger.warning("%s", line)
            said.append(line)
    return said


def _remove_if_empty_temporary(folder: Path, output: Path) -> None:
    """Remove ``folder`` if it is an empty folder of ours named exactly as `new_temporary` names them (a run killed
    between creating it and writing its marker); it holds nothing, so nothing can be lost."""
    match = temporary_folder_pattern(output.name).fullmatch(folder.name)
    if match is None or int(match.group("pid")) == os.getpid() or len(match.group("token")) != 16:
        return
    with contextlib.suppress(OSError):
        if stat.S_ISDIR((info := os.lstat(folder)).st_mode) and info.st_uid == os.geteuid():
            remove_empty_folder(folder)  # only ever succeeds on an empty folder


def _holds_nothing(folder: Path) -> bool:
    """Whether ``folder`` holds no file at all (empty folders only: what a removal killed half-way leaves)."""
    return all(name.endswith("/") for name in _entries(folder))


def _recover_one(output: Path, command: str, kind: str, content: Path) -> str | None:
    """`recover_interrupted` for one proven temporary folder; returns the line to say, if any."""
    shown = str(output)
    aside = kind == ASIDE and content.is_dir() and not content.is_symlink()
    line = None
    if kind == ASIDE and os.path.lexists(content) and not aside:  # we only ever move a folder aside
        return (
            f"{str(content.parent)!r}, a temporary folder of an interrupted {command} run, holds something it did not "
            f"put there ({str(content)!r} is not a folder); nothing was deleted. Move it away."
        )
    free = not os.path.lexists(output) or (output.is_dir() and not output.is_symlink() and not any(output.iterdir()))
    if aside and free:  # renaming a folder onto an empty one replaces it; one filled meanwhile makes it fail
        rename(content, output)
        line = (
            f"{command} was interrupted while replacing {shown!r}: the earlier output, which it had moved aside "
            f"to {str(content)!r}, is back in place."
        )
    elif aside and _complete_output(output, command) and not _only_commands_files(content, command):
        line = (
            f"{command} was interrupted after replacing {shown!r}: the earlier output it had replaced "
            f"({str(content)!r}) was removed, as that run would have done."
        )
    elif aside:
        added = _only_commands_files(content, command)
        now = f", and the earlier output holds {added[0]!r}, which it did not write" if added else ", which now holds"
        return (
            f"{command} was interrupted while replacing {shown!r}{now if added else now + ' other files'}: the "
            f"earlier output is kept in {str(content)!r}; nothing was deleted. Move it back or away."
        )
    elif os.path.lexists(content):
        if content.is_symlink() or not content.is_dir():
            return (
                f"{str(content.parent)!r}, a temporary folder of an interrupted {command} run, holds something it "
                f"did not put there ({str(content)!r} is not a folder); it was left alone: remove it yourself if it "
                "is not yours."
            )
        if not (_holds_nothing(content) or _complete_output(content, command)):
            unlisted = _only_commands_files(content, command)
            more = f" (and {len(unlisted) - 1} more)" if len(unlisted) > 1 else ""
            which = f"{unlisted[0]!r}{more}, which no record of it lists" if unlisted else "files no record of it lists"
            return (
                f"{str(content.parent)!r}, the unfinished output of an interrupted {command} run, holds {which}; "
                "it was left alone: remove it yourself if it is not yours."
            )
        line = f"removed the unfinished output of an interrupted {command} run: {str(content.parent)!r}."
    remove_temporary(content)
    return line


def _complete_output(output: Path, command: str) -> bool:
    """Whether ``output`` is a folder that ``command`` wrote whole: its manifest is ``command``'s and lists at least
    one file, and the folder holds exactly what it records (`foreign_files`)."""
    if output.is_symlink() or not output.is_dir():
        return False
    manifest = read_manifest(output)
    if manifest is None or manifest["command"] != command or not manifest["files"]:
        return False
    return not foreign_files(output, command)


def check_output_name(output: str | os.PathLike, command: str) -> None:
    """Raise `ValueError` when ``output`` (``.``, ``..``, ``/``) has no name of its own to give a new folder."""
    if Path(output).name in ("", ".", ".."):
        raise ValueError(
            f"output folder {str(output)!r} names the current folder, its parent or the root, not a folder of its "
            f"own: {command} writes a new folder beside it and then gives it the output's name. Give a folder "
            "name (such as 'out/elmo')."
        )


#: The locks this process holds on output folders, by thread: a command that calls another one for the same folder
#: (``convert_release`` -> ``convert``) holds the lock once.
_HELD: set[tuple[str, int]] = set()


@contextlib.contextmanager
def output_lock(output: str | os.PathLike, command: str) -> Iterator[None]:
    """Hold an exclusive lock on ``OUTPUT.lock`` beside the output folder while ``command`` writes it
    (`io_utils.exclusive_lock`: a link or FIFO there is refused, a killed run leaves no stale lock): a second run
    for the same folder is refused at once with one line naming the command that holds it. Once the lock is held,
    what a killed run left beside the output is finished or undone (`recover_interrupted`). Missing parent folders
    are created for it and removed again when the block fails and leaves them empty."""
    output = Path(output)
    check_output_name(output, command)
    lock = output.with_name(output.name + ".lock")
    key = (os.path.abspath(lock), threading.get_ident())
    if key in _HELD:
        yield
        return
    try:
        created = make_folders(output.absolute().parent)
    except OSError as error:
        raise ValueError(f"cannot create the output folder {str(output)!r}: {error.strerror or error}.") from None
    try:
        with exclusive_lock(
            lock,
            f"another {{holder}} run is writing {str(output)!r} (it holds {str(lock)!r}); wait "
            "for it to end, or choose another output folder.",
            unwritable=f"cannot write next to the output folder {str(output)!r}",
            holder=command,
        ):
            recover_interrupted(output)
            _HELD.add(key)
            try:
                yield
            finally:
                _HELD.discard(key)
    except BaseException:
        remove_empty_folders(created)  # deepest first; only the empty folders made here
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
        rename(staging, output)
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
    aside = new_temporary(output, ASIDE, command, content=False)
    rename(output, aside)
    try:
        check_replaceable(aside, command, what)
    except ValueError:
        try:
            rename(aside, output)
        except OSError:
            raise ValueError(
                f"{what} changed while {command} replaced it; nothing was deleted: its files are kept in "
                f"{str(aside)!r}."
            ) from None
        remove_temporary(aside)
        raise
    try:
        rename(staging, output)
    except OSError:
        raise ValueError(
            f"{what} appeared again while {command} replaced it; nothing was deleted: the previous "
            f"output is kept in {str(aside)!r}."
        ) from None
    remove_temporary(aside)
