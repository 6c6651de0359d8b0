"""Assembling the Hub repository folder of a model folder, and uploading exactly its files.

`assemble_repo_folder` checks the model folder, loads the model and tokenizer with this package's classes
(safetensors only) and saves them again with the custom-code files and a ``config.json`` whose ``auto_map`` lists
every auto class (`modeling_elmo.hub.saving`), renders the model card (`modeling_elmo.hub.card`) from the folder's
results and metadata (found through `modeling_elmo.folders.run_folder.RunFolder`), copies the plots, audits the code,
and moves the complete folder into place. Only the files of the allow-list (`is_allowed_file`) are written.
`upload_repo_folder` sends that file list in one commit.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..folders.files import MANIFEST, follow_umask, new_temporary, remove_file, remove_temporary
from ..folders.manifest import check_replaceable, install_folder, output_lock, write_manifest
from ..folders.opening import open_regular
from ..folders.run_folder import CODE_FILES, EvaluationFolder, RunFolder
from ..utils.io_utils import check_safetensors_header, is_within, read_json_object
from ..utils.loading import refuse_pickled_weights
from ..utils.vocab_file import copy_vocabulary_file
from .card import CardInputs, build_model_card
from .safety import audit_shipped_code, custom_pipelines_problem, scan_for_secrets
from .saving import PACKAGE_DIR, check_auto_map, load_model_and_tokenizer, save_for_hub

__all__ = [
    "ALLOWED_FILES",
    "COMMAND",
    "assemble_repo_folder",
    "check_model_folder",
    "check_published_inputs",
    "check_weights",
    "is_allowed_file",
    "list_folder",
    "plan_upload",
    "upload_repo_folder",
    "validate_repo_id",
]

logger = logging.getLogger(__name__)

#: The allow-list: exact names, plus safetensors shards and plots.
ALLOWED_FILES = frozenset(
    {
        RunFolder.README,
        RunFolder.CONFIG,
        RunFolder.WEIGHTS,
        RunFolder.WEIGHTS_INDEX,
        *CODE_FILES,
        *RunFolder.TOKENIZER_FILES,
    }
)
_SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
_PLOT = re.compile(r"plots/[A-Za-z0-9][A-Za-z0-9._-]*\.(png|jpg|jpeg)")
#: The image formats a plot may have, and the bytes each file of the format starts with (an SVG may carry script,
#: so it is not one of them).
PLOT_SIGNATURES = {".png": b"\x89PNG\r\n\x1a\n", ".jpg": b"\xff\xd8\xff", ".jpeg": b"\xff\xd8\xff"}
PLOT_SUFFIXES = tuple(PLOT_SIGNATURES)
MAX_PLOT_BYTES = 5 * 2**20
COMMAND = "elmo push"
#: The weight dtypes a published model may have (safetensors names): floating point only.
FLOAT_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


# ----------------------------------------------------------------------------------------------- input checks
def validate_repo_id(repo_id: str) -> str:
    """Return ``repo_id`` if huggingface_hub accepts it as a model repository id, else raise `ValueError`."""
    from huggingface_hub.utils import HFValidationError
    from huggingface_hub.utils import validate_repo_id as hub_validate

    if not isinstance(repo_id, str) or not repo_id:
        raise ValueError(f"invalid repository id {repo_id!r}: expected 'name' or 'namespace/name'.")
    try:
        hub_validate(repo_id)
    except HFValidationError as error:
        raise ValueError(f"invalid repository id {repo_id!r}: {error}") from None
    return repo_id


def check_model_folder(model_dir: str | os.PathLike) -> RunFolder:
    """Check that ``model_dir`` is an ELMo model folder that can be published.

    Raises `ValueError` naming what is wrong: not a folder, no ``config.json`` or one of another model type,
    pickled weights, no safetensors weights, no tokenizer (``tokenizer_config.json``).
    """
    path = Path(model_dir)
    if not path.is_dir():
        raise ValueError(f"model folder {str(model_dir)!r} does not exist or is not a folder.")
    refuse_pickled_weights(path)
    run = RunFolder(path)
    check_published_inputs(run)
    run.require_elmo_model(tokenizer=True)
    problem = custom_pipelines_problem(
        read_json_object(run.config_file, "config", required=True).get("custom_pipelines"), PACKAGE_DIR
    )
    if problem:
        raise ValueError(f"{run.config_file}: {problem}; refusing to publish it.")
    return run


def _allowed_roots(root: Path) -> list[Path]:
    """Where the files of a model folder may lie: in it, or, for a snapshot of the Hugging Face cache
    (``models--owner--name/snapshots/REV``), in its repository's ``blobs`` folder that the snapshot links to."""
    roots = [root]
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
        roots.append(root.parent.parent / "blobs")
    return roots


