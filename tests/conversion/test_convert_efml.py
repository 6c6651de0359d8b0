"""Converting ELMoForManyLangs models (`elmo convert --efml`, `--release efml-LANG`) on small synthetic models in
the exact published layout (`efml_fixtures`): legacy pickles with CUDA storages, ``.dic`` files with multi-byte,
combining and whitespace characters, a zip, served by the local HTTP server for the download path."""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import json
import os
import re
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from efml_fixtures import CHARACTERS, WORDS, efml_weights, legacy_cuda_bytes, write_efml_model, zip_folder  # noqa: E402
from release_server import server  # noqa: E402,F401  (the fixture)
from support import assert_same_numbers, in_the_public_form, run_without_package  # noqa: E402

from modeling_elmo import ElmoModel, ElmoTokenizer, cli  # noqa: E402
from modeling_elmo.conversion import convert_efml as ce  # noqa: E402
from modeling_elmo.conversion import download, efml_format, efml_releases  # noqa: E402
from modeling_elmo.conversion.efml_format import (  # noqa: E402
    check_tensor_storage,
    load_state_dict,
    pickle_references,
    read_dic,
    read_efml_model,
    safe_extract_zip,
)
from modeling_elmo.conversion.efml_reference import efml_forward, efml_inputs  # noqa: E402

SENTENCES = [["日本語", "abc", "Жы"], ["e\u0301", "ü", "unknownword", "ب"], ["ca"], ["日本", "ab", "d" * 60, "語", "ы"]]


@pytest.fixture(scope="module")
def efml_folder(tmp_path_factory) -> Path:
    return write_efml_model(tmp_path_factory.mktemp("efml") / "syn.model", seed=3)


@pytest.fixture(scope="module")
def converted(efml_folder, tmp_path_factory) -> Path:
    return ce.convert_efml(efml_folder, tmp_path_factory.mktemp("converted") / "out", language="de")


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _error_line(excinfo) -> str:
    message = str(excinfo.value.code)
    assert message.startswith("elmo convert: error: ") and "\n" not in message, message
    return message


# --------------------------------------------------------------------------------------------------- the format
def test_fixture_pickles_are_legacy_format_with_cuda_storages_and_load_on_the_cpu(efml_folder):
    data = (efml_folder / "encoder.pkl").read_bytes()
    assert not zipfile.is_zipfile(efml_folder / "encoder.pkl") and b"cuda:0" in data
    assert ("torch.cuda", "FloatStorage") in pickle_references(data)
    state = load_state_dict(efml_folder / "encoder.pkl")
    assert all(t.device.type == "cpu" and t.dtype == torch.float32 for t in state.values())
    assert torch.equal(
        state["forward_layer_0.state_projection.weight"], efml_weights(3)[1]["forward_layer_0.state_projection.weight"]
    )


def test_dic_reader_reads_a_whitespace_character_as_ideographic_space_and_keeps_combining_characters(efml_folder):
    chars = read_dic(efml_folder / "char.dic")
    assert chars.lines == len(CHARACTERS) + 6
    assert chars.ids["\u3000"] == CHARACTERS.index(" ") and " " not in chars.ids
    assert chars.ids["\u0301"] == CHARACTERS.index("\u0301") and chars.ids["語"] == CHARACTERS.index("語")
    assert read_dic(efml_folder / "word.dic").ids["e\u0301"] == 4 + WORDS.index("e\u0301")


def test_reference_inputs_put_eow_first_and_bow_last_as_the_original_does(efml_folder):
    ids = read_dic(efml_folder / "char.dic").ids
    chars, words = efml_inputs(["ab", "x" * 70], ids, {"<oov>": 0, "<bos>": 1, "<eos>": 2, "ab": 7}, 50)
    assert chars[1, :4].tolist() == [ids["<eow>"], ids["a"], ids["b"], ids["<bow>"]]
    assert chars[0, :3].tolist() == [ids["<eow>"], ids["<bos>"], ids["<bow>"]] and chars[0, 3] == ids["<pad>"]
    assert chars[2, 49] == ids["<bow>"] and (chars[2, 1:49] == ids["<oov>"]).all()  # cut to 48 characters
    assert words.tolist() == [1, 7, 0, 2]


# --------------------------------------------------------------------------------------------------- conversion
def test_conversion_matches_the_float64_reference_on_every_layer(converted):
    metadata = json.loads((converted / "conversion_metadata.json").read_text(encoding="utf-8"))
    differences = metadata["validation_max_abs_difference_per_layer"]
    assert len(differences) == 3 and max(differences) <= 1e-5
    assert metadata["language"] == "de" and metadata["language_name"] == "German" and metadata["license"] == "unknown"
    assert metadata["architecture"].startswith("cnn_50_100_512_4096_sample.json")


