"""Every change the package makes to the file system goes through this module: creating a temporary file or folder,
writing a file atomically, renaming, removing, creating missing parent folders (and removing them again when left
empty). Its two neighbours: `modeling_elmo.folders.opening` (opening a file without following a link: the link
rule) and `modeling_elmo.folders.locks` (the lock beside an output), which removes its lock file through this
module.

One naming pattern for temporaries: a file being written as ``NAME`` is ``.NAME.TOKEN.tmp`` beside it and a
temporary folder beside an output ``NAME`` is ``.NAME.KIND-PID-TOKEN``, where ``TOKEN`` is a fresh random part
(`new_token`) of each file or folder.

One deletion rule (`prove_temporary`, used by `modeling_elmo.folders.manifest.recover_interrupted`): a temporary
folder that another run left is finished or removed only when its marker (``.elmo-temporary.json``, a regular
file of one name, ours) names the exact folder and the random token that stands in the folder's name, and its
owning process is proven gone (its process id is free, or now belongs to a process that started at another time:
``/proc/PID/stat``). Where the start time cannot be read, an earlier version's marker (no token, no folder, no
start time), or a token that is not the folder's own, the folder is left alone with one line naming it. Its content
is checked by the caller against what was recorded (names, sizes, sha256): one file more and nothing is deleted.

Every step calls the plain `os` and `shutil` functions, looked up when it runs (``os.replace(...)``), so that a
test can stop a process at each of them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

__all__ = [
    "ASIDE",
    "CONTENT",
    "MANIFEST",
    "TEMPORARY_FILE",
    "TEMPORARY_MARKER",
    "atomic_output",
    "atomic_write_bytes",
    "atomic_write_text",
    "create_file",
    "current_umask",
    "follow_umask",
    "make_folders",
    "new_private_folder",
    "new_temporary",
    "new_token",
    "process_is_gone",
    "probe_writable",
    "process_start_time",
    "prove_temporary",
    "remove_empty_folder",
    "remove_empty_folders",
    "remove_file",
    "remove_own_folder",
    "remove_temporary",
    "remove_tree",
    "rename",
    "replace",
    "temporary_file_name",
]


# ----------------------------------------------------------------------------------------------- modes
def current_umask() -> int:
    """The process's file-mode creation mask (read from ``/proc`` where it can be, so that it is never changed)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike, *, folder: bool = False) -> None:
    """Give ``path`` the mode a new file (``folder``: a new folder) gets under the umask: private temporaries would
    hide a shared model folder's weights from the users who can read the rest of it."""
    os.chmod(path, (0o777 if folder else 0o666) & ~current_umask())


# ----------------------------------------------------------------------------------------------- names
def new_token() -> str:
    """A fresh random part of a temporary's name (16 hex digits)."""
    return secrets.token_hex(8)


def temporary_file_name(name: str, token: str, suffix: str = "") -> str:
    """The name of a temporary file of ``name`` beside it: ``.NAME.TOKEN.tmp`` (``suffix`` after it, for writers
    that pick the format from the name: ``.tmp.png``)."""
    return f".{name}.{token}.tmp{suffix}"


#: A temporary file of ``name`` (`temporary_file_name`); an earlier version's had 8 characters of `tempfile`.
TEMPORARY_FILE = re.compile(r"\.(?P<name>.+)\.(?P<token>[0-9a-f]{16}|[a-z0-9_]{8})\.tmp(?P<suffix>\.[A-Za-z0-9]+)?")


# ----------------------------------------------------------------------------------------------- single steps
def replace(
    source: str | os.PathLike,
    target: str | os.PathLike,
    *,
    src_dir_fd: int | None = None,
    dst_dir_fd: int | None = None,
) -> None:
    """``os.replace``: ``target`` becomes ``source`` at once (a file; or a folder onto a missing or empty one)."""
    where = {key: fd for key, fd in (("src_dir_fd", src_dir_fd), ("dst_dir_fd", dst_dir_fd)) if fd is not None}
    os.replace(source, target, **where)