def check_published_inputs(run: RunFolder) -> None:
    """Raise `ValueError` naming the file if one that publishing reads from the model folder (config, weights,
    tokenizer files, metadata, results, plots) is a link that leads out of the folder, a hard link (a file with
    another name, which may lie outside the folder: `opening.open_regular`'s ``alone``), or is not a regular file
    (a FIFO, a device): publishing never reads a file elsewhere through a name in the folder (``perplexity.png``
    -> ``/etc/passwd``)."""
    root = run.root
    roots = _allowed_roots(root)
    names = [
        RunFolder.CONFIG,
        RunFolder.WEIGHTS,
        RunFolder.WEIGHTS_INDEX,
        *RunFolder.TOKENIZER_FILES,
        RunFolder.TRAINING_METADATA,
        RunFolder.CONVERSION_METADATA,
        RunFolder.EVAL_RESULTS,
        RunFolder.PERPLEXITY_PLOT,
        RunFolder.EVALUATION,
    ]
    names += [f"{RunFolder.EVALUATION}/{name}" for name in (EvaluationFolder.RESULTS, *EvaluationFolder.PLOTS.values())]
    names += sorted(p.name for p in root.iterdir() if _SHARD.fullmatch(p.name))
    for name in names:
        path = root / name
        if not os.path.lexists(path):
            continue
        if path.is_symlink() and not any(is_within(path, allowed) for allowed in roots):
            raise ValueError(
                f"{path} links outside the model folder (to {os.path.realpath(path)}); publishing never "
                "follows a link out of the folder. Copy the file in if it belongs to the model."
            )
        if name == RunFolder.EVALUATION:
            if not path.is_dir():
                raise ValueError(f"{path} is not a folder.")
        elif not path.is_file():
            raise ValueError(f"{path} is not a regular file; publishing reads regular files only.")
        else:  # a link inside the folder: the file it leads to, which must have one name too
            real = Path(os.path.realpath(path)) if path.is_symlink() else path
            os.close(open_regular(real, os.O_RDONLY, "the model folder's file", alone=True))


def check_weights(run: RunFolder) -> str:
    """Check the weights before anything is published and return their dtype (``float32``, ...): every tensor must
    be of a floating-point dtype (integer weights would be truncated values) and hold only finite numbers (a NaN
    or an infinity makes every output NaN). Raises `ValueError` naming the file and the tensor."""
    from safetensors import safe_open

    files = (
        sorted(p for p in run.root.iterdir() if _SHARD.fullmatch(p.name))
        if not run.weights_file.is_file()
        else [run.weights_file]
    )
    dtypes = set()
    for path in files:
        check_safetensors_header(path)  # a damaged or truncated file, a header declaring more than the file holds
        try:
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():
                    dtype = handle.get_slice(name).get_dtype()
                    if dtype not in FLOAT_DTYPES:
                        raise ValueError(
                            f"{path}: tensor {name!r} has dtype {dtype}, not a floating-point "
                            f"dtype ({', '.join(FLOAT_DTYPES.values())}): refusing to publish it."
                        )
                    dtypes.add(FLOAT_DTYPES[dtype])
                    tensor = handle.get_tensor(name)
                    if not bool(tensor.isfinite().all()):
                        bad = int((~tensor.isfinite()).sum())
                        raise ValueError(
                            f"{path}: tensor {name!r} holds {bad} non-finite value(s) (NaN or "
                            "infinity): refusing to publish a broken model."
                        )
        except ValueError:
            raise
        except Exception as error:  # safetensors' own errors: a truncated or malformed file
            raise ValueError(f"{path} cannot be read as safetensors: {error}") from None
    if len(dtypes) > 1:
        raise ValueError(
            f"the weights of {run.root} mix the dtypes {', '.join(sorted(dtypes))}; save them in one "
            "dtype before publishing."
        )
    return dtypes.pop() if dtypes else "float32"


# ----------------------------------------------------------------------------------------------- the allow-list
def is_allowed_file(relative_path: str) -> bool:
    """Whether ``relative_path`` (POSIX, relative to the repository root) is on the upload allow-list."""
    return relative_path in ALLOWED_FILES or bool(_SHARD.fullmatch(relative_path) or _PLOT.fullmatch(relative_path))


