"""ElmoConfig builds what it is given; the tools' checks (`modeling_elmo.utils.config_checks`) name a bad key or value;
options.json round trips; presets have the published sizes."""

from __future__ import annotations

import json
import logging
import re
import time

import pytest
import torch
from conftest import REPO_ROOT
from support import assert_same_numbers

from modeling_elmo import ElmoConfig, ElmoModel
from modeling_elmo.conversion.original_format import config_options, convert_config
from modeling_elmo.utils.config_checks import check_config, config_from_dict, load_config

ORIGINAL_OPTIONS = {
    "lstm": {
        "use_skip_connections": True,
        "projection_dim": 512,
        "cell_clip": 3,
        "proj_clip": 3,
        "dim": 4096,
        "n_layers": 2,
    },
    "char_cnn": {
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "embedding": {"dim": 16},
        "n_characters": 262,
        "max_characters_per_token": 50,
    },
}


def test_the_config_refuses_a_value_that_would_compute_nonsense_and_the_tools_check_a_changed_config():
    with pytest.raises(ValueError, match=r"^`cell_size` must be an integer >= 1, got 2\.5\.$"):
        ElmoConfig(char_cnn_activation="relu", cell_size=2.5)
    config = ElmoConfig()
    config.cell_size = 2.5  # set after it was built: the tools' check still names it
    with pytest.raises(ValueError, match=r"^`cell_size` must be an integer >= 1, got 2\.5\.$"):
        check_config(config)
    mixed = ElmoConfig(char_cnn_filters=((1, 4), [2, 8]), scalar_mix_parameters=(0.0, 1.0, 2.0))  # tuples: lists
    assert (mixed.char_cnn_filters, mixed.scalar_mix_parameters) == ([[1, 4], [2, 8]], [0.0, 1.0, 2.0])


def test_the_config_itself_refuses_only_what_would_change_its_meaning():
    with pytest.raises(ValueError, match=r"^`hidden_size` must be 2 \* projection_dim = 14 \(.*\), got 15\.$"):
        ElmoConfig(hidden_size=15)  # P would be 7: the output 14 wide, not 15
    with pytest.raises(
        ValueError, match=r"^`lstm_implementation='torch'` cannot clip .* cell_clip=3\.0 and proj_clip=None;"
    ):
        ElmoConfig(lstm_implementation="torch", proj_clip=None)  # torch.nn.LSTM would run unclipped
    assert ElmoConfig(lstm_implementation="torch", cell_clip=None, proj_clip=None).uses_torch_lstm


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"char_cnn_activation": "gelu"}, r"^`char_cnn_activation` must be one of 'relu', 'tanh'; got 'gelu'\.$"),
        ({"hidden_size": 0}, "^`hidden_size` must be an integer >= 2, got 0"),  # alone, the output width
        ({"hidden_size": "16"}, "^`hidden_size` must be an integer >= 2, got '16'"),
        ({"projection_dim": 8, "hidden_size": 15}, "hidden_size` must be 2 \\* projection_dim = 16.*got 15"),
        ({"projection_dim": 0}, "projection_dim"),
        ({"projection_dim": 8, "hidden_size": 12}, "hidden_size` must be 2 \\* projection_dim = 16.*got 12"),
        ({"cell_size": 2.5}, "cell_size"),
        ({"cell_clip": -1.0}, "cell_clip"),
        ({"proj_clip": True}, "proj_clip"),
        ({"char_cnn_filters": [[1, 4], [0, 8]]}, r"\[0, 8\]"),
        ({"char_cnn_filters": []}, "char_cnn_filters"),
        ({"char_cnn_filters": [[60, 4]]}, "width 60"),
        ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
        ({"lstm_implementation": "torch"}, "cannot clip"),
        ({"lstm_implementation": "cudnn"}, "lstm_implementation"),
        ({"scalar_mix_parameters": [1.0, 2.0]}, "scalar_mix_parameters"),
        ({"num_characters": 261}, "num_characters"),
        ({"classifier_pooling": "cls"}, "classifier_pooling"),
        ({"vocab_size": 2}, "vocab_size"),
        ({"lm_softmax": "sampled", "vocab_size": 100, "num_negative_samples": 100}, "num_negative_samples"),
        ({"stateful": True}, "lstm_state"),
        ({"cell_clip": float("nan")}, "cell_clip.*nan"),
        ({"proj_clip": float("inf")}, "proj_clip.*inf"),
        ({"num_labels": -3}, "num_labels.*-3"),
        ({"num_labels": 0}, "num_labels"),
        ({"lm_softmax_chunk_size": 0}, "lm_softmax_chunk_size"),
        ({"char_cnn_filters": 5}, "char_cnn_filters` must be a non-empty list .*got 5"),
        ({"scalar_mix_parameters": 5}, "scalar_mix_parameters` must be a list of finite numbers .*got 5"),
        ({"num_labels": 2.5}, "num_labels.*2.5"),
        (
            {"max_characters_per_token": 10**6},
            r"max_characters_per_token` must be an integer in \[3, 1,024\] \(characters per word\)",
        ),
        ({"cell_size": "x" * 10**6}, r"cell_size` must be an integer >= 1, got 'x{79}\.\.\.\.$"),
        # attacker pass on issue 35: values the checks let through that compute nonsense
        ({"bos_token_id": -1}, r"`bos_token_id` must be an integer >= 0 or None, got -1"),
        ({"eos_token_id": "2"}, r"`eos_token_id` must be an integer >= 0 or None, got '2'"),
        ({"pad_token_id": 1.5}, r"`pad_token_id` must be an integer >= 0 or None, got 1\.5"),
        ({"use_packed_kernels": "no"}, r"`use_packed_kernels` must be true or false, got 'no'"),
        ({"scalar_mix_parameters": [float("nan")] * 3}, r"scalar_mix_parameters` must be a list of finite numbers"),
        ({"initializer_range": float("nan")}, r"`initializer_range` must be a finite number >= 0, got nan"),
    ],
)
def test_the_tools_refuse_bad_values_in_one_line_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        config_from_dict(kwargs)


