"""The four released English ELMo models, and fetching their original files.

`RELEASES` is the one table of what AllenNLP published: for each release its name, its S3 folder and file names,
its ``options.json`` (hence every tensor shape), its parameter count, the figures published with it (SRL F1,
constituency-parsing F1, language-model perplexity where one was published, training data), a Hugging Face Hub
mirror where one is known, and the expected size and sha256 of each file where known. No sha256 is known today
(AllenNLP published none); the table has a slot per file, and a digest put there is enforced on every download
and every reuse of a cached file.

`fetch_release` downloads a release's ``options.json`` and ``weights.hdf5`` into a local cache with the resumable
HTTP client of `modeling_elmo.conversion.download`:

* the files come from ``<base URL>/<folder>/elmo_<folder>_options.json`` and ``..._weights.hdf5``; the base URL is
  `DEFAULT_BASE_URL` (AllenNLP's S3 bucket), or the ``ELMO_RELEASES_BASE_URL`` environment variable, or the
  ``base_url`` argument (``elmo convert --base-url``), in increasing priority;
* the cache is ``$HF_HOME/modeling_elmo/releases/<release>/`` (``~/.cache/huggingface/...`` by default), or
  ``cache_dir``. A file carries its final name only once it is complete and checked, so a file found there is
  used again without any request;
* a download is written to ``<file>.part``. When the connection drops, the download continues from the end of the
  ``.part`` file with an HTTP ``Range`` request (a few times within one call, and again in the next call);
* every file is checked before it gets its final name: its size against the ``Content-Length`` the server
  announced, against the size known for it (if any) and against a plausibility bound (``weights.hdf5`` must hold
  the release's parameters as float32 plus a little HDF5 bookkeeping), and its sha256 where one is known;
* when the primary server fails and the release has a Hub mirror, the file is fetched from the mirror with
  ``huggingface_hub.hf_hub_download`` and goes through the same checks.

Every failure is a `DownloadError` whose message is one line naming the file, where it came from and what was
wrong.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..folders.files import new_private_folder, remove_own_folder
from ..utils.io_utils import error_line, sha256_of_file
from .cache_folder import (
    CacheFolder,
    DownloadError,
    OpenedFile,
    cache_lock,
    make_cache_folder,
    read_origin,
)
from .download import DEFAULT_ATTEMPTS, download_file
from .original_format import config_summary, convert_config, expected_dataset_shapes

logger = logging.getLogger(__name__)

#: AllenNLP's S3 bucket; ``https://s3-us-west-2.amazonaws.com/allennlp/models/elmo`` serves the same files.
DEFAULT_BASE_URL = "https://allennlp.s3.amazonaws.com/models/elmo"
#: Environment variable that replaces `DEFAULT_BASE_URL` (a local mirror, a test server).
BASE_URL_ENV = "ELMO_RELEASES_BASE_URL"
FILE_ROLES = ("options", "weights")
#: A released ``options.json`` is a few hundred bytes; anything above this is not one.
OPTIONS_MAX_BYTES = 64 * 1024
#: HDF5 bookkeeping allowed on top of a weight file's float32 payload: a fixed part plus a fraction of the payload.
HDF5_OVERHEAD_BYTES = 1 << 20
HDF5_OVERHEAD_FRACTION = 0.01


# ----------------------------------------------------------------------------------------------- the table
@dataclasses.dataclass(frozen=True)
class HubMirror:
    """A Hugging Face Hub repository holding a copy of a release's files (``role -> file name in the repo``)."""

    repo_id: str
    filenames: Mapping[str, str]
    revision: str | None = None


