"""A tiny configuration, its inputs and the clipping models the model tests share."""

from __future__ import annotations

import copy

import torch
from safetensors.torch import load_file, save_file

from modeling_elmo import (
    ElmoConfig,
    ElmoModel,
    ElmoTokenizer,
    save_model_folder,
)

CELL_CLIP, PROJ_CLIP = 0.5, 0.4


def clipping_model(cls=ElmoModel, seed=3, **overrides):
    tester = ElmoModelTester(cell_clip=CELL_CLIP, proj_clip=PROJ_CLIP, **overrides)
    model = tester.model(cls, seed=seed)
    with torch.no_grad():
        for parameter in model.base_model.encoder.parameters():
            parameter.mul_(3.0)  # both clips act often
    return tester, model


LEGACY_NAMES = {
    "input_transform.weight": "weight_ih",
    "input_transform.bias": "bias",
    "recurrent_transform.weight": "weight_hh",
    "projection.weight": "weight_hr",
}


def write_legacy_folder(model, folder) -> None:
    """``model`` saved as the code before the LSTM transforms became modules saved it: the same folder, with the
    LSTM parameters under their older names (``...layers.{l}.weight_ih``, ``bias``, ``weight_hh``, ``weight_hr``)."""
    save_model_folder(model, None, folder)
    weights = load_file(str(folder / "model.safetensors"))
    renamed = {}
    for key, tensor in weights.items():
        for new, old in LEGACY_NAMES.items():
            if "_layers." in key and key.endswith("." + new):
                key = key[: -len(new)] + old
        renamed[key] = tensor
    assert sum(k.endswith(".weight_hr") for k in renamed) == 4
    save_file(renamed, str(folder / "model.safetensors"), metadata={"format": "pt"})


SENTENCES = [
    ["The", "bank", "closed", "early", "today", "."],
    ["A", "river", "bank"],
    ["Cells", "divide"],
    ["Plant", "the", "seeds", "in", "spring"],
]


class ElmoModelTester:
    """A tiny configuration and the inputs the tests share."""

    def __init__(self, **overrides):
        values = dict(
            projection_dim=8,
            cell_size=16,
            num_hidden_layers=2,
            char_embedding_dim=4,
            char_cnn_filters=[[1, 4], [2, 8], [3, 8]],
            num_highway_layers=2,
            vocab_size=40,
            hidden_dropout_prob=0.0,
            classifier_dropout=0.0,
        )
        values.update(overrides)
        self.config = ElmoConfig(**values)
        self.tokenizer = ElmoTokenizer()

    def model(self, cls=ElmoModel, seed=0, **overrides):
        torch.manual_seed(seed)
        config = copy.deepcopy(self.config)
        for key, value in overrides.items():
            setattr(config, key, value)
        return cls(config).eval()

    def encode(self, sentences=SENTENCES, **kwargs):
        return self.tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt", **kwargs)
