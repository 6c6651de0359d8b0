"""Every change the package makes to the file system goes through this module: creating a temporary file or folder,
writing a file atomically, renaming, removing, the lock beside an output, creating missing parent folders (and
removing them again when left empty), and opening a file without following a link.

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

One link rule (`open_regular`): a file is opened without following a symbolic link and without blocking, and must
be a regular file; a file with more than one name (a hard link, ``st_nlink > 1``) is refused for writing always
and for reading where the caller reads what it will hand on (``alone=True``: publishing, converting).

Every step calls the plain `os` and `shutil` functions, looked up when it runs (``os.replace(...)``), so that a
test can stop a process at each of them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = [
    "ASIDE",
    "CONTENT",
    "MANIFEST",
    "TEMPORARY_FILE",
    "TEMPORARY_MARKER",
    "atomic_output",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_regular_or_absent",
    "create_file",
    "current_umask",
    "exclusive_lock",
    "follow_umask",
    "lock_holders",
    "make_folders",
    "new_private_folder",
    "new_temporary",
    "new_token",
    "open_regular",
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
    "sha256_of_file",
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


def atomic_write_bytes(path: str | os.PathLike, data: bytes | Iterable[bytes], *, dir_fd: int | None = None) -> None:
    """Write ``data`` (bytes, or blocks of them) to ``path`` so that ``path`` is either the old file or the complete
    new one, never a part: a fresh temporary beside it (`temporary_file_name`), flushed to disk, then `replace`.
    With ``dir_fd``, ``path``'s name is written in that open folder. On any error the temporary is removed."""
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
        replace(temporary, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        remove_file(temporary, dir_fd=dir_fd)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


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


# ----------------------------------------------------------------------------------------------- opening a file
def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _not_regular(path: str | os.PathLike, what: str, mode: int) -> ValueError:
    return ValueError(
        f"{what} {str(path)!r} is {_kind(mode)}, not a regular file; refusing to use it (remove it "
        "if it is not yours to keep)."
    )


def check_regular_or_absent(path: str | os.PathLike, what: str, *, folder_fd: int | None = None) -> bool:
    """Whether ``path`` is a regular file (`False` when nothing is there); a link (even to a regular file) or
    anything else is a `ValueError` naming it, so that the package never writes through, or trusts, a planted
    link. With ``folder_fd``, ``path``'s name is looked up in that open folder; messages still name ``path``."""
    try:
        if folder_fd is None:
            mode = os.lstat(path).st_mode
        else:
            mode = os.stat(Path(path).name, dir_fd=folder_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(mode):
        raise _not_regular(path, what, mode)
    return True


def open_regular(
    path: str | os.PathLike, flags: int, what: str, *, folder_fd: int | None = None, alone: bool = False
) -> int:
    """``os.open(path, flags)`` that never follows a link and never blocks (a FIFO, a device), and refuses anything
    but a regular file with a `ValueError` naming it; returns the file descriptor. A file with more than one name
    (a hard link: the same bytes are another file elsewhere) is refused for writing, and with ``alone`` for reading
    too. ``flags`` may hold ``O_CREAT`` (a new file gets the umask's mode). An `OSError` of another kind (no
    permission...) is raised as it is. With ``folder_fd``, ``path``'s name is opened in that open folder
    (``dir_fd``); messages still name ``path``."""
    name, where = (path, {}) if folder_fd is None else (Path(path).name, {"dir_fd": folder_fd})
    try:
        # O_TRUNC would empty the file before it is checked: it is applied once the file passed (below)
        fd = os.open(name, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666, **where)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a link; a FIFO without a reader; a folder
            check_regular_or_absent(path, what, folder_fd=folder_fd)
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _not_regular(path, what, info.st_mode)
    writing = flags & (os.O_WRONLY | os.O_RDWR)
    if (writing or alone) and info.st_nlink > 1:
        os.close(fd)
        if writing:
            raise ValueError(
                f"{what} {str(path)!r} is a hard link to another file ({info.st_nlink} names share it); refusing to "
                "write through it (remove it if it is not yours to keep)."
            )
        raise ValueError(
            f"{what} {str(path)!r} is a hard link ({info.st_nlink} names share the file, which may lie outside the "
            "folder); refusing to read it through this name, as a symbolic link out of the folder is refused. Copy "
            "the file in if it belongs there."
        )
    if flags & os.O_TRUNC:
        os.ftruncate(fd, 0)
    return fd


def sha256_of_file(path: str | os.PathLike, block_size: int = 1 << 20) -> str:
    """The hex sha256 of a file's bytes, read in blocks of ``block_size``."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(block_size):
            digest.update(block)
    return digest.hexdigest()


# ----------------------------------------------------------------------------------------------- the lock
def lock_holders(fd: int) -> str:
    """Who holds a lock on the file open as ``fd``, as Linux's ``/proc/locks`` tells: ``process 123 of user bob
    (exclusive lock)``, joined by commas; empty where that cannot be read."""
    import pwd

    info = os.fstat(fd)
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read(1 << 20).splitlines()
    except OSError:
        return ""
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or "->" in fields:  # a process waiting for the lock, not holding it
            continue
        pid, where = fields[4], fields[5].split(":")
        try:
            same = (int(where[0], 16), int(where[1], 16), int(where[2])) == (
                os.major(info.st_dev),
                os.minor(info.st_dev),
                info.st_ino,
            )
        except (IndexError, ValueError):
            continue
        if not same:
            continue
        kind = "shared" if fields[3] == "READ" else "exclusive"
        try:
            user = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
        except (OSError, KeyError):
            user = "unknown"
        found.append(f"process {pid} of user {user} ({kind} lock)")
    return ", ".join(dict.fromkeys(found))


def _named_holder(fd: int) -> str:
    """The command a lock file names (`exclusive_lock`'s ``holder``): its first 100 bytes, printable ASCII only."""
    try:
        text = os.pread(fd, 100, 0).decode("ascii", "replace")
    except OSError:
        return ""
    return text if re.fullmatch(r"[A-Za-z0-9 ._-]+", text) else ""


@contextlib.contextmanager
def exclusive_lock(
    path: str | os.PathLike,
    busy: str,
    unwritable: str | Callable[[OSError], Exception] | None = None,
    *,
    holder: str | None = None,
    what: str = "lock file",
    folder_fd: int | None = None,
    wait: float | None = None,
    waiting_for: str = "",
    gave_up: Callable[[str], Exception] | None = None,
    keep_file: bool = False,
) -> Iterator[int]:
    """Hold an exclusive `fcntl.flock` on the file ``path`` while the block runs (yields its descriptor). The one
    lock of the package: the operating system releases it when its process dies, so a killed run never leaves a
    stale lock.

    The file is opened without following a link and without blocking (`open_regular`; with ``folder_fd``, its name
    in that open folder): a link planted there, a FIFO, a folder or a hard link to another file is refused with one
    line naming it (``what``), nothing is created through it. An `OSError` creating it is a `ValueError` starting
    with ``unwritable`` (or what the callable ``unwritable`` makes of it).

    Held by another process: without ``wait``, a `ValueError` with the message ``busy`` at once, where ``{holder}``
    becomes the command the lock file names (``holder`` is written into it while held). With ``wait`` (seconds), one
    warning says for whom it waits (the processes `lock_holders` finds) and for what (``waiting_for``), and after
    ``wait`` seconds ``gave_up(holders)`` is raised.

    The file is removed when the block ends (unless ``keep_file``). A process that opened the file just before an
    earlier holder removed it would lock a deleted file: the lock is only taken once it is on the file at the path.
    """
    import fcntl

    path = Path(path)
    name = path.name if folder_fd is not None else path

    def at_path() -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    while True:
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT, what, folder_fd=folder_fd)
        except ValueError as error:
            raise ValueError(f"{unwritable}: {error}" if isinstance(unwritable, str) else str(error)) from None
        except OSError as error:
            if callable(unwritable):
                raise unwritable(error) from None
            if unwritable is None:
                raise ValueError(f"cannot create the {what} {str(path)!r}: {error.strerror}.") from None
            raise ValueError(f"{unwritable}: {error.strerror} ({str(path)!r}).") from None
        handle = os.fdopen(fd, "rb")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if wait is None:
                named = _named_holder(handle.fileno()) or "elmo"
                handle.close()
                raise ValueError(busy.replace("{holder}", named)) from None
            holders = lock_holders(handle.fileno()) or "another process"
            logger.warning(
                "waiting for %s, which holds %s, %s (giving up after %.0f s)", holders, path, waiting_for, wait
            )
            deadline = time.monotonic() + wait
            while True:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        handle.close()
                        raise (gave_up(holders) if gave_up else ValueError(busy)) from None
        current = at_path()
        if current is not None and os.path.samestat(current, os.fstat(handle.fileno())):
            break
        handle.close()  # removed (and maybe re-created) by the process that held it: lock the file at the path
    if holder is not None:
        os.ftruncate(handle.fileno(), 0)
        os.pwrite(handle.fileno(), holder.encode("utf-8"), 0)
    try:
        yield handle.fileno()
    finally:
        if not keep_file:
            current = at_path()
            if current is not None and os.path.samestat(current, os.fstat(handle.fileno())):
                remove_file(name, dir_fd=folder_fd)  # while still locked, so no other process can be holding it
        with contextlib.suppress(OSError):
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()


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
