"""Model locations: a path that looks local never goes to the Hub (a local error at once), a Hub id fails within
seconds when the Hub cannot be reached, and one `HubUnreachableError` for the whole package."""

from __future__ import annotations

import time

import pytest

from modeling_elmo.utils import io_utils, loading


@pytest.fixture
def no_network(monkeypatch):
    """Online mode, as on a machine without a network; any probe of the Hub is recorded."""
    import huggingface_hub

    probes = []
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(io_utils, "hub_reachable", lambda timeout=3.0: probes.append(1) or False)
    return probes


@pytest.mark.parametrize(
    "location, local",
    [
        ("./model", True),
        ("/abs/model", True),
        ("~/model", True),
        ("a/b/c", True),
        ("model/", True),
        ("C:\\models\\elmo", True),
        ("not a hub id!", True),
        ("runs/nope", True),  # runs/ exists in the working folder
        ("someone/elmo", False),
        ("elmo-small", False),
    ],
)
def test_what_looks_like_a_local_path(location, local, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert loading.looks_like_local_path(location) is local


@pytest.mark.parametrize("location", ["./nope", "runs/nope", "a/b/nope", "~/surely-absent-elmo-model"])
def test_a_missing_local_looking_path_is_a_local_error_without_asking_the_hub(
    location, tmp_path, monkeypatch, no_network
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(ValueError) as error:
        loading.check_model_location(location)
    assert str(error.value) == f"model {location!r} does not exist (no such folder)"
    assert not isinstance(error.value, loading.HubUnreachableError) and no_network == []


def test_a_hub_id_fails_within_seconds_when_the_hub_cannot_be_reached(tmp_path, monkeypatch, no_network):
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    with pytest.raises(
        loading.HubUnreachableError,
        match=r"^model 'someone/elmo' is not a local folder, and the "
        r"Hugging Face Hub \(\S+\) cannot be reached",
    ):
        loading.check_model_location("someone/elmo")
    assert no_network == [1] and time.monotonic() - started < 2


def test_offline_a_hub_id_not_in_the_cache_does_not_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    with pytest.raises(ValueError, match=r"^model 'someone/elmo' does not exist: no such folder, and no Hub model"):
        loading.check_model_location("someone/elmo")
    assert loading.check_model_location(str(tmp_path)) is True


def test_embed_and_evaluate_refuse_a_mistyped_model_path_at_once(tmp_path, monkeypatch, no_network, capsys):
    import transformers  # noqa: F401  (imported before the clock starts: the commands import it on first use)

    from modeling_elmo.embedding import embed
    from modeling_elmo.evaluation.cli import main as evaluate_main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(SystemExit) as embed_exit:
        embed.main(["in.txt", "out.h5", "--model", "runs/nope", "--all", "--no-progress"])
    assert str(embed_exit.value.code) == "elmo embed: error: model 'runs/nope' does not exist (no such folder)"
    with pytest.raises(SystemExit):
        evaluate_main(["runs/nope", "--task", "wsd-probe", "--no-progress"])
    assert capsys.readouterr().err.strip() == "elmo evaluate: error: model 'runs/nope' does not exist (no such folder)"
    assert no_network == [] and time.monotonic() - started < 10  # not the Hub client's retries (about 30 s)
    assert not (tmp_path / "out.h5").exists()


def test_there_is_one_hub_unreachable_error():
    from modeling_elmo.evaluation import data as evaluation_data
    from modeling_elmo.pretraining import data as pretraining_data

    assert evaluation_data.HubUnreachableError is pretraining_data.HubUnreachableError is loading.HubUnreachableError
    assert issubclass(loading.HubUnreachableError, ValueError)


def test_the_pickle_guard_lives_with_loading_not_under_hub():
    from modeling_elmo.hub import safety

    assert loading.refuse_pickled_weights.__module__ == "modeling_elmo.utils.loading"
    assert safety.refuse_pickled_weights is loading.refuse_pickled_weights  # the publisher applies the same guard


# ----------------------------------------------------------------------------------------------- h-io: declared sizes
DEEP_JSON = "[" * 200_000 + "]" * 200_000


@pytest.fixture
def small_model(tmp_path):
    """A saved `ElmoForBidirectionalLM` with its tokenizer (a few hundred KB of weights)."""
    from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoTokenizer, save_model_folder

    (tmp_path / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(30)))
    config = ElmoConfig(
        hidden_size=8,
        cell_size=16,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        num_highway_layers=1,
        vocab_size=34,
    )
    folder = tmp_path / "lm"
    save_model_folder(ElmoForBidirectionalLM(config), ElmoTokenizer(vocab_file=str(tmp_path / "vocab.txt")), folder)
    return folder


def _declare_wide_lstms(folder):
    """config.json declaring 65536-wide LSTM cells beside the small model.safetensors."""
    import json

    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "cell_size": 65536}))