@pytest.mark.parametrize(
    ("key", "value"), [("bos_token_id", 7), ("eos_token_id", 3), ("bos_token_id", None), ("eos_token_id", 0)]
)
def test_the_language_model_refuses_boundary_ids_other_than_its_vocabularys_while_the_config_takes_them(
    tiny_config, key, value
):
    from modeling_elmo import ElmoForBidirectionalLM

    tiny = {**tiny_config.to_diff_dict(), "vocab_size": 12}
    config = ElmoConfig(**{**tiny, key: value})  # any id, as transformers' own config tests set
    assert getattr(config, key) == value
    ElmoModel(config)  # the encoder never reads them
    with pytest.raises(ValueError, match=rf"^ElmoForBidirectionalLM predicts <S> and </S> as words 1 and 2 .*{key}="):
        ElmoForBidirectionalLM(config)
    ElmoForBidirectionalLM(ElmoConfig(**tiny))


def test_hidden_size_is_the_output_width_and_projection_dim_the_per_direction_size():
    by_projection, by_width = ElmoConfig(projection_dim=8), ElmoConfig(hidden_size=16)
    assert (by_projection.hidden_size, by_projection.projection_dim) == (16, 8)
    assert by_width.to_dict() == by_projection.to_dict()
    assert (ElmoConfig().projection_dim, ElmoConfig().hidden_size) == (512, 1024)  # the released model
    config = ElmoConfig(projection_dim=4, cell_size=8, char_cnn_filters=[[1, 4]], num_highway_layers=0)
    ids = torch.randint(1, 200, (2, 3, 50))
    assert ElmoModel(config)(input_ids=ids).last_hidden_state.shape[-1] == config.hidden_size == 8