def list_folder(folder: str | os.PathLike) -> list[str]:
    """Every file under ``folder`` as sorted POSIX paths relative to it (not the folder's manifest, which records
    what ``elmo push`` wrote and is never uploaded)."""
    folder = Path(folder)
    return sorted(
        name
        for name in (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink())
        if name != MANIFEST
    )


def plan_upload(folder: str | os.PathLike) -> list[str]:
    """The exact list of files to upload from an assembled ``folder``.

    Raises `ValueError` if the folder holds a file outside the allow-list, pickled weights, a token, or a plot
    over `MAX_PLOT_BYTES`, or lacks one of the files every published model needs.
    """
    folder = Path(folder)
    refuse_pickled_weights(folder)
    files = list_folder(folder)
    stray = [name for name in files if not is_allowed_file(name)]
    if stray:
        raise ValueError(f"{folder} holds files outside the upload allow-list: {stray}.")
    needed = [RunFolder.README, RunFolder.CONFIG, RunFolder.TOKENIZER_CONFIG, *CODE_FILES]
    missing = [name for name in needed if name not in files]
    if not any(name == RunFolder.WEIGHTS or _SHARD.fullmatch(name) for name in files):
        missing.append(RunFolder.WEIGHTS)
    if missing:
        raise ValueError(f"{folder} lacks {missing}, which every published model needs.")
    for name in files:
        if (folder / name).is_symlink() or not (folder / name).is_file():
            raise ValueError(f"{folder / name} is not a regular file; only regular files are uploaded.")
        if name.startswith("plots/"):
            _check_plot(folder / name)
    scan_for_secrets(folder, files)
    return files