def test_a_config_declaring_far_more_than_the_safetensors_hold_is_refused_before_allocation(small_model, monkeypatch):
    from modeling_elmo import ElmoForBidirectionalLM, ElmoModel, load_elmo_model
    from modeling_elmo.evaluation.cli import load_model_and_tokenizer

    _declare_wide_lstms(small_model)
    built = []
    for cls in (ElmoModel, ElmoForBidirectionalLM):
        monkeypatch.setattr(cls, "from_pretrained", classmethod(lambda cls, *a, **k: built.append(cls)))
    expected = (
        f"the weights of model {str(small_model)!r} do not match its config.json: 16 tensor(s) with another "
        "shape than config.json implies, saved vs expected ("
    )
    with pytest.raises(ValueError) as error:
        load_elmo_model(small_model)
    assert str(error.value).startswith(
        expected
    ) and "encoder.backward_layers.0.input_transform.bias (64,) vs (262144,)" in str(error.value), error.value
    with pytest.raises(ValueError) as error:
        load_model_and_tokenizer(str(small_model), "cpu", need_lm=True)
    assert str(error.value).startswith(expected), error.value
    assert built == []


def test_a_config_declaring_far_more_than_the_safetensors_hold_is_one_line_in_every_command(
    small_model, tmp_path, monkeypatch, capsys
):
    from modeling_elmo import cli

    _declare_wide_lstms(small_model)
    (tmp_path / "text.txt").write_text("w1 w2\n")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = str(tmp_path / "text.txt")
    for command in (
        ["embed", text, str(tmp_path / "out.h5"), "--model", str(small_model), "--top"],
        ["push", str(small_model), "--repo-id", "me/elmo", "--dry-run", "--output-dir", str(tmp_path / "p")],
        [
            "evaluate",
            str(small_model),
            "--task",
            "perplexity",
            "--text",
            str(tmp_path / "text.txt"),
            "--output-dir",
            str(tmp_path / "e"),
        ],
    ):
        with pytest.raises(SystemExit) as exit_:
            cli.main(command)
        code = exit_.value.code  # the line itself, or a status with the line on stderr
        message = code if isinstance(code, str) else capsys.readouterr().err.strip().splitlines()[-1]
        assert message.startswith(f"elmo {command[0]}: error: the weights of model ") and "\n" not in message, message
        assert "16 tensor(s) with another shape than config.json implies" in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lm", "text.txt", "vocab.txt"]


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
def test_a_model_json_file_nested_200000_deep_is_one_line_naming_it(small_model, name):
    from modeling_elmo import load_elmo_model

    (small_model / name).write_text(DEEP_JSON)
    with pytest.raises(ValueError) as error:
        load_elmo_model(small_model)
    assert str(error.value).startswith(
        f"{name} in {str(small_model)!r} is not valid JSON: maximum recursion depth exceeded"
    ), error.value