def test_a_config_json_written_before_projection_dim_is_refused_by_the_tools_and_upgraded_to_its_meaning(tmp_path):
    """The keys the code of commit 1fa5770 wrote for a tiny model: hidden_size held the projection P. The package's
    loader refuses it naming `elmo upgrade`, which rewrites it as projection_dim P, hidden_size 2 * P."""
    from transformers import AutoConfig

    from modeling_elmo.conversion.upgrade import upgrade_folder

    legacy = {
        "model_type": "elmo",
        "hidden_size": 8,
        "cell_size": 16,
        "num_hidden_layers": 2,
        "char_embedding_dim": 4,
        "char_cnn_filters": [[1, 4], [2, 8]],
        "num_highway_layers": 1,
        "vocab_size": 4,
        "cell_clip": 3.0,
        "proj_clip": 3.0,
        "freeze_elmo": True,
        "architectures": ["ElmoModel"],
        "transformers_version": "5.24.0",
    }
    (tmp_path / "config.json").write_text(json.dumps(legacy))
    with pytest.raises(ValueError, match=r"has no projection_dim .*run `elmo upgrade .*` once\.$"):
        load_config(tmp_path)
    assert upgrade_folder(tmp_path, dry_run=True) == [
        "config.json: hidden_size held the projection: now projection_dim 8, hidden_size 16"
    ]
    assert json.loads((tmp_path / "config.json").read_text()) == legacy  # a dry run writes nothing
    upgrade_folder(tmp_path)
    for config in (ElmoConfig.from_pretrained(tmp_path), AutoConfig.from_pretrained(tmp_path), load_config(tmp_path)):
        assert isinstance(config, ElmoConfig) and (config.projection_dim, config.hidden_size) == (8, 16)
    assert json.loads((tmp_path / "config.json").read_text()) == {**legacy, "projection_dim": 8, "hidden_size": 16}
    assert upgrade_folder(tmp_path) == []  # in today's format


def test_a_model_folder_written_before_projection_dim_gives_the_same_outputs_once_upgraded(tmp_path):
    from transformers import AutoModel

    from modeling_elmo import ElmoTokenizer
    from modeling_elmo.conversion.upgrade import upgrade_folder

    model = ElmoModel(
        ElmoConfig(
            projection_dim=8,
            cell_size=16,
            char_embedding_dim=4,
            char_cnn_filters=[[1, 4], [2, 8]],
            num_highway_layers=1,
        )
    ).eval()
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["projection_dim"]
    saved["hidden_size"] = 8  # as the code of commit 1fa5770 wrote it
    (tmp_path / "config.json").write_text(json.dumps(saved))
    upgrade_folder(tmp_path)
    batch = ElmoTokenizer()(
        [["a", "river", "bank"], ["hi"]], is_split_into_words=True, padding=True, return_tensors="pt"
    )
    for loaded in (ElmoModel.from_pretrained(tmp_path), AutoModel.from_pretrained(tmp_path)):
        assert (loaded.config.projection_dim, loaded.config.hidden_size) == (8, 16)
        with torch.no_grad():
            assert_same_numbers(
                loaded.eval()(**batch).last_hidden_state, model(**batch).last_hidden_state, what="reloaded"
            )


def test_a_config_dict_without_projection_dim_means_what_the_config_class_means(tmp_path):
    """Today's reading, the same through every entry: hidden_size alone is the output width (P its half)."""
    from transformers import AutoConfig

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "elmo", "hidden_size": 16}))
    for config in (
        ElmoConfig(hidden_size=16),
        ElmoConfig.from_dict({"hidden_size": 16}),
        ElmoConfig.from_json_file(str(tmp_path / "config.json")),
        AutoConfig.from_pretrained(tmp_path),
        load_config(tmp_path),
    ):
        assert (config.projection_dim, config.hidden_size) == (8, 16)


def test_from_pretrained_takes_either_size_as_a_keyword(tmp_path):
    ElmoConfig(projection_dim=8).save_pretrained(tmp_path)
    assert ElmoConfig.from_pretrained(tmp_path, hidden_size=32).projection_dim == 16
    assert ElmoConfig.from_pretrained(tmp_path, projection_dim=4).hidden_size == 8
    with pytest.raises(ValueError, match="hidden_size` must be 2 \\* projection_dim = 8 .*got 32"):
        ElmoConfig.from_pretrained(tmp_path, projection_dim=4, hidden_size=32)


