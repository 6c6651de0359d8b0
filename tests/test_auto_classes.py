"""Auto classes: the installed package and a saved folder's own code (trust_remote_code) give identical outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

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


def test_folder_loads_with_its_own_code_in_a_fresh_process_with_identical_outputs(tmp_path):
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config()).eval()
    tokenizer = ElmoTokenizer()
    folder = save_model_folder(model, tokenizer, tmp_path / "clf")
    for name in ("configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "model.safetensors", "vocab.txt"):
        assert (tmp_path / "clf" / name).is_file(), name
    enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits.numpy()
        features = model.elmo(**enc).last_hidden_state.numpy()
    np.save(tmp_path / "logits.npy", logits)
    np.save(tmp_path / "features.npy", features)
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["modeling_elmo"] = None  # the package must not be importable: only the folder's code may run
        import numpy as np, torch
        from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline
        folder, sentences = {str(folder)!r}, {SENTENCES!r}
        tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        clf = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
        base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(clf).__module__.startswith("transformers_modules"), type(clf).__module__
        assert type(AutoConfig.from_pretrained(folder, trust_remote_code=True)).__name__ == "ElmoConfig"
        enc = tok(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            assert np.array_equal(clf(**enc).logits.numpy(), np.load({str(tmp_path / "logits.npy")!r}))
            assert np.array_equal(base(**enc).last_hidden_state.numpy(), np.load({str(tmp_path / "features.npy")!r}))
        extractor = pipeline("feature-extraction", model=folder, trust_remote_code=True)
        first = np.array(extractor(sentences[0]))[0]
        assert np.allclose(first, np.load({str(tmp_path / "features.npy")!r})[0], atol=1e-6)
        print("FRESH-PROCESS-OK")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "FRESH-PROCESS-OK" in result.stdout, result.stderr[-3000:]


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