def test_json_nested_200000_deep_is_a_value_error_in_every_reader(tmp_path):
    from modeling_elmo.evaluation.data import read_wsd_jsonl
    from modeling_elmo.folders.manifest import read_manifest
    from modeling_elmo.pretraining.arguments import load_recipe, read_model_preset
    from modeling_elmo.tokenization_elmo import ElmoTokenizer
    from modeling_elmo.utils.config_checks import load_config
    from modeling_elmo.utils.io_utils import check_safetensors_header

    path = tmp_path / "deep.json"
    path.write_text(DEEP_JSON)
    with pytest.raises(ValueError, match=r"^options file '.*deep.json' is not valid JSON: maximum recursion"):
        io_utils.read_json_object(path, "options")
    (tmp_path / "config.json").write_text(DEEP_JSON)
    with pytest.raises(ValueError, match=r"^the config.json of '.*' is not valid JSON: maximum recursion"):
        load_config(tmp_path)
    header = DEEP_JSON.encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(ValueError, match=r"its header is not a JSON object"):
        check_safetensors_header(tmp_path / "model.safetensors")
    (tmp_path / ".elmo-manifest.json").write_text(DEEP_JSON)
    assert read_manifest(tmp_path) is None  # no manifest: nothing is deleted on its word
    with pytest.raises(ValueError, match=r"is not valid JSON \(maximum recursion"):
        ElmoTokenizer(char_vocab_file=str(path))
    with pytest.raises(ValueError, match=r"^--model-config '.*deep.json' is not valid JSON \(maximum recursion"):
        read_model_preset(str(path))
    (tmp_path / "deep.yaml").write_text(DEEP_JSON)
    with pytest.raises(ValueError, match=r"^recipe '.*deep.yaml' is not valid YAML \(maximum recursion"):
        load_recipe(tmp_path / "deep.yaml")
    (tmp_path / "wsd.jsonl").write_text(DEEP_JSON + "\n")
    with pytest.raises(ValueError, match=r"wsd.jsonl:1: not valid JSON \(maximum recursion"):
        read_wsd_jsonl(tmp_path / "wsd.jsonl")


@pytest.mark.parametrize(
    "edit,needed",
    [
        # the most layers a config may ask for (`configuration_elmo.MAX_LAYERS`; more: test_configuration_elmo.py)
        ({"num_hidden_layers": 64}, "its 64 LSTM layer(s) per direction, 1 highway layer(s) and 2 character"),
        ({"num_highway_layers": 64}, "its 2 LSTM layer(s) per direction, 64 highway layer(s) and 2 character"),
        ({"char_cnn_filters": [[1, 1]] * 3000}, "1 highway layer(s) and 3000 character filter(s) need at least"),
    ],
)
def test_a_config_counting_more_layers_than_the_weights_hold_is_refused_without_building_a_model(
    small_model, monkeypatch, edit, needed
):
    """Issue 35, H4-H8: the layers a config.json counts are compared with the tensors the safetensors header holds
    arithmetically, before any model (even on the meta device) is built."""
    import json
    import time

    from modeling_elmo import ElmoModel
    from modeling_elmo.utils.config_checks import config_from_dict
    from modeling_elmo.utils.weight_checks import check_weights_fit_config

    config = json.loads((small_model / "config.json").read_text())
    config.update(edit)
    (small_model / "config.json").write_text(json.dumps(config))
    built = []
    monkeypatch.setattr(ElmoModel, "__init__", lambda self, *a, **k: built.append(1) or 1 / 0)
    start = time.perf_counter()
    with pytest.raises(ValueError) as error:
        check_weights_fit_config(small_model, ElmoModel, config_from_dict(config))
    assert time.perf_counter() - start < 5 and built == []
    message = str(error.value)
    assert message.startswith(f"the weights of model {str(small_model)!r} do not match its config.json: "), message
    assert needed in message and "the weights hold 2" in message, message


def test_the_shape_check_reads_the_state_dict_once(small_model, monkeypatch):
    """The shape comparison builds the (meta) model's state dict once, not once per tensor (quadratic)."""
    import torch

    from modeling_elmo import ElmoModel
    from modeling_elmo.utils.config_checks import load_config
    from modeling_elmo.utils.weight_checks import check_weights_fit_config

    calls = []
    real = torch.nn.Module.state_dict

    def counted(self, *args, **kwargs):
        calls.append(type(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "state_dict", counted)
    check_weights_fit_config(small_model, ElmoModel, load_config(str(small_model)), ignore_unexpected=("softmax.",))
    assert calls.count(ElmoModel) == 1
