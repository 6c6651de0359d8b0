"""Convert an original ELMo release (``options.json`` + ``weights.hdf5``) into an `ElmoModel` folder.

The released files (bilm-tf ``dump_weights`` format, also read by AllenNLP) hold TensorFlow tensors: every
matrix is (in, out), the LSTM kernel ``W_0`` stacks the input rows over the recurrent rows with the gates in
TF order (i, j, f, o), and TF's forget bias of 1.0 is added at run time, not stored. `convert_state_dict`
turns them into this package's PyTorch layout:

==============================================  ==================================================================
HDF5 dataset                                    ``ElmoModel`` parameter
==============================================  ==================================================================
``char_embed`` (261, d_c)                       ``char_encoder.char_embeddings.weight`` (262, d_c): a zero row 0
                                                (the absent-token id) is prepended
``CNN/W_cnn_{i}`` (1, w, d_c, n)                ``char_encoder.convolutions.{i}.weight`` (n, d_c, w)
``CNN/b_cnn_{i}`` (n,)                          ``char_encoder.convolutions.{i}.bias``
``CNN_high_{k}/W_carry``, ``b_carry``           ``char_encoder.highways.{k}.gate`` (weight transposed; TF's
                                                "carry" gate multiplies the transform branch, kept as is)
``CNN_high_{k}/W_transform``, ``b_transform``   ``char_encoder.highways.{k}.transform`` (weight transposed)
``CNN_proj/W_proj`` (F, P), ``b_proj``          ``char_encoder.projection`` (weight transposed)
``RNN_{d}/.../Cell{l}/LSTMCell/W_0`` (2P, 4H)   ``encoder.{forward,backward}_layers.{l}.input_transform.weight``
                                                (first P rows) and ``.recurrent_transform.weight`` (last P rows),
                                                transposed, gate blocks reordered from TF (i, j, f, o) to PyTorch
                                                (i, f, g=j, o)
``.../LSTMCell/B`` (4H,)                        ``.bias``: +1.0 on the forget block, then reordered
``.../LSTMCell/W_P_0`` (H, P)                   ``.projection.weight`` (P, H)
==============================================  ==================================================================

``d`` = 0 is the forward stack, 1 the backward stack. The file must contain exactly the datasets the options
imply, with exactly these shapes; anything else is a `ValueError` that lists every problem.

`modeling_elmo.conversion.parity.validate_converted_model` then runs a few sentences through the converted model and
through a small numpy forward pass computed straight from the HDF5 tensors (TF semantics, one sentence at a time,
float64), and raises with the largest difference if they disagree. `convert` does check the output location -> read ->
convert -> validate -> save (safetensors, tokenizer, custom code with the full ``auto_map``, model card,
``conversion_metadata.json``), atomically. `convert_release` first fetches one of the four published English models
(`modeling_elmo.conversion.releases`: download cache, resumable downloads, size/sha256 checks, Hub mirror) and puts the
figures published with it into the model card and the metadata.

Command line (``elmo convert``, or ``python scripts/convert_elmo_original_to_hf.py``)::

    elmo convert --release small|medium|original|original-5.5b --output DIR [--cache-dir DIR] [--base-url URL]
                 [--force-download] [--no-mirror] [--overwrite]
    elmo convert --options OPTIONS.json --weights WEIGHTS.hdf5 --output DIR [--overwrite]

Bad input, a failed download or a damaged file ends the command with one line, ``elmo convert: error: ...``.
User documentation: ``docs/conversion.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from safetensors import SafetensorError

from ..configuration_elmo import ElmoConfig
from ..folders.opening import open_regular
from ..folders.output_folder import check_atol, check_output_dir, locks_output, write_folder_atomically
from ..hub.card import CardInputs, write_model_card
from ..utils import io_utils
from .download import DEFAULT_ATTEMPTS, DownloadError
from .original_format import (
    LSTM_CELL,
    convert_config,
    expected_dataset_shapes,
    open_hdf5,
    read_checked,
    read_options,
)
from .parity import DEFAULT_ATOL, validate_converted_model
from .releases import (
    BASE_URL_ENV,
    FILE_ROLES,
    RELEASES,
    Release,
    fetch_release,
    get_release,
    release_cache_dir,
    resolve_base_url,
)

_DIRECTIONS = ("forward", "backward")


# ------------------------------------------------------------------------------------------------ conversion
def _tf_gates_to_torch(blocks: np.ndarray, cell_size: int) -> np.ndarray:
    """Reorder the four gate blocks along axis 0 from TF (i, j, f, o) to PyTorch (i, f, g=j, o)."""
    i, j, f, o = (blocks[k * cell_size : (k + 1) * cell_size] for k in range(4))
    return np.concatenate([i, f, j, o], axis=0)


def convert_state_dict(h5file: h5py.Group | str | os.PathLike, config: ElmoConfig) -> dict[str, torch.Tensor]:
    """The `ElmoModel` state dict (float32) of an original ``weights.hdf5`` (an open file or a path)."""
    if not isinstance(h5file, h5py.Group):
        with open_hdf5(h5file) as h5:
            return convert_state_dict(h5, config)
    w = read_checked(h5file, config)
    H, P = config.cell_size, config.projection_dim
    sd: dict[str, np.ndarray] = {}
    # 1. Character table: row 0 (absent token) is all zeros; the file holds the 261 training rows.
    table = w["char_embed"]
    sd["char_encoder.char_embeddings.weight"] = np.concatenate([np.zeros((1, table.shape[1]), np.float32), table])
    # 2. Convolutions: TF NHWC kernel (1, w, d_c, n) -> Conv1d (n, d_c, w). Both are cross-correlations.
    for i in range(len(config.char_cnn_filters)):
        sd[f"char_encoder.convolutions.{i}.weight"] = w[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0)
        sd[f"char_encoder.convolutions.{i}.bias"] = w[f"CNN/b_cnn_{i}"]
    # 3. Highways keep TF's convention (gate = sigmoid(x W_carry + b_carry) on the transform branch).
    for k in range(config.num_highway_layers):
        sd[f"char_encoder.highways.{k}.transform.weight"] = w[f"CNN_high_{k}/W_transform"].T
        sd[f"char_encoder.highways.{k}.transform.bias"] = w[f"CNN_high_{k}/b_transform"]
        sd[f"char_encoder.highways.{k}.gate.weight"] = w[f"CNN_high_{k}/W_carry"].T
        sd[f"char_encoder.highways.{k}.gate.bias"] = w[f"CNN_high_{k}/b_carry"]
    # 4. Projection to P.
    sd["char_encoder.projection.weight"] = w["CNN_proj/W_proj"].T
    sd["char_encoder.projection.bias"] = w["CNN_proj/b_proj"]
    # 5. LSTM cells: split [input; recurrent] rows, transpose, reorder gates, fold in the forget bias.
    for d, direction in enumerate(_DIRECTIONS):
        for l in range(config.num_hidden_layers):
            cell = LSTM_CELL.format(d=d, l=l)
            kernel, bias = w[f"{cell}/W_0"], w[f"{cell}/B"].copy()
            bias[2 * H : 3 * H] += np.float32(1.0)  # TF LSTMCell forget_bias, added at run time in TF
            prefix = f"encoder.{direction}_layers.{l}"
            sd[f"{prefix}.input_transform.weight"] = _tf_gates_to_torch(kernel[:P].T, H)
            sd[f"{prefix}.recurrent_transform.weight"] = _tf_gates_to_torch(kernel[P:].T, H)
            sd[f"{prefix}.input_transform.bias"] = _tf_gates_to_torch(bias, H)
            sd[f"{prefix}.projection.weight"] = w[f"{cell}/W_P_0"].T
    return {name: torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)) for name, array in sd.items()}


def load_converted_state_dict(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load ``state_dict`` into ``model``; a missing parameter, unknown key or wrong shape is a `ValueError`."""
    own = model.state_dict()
    missing = sorted(name for name, _ in model.named_parameters() if name not in state_dict)
    unexpected = sorted(name for name in state_dict if name not in own)
    shapes = [
        f"{name}: model {tuple(own[name].shape)}, converted {tuple(t.shape)}"
        for name, t in state_dict.items()
        if name in own and own[name].shape != t.shape
    ]
    if missing or unexpected or shapes:
        raise ValueError(
            f"converted weights do not fit the model: missing {missing}, unexpected {unexpected}, shapes {shapes}"
        )
    model.load_state_dict(state_dict, strict=False)