def _plot_name(path: Path) -> str:
    """The name of a plot inside ``plots/``: only letters, digits and ``._-``, starting with a letter or digit."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem).lstrip("._-") or "plot"
    return f"plots/{stem}{path.suffix.lower()}"


def _check_plot(path: Path) -> None:
    """Raise `ValueError` unless ``path`` is a regular PNG or JPEG file (by its first bytes, not only its name) of at
    most `MAX_PLOT_BYTES`."""
    signature = PLOT_SIGNATURES.get(path.suffix.lower())
    if signature is None or not path.is_file():
        raise ValueError(f"plot {str(path)!r} is not an existing {'/'.join(PLOT_SUFFIXES)} file.")
    if path.stat().st_size > MAX_PLOT_BYTES:
        raise ValueError(f"plot {str(path)!r} is larger than {MAX_PLOT_BYTES // 2**20} MiB.")
    with open(path, "rb") as handle:
        if handle.read(len(signature)) != signature:
            raise ValueError(
                f"plot {str(path)!r} is not a {path.suffix.lower()[1:].upper()} image (its first bytes "
                "say otherwise); refusing to publish it."
            )


def _plots(run: RunFolder, extra: Sequence[str]) -> list[Path]:
    """The plots to publish: ``extra`` (checked), then the folder's own (`RunFolder.plot_files`), one per name;
    each must be a PNG or JPEG file (`_check_plot`)."""
    plots = [Path(p) for p in extra]
    for path in plots + run.plot_files():
        _check_plot(path)
    unique, names = [], set()
    for path in plots + run.plot_files():
        name = _plot_name(path)
        if name not in names:
            names.add(name)
            unique.append(path)
    return sorted(unique, key=_plot_name)


# ----------------------------------------------------------------------------------------------- assembling
def _prepare_output_dir(output_dir: Path, model_dir: Path) -> None:
    """Refuse an output folder inside the model folder (or holding it), and one that holds anything but an earlier
    ``elmo push``'s files (its manifest): a user's files or another saved model are never replaced."""
    if is_within(output_dir, model_dir) or is_within(model_dir, output_dir):
        raise ValueError(
            f"the output folder {output_dir} must lie outside the model folder {model_dir} (and not contain it)."
        )
    check_replaceable(output_dir, COMMAND, f"output folder {str(output_dir)!r}")


def card_inputs_of(run: RunFolder, card: CardInputs | None = None) -> CardInputs:
    """``card`` completed from the model folder: its results files when ``card`` names none, and its training
    metadata (or, for a converted release, its conversion metadata) when ``card`` has none."""
    card = dataclasses.replace(card) if card is not None else CardInputs()
    if not card.results:
        card.results = run.read_results()
    if card.metadata is None:
        training = run.read_training_metadata()
        conversion = run.read_conversion_metadata() if training is None else None
        card.metadata = training if training is not None else conversion
        card.converted = card.converted or conversion is not None
    return card


def assemble_repo_folder(
    model_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    repo_id: str,
    card: CardInputs | None = None,
    plots: Sequence[str] = (),
) -> list[str]:
    """Write the repository folder of ``model_dir`` to ``output_dir`` and return the upload plan (file list).

    The model and tokenizer are loaded with this package's classes (safetensors only) and saved with
    `save_for_hub`; the card is rendered by `build_model_card` from `card_inputs_of`; the plots (``plots`` and the
    folder's own) go to ``plots/``. While it works, the call holds a lock beside ``output_dir`` (a second push into
    the same folder is refused). The folder is built under a temporary name next to ``output_dir`` and moved into
    place when complete (`modeling_elmo.folders.manifest.install_folder`); an existing ``output_dir`` is replaced only
    if it holds nothing but a previous push's files, as that push wrote them (checked again at that moment).
    """
    validate_repo_id(repo_id)
    run = check_model_folder(model_dir)
    output_dir = Path(output_dir)
    with output_lock(output_dir, COMMAND):  # finishes or undoes a swap a killed push left, before looking at it
        _prepare_output_dir(output_dir, run.root)
        return _assemble_locked(run, output_dir, repo_id, card, plots)


def _assemble_locked(
    run: RunFolder, output_dir: Path, repo_id: str, card: CardInputs | None, plots: Sequence[str]
) -> list[str]:
    replacing = output_dir.exists()  # an earlier push's output (`_prepare_output_dir`); else one must not appear
    card = card_inputs_of(run, card)
    plot_paths = _plots(run, plots)
    dtype = check_weights(run)

    model, tokenizer = load_model_and_tokenizer(run, dtype)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = new_temporary(output_dir, "staging", COMMAND)
    try:
        saved = new_temporary(output_dir, "saving", COMMAND)
        try:
            save_for_hub(model, tokenizer, saved)
            if run.vocab_file.is_file():  # checked by `load_model_and_tokenizer`; never held as a mapping
                remove_file(saved / RunFolder.VOCAB)
                copy_vocabulary_file(run.vocab_file, saved / RunFolder.VOCAB)
            for name in list_folder(saved):
                if is_allowed_file(name):
                    shutil.copyfile(saved / name, staging / name)
                else:
                    logger.info("not published (not on the allow-list): %s", name)
        finally:
            remove_temporary(saved)
        plot_names = []
        if plot_paths:
            (staging / "plots").mkdir()
            for path in plot_paths:
                name = _plot_name(path)
                shutil.copyfile(path, staging / name)
                plot_names.append(name)
        model_card, _ = build_model_card(
            model.config,
            repo_id,
            card,
            num_parameters=model.num_parameters(),
            plot_names=plot_names,
            dtype=dtype,
            code_files=sorted(staging.glob("*.py")),
        )
        model_card.save(staging / RunFolder.README)
        check_auto_map(staging)
        problems = audit_shipped_code(staging / name for name in CODE_FILES)
        if problems:
            raise ValueError("the custom code to publish fails the audit:\n  " + "\n  ".join(problems))
        files = plan_upload(staging)
        for name in files:
            follow_umask(staging / name)
        write_manifest(staging, COMMAND, files)
        install_folder(staging, output_dir, COMMAND, overwrite=replacing)  # checked again at this moment
    finally:
        remove_temporary(staging)
    return files


# ----------------------------------------------------------------------------------------------- upload
def upload_repo_folder(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str,
    files: Sequence[str],
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Create ``repo_id`` if needed and upload exactly ``files`` of ``folder`` in one commit; return its URL.

    Uses ``HfApi.create_repo(exist_ok=True)`` (``private`` applies to a new repository), ``create_branch`` for a
    ``revision`` other than ``main``, then ``upload_folder`` with ``allow_patterns`` set to the file list.
    """
    from huggingface_hub import HfApi, constants

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            repo_type="model",
            revision=revision,
            commit_message=commit_message or "Upload ELMo model",
            allow_patterns=list(files),
        )
    except Exception as error:  # offline mode, no connection, HTTP errors: the Hub client raises many kinds
        text = " ".join(str(error).split())[:300] or type(error).__name__
        raise ValueError(
            f"cannot upload to {repo_id} on the Hugging Face Hub ({constants.ENDPOINT}): {type(error).__name__}: {text}"
        ) from None
    return str(getattr(commit, "commit_url", commit))
