"""Opening a file without following a link (one half of the package's file safety; the other changes live in
`modeling_elmo.folders.files`, the lock in `modeling_elmo.folders.locks`).

One link rule (`open_regular`): a file is opened without following a symbolic link and without blocking, and must
be a regular file; a file with more than one name (a hard link, ``st_nlink > 1``) is refused for writing always
and for reading where the caller reads what it will hand on (``alone=True``: publishing, converting).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

__all__ = ["check_regular_or_absent", "open_regular", "sha256_of_file"]


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