# ------------------------------------------------------------------------------------------------ saving
@locks_output
def convert(
    options_path: str | os.PathLike,
    weights_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    overwrite: bool = False,
    atol: float = DEFAULT_ATOL,
    *,
    release: Release | None = None,
    sources: dict[str, str] | None = None,
    read_from: Mapping[str, Path] | None = None,
) -> Path:
    """Convert, validate and save; returns the output folder.

    Refuses an existing non-empty ``output_dir`` unless ``overwrite``, and a location that cannot be written, before
    any work (`check_output_dir`). Everything is written to a temporary folder next to ``output_dir`` and renamed
    into place at the end, so a folder with the final name is always complete; on any failure nothing is left.
    ``release`` (a `modeling_elmo.conversion.releases.Release`) adds the release's name and published figures to the
    model card and ``conversion_metadata.json``; ``sources`` maps ``options``/``weights`` to where the files came from.
    ``read_from`` maps a role to the path to read its file through instead (`FetchedRelease.reading_path`: a cached
    release file held open since it was checked); ``options_path``/``weights_path`` still name the files.
    """
    check_atol(atol)
    files = {"options": Path(options_path), "weights": Path(weights_path)}
    reading = {role: Path((read_from or {}).get(role, path)) for role, path in files.items()}
    for role, path in files.items():  # a mistyped source is named before anything about the output is said
        if not os.path.exists(reading[role]):
            raise ValueError(f"{role} file {str(path)!r} does not exist.")
    with contextlib.ExitStack() as opened:
        for role, path in files.items():
            if role not in (read_from or {}):
                reading[role] = _open_input(path, role, opened)
        output_dir = check_output_dir(output_dir, overwrite, inputs=(options_path, weights_path))
        model, config, described, max_diff = _read_release_files(files, reading, atol, sources)
    return _save_conversion(model, config, described, max_diff, files, output_dir, overwrite, atol, release, sources)