def rename(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """``os.rename`` of a folder: fails where ``target`` is a non-empty folder (never replaces what is there)."""
    os.rename(source, target)


def remove_file(path: str | os.PathLike, *, dir_fd: int | None = None, missing_ok: bool = True) -> None:
    """Remove the file (or link: never followed) ``path``; nothing there is fine unless ``missing_ok`` is false."""
    try:
        os.unlink(path, **({} if dir_fd is None else {"dir_fd": dir_fd}))
    except FileNotFoundError:
        if not missing_ok:
            raise


def remove_empty_folder(path: str | os.PathLike) -> bool:
    """Remove ``path`` if it is an empty folder; whether it was (a folder holding anything stays)."""
    try:
        os.rmdir(path)
    except OSError:
        return False
    return True


#: The record of what a command wrote into a folder (`modeling_elmo.folders.manifest`): removed last.
MANIFEST = ".elmo-manifest.json"


def remove_tree(path: str | os.PathLike) -> None:
    """Remove ``path`` and everything below it (a link is removed, never followed; nothing there is fine), its
    manifest (`MANIFEST`) last: a run killed on the way leaves recorded files and the record of them, so a later
    run can still tell that nothing in it is anybody else's. Only for what the caller proved is the package's: a
    folder this process made, or one `prove_temporary` and a record of its content proved."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        os.unlink(path)
        return
    for entry in os.scandir(path):
        if entry.name == MANIFEST:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)  # its descriptor-based walk never follows a link swapped in meanwhile
        else:
            os.unlink(entry.path)
    remove_file(path / MANIFEST)
    os.rmdir(path)


def probe_writable(folder: str | os.PathLike) -> None:
    """Raise the `OSError` of creating something in ``folder`` (permissions alone do not tell: root, read-only
    file systems): a fresh folder ``.elmo-write-probe-TOKEN`` is created there and removed at once."""
    probe = Path(folder) / f".elmo-write-probe-{new_token()}"
    os.mkdir(probe, 0o700)
    os.rmdir(probe)


def make_folders(folder: str | os.PathLike) -> list[Path]:
    """Create ``folder`` and its missing parents; return the ones created, deepest first (`remove_empty_folders`
    undoes exactly these)."""
    folder = Path(folder).absolute()
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
    return missing


def remove_empty_folders(created: Iterable[Path]) -> None:
    """Remove each folder of ``created`` (deepest first, as `make_folders` returns them) that is empty."""
    for folder in created:
        remove_empty_folder(folder)


# ----------------------------------------------------------------------------------------------- writing a file
def create_file(path: str | os.PathLike, *, flags: int = os.O_RDWR) -> int:
    """Create the new file ``path`` (``O_CREAT | O_EXCL``: never one that was there, never through a link) with
    the umask's mode; return its descriptor."""
    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    os.fchmod(fd, 0o666 & ~current_umask())
    return fd


def _create_temporary_file(path: Path, *, dir_fd: int | None = None, suffix: str = "") -> tuple[int, str | Path]:
    """A new file under a fresh unique name beside ``path`` (``O_CREAT | O_EXCL``: never one that was there), with
    the umask's mode; returns its descriptor and its name (in ``dir_fd``) or path."""
    while True:
        name = temporary_file_name(path.name, new_token(), suffix)
        target: str | Path = name if dir_fd is not None else path.with_name(name)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(target, flags, 0o666 & ~current_umask(), dir_fd=dir_fd)
        except FileExistsError:
            continue
        return fd, target


def atomic_write_bytes(
    path: str | os.PathLike,
    data: bytes | Iterable[bytes],
    *,
    dir_fd: int | None = None,
    before_replace: Callable[[Path, Path], None] | None = None,
) -> None:
    """Write ``data`` (bytes, or blocks of them) to ``path`` so that ``path`` is either the old file or the complete
    new one, never a part: a fresh temporary beside it (`temporary_file_name`), flushed to disk, then `replace`.
    With ``dir_fd``, ``path``'s name is written in that open folder. ``before_replace(path, temporary)`` runs once
    the temporary is complete, before it takes the name (a caller records it). On any error the temporary is
    removed."""
    path = Path(path)
    if dir_fd is None:
        make_folders(path.parent)
    fd, temporary = _create_temporary_file(path, dir_fd=dir_fd)
    target = path.name if dir_fd is not None else path
    try:
        with os.fdopen(fd, "wb") as handle:
            for block in [data] if isinstance(data, bytes) else data:
                handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
        if before_replace is not None:
            before_replace(path, Path(temporary) if dir_fd is None else path.with_name(os.fspath(temporary)))
        replace(temporary, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        remove_file(temporary, dir_fd=dir_fd)
        raise


def atomic_write_text(
    path: str | os.PathLike, text: str, *, before_replace: Callable[[Path, Path], None] | None = None
) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), before_replace=before_replace)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, suffix: str = "") -> Iterator[Path]:
    """For writers that take a path (HDF5, safetensors, a plot): the block writes the yielded fresh temporary beside
    ``path`` (`temporary_file_name`, ``suffix`` after it); when it ends well the file is flushed to disk and gets
    the name ``path`` (`replace`), otherwise it is removed."""
    path = Path(path)
    fd, temporary = _create_temporary_file(path, suffix=suffix)
    os.close(fd)
    temporary = Path(temporary)
    try:
        yield temporary
        fd = os.open(temporary, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        replace(temporary, path)
    except BaseException:
        remove_file(temporary)
        raise


# ----------------------------------------------------------------------------------------------- processes
def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot: field 22 of ``/proc/PID/stat``); `None` where that
    cannot be read (no such process, no ``/proc``)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as handle:
            text = handle.read(4096).decode("ascii", "replace")
        return int(text[text.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_is_gone(pid: object, start: object) -> bool | None:
    """Whether the process ``pid`` that started at ``start`` (`process_start_time`) has ended: `True` when no
    process has that id or the one that has it started at another time (the id was reused), `False` when it runs,
    `None` when it cannot be told (the start time is unknown or unreadable): treat as running."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        pass  # it exists (another user's) or cannot be asked
    now = process_start_time(pid)
    if now is None or isinstance(start, bool) or not isinstance(start, int):
        return None
    return now != start


@functools.cache
def _own_start_time() -> int | None:
    return process_start_time(os.getpid())


# ----------------------------------------------------------------------------------------------- temporary folders
#: The file inside each temporary folder that proves it is one of ours (`new_temporary`).
TEMPORARY_MARKER = ".elmo-temporary.json"
#: The entry of a temporary folder that holds its payload: the folder being written, or the output moved aside.
CONTENT = "content"
#: The kind of temporary folder that holds an earlier output moved aside while a new one takes its name.
ASIDE = "old"
#: The format of the markers `new_temporary` writes; a marker without it is an earlier version's.
MARKER_FORMAT = 2
_MARKER_MAX_BYTES = 4096
#: The temporary folders this process made (their paths), so that it removes its own and nobody else's.
_MADE: set[str] = set()


@functools.cache
def _run_token() -> str:
    """A random name of this process's run, recorded in its markers: a process id can come back (a container's
    commands often all run as the same small pid), so it alone cannot tell our own temporaries from a killed run's."""
    return secrets.token_hex(16)


def temporary_folder_pattern(output_name: str) -> re.Pattern:
    """The names of the temporary folders beside an output ``output_name``: ``.NAME.KIND-PID-TOKEN``."""
    return re.compile(rf"\.{re.escape(output_name)}\.(?P<kind>[a-z]+)-(?P<pid>\d+)-(?P<token>[A-Za-z0-9_]+)")


def new_temporary(output: str | os.PathLike, kind: str, command: str, *, content: bool = True) -> Path:
    """Create a fresh private temporary folder of ``kind`` beside ``output`` (``.NAME.KIND-PID-TOKEN``, a new
    random token) holding its marker (`TEMPORARY_MARKER`: ``command``, ``kind``, the output's name, this process
    and when it started, this run, the folder's name and its token); return the path of its payload,
    ``FOLDER/content`` (created empty, with the umask's mode, unless ``content`` is false)."""
    output = Path(output)
    parent = output.absolute().parent
    while True:
        token = new_token()
        folder = parent / f".{output.name}.{kind}-{os.getpid()}-{token}"
        try:
            os.mkdir(folder, 0o700)
            break
        except FileExistsError:
            continue
    _MADE.add(os.fspath(folder))
    record = {
        "format": MARKER_FORMAT,
        "command": command,
        "kind": kind,
        "output": output.name,
        "pid": os.getpid(),
        "start": _own_start_time(),
        "run": _run_token(),
        "folder": folder.name,
        "token": token,
    }
    fd = os.open(folder / TEMPORARY_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    payload = folder / CONTENT
    if content:
        os.mkdir(payload)
        follow_umask(payload, folder=True)
    return payload


def new_private_folder(name: str, kind: str, parent: str | os.PathLike | None = None) -> Path:
    """A fresh private folder ``.NAME.KIND-PID-TOKEN`` in ``parent`` (the system's temporary folder by default)
    for this process's own use, without a marker (nobody else finishes it); `remove_own_folder` removes it."""
    import tempfile

    parent = Path(parent if parent is not None else tempfile.gettempdir())
    while True:
        folder = parent / f".{name}.{kind}-{os.getpid()}-{new_token()}"
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue
        _MADE.add(os.fspath(folder))
        return folder


def remove_own_folder(folder: str | os.PathLike) -> None:
    """Remove the folder ``folder`` that this process made (`new_private_folder`) and all in it; one it did not
    make is never touched (a `ValueError`)."""
    key = os.fspath(folder)
    if key not in _MADE:
        raise ValueError(f"{key!r} is not a folder this process made; refusing to remove it.")
    with contextlib.suppress(FileNotFoundError):
        remove_tree(folder)
    _MADE.discard(key)


def _read_marker(folder: Path) -> dict | None:
    """The record of ``folder``'s marker when the folder is a real folder of ours holding a regular marker file of
    one name, ours, that is a JSON object; otherwise `None`."""
    uid = os.geteuid()
    try:
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            return None
        fd = os.open(folder / TEMPORARY_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        marker = os.fstat(handle.fileno())
        if not stat.S_ISREG(marker.st_mode) or marker.st_uid != uid or marker.st_nlink != 1:
            return None
        try:
            record = json.loads(handle.read(_MARKER_MAX_BYTES).decode("utf-8"))
        except (ValueError, RecursionError):
            return None
    return record if isinstance(record, dict) and isinstance(record.get("command"), str) else None


def prove_temporary(folder: Path, output: Path) -> tuple[dict | None, str | None]:
    """Whether ``folder`` is a temporary of ``output`` that another, ended run of this package made: ``(record,
    None)`` when its marker (`_read_marker`) has this format, names this output, its kind, process and token as
    the folder's name does, and the folder's own name, and its process is gone (`process_is_gone`); ``(None,
    line)`` when the marker names this output but proves less (the line names the folder and what to do);
    ``(None, None)`` for anything else (no marker: not a temporary of ours, never touched, nothing said).

    A run's own temporaries (this process, at work) are ``(None, None)`` too."""
    match = temporary_folder_pattern(output.name).fullmatch(folder.name)
    if match is None:
        return None, None
    record = _read_marker(folder)
    if record is None or record.get("output") != output.name:
        return None, None
    if record.get("run") == _run_token():
        return None, None
    command = record["command"] if re.fullmatch(r"[A-Za-z0-9 ._-]{1,40}", record["command"]) else "an elmo command"
    leave = f"{str(folder)!r} looks like a temporary folder of an interrupted {command} run, but "
    advice = "; it was left alone: remove it yourself if it is not yours."
    expected = {
        "format": MARKER_FORMAT,
        "kind": match.group("kind"),
        "pid": int(match.group("pid")),
        "folder": folder.name,
        "token": match.group("token"),
    }
    if any(key not in record for key in ("format", "folder", "token", "start", "run")):
        return None, leave + "its marker is of an earlier version, which does not prove it" + advice
    if any(record.get(key) != value for key, value in expected.items()):
        return None, leave + "its marker names another folder, process or token than its name" + advice
    gone = process_is_gone(record["pid"], record["start"])
    if gone is False:
        return None, None  # another run at work on it: not ours to touch, and nothing wrong
    if gone is None:
        return None, (
            leave
            + f"whether its process {record['pid']} has ended cannot be told (its start time cannot be read)"
            + advice
        )
    return record, None


def remove_temporary(payload: str | os.PathLike) -> None:
    """Remove the temporary folder whose payload is ``payload`` (`new_temporary`), one this process made or one
    `prove_temporary` proved (the caller checked its payload): the payload first, then the marker, then the folder,
    so that a run killed on the way leaves a folder its marker still proves to be ours. Anything else found beside
    the marker stays (and so does the folder)."""
    folder = Path(payload).parent
    content = folder / CONTENT
    remove_tree(content)
    remove_file(folder / TEMPORARY_MARKER)
    if remove_empty_folder(folder):
        _MADE.discard(os.fspath(folder))


def is_own_temporary(folder: str | os.PathLike) -> bool:
    """Whether this process made the temporary folder ``folder`` (`new_temporary`) and has not removed it yet."""
    return os.fspath(folder) in _MADE