def test_an_inconsistent_pair_in_config_json_is_refused_in_one_line(tmp_path):
    data = ElmoConfig(projection_dim=8).to_dict()
    data["hidden_size"] = 24
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(
        ValueError,
        match=r"^`hidden_size` must be 2 \* projection_dim = 16 \(the output width, both "
        r"directions\), got 24\.$",
    ):
        ElmoConfig.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("to_dict", 1),
        ("__class__", "x"),
        ("use_return_dict", False),
        ("check_agreement", None),
        ("attribute_map", {}),
        ("num_char_cnn_filters", 3),
    ],
)
def test_a_key_that_would_replace_part_of_the_class_is_refused_naming_it(tmp_path, key, value):
    data = ElmoConfig(projection_dim=8).to_dict()
    data[key] = value
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"^config key '{key}' is not a setting: it would replace ElmoConfig.{key}.$"):
        load_config(tmp_path)


LIBRARY_PATH_VALUES = [
    ("projection_dim", -16, r"^`projection_dim` must be an integer >= 1, got -16\.$"),
    ("projection_dim", 0, r"^`projection_dim` must be an integer >= 1, got 0\.$"),
    ("num_characters", 10, r"^`num_characters` must be 262 \(256 bytes \+ 5 markers \+ the padding id 0\), got 10\.$"),
    ("cell_clip", "3", r"^`cell_clip` must be a finite positive number or None \(no clipping\), got '3'\.$"),
    ("num_hidden_layers", 2.0, r"^`num_hidden_layers` must be an integer in \[1, 64\] \(layers\), got 2\.0\.$"),
    # issue 42: beside small weights, transformers built these for over a minute before any line
    ("num_hidden_layers", 1000, r"^`num_hidden_layers` must be an integer in \[1, 64\] \(layers\), got 1000\.$"),
    ("num_highway_layers", 100_000, r"^`num_highway_layers` must be an integer in \[0, 64\] \(layers\), got 100000\.$"),
    ("lstm_implementation", "cuda", r"^`lstm_implementation` must be one of 'auto', 'loop', 'fused', 'torch'; got"),
    ("bos_token_id", -7, r"^`bos_token_id` must be an integer >= 0 or None, got -7\.$"),
]
#: What only a hostile or damaged file holds: refused where the package's tools read a folder of others
#: (`utils.config_checks`); a ``trust_remote_code`` user of the folder trusts its files already. (These rows ran on
#: the library path too before the shipped config became a config of a model only.)
HOSTILE_FILE_VALUES = [
    ("to_dict", 1, r"^config key 'to_dict' is not a setting: it would replace ElmoConfig\.to_dict\.$"),
    ("__class__", "ElmoConfig", r"^config key '__class__' is not a setting: it would replace ElmoConfig\.__class__\.$"),
    # attacker pass: transformers names each label; 20 bytes of config.json took gigabytes
    ("num_labels", 10**9, r"^`num_labels` must be an integer in \[1, 1,000,000\], got 1000000000\.$"),
    ("id2label", {"a": "x"}, r"^`id2label` keys must be label numbers \(0, 1, \.\.\.\), got 'a'\.$"),
    # attacker pass: transformers (which requires `kernels`) fetched and loaded the named kernel repository's code
    ("attn_implementation", "kernels-community/x", r"^`attn_implementation` names the Hub kernel repository 'kern"),
]