@dataclasses.dataclass(frozen=True)
class Release:
    """One released model: where its files are, what they must contain, and what its authors published about it.

    ``options`` is the release's ``options.json``; every tensor shape of its ``weights.hdf5`` follows from it.
    ``num_parameters`` counts the values stored in ``weights.hdf5`` (the published count); ``sha256`` and
    ``sizes`` map a file role (``options``/``weights``) to the expected digest and byte count, or to ``None``
    when unknown.
    """

    name: str
    folder: str
    options: Mapping[str, Any]
    num_parameters: int
    published_parameters: str
    srl_f1: float
    constituency_parsing_f1: float
    perplexity: float | None
    perplexity_note: str
    training_data: str
    mirror: HubMirror | None = None
    sha256: Mapping[str, str | None] = dataclasses.field(default_factory=lambda: dict.fromkeys(FILE_ROLES))
    sizes: Mapping[str, int | None] = dataclasses.field(default_factory=lambda: dict.fromkeys(FILE_ROLES))

    def filename(self, role: str) -> str:
        """The published file name of ``role`` (``options`` or ``weights``)."""
        if role not in FILE_ROLES:
            raise ValueError(f"file role must be one of {FILE_ROLES}, got {role!r}.")
        return f"elmo_{self.folder}_{role}.{'json' if role == 'options' else 'hdf5'}"

    def url(self, role: str, base_url: str | None = None) -> str:
        """Where ``role`` is published, under ``base_url`` (default: `resolve_base_url`)."""
        return f"{resolve_base_url(base_url)}/{self.folder}/{self.filename(role)}"

    def published_figures(self) -> dict[str, Any]:
        """The figures published with the release, as they go into the model card and the conversion metadata."""
        return {
            "parameters": self.published_parameters,
            "parameters_in_weight_file": self.num_parameters,
            "srl_f1": self.srl_f1,
            "constituency_parsing_f1": self.constituency_parsing_f1,
            "lm_perplexity": self.perplexity if self.perplexity is not None else "not published",
            "lm_perplexity_note": self.perplexity_note,
            "training_data": self.training_data,
        }


#: The character CNN of all four releases: 2048 filters of widths 1 to 7.
RELEASED_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
_ONE_BILLION_WORDS = "1B Word Benchmark (about 800 M tokens of news)"


def released_options(dim: int, projection_dim: int, n_highway: int) -> dict[str, Any]:
    """The inference ``options.json`` of a released English model with these sizes (all else is shared)."""
    return {
        "lstm": {
            "dim": dim,
            "projection_dim": projection_dim,
            "n_layers": 2,
            "cell_clip": 3,
            "proj_clip": 3,
            "use_skip_connections": True,
        },
        "char_cnn": {
            "activation": "relu",
            "embedding": {"dim": 16},
            "filters": [list(f) for f in RELEASED_FILTERS],
            "max_characters_per_token": 50,
            "n_characters": 262,
            "n_highway": n_highway,
        },
    }


def count_parameters(options: Mapping[str, Any]) -> int:
    """How many values a ``weights.hdf5`` matching ``options`` stores (the released models' parameter count)."""
    return sum(math.prod(shape) for shape in expected_dataset_shapes(convert_config(dict(options))).values())


_NO_PERPLEXITY = "no perplexity was published for this release"
RELEASES: dict[str, Release] = {
    release.name: release
    for release in (
        Release(
            name="small",
            folder="2x1024_128_2048cnn_1xhighway",
            options=released_options(1024, 128, 1),
            num_parameters=13_593_296,
            published_parameters="13.6 M",
            srl_f1=83.62,
            constituency_parsing_f1=93.12,
            perplexity=None,
            perplexity_note=_NO_PERPLEXITY,
            training_data=_ONE_BILLION_WORDS,
        ),
        Release(
            name="medium",
            folder="2x2048_256_2048cnn_1xhighway",
            options=released_options(2048, 256, 1),
            num_parameters=28_027_728,
            published_parameters="28.0 M",
            srl_f1=84.04,
            constituency_parsing_f1=93.60,
            perplexity=None,
            perplexity_note=_NO_PERPLEXITY,
            training_data=_ONE_BILLION_WORDS,
        ),
        Release(
            name="original",
            folder="2x4096_512_2048cnn_2xhighway",
            options=released_options(4096, 512, 2),
            num_parameters=93_600_848,
            published_parameters="93.6 M",
            srl_f1=84.63,
            constituency_parsing_f1=93.85,
            perplexity=39.7,
            perplexity_note="on the 1B Word Benchmark held-out data, averaging the forward and backward "
            "perplexities the way bilm-tf does (the mean of the two losses, a geometric mean)",
            training_data=_ONE_BILLION_WORDS,
            mirror=HubMirror(
                "lysandre/elmo-2x4096_512_2048cnn_2xhighway", {"options": "options.json", "weights": "weights.hdf5"}
            ),
        ),
        Release(
            name="original-5.5b",
            folder="2x4096_512_2048cnn_2xhighway_5.5B",
            options=released_options(4096, 512, 2),
            num_parameters=93_600_848,
            published_parameters="93.6 M",
            srl_f1=84.93,
            constituency_parsing_f1=94.01,
            perplexity=None,
            perplexity_note=_NO_PERPLEXITY,
            training_data="Wikipedia (1.9 B tokens) and WMT 2008-2012 news crawl (3.6 B tokens)",
        ),
    )
}


