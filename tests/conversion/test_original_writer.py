"""Writing a model in the original release format (``modeling_elmo.conversion.original_writer``): the files read back
through ``elmo convert``'s reader to the same model, and the independent numpy forward (TensorFlow semantics) computes
the model's outputs from them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # numpy_reference, however pytest imports this file
import numpy_reference as ref  # noqa: E402
from support import assert_same_numbers  # noqa: E402

from modeling_elmo import ElmoConfig, ElmoModel  # noqa: E402
from modeling_elmo.conversion.convert import convert_config, convert_state_dict, read_options  # noqa: E402
from modeling_elmo.conversion.original_writer import write_original_release  # noqa: E402

SENTENCES = [["Hello", "world", "!"], ["a"], ["Naïve", "café", "東京", "and", "more", "words", "here"]]


@pytest.fixture(scope="module")
def model():
    """A small model with every parameter random (biases too), large enough for both clips to act."""
    config = ElmoConfig(
        projection_dim=16,
        cell_size=24,
        num_hidden_layers=2,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8], [3, 16]],
        num_highway_layers=2,
        cell_clip=3.0,
        proj_clip=3.0,
        use_skip_connections=True,
    )
    torch.manual_seed(0)
    model = ElmoModel(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.5)
        model.char_encoder.char_embeddings.weight[0] = 0  # the absent-token row, zero in every release
    return model


@pytest.fixture(scope="module")
def release(model, tmp_path_factory):
    return write_original_release(model, tmp_path_factory.mktemp("release") / "elmo")


def test_written_release_reads_back_through_the_converters_reader_to_the_same_model(model, release):
    options, weights = release
    config = convert_config(read_options(options))
    for key in ("projection_dim", "cell_size", "num_hidden_layers", "char_cnn_filters", "num_highway_layers"):
        assert getattr(config, key) == getattr(model.config, key), key
    assert (config.cell_clip, config.proj_clip) == (3.0, 3.0)
    read = convert_state_dict(weights, config)
    own = model.state_dict()
    assert set(read) == set(own)
    for name, tensor in own.items():
        if name.endswith("input_transform.bias"):  # - 1.0 then + 1.0 on the forget block rounds in fp32
            assert_same_numbers(read[name], tensor, what=name)
        else:
            assert torch.equal(read[name], tensor), name


def test_numpy_reference_on_the_written_files_gives_the_models_layers(model, release):
    options, weights = release
    ids = ref.batch_to_char_ids(SENTENCES)
    stats: dict = {}
    layers, _ = ref.numpy_elmo_forward(json.loads(options.read_text()), weights, ids, stats=stats)
    expected, mask = ref.strip_boundaries(layers, ids)
    assert stats["cell_clipped"] > 0 and stats["proj_clipped"] > 0  # both clips are part of what is compared
    with torch.no_grad():
        output = model(
            input_ids=torch.as_tensor(ref.batch_to_char_ids(SENTENCES, add_boundaries=False)), output_hidden_states=True
        )
    got = torch.stack(output.hidden_states).double().numpy()
    assert got.shape == expected.shape
    assert np.abs(got - expected)[:, mask].max() < 1e-5 * max(1.0, np.abs(expected).max())


def test_a_users_file_in_the_way_is_named_kept_and_nothing_is_written(model, tmp_path):
    (tmp_path / "weights.hdf5").write_bytes(b"the user's")
    with pytest.raises(ValueError, match="weights.hdf5' already exists"):
        write_original_release(model, tmp_path)
    assert (tmp_path / "weights.hdf5").read_bytes() == b"the user's"
    assert [p.name for p in tmp_path.iterdir()] == ["weights.hdf5"]