@pytest.mark.parametrize(("key", "value", "message"), LIBRARY_PATH_VALUES, ids=lambda v: repr(v)[:20])
@pytest.mark.parametrize("how", ["AutoModel", "remote code", "ElmoConfig"])
def test_the_library_path_refuses_a_config_value_that_would_compute_nonsense_in_one_line(
    tmp_path, key, value, message, how
):
    """What the commands refuse, `AutoModel.from_pretrained`, the folder's own code files (remote code) and the
    config's constructor refuse with the same line, through the same check."""
    from transformers import AutoModel
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    small = dict(projection_dim=8, cell_size=16, char_embedding_dim=4, char_cnn_filters=[[1, 4]], num_highway_layers=0)
    ElmoModel(ElmoConfig(**small)).save_pretrained(tmp_path)
    data = {**json.loads((tmp_path / "config.json").read_text()), key: value}
    (tmp_path / "config.json").write_text(json.dumps(data))
    start = time.perf_counter()
    with pytest.raises(ValueError, match=message) as refused:
        if how == "ElmoConfig":
            ElmoConfig(**{**small, key: value})
        elif how == "remote code":  # the folder's own code files, as a client without this package runs them
            get_class_from_dynamic_module("modeling_elmo.ElmoModel", str(tmp_path)).from_pretrained(tmp_path)
        else:
            AutoModel.from_pretrained(tmp_path, trust_remote_code=True)
    assert "\n" not in str(refused.value) and time.perf_counter() - start < 10  # before anything is built
    with pytest.raises(ValueError, match=message):  # the commands' reading of the folder: the same line
        load_config(tmp_path)


@pytest.mark.parametrize(("key", "value", "message"), HOSTILE_FILE_VALUES, ids=lambda v: repr(v)[:20])
def test_the_commands_refuse_a_config_value_of_a_hostile_file_in_one_line(tmp_path, key, value, message):
    """The package's loader and every command that reads a model folder (here ``elmo embed``) refuse what only a
    hostile file holds, in one line naming the key and the value, before anything is built."""
    from modeling_elmo import ElmoTokenizer, load_elmo_model
    from modeling_elmo.cli import main

    small = dict(projection_dim=8, cell_size=16, char_embedding_dim=4, char_cnn_filters=[[1, 4]], num_highway_layers=0)
    ElmoModel(ElmoConfig(**small)).save_pretrained(tmp_path / "m")
    ElmoTokenizer().save_pretrained(tmp_path / "m")
    data = {**json.loads((tmp_path / "m" / "config.json").read_text()), key: value}
    (tmp_path / "m" / "config.json").write_text(json.dumps(data))
    for load in (load_config, load_elmo_model):
        with pytest.raises(ValueError, match=message[1:-1] if message.endswith("$") else message[1:]) as refused:
            load(tmp_path / "m")
        assert "\n" not in str(refused.value)
    (tmp_path / "in.txt").write_text("the bank\n")
    argv = ["embed", "--model", str(tmp_path / "m"), "--top", str(tmp_path / "in.txt"), str(tmp_path / "out.h5")]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    lines = str(exited.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith("elmo embed: error: "), lines
    assert re.search(message[1:-1] if message.endswith("$") else message[1:], lines[0]), lines
    assert not (tmp_path / "out.h5").exists()


@pytest.mark.parametrize("key", ["id2label", "label2id"])
def test_label_maps_that_are_not_objects_are_refused_naming_the_key(tmp_path, key):
    data = {**ElmoConfig(projection_dim=8).to_dict(), key: "positive,negative"}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"`{key}` must be an object mapping labels, got str 'positive,negative'"):
        load_config(tmp_path)


def test_unknown_keys_are_kept_as_transformers_keeps_them_and_survive_a_save(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        config = ElmoConfig(projection_dim=8, written_by_a_newer_release={"a": 1})
    assert config.written_by_a_newer_release == {"a": 1}
    assert not caplog.records  # nothing close to an ELMo field: kept silently
    config.save_pretrained(tmp_path)
    assert ElmoConfig.from_pretrained(tmp_path).written_by_a_newer_release == {"a": 1}


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("hiden_size", "hidden_size"),
        ("cel_size", "cell_size"),
        ("num_hidden_layer", "num_hidden_layers"),
        ("clip_cell", "cell_clip"),
        ("Hidden_Size", "hidden_size"),
        ("char_cnn_filter", "char_cnn_filters"),
    ],
)
def test_a_key_close_to_an_elmo_field_warns_naming_the_field_where_the_package_loads(key, field, caplog):
    config = ElmoConfig(**{key: 7})
    assert getattr(config, key) == 7 and getattr(config, field) == getattr(
        ElmoConfig(), field
    )  # not taken as the field
    with caplog.at_level(logging.WARNING):
        check_config(config, "config.json")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"config.json has the unknown field {key!r}: did you mean {field!r}? It is kept as an "
        f"attribute and does not set {field!r}."
    ]