def _open_input(path: Path, role: str, opened: contextlib.ExitStack) -> Path:
    """Open the local input ``path`` by the link rule (`modeling_elmo.folders.opening.open_regular` with
    ``alone``: a symbolic link, a hard link, a FIFO or a folder is refused in one line naming it), held open in
    ``opened``; returns the path that reads that very file (Linux's ``/proc/self/fd/N``; elsewhere the path)."""
    try:
        fd = open_regular(path, os.O_RDONLY, f"{role} file", alone=True)
    except FileNotFoundError:
        raise ValueError(f"{role} file {str(path)!r} does not exist.") from None
    except OSError as error:
        raise ValueError(f"{role} file {str(path)!r} cannot be read: {error.strerror or error}.") from None
    opened.callback(os.close, fd)
    proc = Path(f"/proc/self/fd/{fd}")
    return proc if proc.exists() else path


def _read_release_files(files, reading, atol, sources):
    """Read and check the options and weights (through ``reading``): the model, its config, the files' records
    and the parity check's largest difference."""
    from .. import ElmoModel

    try:
        # 1. Options -> config.
        options = read_options(reading["options"])
        config = convert_config(options)
        # 2. HDF5 -> state dict -> model.
        with open_hdf5(reading["weights"]) as h5:
            state_dict = convert_state_dict(h5, config)
            model = ElmoModel(config)
            load_converted_state_dict(model, state_dict)
            model.eval()
            # 3. Same numbers as the original computation?
            max_diff = validate_converted_model(model, options, h5, atol=atol)
        described = [
            {
                "name": path.name,
                "origin": (sources or {}).get(role, "local file"),
                "bytes": reading[role].stat().st_size,
                "sha256": io_utils.sha256_of_file(reading[role]),
            }
            for role, path in files.items()
        ]
    except ValueError as error:  # messages name the files, not the paths they were read through
        message = str(error)
        for role in sorted(files, key=lambda role: -len(str(reading[role]))):
            message = message.replace(str(reading[role]), str(files[role]))
        if message == str(error):
            raise
        raise ValueError(message) from None
    return model, config, described, max_diff


