"""Tests of `modeling_elmo.embedding.features`: cached ELMo features and their collator."""

from __future__ import annotations

import copy

import datasets
import numpy as np
import pytest
import torch

from modeling_elmo import (
    ElmoConfig,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
from modeling_elmo.embedding.features import ElmoFeatureCollator, add_elmo_features
from modeling_elmo.utils import capability

TINY = dict(
    projection_dim=8,
    cell_size=16,
    char_embedding_dim=4,
    char_cnn_filters=[[1, 4], [2, 8]],
    num_highway_layers=1,
    hidden_dropout_prob=0.0,
    classifier_dropout=0.0,
)
WORDS = ["good", "bad", "fine", "awful", "the", "a", "movie", "plot", "was", "is", "great", "poor", "!"]


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "ds-cache"))
    were_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    yield
    if were_enabled:  # process-wide: later test files see the bars as they were
        datasets.enable_progress_bars()


def make_dataset(n: int = 24, seed: int = 0) -> datasets.Dataset:
    rng = np.random.default_rng(seed)
    words, labels, tags = [], [], []
    for _ in range(n):
        sentence = [WORDS[j] for j in rng.integers(0, len(WORDS), size=rng.integers(1, 9))]
        words.append(sentence)
        positive = sum(w in ("good", "fine", "great") for w in sentence)
        labels.append(int(positive > sum(w in ("bad", "awful", "poor") for w in sentence)))
        tags.append([int(w in ("the", "a")) for w in sentence])
    return datasets.Dataset.from_dict(
        {"words": words, "text": [" ".join(w) for w in words], "label": labels, "tags": tags}
    )


def direct_layers(model: ElmoModel, words: list[str]) -> np.ndarray:
    with torch.no_grad():
        enc = ElmoTokenizer()([words], is_split_into_words=True, return_tensors="pt")
        out = model(**enc, output_hidden_states=True)
    return torch.stack(out.hidden_states, dim=1)[0].numpy()  # (L + 1, n, 2P)