def test_keys_transformers_knows_give_no_misspelling_warning(caplog):
    from transformers import GenerationConfig, PretrainedConfig

    keys = set(PretrainedConfig().to_dict()) | set(GenerationConfig._get_default_generation_params())
    keys -= {"transformers_version", "model_type", "auto_map", "dtype", "tie_word_embeddings"}
    config = ElmoConfig(
        **{k: getattr(PretrainedConfig(), k, None) for k in keys if not k.startswith("_")}, num_labels=3
    )
    with caplog.at_level(logging.WARNING):
        check_config(config)
    assert not [r for r in caplog.records if "did you mean" in r.getMessage()]


def test_a_config_of_too_many_parameters_is_refused_before_anything_is_allocated():
    with pytest.raises(
        ValueError,
        match=r"^options.json describes a model of 4e\+18 parameters \(char_cnn_filters: "
        r"1,000,000,000 filters, projection_dim 512",
    ):
        convert_config({**ORIGINAL_OPTIONS, "char_cnn": {**ORIGINAL_OPTIONS["char_cnn"], "filters": [[1, 10**9]]}})


def test_values_are_still_validated_next_to_unknown_keys():
    with pytest.raises(ValueError, match="`projection_dim` must be an integer >= 1, got 0"):
        config_from_dict({"projection_dim": 0, "hiden_size": 16})


def test_configs_saved_by_transformers_and_earlier_versions_still_load(tmp_path):
    config = ElmoConfig(
        projection_dim=16, num_labels=3, id2label={0: "a", 1: "b", 2: "c"}, label2id={"a": 0, "b": 1, "c": 2}
    )
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["stateful"] = False  # written by earlier versions of this package
    (tmp_path / "config.json").write_text(json.dumps(saved))
    for loaded in (ElmoConfig.from_pretrained(tmp_path), load_config(tmp_path)):
        assert (loaded.projection_dim, loaded.num_labels, loaded.id2label[2]) == (16, 3, "c")
    saved["stateful"] = True  # a model that relied on carried states: refused by the tools, with what to do instead
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(
        ValueError, match="^`stateful=True` is not a configuration field any more: pass the `lstm_state`"
    ):
        load_config(tmp_path)


def test_the_tools_refuse_a_folder_without_config_and_another_model_type(tmp_path):
    with pytest.raises(ValueError, match="holds no config.json"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    with pytest.raises(ValueError, match="holds a 'bert' model, not an ELMo model"):
        load_config(tmp_path)


def test_every_config_carries_the_full_auto_map():
    from modeling_elmo import AUTO_MAP

    assert ElmoConfig().auto_map == AUTO_MAP
    # a mapping into another repository is never carried: trust_remote_code=True would fetch and run that
    # repository's code; a saved folder ships its own code files, which the plain entries name
    assert ElmoConfig(auto_map={"AutoConfig": "x--configuration_elmo.ElmoConfig"}).auto_map == AUTO_MAP
    assert (
        ElmoConfig(
            auto_map={
                "AutoModel": "attacker/helpers--modeling_evil.ElmoModel",
                "AutoModelForCausalLM": "modeling_evil.Backdoor",
            }
        ).auto_map
        == AUTO_MAP
    )


def test_options_json_round_trip_keeps_every_value():
    config = convert_config(ORIGINAL_OPTIONS)
    assert (config.projection_dim, config.cell_size, config.num_highway_layers, config.cell_clip) == (512, 4096, 2, 3)
    options = config_options(config)
    assert options["lstm"] == {**ORIGINAL_OPTIONS["lstm"]}
    assert options["char_cnn"] == ORIGINAL_OPTIONS["char_cnn"]
    assert convert_config(options).to_dict() == config.to_dict()


def test_options_without_clips_or_highways_or_skips_are_supported():
    options = json.loads(json.dumps(ORIGINAL_OPTIONS))
    for key in ("cell_clip", "proj_clip"):
        del options["lstm"][key]
    options["lstm"]["use_skip_connections"] = False
    del options["char_cnn"]["n_highway"]
    config = convert_config(options)
    assert config.cell_clip is None and config.num_highway_layers == 0 and not config.use_skip_connections
    assert "cell_clip" not in config_options(config)["lstm"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o["lstm"].update(peephole=True), "unknown keys in lstm: \\['peephole'\\]"),
        (lambda o: o["lstm"].pop("dim"), "lstm.dim"),
        (lambda o: o.pop("char_cnn"), "word-input"),
        (lambda o: o["char_cnn"].update(n_characters=300), "n_characters"),
        (lambda o: o.update(mystery=1), "mystery"),
    ],
)
def test_from_options_names_unknown_and_missing_keys(mutate, message):
    options = json.loads(json.dumps(ORIGINAL_OPTIONS))
    mutate(options)
    with pytest.raises(ValueError, match=message):
        convert_config(options)


