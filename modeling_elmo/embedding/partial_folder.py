"""What a run of ``elmo embed`` wrote into ``OUTPUT.partial``, so that it deletes only that.

Each process of a run keeps the record of what it wrote there in ``.elmo-embed-records-R.json`` (R its rank):
the finished files (the run record ``run.json``, the chunks) with their size and sha256, and the temporaries it is
writing: a temporary's name is recorded before the file is created and its identity (device, inode) once it is, and
a finished file's record is written before it takes its name. So at any moment a kill leaves only files the
records prove: a finished file whose name, size and sha256 they list, or a temporary that is the very file they
name (or still empty). The records file itself is first created in place, and each later version is written under
the name its previous version gives (``next``: a fresh random temporary name), then renamed onto it: a kill
between leaves a temporary that the records name, holding records or nothing. Anything else in the folder (a file
merely named like a chunk, a user's notes, a subfolder, a chunk of an earlier version without records) is never read
as the run's, never replaced and never deleted; commands say so in one line naming the folder (`unproven_entries`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from ..folders.files import (
    TEMPORARY_FILE,
    atomic_write_text,
    create_file,
    new_token,
    remove_empty_folder,
    remove_file,
    replace,
    temporary_file_name,
)
from ..folders.opening import sha256_of_file

__all__ = ["COMMAND", "PartialRecords", "proven_names", "remove_proven", "unproven_entries"]

COMMAND = "elmo embed"
_RECORDS = re.compile(r"\.elmo-embed-records-(\d+)\.json")
_RECORDS_MAX_BYTES = 64 << 20


def _file_record(path: Path) -> dict | None:
    """``{"bytes", "sha256"}`` of the regular file ``path`` with one name; `None` for anything else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        return None
    return {"bytes": info.st_size, "sha256": sha256_of_file(path)}


def _read_records(path: Path) -> dict | None:
    """The records in ``path`` (`PartialRecords`), or `None` when it is not a records file of ``elmo embed``."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > _RECORDS_MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(data, dict) and data.get("command") == COMMAND):
        return None
    files, temporaries, following = data.get("files"), data.get("temporaries"), data.get("next")
    if not (isinstance(files, dict) and isinstance(temporaries, dict)):
        return None
    if not (isinstance(following, str) and _is_records_temporary_name(path.name, following)):
        following = None  # a record of an earlier version: its next version's temporary is not named
    return {"files": files, "temporaries": temporaries, "next": following}


def _is_records_temporary_name(records_name: str, name: str) -> bool:
    match = TEMPORARY_FILE.fullmatch(name)
    return match is not None and match.group("name") == records_name and not match.group("suffix")


def _write_records(path: Path, files: dict, temporaries: dict, following: str | None) -> str:
    """Write the records file ``path`` (its previous version named ``following`` as its next temporary; `None`
    where there is no previous version of this format) and return the temporary name the new version gives for the
    one after it. A new records file is created in place (``O_EXCL``: never over a file that is there); a
    later version is written to ``following`` (never a file that is there) and renamed onto ``path``."""
    after = temporary_file_name(path.name, new_token())
    text = json.dumps(
        {"command": COMMAND, "files": files, "temporaries": temporaries, "next": after}, indent=1, sort_keys=True
    )
    if following is None and not os.path.lexists(path):
        fd = create_file(path, flags=os.O_WRONLY)
        with os.fdopen(fd, "wb") as handle:
            handle.write((text + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        return after
    if following is None or os.path.lexists(path.with_name(following)):
        atomic_write_text(path, text + "\n")  # an earlier version's records, or their temporary is taken
        return after
    temporary = path.with_name(following)
    fd = create_file(temporary, flags=os.O_WRONLY)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write((text + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        replace(temporary, path)
    except BaseException:
        remove_file(temporary)
        raise
    return after


class PartialRecords:
    """The records of what this process (rank ``index``) writes into the partial folder ``partial``."""

    def __init__(self, partial: Path, index: int = 0) -> None:
        self.partial = Path(partial)
        self.path = self.partial / f".elmo-embed-records-{index}.json"
        data = _read_records(self.path) or {"files": {}, "temporaries": {}, "next": None}
        self.files: dict[str, dict] = dict(data["files"])
        self.temporaries: dict[str, dict] = dict(data["temporaries"])
        self.next: str | None = data["next"]

    def _save(self) -> None:
        self.next = _write_records(self.path, self.files, self.temporaries, self.next)

    @contextlib.contextmanager
    def writing(self, destination: Path, *, keep: bool) -> Iterator[tuple[int, Path]]:
        """A fresh temporary in the partial folder that becomes ``destination`` when the block ends well: yields its
        descriptor (the block owns it and closes it) and path. With ``keep`` (``destination`` lies in the folder)
        the finished file's record is written before it takes the name, and a name already there that no record
        lists is a `ValueError` naming it (it is never replaced)."""
        if keep and os.path.lexists(destination):
            raise ValueError(
                f"{str(destination)!r} is there, and no record of {COMMAND} lists it as it is; nothing was replaced: "
                "remove it yourself if it is not yours (or run with --overwrite to start again)."
            )
        name = temporary_file_name(destination.name, new_token())
        temporary = self.partial / name
        self.temporaries[name] = {}
        self._save()
        try:
            fd = create_file(temporary)
            info = os.fstat(fd)
            self.temporaries[name] = {"device": info.st_dev, "inode": info.st_ino}
            self._save()
            yield fd, temporary
            if keep:
                self.files[destination.name] = _file_record(temporary)
                self._save()
            replace(temporary, destination)
        except BaseException:
            remove_file(temporary)
            if keep:
                self.files.pop(destination.name, None)
            raise
        finally:
            self.temporaries.pop(name, None)
            if self.partial.is_dir():  # a folder removed meanwhile (a finished run) has nothing left to record
                self._save()

    def write_text(self, destination: Path, text: str) -> None:
        """``destination`` (in the folder) written atomically with ``text``, recorded."""
        with self.writing(destination, keep=True) as (fd, _):
            with os.fdopen(fd, "wb") as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())


def _all_records(partial: Path) -> tuple[list[Path], dict[str, list[dict]], dict[str, list[dict]]]:
    """The records files of ``partial`` and what they list together: finished files and temporaries, by name (the
    temporary each records file names for its next version among them, as ``{"records": True}``)."""
    found, listed, temporaries = [], {}, {}
    for entry in sorted(partial.iterdir()) if partial.is_dir() else []:
        if not _RECORDS.fullmatch(entry.name):
            continue
        data = _read_records(entry)
        if data is None:
            continue
        found.append(entry)
        for name, record in data["files"].items():
            listed.setdefault(name, []).append(record)
        for name, record in data["temporaries"].items():
            temporaries.setdefault(name, []).append(record)
        if data["next"] is not None:
            temporaries.setdefault(data["next"], []).append({"records": True})
    return found, listed, temporaries


def _is_that_temporary(path: Path, records: list[dict]) -> bool:
    """Whether ``path`` is the temporary a record names: the same file (device, inode), or, where the record was
    written before the file was created, an empty file (nothing in it to lose); for the next version of a records
    file (``{"records": True}``), an empty file or records of elmo embed."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        return False
    for record in records:
        if not isinstance(record, dict):
            continue
        if not record and info.st_size == 0:
            return True
        if record == {"records": True} and (info.st_size == 0 or _read_records(path) is not None):
            return True
        if record.get("device") == info.st_dev and record.get("inode") == info.st_ino:
            return True
    return False


