"""Tiny folders saved as any transformers user saves them, and the entities a tagger should give."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from modeling_elmo import (
    ElmoConfig,
    ElmoForTokenClassification,
    ElmoTokenizer,
    save_model_folder,
)
from support import assert_same_numbers

TAGGED_TEXT = "The river bank, in Paris!"


TAG_LABELS = {0: "O", 1: "B-LOC", 2: "I-LOC"}


def tiny_config_with(**overrides) -> ElmoConfig:
    config = ElmoConfig.from_json_file(str(Path(__file__).resolve().parents[2] / "configuration" / "elmo-tiny.json"))
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def saved_with_tokenizer(model, folder):
    """``model.save_pretrained`` and the tokenizer's, as any transformers user saves them (no package helper)."""
    model.save_pretrained(folder)
    ElmoTokenizer().save_pretrained(folder)
    return folder


def saved_tagger(folder):
    torch.manual_seed(0)
    config = tiny_config_with(num_labels=3, id2label=TAG_LABELS, label2id={v: k for k, v in TAG_LABELS.items()})
    model = ElmoForTokenClassification(config)
    save_model_folder(model.eval(), ElmoTokenizer(), folder)  # the tools' save path names the tagger's pipeline
    return model, Path(folder)


def expected_entities(model) -> list[dict]:
    """One entity per word of `TAGGED_TEXT`: the word, its offsets (found with the split's own pattern), the argmax
    label and its softmax probability, computed here from the model's logits."""
    words = [(m.group(), m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]+", TAGGED_TEXT)]
    encoding = ElmoTokenizer()([w for w, _, _ in words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        probabilities = model(**encoding).logits[0].softmax(-1)
    return [
        {"entity": TAG_LABELS[int(p.argmax())], "score": float(p.max()), "index": i, "word": w, "start": s, "end": e}
        for i, ((w, s, e), p) in enumerate(zip(words, probabilities, strict=False))
    ]


def assert_same_entities(got: list[dict], expected: list[dict]) -> None:
    assert [{k: v for k, v in e.items() if k != "score"} for e in got] == [
        {k: v for k, v in e.items() if k != "score"} for e in expected
    ]
    assert_same_numbers([e["score"] for e in got], [e["score"] for e in expected], what="scores")