def test_training_options_with_261_characters_become_inference_configs():
    options = json.loads(json.dumps(ORIGINAL_OPTIONS))
    options["char_cnn"]["n_characters"] = 261
    options.update(n_tokens_vocab=793471, dropout=0.1, batch_size=128, unroll_steps=20)
    config = convert_config(options)
    assert config.num_characters == 262 and config.vocab_size == 793471


@pytest.mark.parametrize(
    ("preset", "reference_count"),
    [("elmo-small", 13_593_296), ("elmo-medium", 28_027_728), ("elmo-original", 93_600_848)],
)
def test_released_shapes_match_the_reference_parameter_counts(preset, reference_count):
    config = ElmoConfig.from_json_file(str(REPO_ROOT / "configuration" / f"{preset}.json"))
    with torch.device("meta"):
        model = ElmoModel(config)
    ours = sum(p.numel() for p in model.parameters())
    # the reference counts a 261-row character table; ours has the padding row 0 too (16 more values)
    assert ours - config.char_embedding_dim == reference_count


def test_27m_preset_has_about_27_million_parameters_with_its_softmax():
    config = ElmoConfig.from_json_file(str(REPO_ROOT / "configuration" / "elmo-27m.json"))
    with torch.device("meta"):
        model = ElmoModel(config)
    total = sum(p.numel() for p in model.parameters()) + config.vocab_size * (config.projection_dim + 1)
    assert 26_000_000 < total < 28_500_000


def test_every_preset_builds_and_round_trips_through_save_pretrained(tmp_path):
    for path in sorted((REPO_ROOT / "configuration").glob("elmo-*.json")):
        config = ElmoConfig.from_json_file(str(path))
        config.save_pretrained(tmp_path / path.stem)
        assert ElmoConfig.from_pretrained(tmp_path / path.stem).to_dict() == config.to_dict()
        assert load_config(tmp_path / path.stem).to_dict() == config.to_dict()  # what the tools load: the same


def test_upgrading_a_dict_saved_before_projection_dim_leaves_the_given_dict_as_it_was():
    from modeling_elmo.utils.earlier_formats import upgraded_config

    saved = {"model_type": "elmo", "hidden_size": 8, "transformers_version": "5.24.0"}
    assert upgraded_config(saved) == {**saved, "projection_dim": 8, "hidden_size": 16}
    assert saved == {"model_type": "elmo", "hidden_size": 8, "transformers_version": "5.24.0"}
    text = {"model_type": "elmo", "transformers_version": "5.24.0", "projection_dim": "8"}  # refused later
    assert upgraded_config({**saved, "hidden_size": "8"}) == text
    assert upgraded_config({"model_type": "elmo", "hidden_size": 8}) is None  # not saved: today's meaning
    assert upgraded_config({**saved, "projection_dim": 4}) is None