def _sort(partial: Path) -> tuple[list[Path], list[Path], list[str]]:
    """The finished files and temporaries the records prove, the records files, and every other entry (names
    relative to ``partial``; a subfolder is named with a ``/``)."""
    records_files, listed, temporaries = _all_records(partial)
    proven, others = [], []
    for entry in sorted(partial.iterdir()) if partial.is_dir() and not partial.is_symlink() else []:
        if entry in records_files:
            continue
        if entry.is_dir() and not entry.is_symlink():
            others.append(entry.name + "/")
        elif entry.name in listed and _file_record(entry) in listed[entry.name]:
            proven.append(entry)
        elif entry.name in temporaries and _is_that_temporary(entry, temporaries[entry.name]):
            proven.append(entry)
        else:
            others.append(entry.name)
    return proven, records_files, others


def proven_names(partial: Path) -> set[str]:
    """The names of the finished files in ``partial`` that the records list as they are (size and sha256)."""
    _, listed, _ = _all_records(partial)
    return {name for name in listed if _file_record(partial / name) in listed[name]}


def unproven_entries(partial: Path) -> list[str]:
    """Every entry of ``partial`` that no record of ``elmo embed`` proves (sorted names; folders end with ``/``)."""
    return _sort(partial)[2]


def remove_proven(partial: Path, *, temporaries_only: bool = False) -> list[str]:
    """Remove what the records prove, then the records (everything they listed is gone) and the folder if it is
    then empty; with ``temporaries_only``, only the temporaries a killed run was writing (and their entries in the
    records). Returns the other entries, left in place."""
    proven, records_files, others = _sort(partial)
    _, listed, _ = _all_records(partial)
    for path in proven:
        if not (temporaries_only and path.name in listed):
            remove_file(path)
    if temporaries_only:
        for path in records_files:
            data = _read_records(path)
            if data is not None and data["temporaries"]:
                _write_records(path, data["files"], {}, data["next"])
        return others
    for path in records_files:  # last: until they go, they prove what is left
        remove_file(path)
    remove_empty_folder(partial)
    return others
