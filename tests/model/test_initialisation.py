"""The documented (bilm-tf) initialisation is what a model gets: built from scratch, built on the meta device and
materialised, and for a head's new weights when a biLM folder is loaded into a head class, with the package and
through the folder's own code (trust_remote_code), six loads in a row; loaded weights are never re-initialised."""

from __future__ import annotations

import math

import pytest
import torch
from support import run_without_package

from modeling_elmo import (
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    save_model_folder,
)

CLASSES = (ElmoModel, ElmoForBidirectionalLM, ElmoForSequenceClassification, ElmoForTokenClassification)


def config(**extra) -> ElmoConfig:
    # sizes large enough for the spread of each tensor to be measured (hundreds of values each)
    values = dict(
        projection_dim=16,
        cell_size=32,
        char_embedding_dim=8,
        char_cnn_filters=[[1, 8], [2, 16], [3, 24]],
        num_highway_layers=2,
        vocab_size=60,
        num_labels=3,
    )
    return ElmoConfig(**{**values, **extra})


def close_spread(values: torch.Tensor, expected_std: float, name: str) -> list[str]:
    std = float(values.float().std())
    return (
        []
        if 0.75 * expected_std <= std <= 1.25 * expected_std
        else [f"{name}: std {std:.4f}, expected {expected_std:.4f}"]
    )


def departures(weights: dict[str, torch.Tensor], config: ElmoConfig) -> list[str]:
    """Every way ``weights`` (a state dict, any prefix) departs from the documented initialisation."""
    problems = []
    F, P, H = config.num_char_cnn_filters, config.projection_dim, config.cell_size
    for name, value in weights.items():
        value = torch.as_tensor(value, dtype=torch.float32)
        if not torch.isfinite(value).all():
            problems.append(f"{name}: not finite")
            continue
        key = name.split("elmo.", 1)[-1]
        if key == "char_encoder.char_embeddings.weight":
            if value[0].abs().max() != 0 or value.abs().max() > 1:
                problems.append(f"{name}: padding row not zero or values outside [-1, 1]")
            problems += close_spread(value[1:], 1 / math.sqrt(3), name)  # U(-1, 1)
        elif key.startswith("char_encoder.convolutions.") and key.endswith("weight"):
            if config.char_cnn_activation == "relu":
                if value.abs().max() > 0.05:
                    problems.append(f"{name}: outside [-0.05, 0.05]")
                problems += close_spread(value, 0.05 / math.sqrt(3), name)
            else:
                problems += close_spread(value, math.sqrt(1 / (value.shape[2] * value.shape[1])), name)
        elif key.startswith("char_encoder.") and key.endswith(".bias"):
            expected = -2.0 if ".gate." in key else 0.0
            if not torch.all(value == expected):
                problems.append(f"{name}: bias {value.flatten()[:4].tolist()}..., expected {expected}")
        elif key.startswith("char_encoder.") and key.endswith(".weight"):  # highway transform / gate, projection
            problems += close_spread(value, math.sqrt(1 / F), name)
        elif key.endswith(".input_transform.weight") or key.endswith(".recurrent_transform.weight"):
            limit = math.sqrt(6 / (P + P + 4 * H))
            if value.abs().max() > limit:
                problems.append(f"{name}: outside the Glorot bound {limit:.4f}")
            problems += close_spread(value, limit / math.sqrt(3), name)
        elif key.startswith("encoder.") and key.endswith(".projection.weight"):
            problems += close_spread(value, math.sqrt(6 / (P + H)) / math.sqrt(3), name)
        elif key.startswith("encoder.") and key.endswith(".bias"):
            expected = torch.zeros(4 * H)
            expected[H : 2 * H] = 1.0
            if not torch.equal(value, expected):
                problems.append(f"{name}: LSTM bias is not 0 with the forget block at +1")
        elif key == "softmax.weight":
            problems += close_spread(value, 1 / math.sqrt(P), name)
        elif key == "classifier.weight":
            bound = math.sqrt(6 / sum(value.shape))
            if value.abs().max() > bound:
                problems.append(f"{name}: abs max {float(value.abs().max()):.3g} beyond the Glorot bound {bound:.3f}")
            if value.abs().max() < bound / 4:
                problems.append(f"{name}: abs max {float(value.abs().max()):.3g}: not Glorot-uniform")
        elif key in ("softmax.bias", "classifier.bias", "scalar_mix.scalar_parameters"):
            if not torch.all(value == 0):
                problems.append(f"{name}: not zero ({value.flatten()[:4].tolist()}...)")
        elif key == "scalar_mix.gamma":
            if not torch.all(value == 1):
                problems.append(f"{name}: not one")
        else:
            problems.append(f"{name}: a parameter the documented initialisation does not cover")
    return problems


