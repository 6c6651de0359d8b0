"""Auto classes: the installed package, and a saved folder's own code (trust_remote_code) where the package is not
installed, whichever way the folder was saved (save_pretrained, a Trainer's save_model), give the same outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from support import assert_same_numbers, in_the_public_form, run_without_package
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
    return ElmoConfig(
        projection_dim=8,
        cell_size=16,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        num_highway_layers=1,
        vocab_size=30,
        num_labels=3,
        **extra,
    )


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


@pytest.mark.slow
def test_folder_loads_with_its_own_code_in_a_fresh_process_with_the_same_outputs(tmp_path):
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config()).eval()
    tokenizer = ElmoTokenizer()
    folder = save_model_folder(model, tokenizer, tmp_path / "clf")
    for name in ("configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "model.safetensors", "vocab.txt"):
        assert (tmp_path / "clf" / name).is_file(), name
    enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = in_the_public_form(model)(**enc).logits
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
        folder,
        json.dumps(SENTENCES),
        workdir=tmp_path / "fresh",
    )
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


CODE_FILES = (
    "configuration_elmo.py",
    "modeling_elmo.py",
    "pipeline_elmo.py",
    "tokenization_elmo.py",
)

LOAD_EVERY_AUTO_CLASS = """
    import json, sys, torch
    from transformers import (AutoConfig, AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification,
                              AutoModelForTokenClassification, AutoTokenizer)
    folder, sentences, saved_class = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    enc = tok(sentences, padding=True, return_tensors="pt")
    loaded = {"AutoConfig": type(AutoConfig.from_pretrained(folder, trust_remote_code=True)).__name__,
              "AutoTokenizer": type(tok).__name__}
    outputs = {}
    for auto in (AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification,
    AutoModelForTokenClassification):
        model = auto.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        loaded[auto.__name__] = type(model).__name__
        if type(model).__name__ == saved_class:
            with torch.no_grad():
                out = model(**enc)
            outputs = {"features": (out.last_hidden_state if saved_class in ("ElmoModel", "ElmoForBidirectionalLM")
                                    else out.logits).tolist()}
    print(json.dumps({"loaded": loaded, **outputs}))
"""

EVERY_AUTO_CLASS = {
    "AutoConfig": "ElmoConfig",
    "AutoTokenizer": "ElmoTokenizer",
    "AutoModel": "ElmoModel",
    "AutoModelForPreTraining": "ElmoForBidirectionalLM",
    "AutoModelForSequenceClassification": "ElmoForSequenceClassification",
    "AutoModelForTokenClassification": "ElmoForTokenClassification",
}


def _outputs_in_this_process(model, saved_class):
    enc = ElmoTokenizer()(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.eval()(**enc)
    return out.last_hidden_state if saved_class in ("ElmoModel", "ElmoForBidirectionalLM") else out.logits


@pytest.mark.parametrize(
    "cls", [ElmoModel, ElmoForBidirectionalLM, ElmoForSequenceClassification, ElmoForTokenClassification]
)
@pytest.mark.slow
def test_plain_save_pretrained_writes_a_folder_every_auto_class_loads_without_the_package(cls, tmp_path):
    torch.manual_seed(0)
    model = cls(tiny_config())
    model.save_pretrained(tmp_path / "saved")  # transformers' own saving, not a helper of this package
    ElmoTokenizer().save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["auto_map"] == AUTO_MAP
    assert all((tmp_path / "saved" / name).is_file() for name in CODE_FILES)
    got = run_without_package(
        LOAD_EVERY_AUTO_CLASS, tmp_path / "saved", json.dumps(SENTENCES), cls.__name__, workdir=tmp_path / "fresh"
    )
    assert got["loaded"] == EVERY_AUTO_CLASS
    expected = _outputs_in_this_process(in_the_public_form(model), cls.__name__)
    assert_same_numbers(got["features"], expected, what=cls.__name__)


@pytest.mark.slow
def test_classifier_fine_tuned_and_saved_by_trainer_loads_without_the_package_with_the_same_outputs(tmp_path):
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    torch.manual_seed(0)
    tokenizer = ElmoTokenizer()
    model = ElmoForSequenceClassification(tiny_config(freeze_elmo=False))  # fine-tune everything
    data = Dataset.from_dict({"text": SENTENCES * 4, "label": [0, 1, 2] * 4})
    data = data.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])
    args = TrainingArguments(
        str(tmp_path / "run"),
        per_device_train_batch_size=4,
        max_steps=3,
        learning_rate=0.05,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    before = {k: v.clone() for k, v in model.elmo.state_dict().items()}
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=data,
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
    )
    trainer.train()
    assert any(not torch.equal(before[k], v) for k, v in model.elmo.state_dict().items())  # the biLM was trained
    trainer.save_model(str(tmp_path / "fine-tuned"))
    got = run_without_package(
        LOAD_EVERY_AUTO_CLASS,
        tmp_path / "fine-tuned",
        json.dumps(SENTENCES),
        "ElmoForSequenceClassification",
        workdir=tmp_path / "fresh",
    )
    assert got["loaded"] == EVERY_AUTO_CLASS
    assert_same_numbers(
        got["features"],
        _outputs_in_this_process(model, "ElmoForSequenceClassification"),
        what="logits of the fine-tuned classifier",
    )
