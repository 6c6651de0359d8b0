"""Auto classes: the installed package and a saved folder's own code (trust_remote_code) give identical outputs."""

from __future__ import annotations

import json

import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    pipeline,
)

from support import assert_same_numbers, run_without_package

from modeling_elmo import (
    AUTO_MAP,
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    save_model_folder,
)

SENTENCES = ["The bank closed early .", "A river bank", "Cells divide"]


def tiny_config(**extra) -> ElmoConfig:
    return ElmoConfig(hidden_size=8, cell_size=16, char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]],
                      num_highway_layers=1, vocab_size=30, num_labels=3, **extra)


def test_installed_package_registers_every_auto_class(tmp_path):
    torch.manual_seed(0)
    model = ElmoForBidirectionalLM(tiny_config())
    folder = save_model_folder(model, ElmoTokenizer(), tmp_path / "lm")
    assert type(AutoConfig.from_pretrained(folder)) is ElmoConfig
    assert type(AutoModel.from_pretrained(folder)) is ElmoModel
    assert type(AutoModelForPreTraining.from_pretrained(folder)) is ElmoForBidirectionalLM
    assert type(AutoModelForSequenceClassification.from_pretrained(folder)) is ElmoForSequenceClassification
    assert type(AutoModelForTokenClassification.from_pretrained(folder)) is ElmoForTokenClassification
    assert type(AutoTokenizer.from_pretrained(folder)) is ElmoTokenizer
    assert json.loads((tmp_path / "lm" / "config.json").read_text())["auto_map"] == AUTO_MAP
    # the base weights land inside the head
    base = AutoModel.from_pretrained(folder)
    head = AutoModelForSequenceClassification.from_pretrained(folder)
    for name, value in base.state_dict().items():
        assert torch.equal(value, head.elmo.state_dict()[name]), name


def test_folder_loads_with_its_own_code_in_a_fresh_process_with_the_same_outputs(tmp_path):
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config()).eval()
    tokenizer = ElmoTokenizer()
    folder = save_model_folder(model, tokenizer, tmp_path / "clf")
    for name in ("configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "model.safetensors", "vocab.txt"):
        assert (tmp_path / "clf" / name).is_file(), name
    enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
        features = model.elmo(**enc).last_hidden_state
    got = run_without_package(
        """
        import json, sys
        import numpy as np, torch
        from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline
        folder, sentences = sys.argv[1], json.loads(sys.argv[2])
        tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        clf = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
        base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        enc = tok(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            logits, features = clf(**enc).logits, base(**enc).last_hidden_state
        extractor = pipeline("feature-extraction", model=folder, trust_remote_code=True)
        print(json.dumps({"classes": [type(o).__module__ for o in (tok, clf, base)],
                          "config": type(AutoConfig.from_pretrained(folder, trust_remote_code=True)).__name__,
                          "logits": logits.tolist(), "features": features.tolist(),
                          "pipeline_first": np.array(extractor(sentences[0]))[0].tolist()}))
        """,
        folder, json.dumps(SENTENCES), workdir=tmp_path / "fresh")
    assert all(module.startswith("transformers_modules") for module in got["classes"]), got["classes"]
    assert got["config"] == "ElmoConfig"
    assert_same_numbers(got["logits"], logits, what="classifier logits")
    assert_same_numbers(got["features"], features, what="biLM features")
    assert_same_numbers(got["pipeline_first"], features[0], what="feature-extraction pipeline")


def test_feature_extraction_pipeline_with_objects_matches_a_direct_forward():
    torch.manual_seed(0)
    model, tokenizer = ElmoModel(tiny_config()).eval(), ElmoTokenizer()
    extractor = pipeline("feature-extraction", model=model, tokenizer=tokenizer)
    out = np.array(extractor(SENTENCES[1]))
    with torch.no_grad():
        direct = model(**tokenizer(SENTENCES[1], return_tensors="pt")).last_hidden_state.numpy()
    np.testing.assert_allclose(out, direct, atol=1e-6)


def test_pickled_weights_are_refused_with_an_explanation(tmp_path):
    model = ElmoModel(tiny_config())
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    import pytest

    with pytest.raises(ValueError, match="pickled weights"):
        AutoModel.from_pretrained(tmp_path)
    save_model_folder(model, None, tmp_path)  # with model.safetensors beside it, the safetensors file is used
    loaded = AutoModel.from_pretrained(tmp_path)
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
