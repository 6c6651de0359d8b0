"""Tests of `modeling_elmo.embedding.inference`: the strict loader and the embedder that `elmo embed` and the cached
features share.

Expected values come from `ElmoModel` called directly on one sentence at a time (no batching, no sorting); the
loader's weights are compared with the saved model's tensors, which must come back bit for bit.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from support import assert_same_numbers

from modeling_elmo import (
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
from modeling_elmo.embedding.inference import ElmoEmbedder, load_elmo_model, load_elmo_tokenizer, make_batches
from modeling_elmo.utils import capability

REPO = Path(__file__).resolve().parents[2]
TINY = dict(
    projection_dim=8,
    cell_size=16,
    char_embedding_dim=4,
    char_cnn_filters=[[1, 4], [2, 8]],
    num_highway_layers=1,
    num_hidden_layers=2,
)
HEADS = {
    ElmoModel: {},
    ElmoForBidirectionalLM: {"vocab_size": 30},
    ElmoForSequenceClassification: {"num_labels": 2},
    ElmoForTokenClassification: {"num_labels": 3},
}


def save(folder: Path, cls=ElmoModel, seed: int = 0, **overrides) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = cls(ElmoConfig(**{**TINY, **HEADS[cls], **overrides})).eval()
    model.save_pretrained(folder)
    ElmoTokenizer().save_pretrained(folder)
    return model


def edit_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def direct_layers(model: ElmoModel, words: list[str]) -> np.ndarray:
    """All layers of one sentence from ElmoModel, no batching: (L + 1, n, 2P)."""
    with torch.no_grad():
        out = model(
            **ElmoTokenizer()([words], is_split_into_words=True, return_tensors="pt"), output_hidden_states=True
        )
    return torch.stack(out.hidden_states, dim=1)[0].numpy()


# ---------------------------------------------------------------------------------------------------- loader


@pytest.mark.parametrize("cls", list(HEADS), ids=lambda c: c.__name__)
def test_loader_returns_the_saved_bilm_of_a_model_a_head_or_the_lm(tmp_path, cls):
    saved = save(tmp_path / "m", cls)
    loaded = load_elmo_model(tmp_path / "m")
    assert type(loaded) is ElmoModel and not loaded.training
    want = getattr(saved, "elmo", saved).state_dict()
    got = loaded.state_dict()
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=0, msg=name)  # stored weights read back


def test_loader_refuses_missing_bilm_weights_and_names_them(tmp_path):
    save(tmp_path / "m")
    edit_config(tmp_path / "m", num_hidden_layers=3)  # the file has 2 layers: layer 2 would be random
    with pytest.raises(
        ValueError,
        match=r"8 biLM weight\(s\) missing \(encoder\.backward_layers\.2\.input_transform\.bias, "
        r"encoder\.backward_layers\.2\.input_transform\.weight",
    ):
        load_elmo_model(tmp_path / "m")


def test_loader_refuses_weights_of_another_depth_as_unexpected(tmp_path):
    save(tmp_path / "m")
    edit_config(tmp_path / "m", num_hidden_layers=1)
    with pytest.raises(
        ValueError, match=r"8 unexpected tensor\(s\) \(encoder\.backward_layers\.1\.input_transform\.bias"
    ):
        load_elmo_model(tmp_path / "m")


def test_loader_refuses_weights_of_another_shape_and_gives_both_shapes(tmp_path):
    save(tmp_path / "m")
    edit_config(tmp_path / "m", projection_dim=6, hidden_size=12)
    with pytest.raises(ValueError, match=r"char_encoder\.projection\.weight \(8, 12\) vs \(6, 12\)"):
        load_elmo_model(tmp_path / "m")


@pytest.mark.parametrize("name", ["elmo.pooler.weight", "decoder.weight"])
def test_loader_refuses_a_tensor_that_belongs_to_no_elmo_model(tmp_path, name):
    save(tmp_path / "m", ElmoForSequenceClassification)
    weights = load_file(tmp_path / "m" / "model.safetensors")
    weights[name] = torch.zeros(2, 2)
    save_file(weights, tmp_path / "m" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"1 unexpected tensor\(s\) \((elmo\.pooler|decoder)\.weight\)"):
        load_elmo_model(tmp_path / "m")


def test_loader_refuses_pickled_weights(tmp_path):
    folder = tmp_path / "m"
    saved = save(folder)
    torch.save(saved.state_dict(), folder / "pytorch_model.bin")  # written here, never unpickled
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"pytorch_model\.bin.*safetensors"):
        load_elmo_model(folder)


@pytest.mark.parametrize(
    "where, match",
    [
        ("missing-folder/elmo/x", "model 'missing-folder/elmo/x' does not exist \\(no such folder\\)"),
        (
            "someone/elmo-that-is-not-cached",
            "model 'someone/elmo-that-is-not-cached' does not exist: no such folder, and no "
            "Hub model of that name in the local cache",
        ),
        ("no-config", "is not an ELMo model folder: it has no config.json"),
        ("bert", "is not an ELMo model: its config.json has model_type 'bert'"),
        ("file.txt", "is a file; give the folder"),
        ("no-weights", "cannot load the weights of model"),
    ],
)
def test_loader_gives_one_line_for_a_location_that_is_not_an_elmo_model(tmp_path, monkeypatch, where, match):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "no-config").mkdir()
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    (tmp_path / "file.txt").write_text("x")
    save(tmp_path / "no-weights")
    (tmp_path / "no-weights" / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=match) as error:
        load_elmo_model(where)
    assert "\n" not in str(error.value)
    if where != "no-weights":
        with pytest.raises(ValueError, match=match):
            load_elmo_tokenizer(where)


@pytest.mark.slow
def test_library_modules_do_not_import_the_embed_command():
    code = (
        "import sys, modeling_elmo.embedding.inference, modeling_elmo.embedding.features; "
        "print(sorted(m for m in sys.modules if m.startswith('modeling_elmo.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    ).stdout
    modules = json.loads(out.replace("'", '"'))
    assert "modeling_elmo.embedding.inference" in modules and "modeling_elmo.embedding.features" in modules
    assert "modeling_elmo.embedding.embed" not in modules, modules


# ---------------------------------------------------------------------------------------------------- embedder


def test_make_batches_sorts_longest_first_skips_empty_and_caps_tokens():
    lengths = [3, 0, 7, 1, 5, 5, 2]
    assert make_batches(lengths, batch_size=2) == [[2, 4], [5, 0], [6, 3]]
    assert make_batches(lengths, batch_size=10, max_batch_tokens=10) == [[2], [4, 5], [0, 6, 3]]
    assert make_batches([12], batch_size=4, max_batch_tokens=5) == [[0]]  # too long alone: still one batch


SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    [],
    ["Hi"],
    ["naïve", "café", "☃"],
    ["A", "much", "longer", "sentence", ",", "with", "punctuation", "and", "more", "words"],
    ["end"],
]


def test_embed_sentences_equals_the_model_run_one_sentence_at_a_time(tmp_path):
    saved = save(tmp_path / "m")  # its config's form, the package's kernels, as the embedder runs it
    embedder = ElmoEmbedder.from_pretrained(tmp_path / "m")
    got = embedder.embed_sentences(SENTENCES, batch_size=2, show_progress=False)
    assert len(got) == len(SENTENCES)
    for words, layers in zip(SENTENCES, got, strict=False):
        assert layers.dtype == np.float32 and layers.shape == (3, len(words), 16)
        if words:  # batched and padded with other sentences: another kernel path than one sentence alone
            assert_same_numbers(layers, direct_layers(saved, words), what=" ".join(words))


def test_kept_word_vectors_give_the_numbers_of_the_model_and_stay_within_their_bound(tmp_path, monkeypatch):
    """Each distinct word goes through the character encoder once (`ElmoEmbedder.token_vectors`); the layers are
    those of the model run on the character ids, and at most ``max_cached_words`` vectors are kept."""
    save(tmp_path / "m")
    embedder = ElmoEmbedder.from_pretrained(tmp_path / "m")
    encoded_words = []
    encode = embedder.model.char_encoder.forward

    def spy(ids, *word_ids):  # the embedder's calls (the model's own, for the sentence boundaries, pass word ids)
        if not word_ids:
            encoded_words.append(len(ids))
        return encode(ids, *word_ids)

    monkeypatch.setattr(embedder.model.char_encoder, "forward", spy)
    sentences = [s for s in SENTENCES if s] * 3  # every word again in later batches
    got = embedder.embed_sentences(sentences, batch_size=2, show_progress=False)
    distinct = {word for sentence in sentences for word in sentence}
    assert sum(encoded_words) == len(distinct) == len(embedder.word_vectors)  # each word encoded once, then kept
    embedder.max_cached_words = 0  # the model's own forward on the character ids
    expected = embedder.embed_sentences(sentences, batch_size=2, show_progress=False)
    for words, layers, want in zip(sentences, got, expected, strict=True):
        assert_same_numbers(layers, want, what=" ".join(words))
    bounded = ElmoEmbedder.from_pretrained(tmp_path / "m")
    bounded.max_cached_words = 3
    again = bounded.embed_sentences(sentences, batch_size=2, show_progress=False)
    assert len(bounded.word_vectors) == 3
    for words, layers, want in zip(sentences, again, expected, strict=True):
        assert_same_numbers(layers, want, what=" ".join(words))


def test_a_model_with_a_word_input_keeps_no_word_vectors(tmp_path):
    model = save(tmp_path / "m", word_input_vocab_size=10, word_input_dim=4)
    embedder = ElmoEmbedder(model, ElmoTokenizer())
    assert embedder.max_cached_words == 0


def test_embed_batch_refuses_an_empty_sentence(tmp_path):
    embedder = ElmoEmbedder(ElmoModel(ElmoConfig(**TINY)), ElmoTokenizer())
    with pytest.raises(ValueError, match="empty sentence"):
        embedder.embed_batch([["a"], []])


def test_non_finite_vectors_are_refused_where_they_leave_the_model_not_in_its_forward(tmp_path, monkeypatch):
    """The forward pass returns what it computed (it makes the host wait for no check); the embedder, the feature
    cache and `elmo embed`, where the vectors leave the device, refuse NaN with one line. The weights are finite
    (so no check of the weights at load time catches them) but overflow float32 in the token projection."""
    import datasets

    from modeling_elmo.embedding.embed import main as embed_main
    from modeling_elmo.embedding.features import add_elmo_features

    model = save(tmp_path / "m")
    with torch.no_grad():  # finite weights whose products overflow: filter outputs near 1e38, times 1e38
        for convolution in model.char_encoder.convolutions:
            convolution.bias.fill_(1e38)
        model.char_encoder.projection.weight.fill_(1e38)
    model.save_pretrained(tmp_path / "m")
    enc = ElmoTokenizer()([["a", "b"]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.isnan(model(**enc).last_hidden_state).any()  # returned, not checked in the forward
    with pytest.raises(FloatingPointError, match="NaN or infinite vectors"):
        ElmoEmbedder(model, ElmoTokenizer()).embed_sentences([["a", "b"]])
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FloatingPointError, match="NaN or infinite vectors"):
        add_elmo_features(
            datasets.Dataset.from_dict({"words": [["a", "b"]]}), model, ElmoTokenizer(), words_column="words"
        )
    (tmp_path / "in.txt").write_text("a b\n")
    with pytest.raises(SystemExit, match=r"^elmo embed: error: the ELMo model produced NaN or infinite vectors"):
        embed_main(
            [
                str(tmp_path / "in.txt"),
                str(tmp_path / "out.hdf5"),
                "--model",
                str(tmp_path / "m"),
                "--top",
                "--no-progress",
            ]
        )


def test_embedder_refuses_bf16_on_a_cpu_without_it_and_float16_on_any_cpu(monkeypatch):
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.raises(ValueError, match=r"^ElmoEmbedder: bfloat16 needs .*; cpu here does not: use float32\.$"):
        ElmoEmbedder(ElmoModel(ElmoConfig(**TINY)), ElmoTokenizer(), device="cpu", dtype=torch.bfloat16)
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"avx512_bf16"}))
    with pytest.raises(ValueError, match=r"^ElmoEmbedder: float16 needs a GPU"):
        ElmoEmbedder(ElmoModel(ElmoConfig(**TINY)), ElmoTokenizer(), device="cpu", dtype=torch.float16)


def test_embedder_runs_bf16_on_a_cpu_that_has_it_close_to_fp32(monkeypatch):
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"amx_bf16"}))
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY))
    sentences = [["a", "few", "words"], ["and", "some", "more", "words", "here"]]
    exact = ElmoEmbedder(copy.deepcopy(model), ElmoTokenizer()).embed_sentences(sentences, show_progress=False)
    embedder = ElmoEmbedder(model, ElmoTokenizer(), device="cpu", dtype=torch.bfloat16)
    assert next(embedder.model.parameters()).dtype == torch.bfloat16
    approximate = embedder.embed_sentences(sentences, show_progress=False)
    for a, e in zip(approximate, exact, strict=True):
        assert a.dtype == np.float32 and 0 < np.abs(a - e).max() < 0.05 * e.std()


def test_load_elmo_model_refuses_bf16_on_a_cpu_without_it_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset())
    with pytest.raises(ValueError, match=r"^load_elmo_model\('.*', dtype=torch.bfloat16\): bfloat16 needs") as error:
        load_elmo_model(tmp_path / "anything", dtype=torch.bfloat16)
    assert "\n" not in str(error.value)


def test_embed_sentences_shows_a_progress_bar_unless_asked_for_silence(capsys):
    embedder = ElmoEmbedder(ElmoModel(ElmoConfig(**TINY)), ElmoTokenizer())
    sentences = [["w"] * (1 + i % 4) for i in range(12)]
    embedder.embed_sentences(sentences, batch_size=4, show_progress=False)
    assert capsys.readouterr().err == ""
    embedder.embed_sentences(sentences, batch_size=4)
    err = capsys.readouterr().err
    assert "ELMo" in err and "12/12" in err


def test_the_package_loader_runs_the_recurrence_the_saved_config_names(tmp_path):
    """Models the package loads run the form their ``config.use_packed_kernels`` says: the package's kernels by
    default, the shipped public form where the folder says false (the shipped files alone run the public form:
    tests/model/test_export.py)."""
    from modeling_elmo import ElmoModel
    from modeling_elmo import modeling_elmo as modeling

    save(tmp_path / "m")
    x = torch.zeros(2, 3, 1, 16)
    for loaded in (load_elmo_model(tmp_path / "m"), ElmoModel.from_pretrained(tmp_path / "m")):
        assert loaded.encoder.recurrence is None and loaded.encoder.recurrence_for(x, True) is modeling.packed_lstm
    save(tmp_path / "off", use_packed_kernels=False)
    for loaded in (load_elmo_model(tmp_path / "off"), ElmoEmbedder.from_pretrained(tmp_path / "off").model):
        assert loaded.config.use_packed_kernels is False
        assert loaded.encoder.recurrence_for(x, True) is modeling.stacked_lstm