def _save_conversion(model, config, described, max_diff, files, output_dir, overwrite, atol, release, sources):
    """4. Save into a temporary sibling, then move into place."""
    from .. import ElmoTokenizer, save_model_folder

    num_parameters = sum(p.numel() for p in model.parameters())
    metadata: dict[str, Any] = {
        "converted_from": (
            f"AllenNLP ELMo release '{release.name}' ({release.folder})"
            if release
            else "original ELMo release (bilm-tf options.json + weights.hdf5)"
        ),
        "options_file": files["options"].name,
        "weights_file": files["weights"].name,
        "sha256": {d["name"]: d["sha256"] for d in described},
        "files": described,
        "validation_max_abs_difference": max_diff,
        "validation_atol": atol,
        "num_parameters": num_parameters,
    }
    if release is not None:
        metadata["release"] = release.name
        metadata["published"] = release.published_figures()
    if sources:
        metadata["sources"] = dict(sources)

    def fill(staging: Path) -> None:
        save_model_folder(model, ElmoTokenizer(), staging)  # safetensors, tokenizer, code files, full auto_map
        card = CardInputs(metadata=metadata, converted=True)
        write_model_card(staging, config, card, name=output_dir.name, num_parameters=num_parameters)
        (staging / "conversion_metadata.json").write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")

    write_folder_atomically(output_dir, fill, overwrite=overwrite)
    return output_dir


def check_release_reachable(
    release: Release,
    cache_dir: str | os.PathLike | None = None,
    *,
    base_url: str | None = None,
    force_download: bool = False,
    use_mirror: bool = True,
) -> None:
    """Raise `~modeling_elmo.conversion.download.DownloadError` at once when files of ``release`` must be downloaded and
    neither the release server nor (where there is one) its Hub mirror can be reached: one connection attempt each,
    within seconds, instead of every download's retries. The message names what works offline."""
    from ..utils.compat import is_offline_mode

    folder = release_cache_dir(release, cache_dir)
    missing = [
        release.filename(role)
        for role in FILE_ROLES
        if force_download or not (folder / release.filename(role)).is_file()
    ]
    primary = resolve_base_url(base_url)
    if not missing or io_utils.host_reachable(primary):
        return
    has_mirror = use_mirror and release.mirror is not None
    if has_mirror and not is_offline_mode() and io_utils.hub_reachable():
        return
    if not has_mirror:
        mirror = ""
    elif is_offline_mode():
        mirror = f", and the Hub mirror {release.mirror.repo_id} is off in offline mode (HF_HUB_OFFLINE=1)"
    else:
        mirror = f", nor the Hub mirror {release.mirror.repo_id}"
    raise DownloadError(
        f"cannot download release {release.name!r}: {primary} cannot be reached{mirror}. Offline, convert local "
        f"copies with --options OPTIONS.json --weights WEIGHTS.hdf5, pass --base-url URL of a server you can reach, "
        f"or put {' and '.join(missing)} into the cache folder {folder}."
    )


