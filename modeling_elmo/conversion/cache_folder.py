"""A release's cache folder, kept real and written by one process at a time: the folder under
`modeling_elmo.conversion.download`'s HTTP client.

`make_cache_folder`, `cache_lock`, `CacheFolder` and `read_origin` keep a cache folder real (no link followed), one
writer at a time, written only relative to the folder opened at the lock (``dir_fd``: a folder swapped for a link never
receives a byte), and the source of every cached file beside it (``<file>.source``). Their file safety (regular files
only, atomic writes, the lock) comes from `modeling_elmo.folders` (files, opening, locks).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from ..folders.files import atomic_write_bytes, remove_file, replace
from ..folders.locks import exclusive_lock
from ..folders.opening import check_regular_or_absent, open_regular

_CHUNK = 1 << 20


class DownloadError(OSError):
    """A release file could not be fetched, or failed a check; the message names the file and its source."""


def origin_path(path: Path) -> Path:
    """The small text file that records where a cached file was downloaded from (``<name>.source``)."""
    return path.with_name(path.name + ".source")


def make_cache_folder(folder: Path) -> Path:
    """Create a release's cache folder (and its parents) if needed; return it. The folder itself must be a real
    folder: a link planted there would send every download elsewhere (a `ValueError` naming it)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DownloadError(f"cannot create the release cache folder {folder}: {error.strerror or error}.") from None
    if folder.is_symlink():
        raise ValueError(
            f"the release cache folder {str(folder)!r} is a symbolic link; refusing to download "
            "through it (remove it, or give another --cache-dir)."
        )
    return folder


def read_origin(path: Path, default: str, cache: CacheFolder | None = None) -> str:
    """Where the cached file ``path`` came from, as its ``.source`` record says (at most 4 KB of it), else
    ``default`` (read in ``cache``, the pinned folder, where given). The record must be a regular file: a link or a
    FIFO planted there is refused, naming it."""
    origin = origin_path(path)
    where = cache.fd if cache is not None else None
    if not check_regular_or_absent(origin, "the cached file's source record", folder_fd=where):
        return default
    with os.fdopen(open_regular(origin, os.O_RDONLY, "the cached file's source record", folder_fd=where), "rb") as f:
        return " ".join(f.read(4096).decode("utf-8", "replace").split()) or default


def source_of(url: str, final_url: str) -> str:
    """The URL that served a file, with the one asked for when a redirect led elsewhere (what ``.source`` holds)."""
    return url if final_url == url else f"{final_url} (redirected from {url})"


def part_path(path: str | os.PathLike) -> Path:
    """Where an unfinished download of ``path`` is kept (``<name>.part``, next to it)."""
    path = Path(path)
    return path.with_name(path.name + ".part")


def part_record_path(part: Path) -> Path:
    """The record of what a ``.part`` file holds: its URL and the server's validator (``<name>.part.json``)."""
    return part.with_name(part.name + ".json")