def test_saved_model_in_float32_matches_the_reference_on_new_sentences(converted, efml_folder):
    efml = read_efml_model(efml_folder)
    model = ElmoModel.from_pretrained(converted).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted)
    encoding = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    assert "word_input_ids" in encoding and tokenizer.characters[CHARACTERS.index(" ")] == "\u3000"
    with torch.no_grad():
        layers = model(**encoding, output_hidden_states=True).hidden_states
    for row, sentence in enumerate(SENTENCES):
        expected = efml_forward(
            sentence, efml.chars.ids, efml.words.ids, efml.token_embedder, efml.encoder, efml.architecture
        )
        for index in range(3):
            assert_same_numbers(
                layers[index][row, : len(sentence)], expected[index], rtol=1e-5, what=f"sentence {row} layer {index}"
            )


def test_literal_bos_and_eos_are_boundary_tokens_and_a_literal_s_is_a_word_as_in_the_original(converted, efml_folder):
    """ELMoForManyLangs reads a literal ``<bos>``/``<eos>`` in a sentence as its boundary token (characters and word
    vector) and ``<S>`` as an ordinary word; the converted model computes the same."""
    efml = read_efml_model(efml_folder)
    model = ElmoModel.from_pretrained(converted).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted)
    sentence = ["abc", "<bos>", "Жы", "<S>", "<eos>", "ca"]
    with torch.no_grad():
        layers = model(**tokenizer(" ".join(sentence), return_tensors="pt"), output_hidden_states=True).hidden_states
    expected = efml_forward(
        sentence, efml.chars.ids, efml.words.ids, efml.token_embedder, efml.encoder, efml.architecture
    )
    for index in range(3):
        assert_same_numbers(layers[index][0], expected[index], rtol=1e-5, what=f"layer {index}")


def test_parity_check_catches_a_wrong_layout(efml_folder, tmp_path, monkeypatch):
    right = ce.efml_state_dict

    def highway_gate_not_negated(efml, config):
        state = right(efml, config)
        state["char_encoder.highways.0.gate.weight"] = -state["char_encoder.highways.0.gate.weight"]
        state["char_encoder.highways.0.gate.bias"] = -state["char_encoder.highways.0.gate.bias"]
        return state

    monkeypatch.setattr(ce, "efml_state_dict", highway_gate_not_negated)
    with pytest.raises(ValueError, match="differs from the original computation: layer 0"):
        ce.convert_efml(efml_folder, tmp_path / "out")
    assert _listing(tmp_path) == []


def test_zip_converts_like_the_folder(efml_folder, converted, tmp_path):
    archive = zip_folder(efml_folder, tmp_path / "999.zip", inside="syn.model")
    out = ce.convert_efml(archive, tmp_path / "from-zip")
    for name in ("model.safetensors", "char_vocab.json", "word_input_vocab.json"):
        assert (out / name).read_bytes() == (converted / name).read_bytes(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["999.zip", "from-zip"]


@pytest.mark.slow
def test_converted_folder_loads_through_the_auto_classes_without_the_package(converted, tmp_path):
    model = in_the_public_form(ElmoModel.from_pretrained(converted).eval())  # the form the shipped files run alone
    tokenizer = ElmoTokenizer.from_pretrained(converted)
    encoding = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**encoding).last_hidden_state
    got = run_without_package(
        """
        import json, sys
        import numpy as np, torch
        from transformers import AutoModel, AutoTokenizer, pipeline
        folder, sentences = sys.argv[1], json.loads(sys.argv[2])
        tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        enc = tok(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            features = model(**enc).last_hidden_state
        extractor = pipeline("feature-extraction", model=folder, trust_remote_code=True)
        print(json.dumps({"module": type(tok).__module__, "inputs": sorted(enc.keys()), "features": features.tolist(),
                          "pipeline": np.array(extractor(" ".join(sentences[0])))[0].tolist()}))
        """,
        converted,
        json.dumps(SENTENCES, ensure_ascii=False),
        workdir=tmp_path / "fresh",
    )
    assert got["module"].startswith("transformers_modules")
    assert got["inputs"] == ["attention_mask", "input_ids", "word_input_ids"]
    assert_same_numbers(got["features"], expected, what="features without the package")
    assert_same_numbers(got["pipeline"], expected[0, : len(SENTENCES[0])], what="feature-extraction pipeline")


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_same_sentence_gives_the_same_vectors_in_any_batch_and_order(converted, dtype, rtol):
    # In float64 the vectors agree to 1e-12: only rounding differs between batch shapes (in float32, BLAS sums in
    # an order that depends on the shape, and the LSTM carries those last-bit differences a little further).
    model = ElmoModel.from_pretrained(converted).to(dtype).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted)

    def vectors(batch):
        encoding = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            layers = model(**encoding, output_hidden_states=True).hidden_states
        return {tuple(s): torch.stack(layers)[:, row, : len(s)] for row, s in enumerate(batch)}

    alone = {tuple(s): vectors([s])[tuple(s)] for s in SENTENCES}
    for batch in (SENTENCES, SENTENCES[::-1], [SENTENCES[3], SENTENCES[0]], SENTENCES + SENTENCES[:2]):
        for sentence, got in vectors(batch).items():
            assert_same_numbers(got, alone[sentence], rtol=rtol, what=f"{sentence} in a batch of {len(batch)}")
    again = vectors(SENTENCES)  # a stateless model: calling twice changes nothing
    for sentence in SENTENCES:
        assert_same_numbers(again[tuple(sentence)], vectors(SENTENCES)[tuple(sentence)], rtol=0.0)