@locks_output
def convert_release(
    release: Release | str,
    output_dir: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    base_url: str | None = None,
    overwrite: bool = False,
    force_download: bool = False,
    use_mirror: bool = True,
    atol: float = DEFAULT_ATOL,
    progress: bool = True,
    attempts: int | None = None,
    retry_wait: float = 1.0,
) -> Path:
    """Fetch a released model (`modeling_elmo.conversion.releases.fetch_release`: cache, resume, size/sha256 checks, Hub
    mirror), then `convert` it with its published figures in the card. The output location is checked before
    anything is downloaded. Returns the output folder; raises `ValueError` or
    `~modeling_elmo.conversion.download.DownloadError`.
    """
    release = get_release(release) if isinstance(release, str) else release
    check_atol(atol)
    check_output_dir(output_dir, overwrite, inputs=(cache_dir,) if cache_dir else ())
    check_release_reachable(release, cache_dir, base_url=base_url, force_download=force_download, use_mirror=use_mirror)
    with fetch_release(
        release,
        cache_dir,
        base_url=base_url,
        force_download=force_download,
        use_mirror=use_mirror,
        attempts=attempts or DEFAULT_ATTEMPTS,
        retry_wait=retry_wait,
        progress=progress,
        keep_open=True,  # read the files checked under the cache's lock, whatever the cache's path leads to later
    ) as fetched:
        return convert(
            fetched.paths["options"],
            fetched.paths["weights"],
            output_dir,
            overwrite=overwrite,
            atol=atol,
            release=release,
            sources=fetched.sources,
            read_from={role: fetched.reading_path(role) for role in FILE_ROLES},
        )


