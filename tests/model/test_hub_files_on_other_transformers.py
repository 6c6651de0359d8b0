"""The Hub files on every transformers release they accept: a saved folder (an upgraded older one too) saves back
under the same names with the same numbers, every
``attn_implementation`` loads (ELMo has no attention), and, in another interpreter with transformers 4.57 (the last
4.x, where Flair and spaCy live), the folder's own code computes the numbers this package computes here.

The in-process tests run under whatever transformers is installed (CI runs them in its oldest environment too); the
4.x tests need ``ELMO_TRANSFORMERS4_PYTHON``, the path of a Python whose environment holds torch and transformers 4.57
(and not this package), and skip without it."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file
from support import assert_same_numbers, in_the_public_form, run_without_package
from support.clients import (
    TAG_LABELS,
    TAGGED_TEXT,
    assert_same_entities,
    expected_entities,
    tiny_config_with,
)
from support.model import clipping_model, write_legacy_folder
from transformers import AutoModel, Trainer, TrainingArguments

from modeling_elmo import (
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    save_model_folder,
)
from modeling_elmo.conversion.upgrade import upgrade_folder

SENTENCES = [["The", "river", "bank", "flooded", "twice"], ["A", "bank", "closed"], ["Cells", "divide", "."]]
TRANSFORMERS4_PYTHON = os.environ.get("ELMO_TRANSFORMERS4_PYTHON")
needs_transformers4 = pytest.mark.skipif(
    not TRANSFORMERS4_PYTHON,
    reason="set ELMO_TRANSFORMERS4_PYTHON to a Python with torch and transformers 4.57 (CI sets it)",
)


def names(folder) -> list[str]:
    return sorted(load_file(str(folder / "model.safetensors")))


def encode(sentences=SENTENCES, **kwargs):
    return ElmoTokenizer()(sentences, is_split_into_words=True, padding=True, return_tensors="pt", **kwargs)


def hidden_states(model, encoding) -> list[torch.Tensor]:
    with torch.no_grad():
        return list(model(**encoding, output_hidden_states=True).hidden_states)


# ------------------------------------------------------------------------------------- this interpreter's release
@pytest.mark.parametrize("cls", [ElmoModel, ElmoForBidirectionalLM, ElmoForTokenClassification])
def test_a_loaded_folder_saves_back_under_the_same_names_with_the_same_weights_and_numbers(tmp_path, cls):
    _, model = clipping_model(cls)
    save_model_folder(model, ElmoTokenizer(), tmp_path / "first")
    loaded = (
        AutoModel.from_pretrained(tmp_path / "first") if cls is ElmoModel else cls.from_pretrained(tmp_path / "first")
    )
    loaded.save_pretrained(tmp_path / "saved")
    trainer = Trainer(
        model=loaded, args=TrainingArguments(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True)
    )
    trainer.save_model(str(tmp_path / "trainer"))
    expected = load_file(str(tmp_path / "first" / "model.safetensors"))
    encoding = encode()
    for folder in ("saved", "trainer"):
        assert names(tmp_path / folder) == sorted(expected), folder
        saved = load_file(str(tmp_path / folder / "model.safetensors"))
        assert all(torch.equal(saved[key], expected[key]) for key in expected), folder
        again = cls.from_pretrained(tmp_path / folder).eval()
        for layer, (got, want) in enumerate(
            zip(hidden_states(again, encoding), hidden_states(model, encoding), strict=True)
        ):
            assert_same_numbers(got, want, what=f"{folder}: layer {layer}")


def test_an_upgraded_folder_of_the_older_lstm_names_loads_and_saves_back_in_todays_names_with_the_same_numbers(
    tmp_path,
):
    _, model = clipping_model()
    write_legacy_folder(model, tmp_path / "old")
    upgrade_folder(tmp_path / "old")
    loaded, info = AutoModel.from_pretrained(tmp_path / "old", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    loaded.save_pretrained(tmp_path / "saved")
    assert names(tmp_path / "saved") == names(tmp_path / "old") == sorted(model.state_dict())
    encoding = encode()
    for got, want in zip(
        hidden_states(AutoModel.from_pretrained(tmp_path / "saved"), encoding),
        hidden_states(model, encoding),
        strict=True,
    ):
        assert_same_numbers(got, want, what="saved again")


@pytest.mark.parametrize("implementation", ["eager", "sdpa", "flash_attention_2", "flex_attention"])
def test_every_attention_implementation_loads_and_computes_the_same_numbers(tmp_path, implementation):
    _, model = clipping_model()
    save_model_folder(model, ElmoTokenizer(), tmp_path / "encoder")
    loaded = AutoModel.from_pretrained(tmp_path / "encoder", attn_implementation=implementation)
    assert loaded.config._attn_implementation == "eager"  # what runs: no attention at all
    encoding = encode()
    for got, want in zip(hidden_states(loaded, encoding), hidden_states(model, encoding), strict=True):
        assert_same_numbers(got, want, what=implementation)


# ------------------------------------------------------------------------------------------------ transformers 4.x
def saved_folders(root):
    """An encoder, a sequence classifier and a tagger (no dropout, so a training step's loss is the eval loss), each
    saved with its tokenizer; the models as this package builds them."""
    torch.manual_seed(0)
    no_dropout = dict(hidden_dropout_prob=0.0, classifier_dropout=0.0)
    labels = dict(id2label=TAG_LABELS, label2id={v: k for k, v in TAG_LABELS.items()})
    models = {
        "encoder": ElmoModel(tiny_config_with(**no_dropout)),
        "classifier": ElmoForSequenceClassification(tiny_config_with(num_labels=2, **no_dropout)),
        "tagger": ElmoForTokenClassification(tiny_config_with(num_labels=3, **no_dropout, **labels)),
    }
    for name, model in models.items():  # in the form the shipped files run alone
        save_model_folder(in_the_public_form(model.eval()), ElmoTokenizer(), root / name)
    return models


INFERENCE = """
import json, sys, torch, transformers
from transformers import (AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification,
                          AutoTokenizer, pipeline)
root, sentences, text = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
tokenizer = AutoTokenizer.from_pretrained(root + "/encoder", trust_remote_code=True)
encoding = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
left = tokenizer(sentences, is_split_into_words=True, padding="max_length", max_length=7, padding_side="left",
                 return_tensors="pt")
out = {"version": transformers.__version__, "input_ids": encoding["input_ids"].tolist(),
       "attention_mask": encoding["attention_mask"].tolist(), "left_ids": left["input_ids"].tolist(),
       "left_mask": left["attention_mask"].tolist()}
with torch.no_grad():
    for implementation in ("eager", "sdpa"):
        model = AutoModel.from_pretrained(root + "/encoder", trust_remote_code=True, attn_implementation=implementation)
        layers = model(**encoding, output_hidden_states=True).hidden_states
        out["hidden_" + implementation] = [h.tolist() for h in layers]
    out["module"] = type(model).__module__
    classifier = AutoModelForSequenceClassification.from_pretrained(root + "/classifier", trust_remote_code=True)
    out["sequence_logits"] = classifier(**encoding).logits.tolist()
    tagger = AutoModelForTokenClassification.from_pretrained(root + "/tagger", trust_remote_code=True)
    out["token_logits"] = tagger(**encoding).logits.tolist()
out["features"] = pipeline("feature-extraction", model=root + "/encoder", trust_remote_code=True)(text)
entities = pipeline("token-classification", model=root + "/tagger", trust_remote_code=True)(text, ignore_labels=[])
out["entities"] = [{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in entities]
print(json.dumps(out))
"""


@pytest.mark.slow
@needs_transformers4
def test_the_hub_files_compute_the_same_numbers_under_transformers_4(tmp_path):
    models = saved_folders(tmp_path)
    got = run_without_package(
        INFERENCE,
        tmp_path,
        json.dumps(SENTENCES),
        TAGGED_TEXT,
        workdir=tmp_path / "client",
        python=TRANSFORMERS4_PYTHON,
    )
    assert got["version"].startswith("4."), got["version"]
    assert got["module"].startswith("transformers_modules.")
    encoding = encode()
    assert (
        got["input_ids"] == encoding["input_ids"].tolist()
        and got["attention_mask"] == encoding["attention_mask"].tolist()
    )
    left = ElmoTokenizer()(
        SENTENCES,
        is_split_into_words=True,
        padding="max_length",
        max_length=7,
        padding_side="left",
        return_tensors="pt",
    )
    assert got["left_ids"] == left["input_ids"].tolist() and got["left_mask"] == left["attention_mask"].tolist()
    expected = hidden_states(models["encoder"], encoding)
    for implementation in ("eager", "sdpa"):
        for layer, want in enumerate(expected):
            assert_same_numbers(torch.tensor(got["hidden_" + implementation][layer]), want, what=f"layer {layer}")
    with torch.no_grad():
        assert_same_numbers(torch.tensor(got["sequence_logits"]), models["classifier"](**encoding).logits)
        assert_same_numbers(torch.tensor(got["token_logits"]), models["tagger"](**encoding).logits)
        words = ElmoTokenizer().split_words(TAGGED_TEXT)
        features = models["encoder"](**encode([words])).last_hidden_state
    assert_same_numbers(torch.tensor(got["features"]), features, what="feature-extraction")
    assert_same_entities(got["entities"], expected_entities(models["tagger"]))


TRAINING = """
import json, sys, torch, transformers
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForTokenClassification, AutoTokenizer, Trainer, TrainingArguments
root, sentences, labels = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(root + "/tagger", trust_remote_code=True)
encoding = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
rows = [{"input_ids": encoding["input_ids"][i], "attention_mask": encoding["attention_mask"][i],
         "labels": torch.tensor(labels[i])} for i in range(len(sentences))]
model = AutoModelForTokenClassification.from_pretrained(root + "/tagger", trust_remote_code=True)
trainable_elmo = [name for name, p in model.named_parameters() if p.requires_grad and name.startswith("elmo.")]
before = {name: p.detach().clone() for name, p in model.named_parameters()}
args = TrainingArguments(output_dir=root + "/run", per_device_train_batch_size=len(rows), max_steps=1,
                         learning_rate=0.1, report_to=[], save_strategy="no", use_cpu=True)
trainer = Trainer(model=model, args=args, train_dataset=rows)
loss = trainer.train().training_loss
trainer.save_model(root + "/trained")
moved = sorted(name for name, p in model.named_parameters() if not torch.equal(p, before[name]))
model.eval()
trained = AutoModelForTokenClassification.from_pretrained(root + "/trained", trust_remote_code=True)
encoder = AutoModel.from_pretrained(root + "/encoder", trust_remote_code=True)
encoder.save_pretrained(root + "/encoder-again")
old = AutoModel.from_pretrained(root + "/old", trust_remote_code=True)
old.save_pretrained(root + "/old-again")
again = {n: AutoModel.from_pretrained(f"{root}/{n}", trust_remote_code=True) for n in ("encoder-again", "old-again")}
names = {n: sorted(load_file(f"{root}/{n}/model.safetensors")) for n in ("trained", "encoder-again", "old-again")}
with torch.no_grad():
    out = {"version": transformers.__version__, "loss": loss, "moved": moved, "names": names,
           "trainable_elmo": trainable_elmo,
           "trained": model(**encoding).logits.tolist(), "reloaded": trained(**encoding).logits.tolist(),
           "again": {name: m(**encoding).last_hidden_state.tolist() for name, m in again.items()}}
print(json.dumps(out))
"""


@pytest.mark.slow
@needs_transformers4
def test_the_hub_files_train_and_save_back_exactly_under_transformers_4(tmp_path):
    models = saved_folders(tmp_path)
    _, clipping = clipping_model()
    write_legacy_folder(in_the_public_form(clipping), tmp_path / "old")
    upgrade_folder(tmp_path / "old")
    encoding = encode()
    labels = torch.tensor([[1, 2, 0, 0, 1], [0, 1, 0, -100, -100], [1, 0, 0, -100, -100]])
    with torch.no_grad():
        expected_loss = models["tagger"](**encoding, labels=labels).loss
        expected = {"encoder-again": models["encoder"](**encoding).last_hidden_state}
        expected["old-again"] = clipping(**encoding).last_hidden_state
    got = run_without_package(
        TRAINING,
        tmp_path,
        json.dumps(SENTENCES),
        json.dumps(labels.tolist()),
        workdir=tmp_path / "client",
        python=TRANSFORMERS4_PYTHON,
    )
    assert got["version"].startswith("4."), got["version"]
    assert_same_numbers(torch.tensor(got["loss"]), expected_loss, rtol=1e-5, what="the step's loss")
    assert got["moved"] and all(not name.startswith("elmo.") for name in got["moved"]), got["moved"]  # biLM frozen
    assert got["trainable_elmo"] == []  # frozen by from_pretrained itself (config.freeze_elmo)
    assert_same_numbers(torch.tensor(got["reloaded"]), torch.tensor(got["trained"]), what="trained, saved, reloaded")
    assert got["names"]["trained"] == names(tmp_path / "tagger")
    assert got["names"]["encoder-again"] == names(tmp_path / "encoder")
    assert got["names"]["old-again"] == sorted(clipping.state_dict())  # an upgraded older folder: today's names
    for name, want in expected.items():
        assert_same_numbers(torch.tensor(got["again"][name]), want, what=name)
