"""Write an `ElmoModel` in the original release format (``options.json`` + ``weights.hdf5``, bilm-tf ``dump_weights``
layout, as AllenNLP reads it): the inverse of `modeling_elmo.conversion.convert.convert_state_dict`.

Used to run other ELMo implementations on this package's weights (``scripts/bench/bench_forward.py --forms
allennlp``). Every tensor goes back to TensorFlow's (in, out) layout, the LSTM kernel stacks the input rows over the
recurrent rows with the gates in TF order (i, j, f, o), and the forget bias TF adds at run time (1.0) is taken out of
the stored bias. The absent-token row 0 of the character table is not stored (the reader puts a zero row back).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np
import torch

from ..configuration_elmo import ElmoConfig
from ..folders.files import atomic_output, atomic_write_text
from .convert import _DIRECTIONS, _tf_gates_to_torch
from .original_format import LSTM_CELL, config_options


def original_weights(state_dict: dict[str, torch.Tensor], config: ElmoConfig) -> dict[str, np.ndarray]:
    """The ``weights.hdf5`` datasets (float32) of an `ElmoModel` state dict."""
    sd = {name: tensor.detach().to("cpu", torch.float32).numpy() for name, tensor in state_dict.items()}
    H = config.cell_size
    w = {"char_embed": sd["char_encoder.char_embeddings.weight"][1:]}
    for i in range(len(config.char_cnn_filters)):
        w[f"CNN/W_cnn_{i}"] = sd[f"char_encoder.convolutions.{i}.weight"].transpose(2, 1, 0)[None]
        w[f"CNN/b_cnn_{i}"] = sd[f"char_encoder.convolutions.{i}.bias"]
    for k in range(config.num_highway_layers):
        w[f"CNN_high_{k}/W_transform"] = sd[f"char_encoder.highways.{k}.transform.weight"].T
        w[f"CNN_high_{k}/b_transform"] = sd[f"char_encoder.highways.{k}.transform.bias"]
        w[f"CNN_high_{k}/W_carry"] = sd[f"char_encoder.highways.{k}.gate.weight"].T
        w[f"CNN_high_{k}/b_carry"] = sd[f"char_encoder.highways.{k}.gate.bias"]
    w["CNN_proj/W_proj"] = sd["char_encoder.projection.weight"].T
    w["CNN_proj/b_proj"] = sd["char_encoder.projection.bias"]
    # The gate reorder swaps the two middle blocks, so it is its own inverse: PyTorch (i, f, g, o) -> TF (i, j, f, o).
    for d, direction in enumerate(_DIRECTIONS):
        for l in range(config.num_hidden_layers):
            prefix, cell = f"encoder.{direction}_layers.{l}", LSTM_CELL.format(d=d, l=l)
            rows = [
                _tf_gates_to_torch(sd[f"{prefix}.{name}.weight"], H).T
                for name in ("input_transform", "recurrent_transform")
            ]
            w[f"{cell}/W_0"] = np.concatenate(rows)
            bias = _tf_gates_to_torch(sd[f"{prefix}.input_transform.bias"], H).copy()
            bias[2 * H : 3 * H] -= np.float32(1.0)  # TF's LSTMCell adds forget_bias=1.0 at run time
            w[f"{cell}/B"] = bias
            w[f"{cell}/W_P_0"] = sd[f"{prefix}.projection.weight"].T
    return {name: np.ascontiguousarray(array, dtype=np.float32) for name, array in w.items()}


def write_original_release(model: torch.nn.Module, folder: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``model`` (an `ElmoModel`) as ``folder/options.json`` and ``folder/weights.hdf5``, each atomically;
    an existing file of either name is a `ValueError` naming it. Returns both paths."""
    folder = Path(folder)
    options, weights = folder / "options.json", folder / "weights.hdf5"
    for path in (options, weights):
        if os.path.lexists(path):
            raise ValueError(f"{str(path)!r} already exists: not overwriting it.")
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_output(weights) as partial, h5py.File(partial, "w") as h5:  # a fresh file of this call's own
        for name, array in original_weights(model.state_dict(), model.config).items():
            h5.create_dataset(name, data=array)
    atomic_write_text(options, json.dumps(config_options(model.config), indent=2) + "\n")
    return options, weights


__all__ = ["original_weights", "write_original_release"]
