"""The original ELMo release format (bilm-tf ``dump_weights``, also read by AllenNLP): reading ``options.json`` and
``weights.hdf5``, and the dataset names and shapes the options imply.

A leaf module: it imports only the configuration and file helpers, and `modeling_elmo.conversion.convert` (the
conversion), `modeling_elmo.conversion.parity` (the numpy reference forward) and `modeling_elmo.conversion.releases`
(the download checks) all read the release through it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..configuration_elmo import ElmoConfig
from ..utils.config_checks import config_from_dict
from ..utils.io_utils import read_json_object

#: The HDF5 group of one LSTM cell: ``d`` = 0 is the forward stack, 1 the backward stack; ``l`` the layer.
LSTM_CELL = "RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell"


def read_options(path: str | os.PathLike) -> dict[str, Any]:
    """Load an ``options.json``; a missing file, invalid JSON or a non-object is a `ValueError`."""
    return read_json_object(path, "options", required=True)


def convert_config(options: dict[str, Any], **kwargs: Any) -> ElmoConfig:
    """The `ElmoConfig` of an original ``options.json`` dict (inference or training form); ``kwargs`` set further
    fields.

    Unknown keys raise a `ValueError` that names them; ``n_characters`` 261 (a training file) is accepted and stored as
    262, the inference table size.
    """
    if not isinstance(options, dict) or "lstm" not in options:
        raise ValueError(
            f"options.json must be an object with an 'lstm' block, got keys "
            f"{sorted(options) if isinstance(options, dict) else type(options).__name__}."
        )
    known_top = {
        "lstm",
        "char_cnn",
        "bidirectional",
        "dropout",
        "all_clip_norm_val",
        "n_epochs",
        "n_train_tokens",
        "batch_size",
        "n_tokens_vocab",
        "unroll_steps",
        "n_negative_samples_batch",
        "learning_rate",
        "sample_softmax",
        "share_embedding_softmax",
        "reverse",
    }
    known_lstm = {"dim", "projection_dim", "n_layers", "cell_clip", "proj_clip", "use_skip_connections"}
    known_cnn = {
        "activation",
        "embedding",
        "filters",
        "max_characters_per_token",
        "n_characters",
        "n_highway",
        "projection_after_highway",
    }
    lstm, cnn = options["lstm"], options.get("char_cnn")
    if cnn is None:
        raise ValueError("options.json has no 'char_cnn' block: word-input ELMo models are not supported.")
    for block, keys, name in (
        (options, known_top, "top level"),
        (lstm, known_lstm, "lstm"),
        (cnn, known_cnn, "char_cnn"),
    ):
        unknown = sorted(set(block) - keys)
        if unknown:
            raise ValueError(f"options.json has unknown keys in {name}: {unknown}.")
    for key in ("dim", "projection_dim", "n_layers"):
        if key not in lstm:
            raise ValueError(f"options.json is missing lstm.{key}.")
    for key in ("activation", "embedding", "filters", "max_characters_per_token"):
        if key not in cnn:
            raise ValueError(f"options.json is missing char_cnn.{key}.")
    n_characters = cnn.get("n_characters", 262)
    if n_characters not in (261, 262):
        raise ValueError(f"char_cnn.n_characters must be 261 (training) or 262 (inference), got {n_characters!r}.")
    values = dict(
        projection_dim=lstm["projection_dim"],
        cell_size=lstm["dim"],
        num_hidden_layers=lstm["n_layers"],
        cell_clip=lstm.get("cell_clip") or None,
        proj_clip=lstm.get("proj_clip") or None,
        use_skip_connections=bool(lstm.get("use_skip_connections", False)),
        char_embedding_dim=cnn["embedding"]["dim"],
        char_cnn_filters=[list(f) for f in cnn["filters"]],
        num_highway_layers=cnn.get("n_highway") or 0,
        char_cnn_activation=cnn["activation"],
        max_characters_per_token=cnn["max_characters_per_token"],
        num_characters=262,
    )
    if "dropout" in options:
        values["hidden_dropout_prob"] = options["dropout"]
    if "n_tokens_vocab" in options:
        values["vocab_size"] = options["n_tokens_vocab"]
    return config_from_dict({**values, **kwargs}, "options.json")


def config_options(config: ElmoConfig) -> dict[str, Any]:
    """The inference ``options.json`` dict of ``config`` (as the released models have it)."""
    return {
        "lstm": {
            "dim": config.cell_size,
            "projection_dim": config.projection_dim,
            "n_layers": config.num_hidden_layers,
            "use_skip_connections": config.use_skip_connections,
            # A clip that is off is left out: bilm-tf would clip to [0, 0] on a stored 0.
            **({"cell_clip": config.cell_clip} if config.cell_clip is not None else {}),
            **({"proj_clip": config.proj_clip} if config.proj_clip is not None else {}),
        },
        "char_cnn": {
            "activation": config.char_cnn_activation,
            "embedding": {"dim": config.char_embedding_dim},
            "filters": [list(f) for f in config.char_cnn_filters],
            "max_characters_per_token": config.max_characters_per_token,
            "n_characters": 262,
            "n_highway": config.num_highway_layers,
        },
    }


def expected_dataset_shapes(config: ElmoConfig) -> dict[str, tuple[int, ...]]:
    """Every dataset an original ``weights.hdf5`` for ``config`` holds, with its shape."""
    d_c, P, H, F = config.char_embedding_dim, config.projection_dim, config.cell_size, config.num_char_cnn_filters
    shapes: dict[str, tuple[int, ...]] = {"char_embed": (config.num_characters - 1, d_c)}
    for i, (width, count) in enumerate(config.char_cnn_filters):
        shapes[f"CNN/W_cnn_{i}"] = (1, width, d_c, count)
        shapes[f"CNN/b_cnn_{i}"] = (count,)
    for k in range(config.num_highway_layers):
        for name, shape in (("W_carry", (F, F)), ("W_transform", (F, F)), ("b_carry", (F,)), ("b_transform", (F,))):
            shapes[f"CNN_high_{k}/{name}"] = shape
    shapes["CNN_proj/W_proj"] = (F, P)
    shapes["CNN_proj/b_proj"] = (P,)
    for d in range(2):
        for l in range(config.num_hidden_layers):
            cell = LSTM_CELL.format(d=d, l=l)
            shapes[f"{cell}/W_0"] = (2 * P, 4 * H)
            shapes[f"{cell}/B"] = (4 * H,)
            shapes[f"{cell}/W_P_0"] = (H, P)
    return shapes


def open_hdf5(path: str | os.PathLike) -> h5py.File:
    """Open a ``weights.hdf5`` for reading; a missing or unreadable file is a `ValueError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"weights file {str(path)!r} does not exist.")
    try:
        return h5py.File(path, "r")
    except OSError as error:
        raise ValueError(
            f"weights file {str(path)!r} cannot be read as HDF5 (truncated or corrupt download?): {error}"
        ) from None


def _damaged(h5: h5py.Group, detail: str) -> ValueError:
    return ValueError(
        f"weights file {h5.file.filename!r} is damaged or truncated ({detail}); download it again "
        "(`elmo convert --release NAME --force-download` fetches a fresh copy of a release)."
    )


def _datasets(h5: h5py.Group) -> dict[str, tuple[h5py.Dataset, tuple[int, ...], np.dtype]]:
    """Every dataset of the file with its shape and dtype; an unreadable index is a `ValueError` naming the file."""
    found: dict[str, tuple[h5py.Dataset, tuple[int, ...], np.dtype]] = {}

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            found[name] = (obj, tuple(obj.shape), obj.dtype)

    try:
        h5.visititems(visit)
    except (RuntimeError, OSError, KeyError, ValueError) as error:  # h5py's errors for a broken object index
        raise _damaged(h5, f"its table of datasets cannot be read: {error}") from None
    return found


def read_checked(h5: h5py.Group, config: ElmoConfig) -> dict[str, np.ndarray]:
    """Read every dataset as float32 after checking names, shapes, dtype and finiteness against ``config``."""
    expected = expected_dataset_shapes(config)
    found = _datasets(h5)
    F, P = config.num_char_cnn_filters, config.projection_dim
    # bilm-tf creates no projection when the CNN width already equals P; the identity reproduces it.
    implicit_projection = F == P and "CNN_proj/W_proj" not in found and "CNN_proj/b_proj" not in found
    if implicit_projection:
        del expected["CNN_proj/W_proj"], expected["CNN_proj/b_proj"]
    problems = []
    missing = [name for name in expected if name not in found]
    unexpected = sorted(name for name in found if name not in expected)
    if missing:
        problems.append(f"missing datasets: {missing}")
    if unexpected:
        problems.append(f"unexpected datasets: {unexpected}")
    for name, shape in expected.items():
        if name in found and found[name][1] != shape:
            problems.append(f"dataset {name!r} has shape {found[name][1]}, the options imply {shape}")
        elif name in found and found[name][2].kind != "f":
            problems.append(f"dataset {name!r} has dtype {found[name][2]}, expected floating point")
    if problems:
        raise ValueError(
            "the weights file does not match the options (" + config_summary(config) + "): " + "; ".join(problems)
        )
    for name in expected:
        _check_storage(h5, name, found[name][0])
    arrays = {}
    for name in expected:
        try:
            array = np.asarray(found[name][0][()], dtype=np.float32)
        except (OSError, RuntimeError) as error:  # a file cut inside a dataset's data
            raise _damaged(h5, f"dataset {name!r} cannot be read: {error}") from None
        if not np.isfinite(array).all():
            raise _damaged(h5, f"dataset {name!r} contains NaN or infinite values")
        arrays[name] = array
    if implicit_projection:
        arrays["CNN_proj/W_proj"] = np.eye(F, dtype=np.float32)
        arrays["CNN_proj/b_proj"] = np.zeros(P, dtype=np.float32)
    return arrays


#: The most a compressed HDF5 dataset may expand: deflate, the usual filter, cannot exceed about 1032 to 1.
MAX_COMPRESSION_RATIO = 1032


def _check_storage(h5: h5py.Group, name: str, dataset: h5py.Dataset) -> None:
    """Refuse a dataset whose declared size the file cannot hold, before its values are read (and memory is
    allocated for them): an uncompressed dataset needs storage for every byte, a compressed one at least
    1/`MAX_COMPRESSION_RATIO` of them; unwritten chunks would read as the fill value, not as weights."""
    declared = dataset.size * dataset.dtype.itemsize
    try:
        stored = dataset.id.get_storage_size()
        compressed = dataset.id.get_create_plist().get_nfilters() > 0
    except (OSError, RuntimeError) as error:
        raise _damaged(h5, f"the storage of dataset {name!r} cannot be read: {error}") from None
    needed = math.ceil(declared / MAX_COMPRESSION_RATIO) if compressed else declared
    if stored < needed:
        raise _damaged(
            h5, f"dataset {name!r} declares {declared:,} bytes of values but the file stores {stored:,} for it"
        )


def config_summary(config: ElmoConfig) -> str:
    return (
        f"n_layers={config.num_hidden_layers}, dim={config.cell_size}, projection_dim={config.projection_dim}, "
        f"char dim={config.char_embedding_dim}, filters={config.char_cnn_filters}, "
        f"n_highway={config.num_highway_layers}"
    )


__all__ = [
    "LSTM_CELL",
    "config_summary",
    "convert_config",
    "expected_dataset_shapes",
    "open_hdf5",
    "read_checked",
    "read_options",
]
