"""The one lock of the package (`exclusive_lock`: an `fcntl.flock` on a file beside what it guards, released by the
operating system when its process dies) and who holds it (`lock_holders`). The lock file is opened by the link
rule's opener (`modeling_elmo.folders.opening.open_regular`) and removed through `modeling_elmo.folders.files`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .files import remove_file
from .opening import open_regular

logger = logging.getLogger(__name__)

__all__ = ["exclusive_lock", "lock_holders"]


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