def test_lstm_state_still_gives_the_stateful_behaviour_when_asked(converted):
    model = ElmoModel.from_pretrained(converted).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted)
    encoding = tokenizer(SENTENCES[:2], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        first = model(**encoding, return_lstm_state=True)
        carried = model(**encoding, lstm_state=first.lstm_state).last_hidden_state
    assert not torch.allclose(carried, first.last_hidden_state)


# --------------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "foreign, named",
    [(os.system, "system"), (argparse.Namespace(a=1), "argparse.Namespace")],
    ids=["a function", "a class"],
)
def test_pickle_referencing_anything_but_tensors_is_refused_naming_the_file_before_loading(
    efml_folder, tmp_path, monkeypatch, foreign, named
):
    bad = tmp_path / "bad.model"
    bad.mkdir()
    for path in efml_folder.iterdir():
        (bad / path.name).write_bytes(path.read_bytes())
    import collections

    (bad / "token_embedder.pkl").write_bytes(
        legacy_cuda_bytes(collections.OrderedDict(weight=torch.zeros(2), x=foreign))
    )
    loads = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a))  # the refusal comes before any unpickling
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["convert", "--efml", str(bad), "--output", str(tmp_path / "out")])
    message = _error_line(excinfo)
    assert "token_embedder.pkl references" in message and named in message
    assert not (tmp_path / "out").exists() and loads == []


def test_zip_with_a_path_outside_its_folder_is_refused_and_nothing_is_unpacked(efml_folder, tmp_path):
    archive = zip_folder(efml_folder, tmp_path / "evil.zip")
    with zipfile.ZipFile(archive, "a") as handle:
        handle.writestr("../escaped.txt", "outside")
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["convert", "--efml", str(archive), "--output", str(tmp_path / "out")])
    assert "'../escaped.txt', a path outside the folder" in _error_line(excinfo)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.zip"]
    with pytest.raises(ValueError, match="outside"):
        safe_extract_zip(archive, tmp_path / "target")
    assert not (tmp_path / "target").exists() and not (tmp_path / "escaped.txt").exists()


def test_vocabulary_that_does_not_match_its_table_is_refused(efml_folder, tmp_path):
    bad = tmp_path / "bad.model"
    bad.mkdir()
    for path in efml_folder.iterdir():
        (bad / path.name).write_bytes(path.read_bytes())
    lines = (bad / "word.dic").read_text(encoding="utf-8").splitlines()
    (bad / "word.dic").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"word.dic has 12 entries but the word table of the weights has 13 rows"):
        ce.convert_efml(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------------- releases
def test_release_table_lists_the_44_languages_with_their_nlpl_ids():
    table = efml_releases.EFML_RELEASES
    assert len(table) == 44 and sorted(r.repository_id for r in table.values()) == list(range(136, 180))
    assert (
        table["efml-zh"].repository_id == 179
        and table["efml-en"].url() == "http://vectors.nlpl.eu/repository/11/144.zip"
    )
    assert table["efml-nl"].repository_id == 164 and table["efml-nb"].repository_id == 165  # as the README has them


@pytest.fixture
def efml_served(server, efml_folder, tmp_path_factory, monkeypatch):  # noqa: F811
    """The server holding the synthetic model as the German release's zip (its size in the table)."""
    data = zip_folder(efml_folder, tmp_path_factory.mktemp("zip") / "142.zip").read_bytes()
    release = dataclasses.replace(efml_releases.EFML_RELEASES["efml-de"], size=len(data))
    monkeypatch.setitem(efml_releases.EFML_RELEASES, "efml-de", release)
    server.files["/repository/11/142.zip"] = data
    return server.url.replace("/models/elmo", "/repository/11"), "/repository/11/142.zip", data


def _convert_release(base_url, tmp_path, output="out"):
    return cli.main(
        [
            "convert",
            "--release",
            "efml-de",
            "--base-url",
            base_url,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output",
            str(tmp_path / output),
        ]
    )


def test_release_downloads_converts_and_names_language_and_source(efml_served, converted, tmp_path, capsys):
    base_url, path, _ = efml_served
    assert _convert_release(base_url, tmp_path) == 0
    out = tmp_path / "out"
    assert (out / "model.safetensors").read_bytes() == (converted / "model.safetensors").read_bytes()
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "ELMo for German" in card and "repository, model 142" in card and "none is stated" in card
    assert "CoNLL 2018 shared task" in card
    assert f"zip: {base_url}/142.zip" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "cache" / "efml-de").iterdir()) == ["142.zip", "142.zip.source"]


