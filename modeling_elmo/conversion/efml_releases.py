"""The 44 ELMoForManyLangs models and fetching them: ``elmo convert --release efml-LANG``.

`EFML_RELEASES` lists them as ELMoForManyLangs' README does: the language, a code (ISO 639-1 where there is one,
639-3 otherwise), and the model's id in the NLPL vector repository, which serves it as
``http://vectors.nlpl.eu/repository/11/<id>.zip``. `fetch_efml_release` downloads that zip into the release cache
(``$HF_HOME/modeling_elmo/releases/efml-<code>/``) with the package's download function
(`modeling_elmo.conversion.download.download_file`: progress, a resumable ``.part`` file, size checks), or takes it from
a Hugging Face Hub mirror (a repository holding ``<id>.zip`` files) when the repository fails.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path

from ..folders.files import new_private_folder, remove_own_folder
from .cache_folder import (
    CacheFolder,
    DownloadError,
    OpenedFile,
    cache_lock,
    make_cache_folder,
    read_origin,
)
from .download import DEFAULT_ATTEMPTS, download_file
from .releases import default_cache_dir

logger = logging.getLogger(__name__)

#: Where NLPL serves the models (``<base>/<id>.zip``); ``$ELMO_EFML_BASE_URL`` or ``--base-url`` replace it.
EFML_BASE_URL = "http://vectors.nlpl.eu/repository/11"
EFML_BASE_URL_ENV = "ELMO_EFML_BASE_URL"
#: A Hub repository holding copies of the zips as ``<id>.zip`` (none is published today); ``--mirror`` or this
#: environment variable names one.
EFML_MIRROR_ENV = "ELMO_EFML_HUB_MIRROR"
#: A published model zip is a few hundred MB; a file outside these bounds is not one.
EFML_ZIP_MIN_BYTES = 1 << 10
EFML_ZIP_MAX_BYTES = 4 << 30


@dataclasses.dataclass(frozen=True)
class EfmlRelease:
    """One ELMoForManyLangs model: its language, code, NLPL repository id, and its zip's size where known."""

    language: str
    code: str
    repository_id: int
    size: int | None = None

    @property
    def name(self) -> str:
        return f"efml-{self.code}"

    @property
    def filename(self) -> str:
        return f"{self.repository_id}.zip"

    def url(self, base_url: str | None = None) -> str:
        base = base_url or os.environ.get(EFML_BASE_URL_ENV) or EFML_BASE_URL
        if not re.match(r"^https?://[^/]", base):
            raise ValueError(f"base URL {base!r} must start with http:// or https:// and name a host.")
        return f"{base.rstrip('/')}/{self.filename}"


_TABLE = """\
Arabic ar 136; Bulgarian bg 137; Catalan ca 138; Czech cs 139; Old Church Slavonic cu 140; Danish da 141;
German de 142; Greek el 143; English en 144; Spanish es 145; Estonian et 146; Basque eu 147; Persian fa 148;
Finnish fi 149; French fr 150; Irish ga 151; Galician gl 152; Ancient Greek grc 153; Hebrew he 154; Hindi hi 155;
Croatian hr 156; Hungarian hu 157; Indonesian id 158; Italian it 159; Japanese ja 160; Korean ko 161; Latin la 162;
Latvian lv 163; Dutch nl 164; Norwegian Bokmål nb 165; Norwegian Nynorsk nn 166; Polish pl 167; Portuguese pt 168;
Romanian ro 169; Russian ru 170; Slovak sk 171; Slovene sl 172; Swedish sv 173; Turkish tr 174; Uyghur ug 175;
Ukrainian uk 176; Urdu ur 177; Vietnamese vi 178; Chinese zh 179"""


def _parse(table: str) -> dict[str, EfmlRelease]:
    releases = {}
    for entry in " ".join(table.split()).split(";"):
        *language, code, number = entry.split()
        release = EfmlRelease(" ".join(language), code, int(number))
        releases[release.name] = release
    return releases


#: The 44 models by name (``efml-<code>``), as ELMoForManyLangs' README lists them.
EFML_RELEASES: dict[str, EfmlRelease] = _parse(_TABLE)


def get_efml_release(name: str) -> EfmlRelease:
    """The `EfmlRelease` called ``name`` (``efml-de``...); an unknown name is a `ValueError` listing the codes."""
    if name not in EFML_RELEASES:
        codes = ", ".join(r.code for r in EFML_RELEASES.values())
        raise ValueError(
            f"unknown release {name!r}; the ELMoForManyLangs releases are efml-CODE with CODE one of {codes}."
        )
    return EFML_RELEASES[name]


def zip_size_problem(release: EfmlRelease, size: int) -> str | None:
    """Why ``size`` bytes cannot be ``release``'s zip, or `None`."""
    if release.size is not None and size != release.size:
        return f"{size:,} bytes where the published zip has {release.size:,}"
    if not EFML_ZIP_MIN_BYTES <= size <= EFML_ZIP_MAX_BYTES:
        return (
            f"{size:,} bytes, not a plausible size for a model zip ({EFML_ZIP_MIN_BYTES:,} to {EFML_ZIP_MAX_BYTES:,})"
        )
    return None