def test_features_equal_the_model_run_one_sentence_at_a_time():
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    ds = make_dataset(7)
    cached = add_elmo_features(ds, model, ElmoTokenizer(), words_column="words", batch_size=3)
    assert cached.features["elmo_hidden_states"].shape == (None, 3, 16)
    for row in cached:
        expected = direct_layers(model, row["words"]).transpose(1, 0, 2)
        assert isinstance(row["elmo_hidden_states"], np.ndarray) and row["elmo_hidden_states"].dtype == np.float32
        np.testing.assert_allclose(row["elmo_hidden_states"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("native", [True, False], ids=["cpu-with-bf16", "cpu-without-bf16"])
def test_features_compute_in_bf16_where_the_cpu_has_it_and_refuse_in_one_line_elsewhere(monkeypatch, native):
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"amx_bf16"} if native else {"avx2"}))
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    ds = make_dataset(5)
    if not native:
        with pytest.raises(ValueError, match=r"^ElmoEmbedder: bfloat16 needs .*; cpu here does not: use float32\.$"):
            add_elmo_features(ds, model, ElmoTokenizer(), words_column="words", compute_dtype=torch.bfloat16)
        return
    cached = add_elmo_features(ds, model, ElmoTokenizer(), words_column="words", compute_dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.float32  # moved back after the run
    for row in cached:
        expected = direct_layers(model, row["words"]).transpose(1, 0, 2)
        assert 0 < np.abs(row["elmo_hidden_states"] - expected).max() < 0.05 * expected.std()


def test_features_from_a_saved_model_folder(tmp_path):
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    model.save_pretrained(tmp_path / "m")
    ElmoTokenizer().save_pretrained(tmp_path / "m")
    cached = add_elmo_features(make_dataset(3), str(tmp_path / "m"), words_column="words")
    for row in cached:
        np.testing.assert_allclose(
            row["elmo_hidden_states"], direct_layers(model, row["words"]).transpose(1, 0, 2), rtol=1e-5, atol=1e-6
        )


def test_text_column_float16_and_layer_selection():
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    ds = datasets.Dataset.from_dict({"text": ["Don't panic!", "", "ok"]})
    tok = ElmoTokenizer()
    cached = add_elmo_features(ds, model, tok, text_column="text", dtype="float16", layers=[2, 0])
    first = cached[0]["elmo_hidden_states"]
    words = tok.split_words("Don't panic!")
    assert cached.features["elmo_hidden_states"].dtype == "float16" and first.shape == (len(words), 2, 16)
    np.testing.assert_array_equal(first, first.astype(np.float16))  # stored in half precision
    np.testing.assert_allclose(first, direct_layers(model, words)[[2, 0]].transpose(1, 0, 2), rtol=2e-3, atol=2e-3)
    assert cached[1]["elmo_hidden_states"].size == 0


def test_add_elmo_features_rejects_bad_arguments():
    model = ElmoModel(ElmoConfig(**TINY))
    ds = make_dataset(2)
    with pytest.raises(ValueError, match="exactly one of"):
        add_elmo_features(ds, model, text_column="text", words_column="words")
    with pytest.raises(ValueError, match="'nope'"):
        add_elmo_features(ds, model, words_column="nope")
    with pytest.raises(ValueError, match=r"layers must be distinct indices in \[0, 3\), got \[3\]"):
        add_elmo_features(ds, model, words_column="words", layers=[3])
    with pytest.raises(ValueError, match="'float64'"):
        add_elmo_features(ds, model, words_column="words", dtype="float64")


def test_collator_pads_features_and_token_labels():
    rows = [
        {"elmo_hidden_states": np.ones((2, 3, 4), np.float16), "tags": [1, 0], "labels": [1, 0]},
        {"elmo_hidden_states": np.zeros((0,), np.float16), "labels": []},
        {"elmo_hidden_states": 2 * np.ones((3, 3, 4), np.float16), "labels": [0, 1, 1]},
    ]
    batch = ElmoFeatureCollator()(rows)
    assert set(batch) == {"elmo_hidden_states", "attention_mask", "labels"}
    assert batch["elmo_hidden_states"].shape == (3, 3, 3, 4) and batch["elmo_hidden_states"].dtype == torch.float32
    assert batch["attention_mask"].tolist() == [[1, 1, 0], [0, 0, 0], [1, 1, 1]]
    assert batch["labels"].tolist() == [[1, 0, -100], [-100, -100, -100], [0, 1, 1]]
    assert batch["elmo_hidden_states"][0, :, 2].abs().sum() == 0 and batch["elmo_hidden_states"][2, 1, 2, 0] == 2
    with pytest.raises(ValueError, match="2 labels but 3 tokens"):
        ElmoFeatureCollator()([{"elmo_hidden_states": np.ones((3, 3, 4)), "labels": [0, 1]}])


def test_token_head_gives_the_same_logits_from_cached_features():
    torch.manual_seed(0)
    model = ElmoForTokenClassification(ElmoConfig(**TINY, num_labels=3)).eval()
    ds = make_dataset(5).rename_column("tags", "labels")
    cached = add_elmo_features(ds, model, words_column="words")
    rows = [cached[i] for i in range(len(cached))]
    enc = ElmoTokenizer()([r["words"] for r in rows], is_split_into_words=True, padding=True, return_tensors="pt")
    feats = ElmoFeatureCollator()(rows)
    with torch.no_grad():
        end_to_end = model(**enc).logits
        from_cache = model(
            elmo_hidden_states=feats["elmo_hidden_states"], attention_mask=feats["attention_mask"]
        ).logits
    torch.testing.assert_close(from_cache, end_to_end, rtol=1e-5, atol=1e-6)


def _words_collator(tok):
    def collate(rows):
        enc = tok([r["words"] for r in rows], is_split_into_words=True, padding=True, return_tensors="pt")
        return {
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "labels": torch.tensor([r["label"] for r in rows]),
        }

    return collate


@pytest.mark.slow
def test_training_on_cached_features_matches_end_to_end_training_with_frozen_bilm(tmp_path):
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    config = ElmoConfig(**TINY, num_labels=2, freeze_elmo=True)
    end_to_end_model = ElmoForSequenceClassification(config)
    cached_model = copy.deepcopy(end_to_end_model)
    bilm_before = copy.deepcopy(end_to_end_model.elmo.state_dict())
    classifier_before = end_to_end_model.classifier.weight.detach().clone()
    tok = ElmoTokenizer()
    ds = make_dataset(24)
    cached = add_elmo_features(ds, end_to_end_model.elmo, tok, words_column="words", batch_size=8)

    def args(name):
        return TrainingArguments(
            output_dir=str(tmp_path / name),
            per_device_train_batch_size=4,
            max_steps=8,
            learning_rate=0.05,
            seed=0,
            data_seed=0,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
            remove_unused_columns=False,
            logging_strategy="no",
        )

    Trainer(model=end_to_end_model, args=args("e2e"), train_dataset=ds, data_collator=_words_collator(tok)).train()
    Trainer(model=cached_model, args=args("cached"), train_dataset=cached, data_collator=ElmoFeatureCollator()).train()

    end_to_end_model.eval()
    cached_model.eval()
    batch = _words_collator(tok)([ds[i] for i in range(len(ds))])
    feats = ElmoFeatureCollator()([cached[i] for i in range(len(cached))])
    with torch.no_grad():
        logits_e2e = end_to_end_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits_cached = cached_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits_cached_features = cached_model(**{k: feats[k] for k in ("elmo_hidden_states", "attention_mask")}).logits
    torch.testing.assert_close(logits_cached, logits_e2e, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits_cached_features, logits_e2e, rtol=1e-5, atol=1e-5)
    # the comparison is not vacuous: both heads moved by the same amount, the biLM did not move
    moved = (end_to_end_model.classifier.weight - classifier_before).abs().max()
    assert moved > 1e-2, moved
    torch.testing.assert_close(cached_model.classifier.weight, end_to_end_model.classifier.weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        cached_model.scalar_mix.scalar_parameters, end_to_end_model.scalar_mix.scalar_parameters, rtol=1e-5, atol=1e-6
    )
    for name, value in end_to_end_model.elmo.state_dict().items():
        torch.testing.assert_close(value, bilm_before[name], rtol=0, atol=0)


def test_features_from_a_folder_whose_weights_do_not_match_its_config_are_refused(tmp_path):
    model = ElmoModel(ElmoConfig(**TINY))
    model.save_pretrained(tmp_path / "m")
    ElmoTokenizer().save_pretrained(tmp_path / "m")
    config = (tmp_path / "m" / "config.json").read_text()
    (tmp_path / "m" / "config.json").write_text(config.replace('"num_hidden_layers": 2', '"num_hidden_layers": 3'))
    with pytest.raises(
        ValueError, match=r"biLM weight\(s\) missing \(encoder\.backward_layers\.2\.input_transform\.bias"
    ):
        add_elmo_features(make_dataset(2), str(tmp_path / "m"), words_column="words")


def test_progress_bar_over_the_examples_unless_asked_for_silence(capsys):
    model = ElmoModel(ElmoConfig(**TINY)).train()
    ds = make_dataset(6)
    datasets.enable_progress_bars()  # the autouse fixture turned them off
    try:
        add_elmo_features(ds, model, words_column="words", batch_size=2, show_progress=False)
        assert "ELMo features" not in capsys.readouterr().err
        assert datasets.is_progress_bar_enabled()  # silence was for that call only
        add_elmo_features(ds, model, words_column="words", batch_size=2)
        assert "ELMo features" in capsys.readouterr().err
    finally:
        datasets.disable_progress_bars()
    assert model.training  # the caller's model is left as it was