class CacheFolder:
    """A cache folder opened once, without following a link, and held open: every file in it is created, written,
    renamed and removed relative to that open folder (``dir_fd``), never through its path, so a folder swapped for a
    link or another folder after it was opened never receives a byte (what is written lands in the folder that was
    opened, wherever it now is). `check` says whether the path still leads to it, so that a download stops with a
    line instead of finishing in a folder no one will look in. Names are file names in the folder (no ``/``)."""

    def __init__(self, path: str | os.PathLike, *, follow_link: bool = False, parent_fd: int | None = None) -> None:
        self.path = Path(path)
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow_link else os.O_NOFOLLOW)
        try:  # with ``parent_fd``, the folder's name is opened in that open parent
            self.fd = os.open(self.path if parent_fd is None else self.path.name, flags, dir_fd=parent_fd)
        except OSError as error:
            raise ValueError(
                f"the release cache folder {str(self.path)!r} is not a folder of its own ({error.strerror or error}); "
                "refusing to download through it (remove it, or give another --cache-dir)."
            ) from None
        self._identity = os.fstat(self.fd)
        self._follow = follow_link

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def check(self) -> None:
        """Raise a `ValueError` when the folder's path no longer leads to the folder that was opened."""
        try:
            current = os.stat(self.path) if self._follow else os.lstat(self.path)
        except OSError:
            current = None
        if current is None or not os.path.samestat(current, self._identity):
            raise ValueError(
                f"the release cache folder {str(self.path)!r} was replaced (by a link or another folder) while the "
                "download ran; nothing more is written there. Check who can write its parent folder, and run again."
            )

    def shown(self, name: str) -> Path:
        """The path a message names for ``name``."""
        return self.path / name

    def open_file(self, name: str, what: str = "the cached file") -> OpenedFile:
        """``name`` in the opened folder, opened for reading (no link followed, a regular file) and held open."""
        return OpenedFile(self.shown(name), self.open(name, os.O_RDONLY, what))

    def reading_path(self, name: str) -> Path:
        """A path that reads ``name`` in the opened folder wherever it now is (Linux's ``/proc/self/fd``), for
        readers that take a path (a checksum); elsewhere the path itself."""
        proc = Path(f"/proc/self/fd/{self.fd}")
        return proc / name if proc.is_dir() else self.path / name

    def is_regular_or_absent(self, name: str, what: str) -> bool:
        """`io_utils.check_regular_or_absent` of ``name`` in the opened folder."""
        return check_regular_or_absent(self.shown(name), what, folder_fd=self.fd)

    def open(self, name: str, flags: int, what: str) -> int:
        """`io_utils.open_regular` of ``name`` in the opened folder."""
        return open_regular(self.shown(name), flags, what, folder_fd=self.fd)

    def size(self, name: str) -> int:
        """Bytes of ``name`` (0 when it is absent)."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_size
        except FileNotFoundError:
            return 0

    def remove(self, name: str) -> None:
        """Remove ``name`` (a link there is removed, never followed); nothing there is fine."""
        remove_file(name, dir_fd=self.fd)

    def replace(self, source: str, name: str) -> None:
        replace(source, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def discard_part(self, name: str) -> None:
        """Remove the unfinished download of ``name`` and its record."""
        part = part_path(name).name
        self.remove(part)
        self.remove(part_record_path(Path(part)).name)

    def write_atomic(self, name: str, data: bytes | Iterator[bytes]) -> None:
        """Write ``data`` (bytes, or blocks of them) to a fresh temporary in the folder, flush it to disk and give it
        the name ``name`` (`files.atomic_write_bytes`: ``name`` is the old file or the whole new one); the temporary
        is removed on any error."""
        atomic_write_bytes(self.shown(name), data, dir_fd=self.fd)

    def write_new(self, name: str, data: bytes, what: str) -> None:
        """Create ``name``, which is not there (``O_EXCL``: never a file that is), holding ``data`` flushed to disk:
        for a record written where its old version was just removed, so that a kill leaves no temporary beside it
        (a record cut short does not parse, and is discarded with what it describes)."""
        with os.fdopen(self.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, what), "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    def write_origin(self, name: str, source: str) -> None:
        """Record that ``name`` came from ``source`` (its ``.source``): left as it is where it says so already, else
        the old record is removed and the new one created in its place (`write_new`: a kill leaves no temporary; at
        worst no record, which `finish_download` writes again from the download's record)."""
        origin = origin_path(Path(name)).name
        data = (source + "\n").encode("utf-8")
        if self.is_regular_or_absent(origin, "the cached file's source record"):
            with os.fdopen(self.open(origin, os.O_RDONLY, "the cached file's source record"), "rb") as handle:
                if handle.read(len(data) + 1) == data:
                    return
            self.remove(origin)
        self.write_new(origin, data, "the cached file's source record")

    def finish_download(self, name: str) -> None:
        """Finish what a download of ``name`` killed after the file took its name left: its record (``.part.json``,
        no ``.part`` beside it) says where the file came from; the ``.source`` is written from it, then the record
        is removed."""
        part = part_path(name).name
        record_name = part_record_path(Path(part)).name
        if self.is_regular_or_absent(part, "the partial download"):
            return  # a download to resume: its record is its own
        if not self.is_regular_or_absent(record_name, "the download record"):
            return
        try:
            with os.fdopen(self.open(record_name, os.O_RDONLY, "the download record"), "rb") as handle:
                record = json.loads(handle.read(1 << 16).decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            record = None
        url = record.get("url") if isinstance(record, dict) else None
        final = record.get("final_url") or url if isinstance(record, dict) else None
        if isinstance(url, str) and isinstance(final, str) and self.is_regular_or_absent(name, "the cached file"):
            self.write_origin(name, source_of(url, final))
        self.remove(record_name)

    def install(self, source: Path, name: str) -> None:
        """Move the finished file ``source`` (outside the folder, in a private staging folder) into the folder as
        ``name``: renamed where both are on one file system, else copied to a fresh temporary first."""
        import errno

        try:
            replace(source, name, dst_dir_fd=self.fd)
            return
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
        with open(source, "rb") as handle:
            self.write_atomic(name, iter(lambda: handle.read(_CHUNK), b""))


class OpenedFile:
    """A cache file held open (`CacheFolder.open_file`, under the cache's lock): `reading_path` reads that very file,
    whatever its name or its folder's path lead to later (a folder swapped for a link to other files, a newer
    download renamed over the name), so what is checked and what is read later are the same bytes. ``path`` is the
    name messages use. Close it (or use it as a context manager) when done."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd

    @property
    def reading_path(self) -> Path:
        """A path that opens this file itself (Linux's ``/proc/self/fd/N``), for readers that take a path (h5py,
        zipfile, a checksum); elsewhere the path itself."""
        proc = Path("/proc/self/fd")
        return proc / str(self.fd) if self.fd >= 0 and proc.is_dir() else self.path

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OpenedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: How long a download waits for another process holding the release cache's lock before it gives up with a line.
LOCK_WAIT_SECONDS = 1800.0


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[CacheFolder]:
    """Hold an exclusive `fcntl.flock` on ``.<release>.lock`` beside the release's cache folder (the file stays; a
    lock dies with its process); yield the folder, opened (`CacheFolder`). The lock file is opened without following
    a link and must be a regular file of one name: a link, a FIFO, a folder or a hard link to another file planted
    there is a `ValueError` naming it, and nothing is opened through it. The lock and the folder are both opened in
    their parent folder, opened once.

    A second download of the same release into the same cache waits for the first one and then finds its files
    complete in the cache, instead of writing the same ``.part`` at the same time. While it waits it says for whom
    (the process and user holding the lock, where the system tells), and after `LOCK_WAIT_SECONDS` it gives up with
    a `DownloadError` naming them: a lock held by another user's process (shared or not) never blocks for ever.

    The cache folder is opened once here (without following a link), and every file in it is written relative to
    that open folder: a folder swapped for a link or another folder while a server delayed its answer never receives
    a byte, and `CacheFolder.check` (called before each step) stops the download with a `ValueError` naming it.
    """
    path = folder.with_name(f".{folder.name}.lock")
    with contextlib.ExitStack() as stack:
        try:  # the folder and its lock are opened in one open parent: siblings, however the parent's path changes
            parent = os.open(folder.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            raise DownloadError(f"cannot open the release cache folder {folder}: {error.strerror or error}.") from None
        stack.callback(os.close, parent)
        cache = CacheFolder(folder, parent_fd=parent)
        stack.callback(cache.close)
        stack.enter_context(
            exclusive_lock(  # never through a link, a FIFO, a folder or a hard link: a `ValueError` naming it
                path,
                f"another process holds {path}",
                lambda error: DownloadError(
                    f"cannot write in the release cache folder {folder}: {error.strerror or error}."
                ),
                what="the cache's lock file",
                folder_fd=parent,
                wait=LOCK_WAIT_SECONDS,
                waiting_for=f"the lock of the release cache {folder}",
                gave_up=lambda holders: DownloadError(
                    f"gave up after {LOCK_WAIT_SECONDS:.0f} s waiting for {holders}, which holds {path}, the "
                    f"lock of the release cache {folder}; wait for it to end, or give another --cache-dir."
                ),
                keep_file=True,
            )
        )
        cache.check()
        yield cache


__all__ = [
    "LOCK_WAIT_SECONDS",
    "CacheFolder",
    "DownloadError",
    "OpenedFile",
    "cache_lock",
    "make_cache_folder",
    "origin_path",
    "part_path",
    "part_record_path",
    "read_origin",
]