def get_release(name: str) -> Release:
    """The `Release` called ``name``; an unknown name is a `ValueError` listing the known ones."""
    if name not in RELEASES:
        raise ValueError(f"unknown release {name!r}; the releases are {', '.join(RELEASES)}.")
    return RELEASES[name]


# ----------------------------------------------------------------------------------------------- locations
def resolve_base_url(base_url: str | None = None) -> str:
    """``base_url``, else ``$ELMO_RELEASES_BASE_URL``, else `DEFAULT_BASE_URL` (without a trailing slash)."""
    url = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    if not re.match(r"^https?://[^/]", url):
        raise ValueError(f"base URL {url!r} must start with http:// or https:// and name a host.")
    return url.rstrip("/")


def default_cache_dir() -> Path:
    """``$HF_HOME/modeling_elmo/releases`` (huggingface_hub's default home when ``HF_HOME`` is unset)."""
    from huggingface_hub import constants

    return Path(os.path.expanduser(os.environ.get("HF_HOME") or constants.HF_HOME)) / "modeling_elmo" / "releases"


def release_cache_dir(release: Release, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder that caches ``release``'s files: ``<cache_dir or default_cache_dir()>/<release name>``."""
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / release.name


# ----------------------------------------------------------------------------------------------- checks
def weights_size_bounds(num_parameters: int) -> tuple[int, int]:
    """The smallest and largest plausible ``weights.hdf5`` size in bytes for ``num_parameters`` float32 values."""
    payload = 4 * num_parameters
    return payload, payload + HDF5_OVERHEAD_BYTES + int(HDF5_OVERHEAD_FRACTION * payload)


def size_problem(release: Release, role: str, size: int) -> str | None:
    """Why ``size`` bytes cannot be ``release``'s ``role`` file, or ``None`` if it can."""
    known = release.sizes.get(role)
    if known is not None and size != known:
        return f"{size:,} bytes where the release's file has {known:,}"
    if role == "options":
        if size == 0 or size > OPTIONS_MAX_BYTES:
            return f"{size:,} bytes, not a plausible size for an options.json (1 to {OPTIONS_MAX_BYTES:,})"
        return None
    low, high = weights_size_bounds(release.num_parameters)
    if size < low:
        return (
            f"{size:,} bytes, too small for the release's {release.num_parameters:,} float32 parameters "
            f"({low:,} bytes at least)"
        )
    if size > high:
        return (
            f"{size:,} bytes, too large for the release's {release.num_parameters:,} float32 parameters "
            f"({high:,} bytes at most)"
        )
    return None


def options_problem(release: Release, data: bytes) -> str | None:
    """Why ``data`` is not ``release``'s ``options.json`` (not JSON, unreadable options, another model's sizes)."""
    try:
        options = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        return f"no valid JSON ({error})"
    try:
        got = convert_config(options)
    except (ValueError, TypeError, KeyError) as error:
        return f"options this package cannot read ({error})"
    want = convert_config(dict(release.options))

    def architecture(config: Any) -> tuple:
        return (
            expected_dataset_shapes(config),
            config.cell_clip,
            config.proj_clip,
            config.use_skip_connections,
            config.char_cnn_activation,
            config.max_characters_per_token,
        )

    if architecture(got) != architecture(want):
        return (
            f"the options of another model ({config_summary(got)}; release {release.name!r} has {config_summary(want)})"
        )
    return None


def check_file(release: Release, role: str, path: Path, where: str) -> None:
    """Raise `DownloadError` unless ``path`` has a plausible (or the known) size, the known sha256 and, for the
    options, the release's sizes."""
    problem = size_problem(release, role, path.stat().st_size)
    if problem:
        raise DownloadError(f"{release.filename(role)} from {where} has {problem}.")
    expected = release.sha256.get(role)
    if expected:
        actual = sha256_of_file(path)
        if actual != expected.lower():
            raise DownloadError(
                f"{release.filename(role)} from {where} has sha256 {actual}, the release's file has {expected.lower()}."
            )
    if role == "options":
        problem = options_problem(release, path.read_bytes())
        if problem:
            raise DownloadError(f"{release.filename(role)} from {where} holds {problem}.")


# ----------------------------------------------------------------------------------------------- releases
@dataclasses.dataclass
class FetchedRelease:
    """Where a release's files are now (``paths``), where they came from (``sources``, a URL or ``hf://``), and
    which were already in the cache (``cached``). With `fetch_release`'s ``keep_open``, ``opened`` holds each file as
    it was checked under the cache's lock, open (`reading_path`); close it (or use it as a context manager)."""

    release: Release
    paths: dict[str, Path]
    sources: dict[str, str]
    cached: dict[str, bool]
    opened: dict[str, OpenedFile] = dataclasses.field(default_factory=dict)

    def reading_path(self, role: str) -> Path:
        """Where to read ``role``'s file: the very file that was checked (`OpenedFile.reading_path`, whatever the
        cache folder's path leads to now) when it is held open, else its path in the cache."""
        return self.opened[role].reading_path if role in self.opened else self.paths[role]

    def close(self) -> None:
        for opened in self.opened.values():
            opened.close()

    def __enter__(self) -> FetchedRelease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fetch_from_mirror(release: Release, role: str, destination: Path, cache: CacheFolder) -> str:
    """Fetch ``role`` from the release's Hub mirror into ``destination`` (checked); return its ``hf://`` address.
    The Hub client writes by path, so it writes into a private staging folder outside the cache; the checked file
    is then moved (or copied) into the opened cache folder."""
    import huggingface_hub

    mirror = release.mirror
    filename = mirror.filenames[role]
    where = f"hf://{mirror.repo_id}/{filename}"
    staging = new_private_folder(destination.name, "mirror")
    try:
        fetched = Path(
            huggingface_hub.hf_hub_download(mirror.repo_id, filename, revision=mirror.revision, local_dir=staging)
        )
    except Exception as error:  # the Hub client raises many kinds (offline, HTTP, auth, file system)
        remove_own_folder(staging)
        raise DownloadError(f"the Hub mirror {where} failed: {error_line(error, 200, named=True)}") from None
    try:
        check_file(release, role, fetched, where)
        cache.check()
        cache.install(fetched, destination.name)
    finally:
        remove_own_folder(staging)
    return where


def fetch_release(
    release: Release | str,
    cache_dir: str | os.PathLike | None = None,
    *,
    base_url: str | None = None,
    force_download: bool = False,
    use_mirror: bool = True,
    attempts: int = DEFAULT_ATTEMPTS,
    retry_wait: float = 1.0,
    progress: bool = True,
    deadlines: Mapping[str, float] | None = None,
    keep_open: bool = False,
) -> FetchedRelease:
    """Make sure ``release``'s ``options.json`` and ``weights.hdf5`` are in the cache, checked; return where.

    A file already in the cache (see `release_cache_dir`) is checked again (size, sha256 where known) and used
    without any request, unless ``force_download`` (which also discards a ``.part`` file; the cached file is
    replaced only once the new download is complete). Otherwise the file is downloaded from
    ``release.url(role, base_url)`` with `download_file`; if that fails and ``use_mirror`` and the release has a
    Hub mirror, from the mirror. Where each file came from is kept next to it (``<name>.source``; the URL that
    answered, with the one asked for when a redirect led elsewhere). While it works, the call holds a lock on the
    release's cache folder: a second call for the same cache waits for it. A file may take at most
    ``deadlines[role]`` seconds (default: see `download_file`). Every file is checked once more as it is opened at
    the end (no link followed); with ``keep_open`` it stays open (`FetchedRelease.opened`), and a reader of
    `FetchedRelease.reading_path` reads the bytes checked here even when the folder's path is swapped for a link to
    other files once the lock is released. Raises `DownloadError` (one line: file, source, problem).
    """
    release = get_release(release) if isinstance(release, str) else release
    folder = make_cache_folder(release_cache_dir(release, cache_dir))
    with cache_lock(folder) as cache:
        return _fetch_locked(
            release,
            cache,
            base_url=base_url,
            force_download=force_download,
            use_mirror=use_mirror,
            attempts=attempts,
            retry_wait=retry_wait,
            progress=progress,
            deadlines=deadlines or {},
            keep_open=keep_open,
        )


def max_size(release: Release, role: str) -> int:
    """The most bytes ``release``'s ``role`` file can have (its known size, else the plausibility bound)."""
    known = release.sizes.get(role)
    if known is not None:
        return known
    return OPTIONS_MAX_BYTES if role == "options" else weights_size_bounds(release.num_parameters)[1]


def _fetch_locked(
    release: Release,
    cache: CacheFolder,
    *,
    base_url: str | None,
    force_download: bool,
    use_mirror: bool,
    attempts: int,
    retry_wait: float,
    progress: bool,
    deadlines: Mapping[str, float],
    keep_open: bool,
) -> FetchedRelease:
    fetched = FetchedRelease(release=release, paths={}, sources={}, cached={})
    try:
        for role in FILE_ROLES:
            _fetch_file_locked(
                release,
                role,
                cache,
                fetched,
                base_url=base_url,
                force_download=force_download,
                use_mirror=use_mirror,
                attempts=attempts,
                retry_wait=retry_wait,
                progress=progress,
                deadlines=deadlines,
            )
            destination = fetched.paths[role]
            # the file as it is read later: opened here (no link followed) and checked as opened
            fetched.opened[role] = opened = cache.open_file(destination.name)
            try:
                check_file(release, role, opened.reading_path, f"the cache ({destination})")
            except DownloadError as error:
                raise DownloadError(f"{error} Delete it or rerun with --force-download.") from None
        cache.check()  # the paths returned lead to the files checked here
    except BaseException:
        fetched.close()
        raise
    if not keep_open:
        fetched.close()
        fetched.opened = {}
    return fetched


def _fetch_file_locked(
    release: Release,
    role: str,
    cache: CacheFolder,
    fetched: FetchedRelease,
    *,
    base_url: str | None,
    force_download: bool,
    use_mirror: bool,
    attempts: int,
    retry_wait: float,
    progress: bool,
    deadlines: Mapping[str, float],
) -> None:
    """Put ``role``'s file into the cache (or find it there) and record it in ``fetched``."""
    paths, sources, cached = fetched.paths, fetched.sources, fetched.cached
    destination = cache.path / release.filename(role)
    url = release.url(role, base_url)
    if force_download:  # the cached file stays until the new one replaces it
        cache.discard_part(destination.name)
    elif cache.is_regular_or_absent(destination.name, "the cached file"):
        cache.check()  # a file found through a folder swapped meanwhile is not the cache's
        cache.finish_download(destination.name)  # a download killed after the file took its name
        sources[role] = read_origin(destination, url, cache)
        paths[role], cached[role] = destination, True
        logger.info("using the cached %s", destination)
        return
    try:
        downloaded = download_file(
            url,
            destination,
            attempts=attempts,
            retry_wait=retry_wait,
            progress=progress,
            check_size=lambda size, role=role: size_problem(release, role, size),
            check_complete=lambda path, role=role, url=url: check_file(release, role, path, url),
            max_bytes=max_size(release, role),
            deadline=deadlines.get(role),
            cache=cache,
        )
        sources[role] = downloaded.source
    except DownloadError as error:
        if not (use_mirror and release.mirror is not None and role in release.mirror.filenames):
            raise
        logger.info("%s; trying the Hub mirror %s", error, release.mirror.repo_id)
        try:
            cache.check()
            sources[role] = _fetch_from_mirror(release, role, destination, cache)
        except DownloadError as mirror_error:
            raise DownloadError(f"{str(error).rstrip('.')}; {mirror_error}") from None
        cache.discard_part(destination.name)  # an unfinished primary download is of no use now
    cache.check()
    cache.write_origin(destination.name, sources[role])
    paths[role], cached[role] = destination, False


__all__ = [
    "BASE_URL_ENV",
    "DEFAULT_BASE_URL",
    "FetchedRelease",
    "HubMirror",
    "RELEASES",
    "Release",
    "count_parameters",
    "default_cache_dir",
    "fetch_release",
    "get_release",
    "release_cache_dir",
    "released_options",
    "resolve_base_url",
    "size_problem",
    "weights_size_bounds",
]
