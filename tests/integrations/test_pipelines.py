"""transformers pipelines on ELMo folders with this package installed: token classification (one entity per word),
feature extraction and text classification; what a saved head folder carries for them."""

from __future__ import annotations

import json

import pytest
import torch
from support import assert_same_numbers
from support.clients import (
    TAGGED_TEXT,
    assert_same_entities,
    expected_entities,
    saved_tagger,
    saved_with_tokenizer,
    tiny_config_with,
)
from transformers import pipeline

from modeling_elmo import ElmoForSequenceClassification, ElmoModel, ElmoTokenizer
from modeling_elmo.pipeline_elmo import CUSTOM_PIPELINES, ElmoTokenClassificationPipeline


def test_saved_tagger_names_its_pipeline_and_every_folder_ships_the_pipeline_file(tmp_path):
    _, folder = saved_tagger(tmp_path / "tagger")
    assert json.loads((folder / "config.json").read_text())["custom_pipelines"] == CUSTOM_PIPELINES
    encoder = saved_with_tokenizer(ElmoModel(tiny_config_with()), tmp_path / "encoder")
    assert (folder / "pipeline_elmo.py").is_file() and (encoder / "pipeline_elmo.py").is_file()
    assert "custom_pipelines" not in json.loads((encoder / "config.json").read_text())


@pytest.mark.parametrize("how", ["trust_remote_code", "pipeline_class"])
def test_token_classification_pipeline_gives_one_entity_per_word(tmp_path, how):
    model, folder = saved_tagger(tmp_path / "tagger")
    options = (
        {"trust_remote_code": True}
        if how == "trust_remote_code"
        else {"pipeline_class": ElmoTokenClassificationPipeline}
    )
    tagger = pipeline("token-classification", model=str(folder), **options)
    assert type(tagger).__name__ == "ElmoTokenClassificationPipeline"
    assert_same_entities(tagger(TAGGED_TEXT, ignore_labels=[]), expected_entities(model))


def test_token_classification_pipeline_on_pre_split_words_and_on_words_the_text_does_not_hold(tmp_path):
    model, folder = saved_tagger(tmp_path / "tagger")
    tagger = pipeline("token-classification", model=str(folder), pipeline_class=ElmoTokenClassificationPipeline)
    words = ["The", "river", "bank", ",", "in", "Paris", "!"]
    (split,) = tagger([words], is_split_into_words=True, ignore_labels=[])
    assert [(e["word"], e["start"], e["end"]) for e in split] == [
        ("The", 0, 3),
        ("river", 4, 9),
        ("bank", 10, 14),
        (",", 15, 16),
        ("in", 17, 19),
        ("Paris", 20, 25),
        ("!", 26, 27),
    ]
    assert_same_numbers([e["score"] for e in split], [e["score"] for e in expected_entities(model)], what="scores")
    lower = pipeline(
        "token-classification",
        model=model,
        tokenizer=ElmoTokenizer(do_lower_case=True),
        pipeline_class=ElmoTokenClassificationPipeline,
    )
    entities = lower("Paris BANK", ignore_labels=[])
    assert [(e["word"], e["start"]) for e in entities] == [("paris", None), ("bank", None)]  # read back from the rows


@pytest.mark.parametrize("text", ["", "   ", " \n\t "])
def test_token_classification_pipeline_on_text_without_words_returns_no_entities(tmp_path, text):
    model, folder = saved_tagger(tmp_path / "tagger")
    tagger = pipeline("token-classification", model=str(folder), trust_remote_code=True)
    assert tagger(text) == [] and tagger(text, ignore_labels=[], aggregation_strategy="simple") == []
    entities = tagger([text, TAGGED_TEXT], ignore_labels=[])  # in a batch with a text that has words
    assert entities[0] == []
    assert_same_entities(entities[1], expected_entities(model))


def test_feature_extraction_and_text_classification_pipelines(tmp_path):
    torch.manual_seed(0)
    encoder, classifier = (
        ElmoModel(tiny_config_with()).eval(),
        ElmoForSequenceClassification(tiny_config_with(num_labels=2)).eval(),
    )
    extractor = pipeline("feature-extraction", model=str(saved_with_tokenizer(encoder, tmp_path / "encoder")))
    scorer = pipeline("text-classification", model=str(saved_with_tokenizer(classifier, tmp_path / "classifier")))
    encoding = ElmoTokenizer()(TAGGED_TEXT, return_tensors="pt")
    with torch.no_grad():
        assert_same_numbers(extractor(TAGGED_TEXT)[0], encoder(**encoding).last_hidden_state[0], what="features")
        probabilities = classifier(**encoding).logits[0].softmax(-1)
    scores = {entry["label"]: entry["score"] for entry in scorer(TAGGED_TEXT, top_k=None)}
    assert_same_numbers([scores[classifier.config.id2label[i]] for i in range(2)], probabilities, what="classifier")