@pytest.mark.parametrize("cached", [False, True], ids=["downloaded", "found in the cache"])
def test_a_cache_folder_swapped_for_a_link_to_another_zip_once_fetched_still_converts_the_checked_zip(
    efml_served, converted, tmp_path, monkeypatch, cached
):
    """X8: the zip is read after the cache's lock is released. Right after `fetch_efml_release` returns, the folder is
    swapped for a link to a folder holding another model's valid zip under the same name: the conversion unpacks
    the zip that was checked, held open since."""
    import hashlib

    base_url, _, data = efml_served
    folder = tmp_path / "cache" / "efml-de"
    impostor = tmp_path / "impostor"
    impostor.mkdir()
    zip_folder(write_efml_model(tmp_path / "other.model", seed=4), impostor / "142.zip")
    if cached:
        efml_releases.fetch_efml_release("efml-de", tmp_path / "cache", base_url=base_url, progress=False)
    real_fetch = efml_releases.fetch_efml_release

    def fetch_then_swap(*args, **kwargs):
        fetched = real_fetch(*args, **kwargs)
        folder.rename(tmp_path / "moved")
        folder.symlink_to(impostor, target_is_directory=True)
        return fetched

    monkeypatch.setattr(efml_releases, "fetch_efml_release", fetch_then_swap)
    assert _convert_release(base_url, tmp_path) == 0
    out = tmp_path / "out"
    assert folder.is_symlink()
    assert (out / "model.safetensors").read_bytes() == (converted / "model.safetensors").read_bytes()
    archive = json.loads((out / "conversion_metadata.json").read_text(encoding="utf-8"))["files"][0]
    assert archive["name"] == "142.zip" and archive["sha256"] == hashlib.sha256(data).hexdigest()
    assert archive["bytes"] == len(data)


def test_interrupted_download_keeps_its_part_and_the_next_run_resumes(efml_served, server, tmp_path):  # noqa: F811
    base_url, path, data = efml_served
    assert len(data) > 9000
    server.drops[path] = [3000, 3000, 3000]
    with pytest.raises(download.DownloadError, match="3 attempts.*kept in"):
        efml_releases.fetch_efml_release("efml-de", tmp_path / "cache", base_url=base_url, retry_wait=0, progress=False)
    cache = tmp_path / "cache" / "efml-de"
    assert "142.zip.part" in [p.name for p in cache.iterdir()] and not (cache / "142.zip").exists()
    server.requests.clear()
    archive, _ = efml_releases.fetch_efml_release("efml-de", tmp_path / "cache", base_url=base_url, progress=False)
    assert archive.read_bytes() == data
    assert server.requests_for(path) == ["bytes=9000-"]  # the three cut attempts kept 3 x 3000 bytes


def test_wrong_size_is_refused_before_the_body_and_nothing_is_kept(efml_served, server, tmp_path, monkeypatch):  # noqa: F811
    base_url, path, data = efml_served
    server.files[path] = data + b"extra bytes"
    with pytest.raises(SystemExit) as excinfo:
        _convert_release(base_url, tmp_path)
    assert f"where the published zip has {len(data):,}" in _error_line(excinfo)
    assert not (tmp_path / "out").exists() and list((tmp_path / "cache" / "efml-de").iterdir()) == []


def test_unknown_efml_language_is_one_clear_error(tmp_path):
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["convert", "--release", "efml-xx", "--output", str(tmp_path / "out")])
    assert "unknown release 'efml-xx'" in _error_line(excinfo) and "zh" in str(excinfo.value.code)
    assert not (tmp_path / "out").exists()


def test_unicode_tokenizer_and_word_input_are_off_by_default():
    tokenizer = ElmoTokenizer()
    assert tokenizer.char_vocabulary == "bytes" and tokenizer.model_input_names == ["input_ids", "attention_mask"]
    model = ElmoModel(ce.ElmoConfig(projection_dim=8, cell_size=16, char_cnn_filters=[[1, 4]], num_highway_layers=1))
    assert model.char_encoder.word_embeddings is None and model.config.num_characters == 262
    assert np.array_equal(tokenizer([["x"]], is_split_into_words=True)["input_ids"][0][0][:3], [259, 121, 260])