def _check_zip(release: EfmlRelease, path: Path, where: str) -> None:
    import zipfile

    problem = zip_size_problem(release, path.stat().st_size)
    if problem:
        raise DownloadError(f"{release.filename} from {where} has {problem}.")
    if not zipfile.is_zipfile(path):
        raise DownloadError(f"{release.filename} from {where} is not a zip archive.")


def fetch_efml_release(
    release: EfmlRelease | str,
    cache_dir: str | os.PathLike | None = None,
    *,
    base_url: str | None = None,
    mirror: str | None = None,
    force_download: bool = False,
    attempts: int = DEFAULT_ATTEMPTS,
    retry_wait: float = 1.0,
    progress: bool = True,
    keep_open: bool = False,
) -> tuple[Path | OpenedFile, str]:
    """Make sure ``release``'s zip is in the cache, checked; return its path and where it came from.

    A cached zip is checked again and used without any request (unless ``force_download``). Otherwise it is
    downloaded from the NLPL repository (``base_url``) through `download_file`, which keeps an interrupted
    download as ``<id>.zip.part`` and resumes it next time; when that fails and a Hub ``mirror`` is named (or
    ``$ELMO_EFML_HUB_MIRROR``), the zip is fetched from there. The zip is checked once more as it is opened at the
    end (no link followed); with ``keep_open`` that open file (`OpenedFile`; close it) comes back instead of the
    path, and a reader of its ``reading_path`` reads the bytes checked here even when the folder's path is swapped
    for a link to another zip once the lock is released. Raises `DownloadError`.
    """
    release = get_efml_release(release) if isinstance(release, str) else release
    folder = make_cache_folder(Path(cache_dir if cache_dir is not None else default_cache_dir()) / release.name)
    with cache_lock(folder) as cache:  # one writer at a time; every file written in the folder as opened
        destination, where = _fetch_zip_locked(
            release, cache, base_url, mirror, force_download, attempts, retry_wait, progress
        )
        opened = cache.open_file(destination.name)  # the zip as it is read later, checked as opened
        try:
            try:
                _check_zip(release, opened.reading_path, f"the cache ({destination})")
            except DownloadError as error:
                raise DownloadError(f"{error} Delete it or rerun with --force-download.") from None
            cache.check()
        except BaseException:
            opened.close()
            raise
    if keep_open:
        return opened, where
    opened.close()
    return destination, where


def _fetch_zip_locked(
    release: EfmlRelease,
    cache: CacheFolder,
    base_url: str | None,
    mirror: str | None,
    force_download: bool,
    attempts: int,
    retry_wait: float,
    progress: bool,
) -> tuple[Path, str]:
    destination = cache.path / release.filename
    url = release.url(base_url)
    if force_download:
        cache.check()
        cache.discard_part(destination.name)
    elif cache.is_regular_or_absent(destination.name, "the cached file"):
        cache.check()  # a file found through a folder swapped meanwhile is not the cache's; checked once opened
        return destination, read_origin(destination, url, cache)
    try:
        download_file(
            url,
            destination,
            attempts=attempts,
            retry_wait=retry_wait,
            progress=progress,
            check_size=lambda size: zip_size_problem(release, size),
            check_complete=lambda path: _check_zip(release, path, url),
            cache=cache,
        )
        where = url
    except DownloadError as error:
        mirror = mirror or os.environ.get(EFML_MIRROR_ENV)
        if not mirror:
            raise
        logger.info("%s; trying the Hub mirror %s", error, mirror)
        try:
            cache.check()
            where = _fetch_from_mirror(release, mirror, destination, cache)
        except DownloadError as mirror_error:
            raise DownloadError(f"{str(error).rstrip('.')}; {mirror_error}") from None
    cache.check()
    cache.write_origin(destination.name, where)
    return destination, where


def _fetch_from_mirror(release: EfmlRelease, repo_id: str, destination: Path, cache: CacheFolder) -> str:
    """Fetch the zip from the Hub ``repo_id`` into ``destination`` (checked); the Hub client writes by path, into a
    private staging folder outside the cache, and the checked zip is moved (or copied) into the opened cache."""
    import huggingface_hub

    where = f"hf://{repo_id}/{release.filename}"
    staging = new_private_folder(destination.name, "mirror")
    try:
        fetched = Path(huggingface_hub.hf_hub_download(repo_id, release.filename, local_dir=staging))
    except Exception as error:  # the Hub client raises many kinds (offline, HTTP, auth, file system)
        remove_own_folder(staging)
        raise DownloadError(
            f"the Hub mirror {where} failed: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
        ) from None
    try:
        _check_zip(release, fetched, where)
        cache.check()
        cache.install(fetched, destination.name)
    finally:
        remove_own_folder(staging)
    cache.discard_part(destination.name)
    return where


__all__ = [
    "EFML_BASE_URL",
    "EFML_RELEASES",
    "EfmlRelease",
    "fetch_efml_release",
    "get_efml_release",
    "zip_size_problem",
]