# ------------------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="elmo convert",
        allow_abbrev=False,
        description="Convert an original ELMo release into a transformers model folder: either a published release "
        "(--release, downloaded and cached), local files (--options and --weights), or an "
        "ELMoForManyLangs model (--efml FOLDER_OR_ZIP, or --release efml-LANG). The converted "
        "model is checked against a numpy implementation of the original computation before it is "
        "written.",
    )
    parser.add_argument(
        "--release",
        metavar="NAME",
        help=f"download and convert a published model: an English one ({', '.join(RELEASES)}) or an "
        "ELMoForManyLangs one, efml-LANG (efml-de, efml-zh...; the table is in docs/conversion.md)",
    )
    parser.add_argument("--options", help="a local options.json (with --weights)")
    parser.add_argument("--weights", help="a local weights.hdf5 (with --options)")
    parser.add_argument("--efml", metavar="FOLDER_OR_ZIP", help="a local ELMoForManyLangs model (its folder or zip)")
    parser.add_argument(
        "--architecture",
        metavar="JSON",
        help="ELMoForManyLangs only: the architecture json to use instead of the published "
        "cnn_50_100_512_4096_sample.json",
    )
    parser.add_argument(
        "--language", metavar="CODE", help="--efml only: the model's language code (de, zh...), for the model card"
    )
    parser.add_argument(
        "--mirror",
        metavar="REPO_ID",
        help="efml-LANG only: a Hugging Face Hub repository holding the zips as <id>.zip, tried when "
        "the NLPL repository fails (default $ELMO_EFML_HUB_MIRROR)",
    )
    parser.add_argument("--output", required=True, help="folder to write (safetensors, config, tokenizer, code, card)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing non-empty output folder")
    parser.add_argument(
        "--cache-dir", help="download cache (default $HF_HOME/modeling_elmo/releases; one folder per release)"
    )
    parser.add_argument(
        "--base-url", help=f"where the release folders are (default ${BASE_URL_ENV}, else AllenNLP's S3 bucket)"
    )
    parser.add_argument(
        "--force-download", action="store_true", help="download the release again even if it is in the cache"
    )
    parser.add_argument(
        "--no-mirror",
        action="store_true",
        help="do not fall back to the Hugging Face Hub mirror when the primary server fails",
    )
    parser.add_argument(
        "--atol",
        type=float,
        default=None,
        help=f"largest accepted difference to the numpy reference forward (default {DEFAULT_ATOL:g}; "
        "1e-5 for ELMoForManyLangs models, checked on every layer in float64)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    efml_release = bool(args.release and args.release.startswith("efml-"))
    if args.release and (args.options or args.weights or args.efml):
        parser.error("--release downloads its own files; do not combine it with --options/--weights or --efml.")
    if args.efml and (args.options or args.weights):
        parser.error("give one source: --efml FOLDER_OR_ZIP, or --options with --weights.")
    if not (args.release or args.efml) and not (args.options and args.weights):
        parser.error("give --release NAME, both --options and --weights, or --efml FOLDER_OR_ZIP.")
    if args.release and not efml_release and args.release not in RELEASES:
        parser.error(
            f"unknown release {args.release!r}; the English releases are {', '.join(RELEASES)}, the "
            "ELMoForManyLangs ones efml-LANG (see docs/conversion.md)."
        )
    misplaced = [
        flag
        for flag, used, allowed in (
            ("--architecture", args.architecture, args.efml or efml_release),
            ("--language", args.language, args.efml),
            ("--mirror", args.mirror, efml_release),
            ("--no-mirror", args.no_mirror, args.release and not efml_release),
        )
        if used and not allowed
    ]
    if misplaced:
        parser.error(f"{', '.join(misplaced)} do(es) not apply to this source (see --help).")
    local_only = [
        flag
        for flag, used in (
            ("--cache-dir", args.cache_dir),
            ("--base-url", args.base_url),
            ("--force-download", args.force_download),
            ("--no-mirror", args.no_mirror),
        )
        if used and not args.release
    ]
    if local_only:
        parser.error(f"{', '.join(local_only)} only apply with --release.")
    try:
        if args.efml or efml_release:
            from .convert_efml import EFML_ATOL, convert_efml, convert_efml_release

            atol = EFML_ATOL if args.atol is None else args.atol
            if args.efml:
                folder = convert_efml(
                    args.efml,
                    args.output,
                    overwrite=args.overwrite,
                    atol=atol,
                    architecture=args.architecture,
                    language=args.language,
                )
            else:
                folder = convert_efml_release(
                    args.release,
                    args.output,
                    cache_dir=args.cache_dir,
                    base_url=args.base_url,
                    mirror=args.mirror,
                    overwrite=args.overwrite,
                    force_download=args.force_download,
                    atol=atol,
                )
        elif args.release:
            folder = convert_release(
                args.release,
                args.output,
                cache_dir=args.cache_dir,
                base_url=args.base_url,
                overwrite=args.overwrite,
                force_download=args.force_download,
                use_mirror=not args.no_mirror,
                atol=DEFAULT_ATOL if args.atol is None else args.atol,
            )
        else:
            folder = convert(
                args.options,
                args.weights,
                args.output,
                overwrite=args.overwrite,
                atol=DEFAULT_ATOL if args.atol is None else args.atol,
            )
    except (ValueError, OSError) as error:  # bad input, a failed download, a file system refusing a write
        raise io_utils.command_error("convert", error) from None
    except SafetensorError as error:  # safetensors' own error for a failed write (a full disk)
        raise io_utils.command_error(
            "convert",
            f"cannot write the model into {args.output!r}: {io_utils.error_line(error)}; the output folder was left "
            "as it was.",
        ) from None
    metadata = io_utils.read_json_object(folder / "conversion_metadata.json", "conversion metadata", required=True)
    for role, origin in metadata.get("sources", {}).items():
        print(f"{role}: {origin}")
    print(f"wrote {folder} (validated: max abs difference {metadata['validation_max_abs_difference']:.2g})")
    return 0


__all__ = [
    "read_options",
    "convert_config",
    "expected_dataset_shapes",
    "convert_state_dict",
    "check_output_dir",
    "convert",
    "check_release_reachable",
    "convert_release",
    "main",
]