# --------------------------------------------------------------------------------------------------- the tools
def test_embed_command_writes_the_original_computation_of_each_line(converted, efml_folder, tmp_path):
    import h5py

    (tmp_path / "in.txt").write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n", encoding="utf-8")
    assert (
        cli.main(
            [
                "embed",
                str(tmp_path / "in.txt"),
                str(tmp_path / "out.h5"),
                "--model",
                str(converted),
                "--all",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    efml = read_efml_model(efml_folder)
    with h5py.File(tmp_path / "out.h5", "r") as h5:
        for index, sentence in enumerate(SENTENCES):
            expected = efml_forward(
                sentence, efml.chars.ids, efml.words.ids, efml.token_embedder, efml.encoder, efml.architecture
            )
            assert_same_numbers(h5[str(index)][()], expected, rtol=1e-5, what=f"line {index}")


def test_evaluate_runs_the_wsd_probe_on_the_converted_model(converted, tmp_path):
    from modeling_elmo.evaluation import main as evaluate_main

    occurrences = [
        (["日本", "abc", "Жы"], 0, "A"),
        (["日本", "ab"], 0, "A"),
        (["ca", "日本"], 1, "B"),
        (["ü", "日本", "ca"], 1, "B"),
        (["abc", "ü"], 1, "C"),
        (["ü", "Жы"], 0, "D"),
    ]
    lines = [
        json.dumps({"tokens": t, "index": i, "word": t[i], "sense": s}, ensure_ascii=False) for t, i, s in occurrences
    ]
    (tmp_path / "wsd.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert (
        evaluate_main(
            [
                str(converted),
                "--task",
                "wsd-probe",
                "--wsd-file",
                str(tmp_path / "wsd.jsonl"),
                "--output-dir",
                str(tmp_path / "eval"),
                "--no-progress",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    results = json.loads((tmp_path / "eval" / "eval_results.json").read_text(encoding="utf-8"))
    scores = [r for r in results["scores"] if r["task"] == "wsd-probe" and r["metric"] == "accuracy"]
    assert {r["representation"] for r in scores} >= {"layer 0", "layer 1", "layer 2"}
    assert all(0.0 <= r["value"] <= 1.0 and r["examples"] > 0 for r in scores)


@pytest.mark.slow
def test_trainer_fine_tunes_a_tagging_head_on_the_converted_model(converted, tmp_path):
    from datasets import Dataset
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    from modeling_elmo import ElmoForTokenClassification

    tokenizer = ElmoTokenizer.from_pretrained(converted)
    base = ElmoModel.from_pretrained(converted)
    config = base.config.__class__.from_pretrained(converted, num_labels=2, freeze_elmo=False, classifier_dropout=0.0)
    torch.manual_seed(0)
    model = ElmoForTokenClassification(config)
    model.elmo.load_state_dict(base.state_dict())
    sentences = SENTENCES * 4
    labels = [[int(w in WORDS) for w in s] for s in sentences]  # tag the words of the word list

    def encode(batch):
        encoded = tokenizer(batch["tokens"], is_split_into_words=True)
        return {**encoded, "labels": batch["tags"]}

    data = Dataset.from_dict({"tokens": sentences, "tags": labels}).map(
        encode, batched=True, remove_columns=["tokens", "tags"]
    )
    assert "word_input_ids" in data.column_names
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_train_epochs=2,
        learning_rate=1e-2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    result = trainer.train()
    assert np.isfinite(result.training_loss)
    assert not torch.equal(model.elmo.char_encoder.word_embeddings.weight, base.char_encoder.word_embeddings.weight)
    trainer.save_model(str(tmp_path / "tagger"))
    again = ElmoForTokenClassification.from_pretrained(tmp_path / "tagger").eval()
    encoding = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(again(**encoding).logits, model.eval()(**encoding).logits, rtol=1e-5, atol=1e-6)


def test_push_writes_a_card_naming_the_language_the_source_and_no_licence(converted, tmp_path):
    import shutil

    folder = tmp_path / "elmo-efml-de"
    shutil.copytree(converted, folder)
    assert cli.main(["push", str(folder), "--repo-id", "me/elmo-efml-de", "--dry-run"]) == 0
    card = (tmp_path / "elmo-efml-de-hub" / "README.md").read_text(encoding="utf-8")
    header = card.split("---")[1]
    assert "license: unknown" in header and "- de" in header and "apache" not in header
    assert "ELMoForManyLangs model" in card and "CoNLL 2018 shared task" in card and "none is stated" in card
    assert "UTF-8 bytes" not in card and "1B Word Benchmark" not in card
    for name in ("char_vocab.json", "word_input_vocab.json", "model.safetensors"):
        assert (tmp_path / "elmo-efml-de-hub" / name).is_file(), name


def test_hub_mirror_serves_the_zip_when_the_repository_fails(efml_served, server, tmp_path, monkeypatch):  # noqa: F811
    import huggingface_hub

    base_url, path, data = efml_served
    server.status[path] = 404
    calls = []

    def from_mirror(repo_id, filename, local_dir, **kwargs):
        calls.append((repo_id, filename))
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        (Path(local_dir) / filename).write_bytes(data)
        return str(Path(local_dir) / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", from_mirror)
    archive, where = efml_releases.fetch_efml_release(
        "efml-de", tmp_path / "cache", base_url=base_url, mirror="someone/efml-zips", progress=False
    )
    assert calls == [("someone/efml-zips", "142.zip")] and where == "hf://someone/efml-zips/142.zip"
    assert archive.read_bytes() == data
    assert sorted(p.name for p in archive.parent.iterdir()) == ["142.zip", "142.zip.source"]


def test_word_embedding_input_is_initialised_with_rows_of_about_unit_norm():
    config = ce.ElmoConfig(
        projection_dim=8,
        cell_size=16,
        char_cnn_filters=[[1, 4]],
        num_highway_layers=1,
        word_input_vocab_size=4000,
        word_input_dim=50,
    )
    torch.manual_seed(0)
    table = ElmoModel(config).char_encoder.word_embeddings.weight.detach()
    assert abs(float(table.std()) - 50**-0.5) < 0.01 and abs(float(table.norm(dim=1).mean()) - 1.0) < 0.05
    assert config.token_features_size == 50 + 4  # the projection reads [word vector; character features]


# --------------------------------------------------------------------------------------------------- hostile files
def _copy_model(efml_folder: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for path in efml_folder.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def _convert_line(source: Path, output: Path, *extra: str) -> str:
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["convert", "--efml", str(source), "--output", str(output), *extra])
    message = _error_line(excinfo)
    assert len(message) < 500, message
    assert not output.exists()
    return message


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_non_finite_source_tensor_is_refused_naming_the_file_and_the_tensor(efml_folder, tmp_path, value):
    bad = _copy_model(efml_folder, tmp_path / "bad.model")
    te, en = efml_weights(seed=3)
    en["backward_layer_1.state_linearity.weight"][2, 3] = value
    (bad / "encoder.pkl").write_bytes(legacy_cuda_bytes(en))
    message = _convert_line(bad, tmp_path / "out")
    assert (
        "encoder.pkl: tensor 'backward_layer_1.state_linearity.weight' holds 1 NaN or infinite value(s)" in message
    ), message


def test_parity_check_fails_when_the_converted_model_computes_nan(converted, efml_folder):
    efml = read_efml_model(efml_folder)
    model = ElmoModel.from_pretrained(converted).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted)
    sentences = ce.validation_sentences(efml)
    assert max(ce.validate_efml_conversion(model, tokenizer, efml, sentences)) <= ce.EFML_ATOL
    with torch.no_grad():
        model.encoder.backward_layers[1].input_transform.bias[0] = float(
            "nan"
        )  # the last layer computes NaN, the others do not
    with pytest.raises(ValueError, match=r"differs from the original computation: layer 2 by nan"):
        ce.validate_efml_conversion(model, tokenizer, efml, sentences)


def test_stride_zero_views_declaring_huge_layers_are_refused_before_any_model_is_built(
    efml_folder, tmp_path, monkeypatch
):
    """9 KB of pickles whose encoder tensors are views of one stored value declaring 16384-wide LSTMs (an
    8.6e9-parameter model) are refused from the bytes the file stores, naming the file and the tensor."""
    bad = _copy_model(efml_folder, tmp_path / "bad.model")
    _, en = efml_weights(seed=3)
    wide, width = collections.OrderedDict(), 16384
    for name, tensor in en.items():
        shape = {
            "input_linearity.weight": (4 * width, width),
            "state_linearity.weight": (4 * width, width),
            "state_linearity.bias": (4 * width,),
            "state_projection.weight": (width, width),
        }[name.split(".", 1)[1]]
        wide[name] = torch.zeros(1).expand(*shape)
    (bad / "encoder.pkl").write_bytes(legacy_cuda_bytes(wide))
    assert (bad / "encoder.pkl").stat().st_size < 20_000
    built = []
    monkeypatch.setattr(ce, "efml_config", lambda *a: built.append(a))
    message = _convert_line(bad, tmp_path / "out")
    assert (
        "encoder.pkl: tensor 'forward_layer_0.input_linearity.weight' of shape (65536, 16384) is a stride-0 view"
        in message
    ), message
    assert built == []


def test_overlapping_and_shared_views_declare_more_than_the_file_stores_and_are_refused():
    storage = torch.arange(10.0)
    overlapping = storage.as_strided((4, 4), (1, 1))  # 16 values read from 7 stored ones
    with pytest.raises(ValueError, match=r"^x.pkl: tensor 'w' of shape \(4, 4\) is a view whose elements overlap"):
        check_tensor_storage({"w": overlapping}, "x.pkl")
    with pytest.raises(ValueError, match=r"^x.pkl: its tensors declare 80 bytes of values but the file stores 40"):
        check_tensor_storage({"a": storage, "b": storage.view(2, 5)}, "x.pkl")  # two tensors, one storage
    check_tensor_storage({"a": storage, "t": torch.rand(3, 4).t(), "empty": torch.zeros(0, 5)}, "x.pkl")  # plain


@pytest.mark.parametrize(
    "key, value, shown",
    [
        ("encoder.cell_clip", [1], '"encoder"."cell_clip" must be a number >= 0 (0: no clipping) or null, got [1]'),
        ("token_embedder", "cnn", '"token_embedder" must be an object, got "cnn"'),
        (
            "token_embedder.max_characters_per_token",
            "abc",
            '"token_embedder"."max_characters_per_token" must be an integer from 3 to 1024, got "abc"',
        ),
        ("token_embedder.activation", 7, '"token_embedder"."activation" must be "relu" or "tanh", got 7'),
    ],
)
def test_a_wrongly_typed_architecture_value_is_one_line_naming_the_file_and_the_key(
    efml_folder, tmp_path, key, value, shown
):
    architecture = copy.deepcopy(efml_format.PUBLISHED_ARCHITECTURE)
    section, _, field = key.partition(".")
    if field:
        architecture[section][field] = value
    else:
        architecture[section] = value
    path = tmp_path / "arch.json"
    path.write_text(json.dumps(architecture))
    message = _convert_line(efml_folder, tmp_path / "out", "--architecture", str(path))
    assert message == f"elmo convert: error: architecture file {str(path)!r}: {shown}.", message


@pytest.mark.parametrize(
    "line, shown",
    [
        ("x\t²", "char.dic line 3 is not 'token<TAB>id' (the id a number): 'x\\t²'."),
        (
            "x\t" + "7" * 5000,
            "char.dic line 3 is not 'token<TAB>id' (the id a number): 'x\\t7777777777777777777777777777777"
            "777777777777777777777777777777777777777777777...",
        ),
        (
            "y" * 5_000_000 + "\t2",
            "char.dic line 3 lists 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"
            "yyyyyyyyyyyyyyyyy..., which is neither one character nor one of the symbols",
        ),
    ],
)
def test_a_bad_char_dic_line_is_one_short_line_naming_the_file_and_the_line(efml_folder, tmp_path, line, shown):
    bad = _copy_model(efml_folder, tmp_path / "bad.model")
    lines = (bad / "char.dic").read_text(encoding="utf-8").split("\n")
    lines[2] = line
    (bad / "char.dic").write_text("\n".join(lines), encoding="utf-8")
    message = _convert_line(bad, tmp_path / "out")
    assert message.startswith(f"elmo convert: error: {shown}"), message


@pytest.mark.parametrize("nesting", ["config.json", "architecture"])
def test_json_nested_200000_deep_is_one_line_naming_the_file(efml_folder, tmp_path, nesting):
    bad = _copy_model(efml_folder, tmp_path / "bad.model")
    deep = "[" * 200_000 + "]" * 200_000
    extra = []
    if nesting == "config.json":
        (bad / "config.json").write_text(deep)
        named = str(bad / "config.json")
    else:
        (tmp_path / "arch.json").write_text(deep)
        extra, named = ["--architecture", str(tmp_path / "arch.json")], str(tmp_path / "arch.json")
    message = _convert_line(bad, tmp_path / "out", *extra)
    assert f"file {named!r} is not valid JSON: maximum recursion depth exceeded" in message, message


def test_zip_members_written_with_permission_bits_only_convert(efml_folder, converted, tmp_path):
    archive = tmp_path / "written.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(efml_folder.iterdir()):
            handle.writestr(f"model/{path.name}", path.read_bytes())  # mode 0o600 << 16: no file type
    assert all(info.external_attr >> 16 == 0o600 for info in zipfile.ZipFile(archive).infolist())
    out = ce.convert_efml(archive, tmp_path / "out")
    assert_same_numbers(
        json.loads((out / "conversion_metadata.json").read_text())["num_parameters"],
        json.loads((converted / "conversion_metadata.json").read_text())["num_parameters"],
    )


def test_zip_member_that_is_a_link_is_refused(efml_folder, tmp_path):
    archive = zip_folder(efml_folder, tmp_path / "linked.zip")
    with zipfile.ZipFile(archive, "a") as handle:
        info = zipfile.ZipInfo("escape")
        info.external_attr = 0o120777 << 16  # a symbolic link
        handle.writestr(info, "/etc/passwd")
    message = _convert_line(archive, tmp_path / "out")
    assert "linked.zip holds 'escape', which is not a plain file or folder (a link?)" in message, message


def test_zip_member_inflating_far_beyond_its_compressed_size_is_refused_before_anything_is_written(
    efml_folder, tmp_path
):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(efml_folder.iterdir()):  # encoder.pkl: 64 MB of zeros in about 64 KB
            handle.writestr(
                f"model/{path.name}", b"\x80\x02" + bytes(64 << 20) if path.name == "encoder.pkl" else path.read_bytes()
            )
    assert archive.stat().st_size < 200_000
    message = _convert_line(archive, tmp_path / "out")
    assert "bomb.zip holds 'model/encoder.pkl', which inflates from " in message
    assert "to 67,108,866 bytes: no file of a model compresses so well (a zip bomb?); nothing was unpacked." in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.zip"]


def test_zip_weight_file_that_does_not_start_like_one_is_refused_at_its_first_block(efml_folder, tmp_path, monkeypatch):
    archive = tmp_path / "zeros.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as handle:  # stored: the ratio is 1
        for path in sorted(efml_folder.iterdir()):
            handle.writestr(
                f"model/{path.name}", bytes(3 << 20) if path.name == "token_embedder.pkl" else path.read_bytes()
            )
    read = []
    real_read = zipfile.ZipExtFile.read

    def counting_read(self, n=-1):
        data = real_read(self, n)
        if self.name.endswith("token_embedder.pkl"):
            read.append(len(data))
        return data

    monkeypatch.setattr(zipfile.ZipExtFile, "read", counting_read)
    with pytest.raises(ValueError) as error:
        safe_extract_zip(archive, tmp_path / "target")
    assert str(error.value) == (
        "zeros.zip holds 'model/token_embedder.pkl', which does not start like a PyTorch "
        "weight file (its first bytes are b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'); "
        "nothing was unpacked."
    )
    assert 0 < sum(read) <= 1 << 20  # one block of the member was read, none written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["zeros.zip"]


def test_zip_holding_two_models_is_reported_by_the_zip_name(efml_folder, tmp_path):
    archive = tmp_path / "two.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for inside in ("a", "b"):
            for path in sorted(efml_folder.iterdir()):
                handle.write(path, f"{inside}/{path.name}")
    message = _convert_line(archive, tmp_path / "out")
    assert message == (
        f"elmo convert: error: {str(archive)!r} is not an ELMoForManyLangs model: 2 folders hold an encoder.pkl."
    ), message
    assert "elmo-efml-" not in message


def test_a_zip_of_many_small_members_that_together_inflate_beyond_the_bound_is_refused_unpacked(efml_folder, tmp_path):
    """Issue 35, M6: 400 members of 1 MiB of zeros, each under the per-member bound, were unpacked (377 MB from a
    476 KB zip); the zip's total is bounded by the same ratio, before anything is written."""
    archive = zip_folder(efml_folder, tmp_path / "padded.zip")
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as handle:
        for number in range(40):
            handle.writestr(f"model/padding-{number}.txt", bytes(1 << 20))
    assert archive.stat().st_size < 600_000
    with pytest.raises(ValueError) as error:
        safe_extract_zip(archive, tmp_path / "target")
    assert re.fullmatch(
        r"padded\.zip inflates from [\d,]+ to [\d,]+ bytes in all: no model compresses so well \(a zip bomb\?\); "
        r"nothing was unpacked\.",
        str(error.value),
    ), error.value
    assert sorted(p.name for p in tmp_path.iterdir()) == ["padded.zip"]


def test_a_zip_whose_directory_overstates_its_members_compressed_sizes_is_bounded_by_its_own_size(
    efml_folder, tmp_path
):
    """Attacker pass on M6: the central directory may claim compressed sizes the archive does not hold (members
    sharing their data); the total is bounded by the archive's real size."""
    import struct

    archive = zip_folder(efml_folder, tmp_path / "claims.zip")
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as handle:
        for number in range(40):
            handle.writestr(f"model/padding-{number}.txt", bytes(1 << 20))
    data = bytearray(archive.read_bytes())
    start = 0
    while (start := data.find(b"PK\x01\x02", start)) >= 0:  # each central directory entry: claim 1 MiB compressed
        if data[start + 46 : start + 46 + 14] == b"model/padding-":
            struct.pack_into("<I", data, start + 20, 1 << 20)
        start += 4
    archive.write_bytes(bytes(data))
    claimed = sum(m.compress_size for m in zipfile.ZipFile(archive).infolist())
    assert claimed > 40 << 20 > 64 * archive.stat().st_size // 2
    with pytest.raises(ValueError, match=r"claims\.zip inflates from [\d,]+ to [\d,]+ bytes in all"):
        safe_extract_zip(archive, tmp_path / "target")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claims.zip"]