@pytest.mark.parametrize("model_class", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_a_model_built_from_scratch_carries_the_documented_initialisation(model_class, activation):
    torch.manual_seed(0)
    model = model_class(config(char_cnn_activation=activation))
    assert departures(model.state_dict(), model.config) == []


@pytest.mark.parametrize("model_class", CLASSES, ids=lambda c: c.__name__)
def test_a_model_built_on_the_meta_device_and_materialised_carries_it_too(model_class):
    torch.manual_seed(0)
    with torch.device("meta"):
        model = model_class(config())
    assert all(p.device.type == "meta" for p in model.parameters())
    model.to_empty(device="cpu")
    model.init_weights()
    assert departures(model.state_dict(), model.config) == []


def test_fixed_scalar_mix_weights_are_initialised_to_the_configured_values():
    model = ElmoForTokenClassification(config(scalar_mix_parameters=[-9e10, 1.0, -9e10]))
    assert torch.equal(model.scalar_mix.scalar_parameters, torch.tensor([[-9e10, 1.0, -9e10]]))


@pytest.fixture
def bilm_folder(tmp_path):
    torch.manual_seed(0)
    model = ElmoForBidirectionalLM(config())
    with torch.no_grad():  # weights no initialisation would give: a re-initialised weight shows
        for parameter in model.parameters():
            parameter.add_(0.5)
    return save_model_folder(model, ElmoTokenizer(), tmp_path / "bilm"), model


@pytest.mark.parametrize(
    "head_class", [ElmoForSequenceClassification, ElmoForTokenClassification], ids=lambda c: c.__name__
)
def test_a_head_loaded_from_a_bilm_folder_gets_initialised_new_weights_and_keeps_the_loaded_ones(
    bilm_folder, head_class
):
    folder, saved = bilm_folder
    for _ in range(6):
        head = head_class.from_pretrained(folder, num_labels=2)
        new = {k: v for k, v in head.state_dict().items() if not k.startswith("elmo.")}
        assert sorted(new) == [
            "classifier.bias",
            "classifier.weight",
            "scalar_mix.gamma",
            "scalar_mix.scalar_parameters",
        ]
        assert departures(new, head.config) == []
        for name, value in saved.elmo.state_dict().items():
            assert torch.equal(head.elmo.state_dict()[name], value), name


def test_a_full_folder_loads_back_exactly_with_nothing_re_initialised(bilm_folder):
    folder, saved = bilm_folder
    loaded = ElmoForBidirectionalLM.from_pretrained(folder)
    for name, value in saved.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name


@pytest.mark.slow
def test_six_loads_through_the_folders_own_code_give_the_documented_head_weights(bilm_folder, tmp_path):
    folder, saved = bilm_folder
    got = run_without_package(
        """
        import json, sys, torch
        from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification
        folder, loads = sys.argv[1], []
        for auto in [AutoModelForSequenceClassification] * 6 + [AutoModelForTokenClassification] * 6:
            head = auto.from_pretrained(folder, num_labels=2, trust_remote_code=True)
            state = head.state_dict()
            char_table = state["elmo.char_encoder.char_embeddings.weight"].tolist()
            loads.append({"module": type(head).__module__, "char_table": char_table,
                          **{k: v.tolist() for k, v in state.items() if not k.startswith("elmo.")}})
        print(json.dumps(loads))
        """,
        folder,
        workdir=tmp_path / "fresh",
    )
    assert len(got) == 12
    table = saved.elmo.char_encoder.char_embeddings.weight
    for load in got:
        assert load.pop("module").startswith("transformers_modules")
        assert torch.equal(torch.tensor(load.pop("char_table")), table)  # loaded, not re-initialised
        assert departures({k: torch.tensor(v) for k, v in load.items()}, saved.config) == []


def test_the_check_itself_finds_torch_defaults_and_uninitialised_memory():
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(config())
    torch_defaults = {
        "elmo.char_encoder.highways.0.gate.bias": torch.nn.Linear(28, 28).bias.detach(),
        "elmo.char_encoder.char_embeddings.weight": torch.randn(262, 8),
        "classifier.weight": torch.full((3, 32), 1.89e38),
    }
    found = departures(torch_defaults, model.config)
    assert {problem.split(":")[0] for problem in found} == set(torch_defaults)
