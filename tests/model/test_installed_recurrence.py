"""The shipped model file checks for the installed package's kernels by itself (`modeling_elmo.installed_kernels`)
and calls `packed_kernels.packed_lstm`: every client that builds a model where the package is installed
(`AutoModel`, with or without ``trust_remote_code``, pipelines, sentence-transformers, `Trainer`) runs it, with the
public form's numbers and gradients; ``config.use_packed_kernels=False`` and a package without `packed_lstm` or
without packed products run the public form; the shipped files alone still run the public form
(`support.run_without_package`)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import torch
from support import assert_same_numbers, in_the_public_form, run_without_package
from support.clients import TAGGED_TEXT, saved_with_tokenizer, tiny_config_with
from transformers import AutoModel, pipeline
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, save_model_folder
from modeling_elmo import modeling_elmo as modeling
from modeling_elmo.acceleration import packed_kernels
from modeling_elmo.acceleration.packed_kernels import RecurrencePlan

#: Packed per-step products against the public form's (fp32): summation orders differ in the last bits.
TOLERANCE = 1e-5
SENTENCES = ["The river bank .", "A bank", "Ein Haus am See , und ein Boot !"]


@pytest.fixture
def packed_calls(monkeypatch) -> list[tuple]:
    """The calls of the package's kernel entry (`packed_kernels.packed_lstm`, what a model file calls), run as large
    models run it (one direction at a time on packed products) also on the tiny test models."""
    if not packed_kernels.available():
        pytest.skip("this torch build has neither oneDNN's nor MKL's packed products (not an x86 build)")
    monkeypatch.setattr(RecurrencePlan, "PER_DIRECTION_FROM", 0)
    calls, run = [], packed_kernels.packed_lstm

    def spy(inputs, *args, **kwargs):
        calls.append(tuple(inputs.shape))
        return run(inputs, *args, **kwargs)

    monkeypatch.setattr(packed_kernels, "packed_lstm", spy)
    return calls


def saved_encoder(folder, **overrides) -> ElmoModel:
    torch.manual_seed(0)
    model = ElmoModel(tiny_config_with(**overrides)).eval()
    saved_with_tokenizer(model, folder)
    return model


def encoded(sentences=SENTENCES) -> dict[str, torch.Tensor]:
    return dict(ElmoTokenizer()(sentences, padding=True, return_tensors="pt"))


def public_layers(model: torch.nn.Module) -> torch.Tensor:
    """All layers of ``model`` on `SENTENCES` in the public form (a copy with the package form switched off)."""
    public = in_the_public_form(copy.deepcopy(model))
    with torch.no_grad():
        return torch.stack(public(**encoded(), output_hidden_states=True).hidden_states)


def folder_class(folder, name: str = "ElmoModel"):
    """The class of the folder's own code (``transformers_modules.<folder>``), as ``AutoModel.from_pretrained(folder,
    trust_remote_code=True)`` returns it in a process where the package's classes are not registered."""
    return get_class_from_dynamic_module(f"modeling_elmo.{name}", str(folder))


@pytest.mark.parametrize("remote_code", [False, True], ids=["AutoModel", "folder-code"])
def test_automodel_from_a_folder_runs_the_packed_form_with_the_public_numbers(tmp_path, packed_calls, remote_code):
    saved_encoder(tmp_path / "m")
    loader = folder_class(tmp_path / "m") if remote_code else AutoModel
    model = loader.from_pretrained(tmp_path / "m").eval()
    assert type(model).__module__.startswith("transformers_modules.") == remote_code
    assert model.encoder.recurrence is None and model.config.use_packed_kernels is True
    with torch.no_grad():
        layers = torch.stack(model(**encoded(), output_hidden_states=True).hidden_states)
    assert len(packed_calls) == model.config.num_hidden_layers  # one call per layer, both directions in it
    calls = len(packed_calls)
    assert_same_numbers(layers, public_layers(model), rtol=TOLERANCE, what="packed against public")
    assert len(packed_calls) == calls  # the public form ran without the package's recurrence


def test_the_config_switch_turns_the_packed_form_off_and_is_saved(tmp_path, packed_calls):
    model = saved_encoder(tmp_path / "on")
    model.config.use_packed_kernels = False
    with torch.no_grad():
        model(**encoded())
    assert packed_calls == []
    model.save_pretrained(tmp_path / "off")
    assert json.loads((tmp_path / "off" / "config.json").read_text())["use_packed_kernels"] is False
    assert json.loads((tmp_path / "on" / "config.json").read_text())["use_packed_kernels"] is True
    reloaded = folder_class(tmp_path / "off").from_pretrained(tmp_path / "off").eval()
    with torch.no_grad():
        reloaded(**encoded())
    assert packed_calls == [] and reloaded.config.use_packed_kernels is False


def test_a_config_saved_without_the_switch_loads_with_the_packed_form_on(tmp_path, packed_calls):
    saved_encoder(tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    fields = json.loads(path.read_text())
    del fields["use_packed_kernels"]
    path.write_text(json.dumps(fields))
    assert ElmoConfig.from_pretrained(tmp_path / "m").use_packed_kernels is True
    model = AutoModel.from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        model(**encoded())
    assert packed_calls


def test_training_mode_and_gradients_run_the_packed_form_with_the_public_gradients(packed_calls):
    torch.manual_seed(0)
    model = ElmoModel(tiny_config_with())
    public = in_the_public_form(copy.deepcopy(model))
    inputs = encoded()
    for mode, no_grad in (("train", True), ("train", False), ("eval", False)):
        packed_calls.clear()
        getattr(model, mode)()
        with torch.set_grad_enabled(not no_grad):
            out = model(**inputs).last_hidden_state
        assert len(packed_calls) == model.config.num_hidden_layers, (mode, no_grad)
    out.sum().backward()  # the package form's gradients (eval mode: no dropout) ...
    public.eval()(**inputs).last_hidden_state.sum().backward()
    calls = len(packed_calls)
    for (name, packed), shipped in zip(model.encoder.named_parameters(), public.encoder.parameters(), strict=True):
        assert_same_numbers(packed.grad, shipped.grad, rtol=TOLERANCE, what=name)  # ... are the public form's
    assert len(packed_calls) == calls


def test_a_package_without_the_kernel_entry_or_without_packed_products_is_not_called(monkeypatch):
    assert modeling.installed_kernels() is packed_kernels
    model = ElmoModel(tiny_config_with()).eval()
    x = torch.zeros(2, 3, 4, 16)
    assert model.encoder.recurrence_for(x, True) is modeling.packed_lstm
    monkeypatch.delattr(packed_kernels, "packed_lstm")  # an installed package of another version
    assert modeling.installed_kernels() is None
    assert model.encoder.recurrence_for(x, True) is modeling.stacked_lstm
    monkeypatch.undo()
    monkeypatch.setattr(packed_kernels, "available", lambda: False)
    assert modeling.installed_kernels() is None
    with torch.no_grad():
        assert model.encoder.recurrence_for(x, True) is modeling.stacked_lstm


def test_use_packed_kernels_off_runs_the_public_form_in_training_too(packed_calls):
    model = ElmoModel(tiny_config_with(use_packed_kernels=False))
    model(**encoded()).last_hidden_state.sum().backward()
    with torch.no_grad():
        model.eval()(**encoded())
    assert packed_calls == []


def test_pipelines_run_the_packed_form_with_the_public_numbers(tmp_path, packed_calls):
    model = saved_encoder(tmp_path / "m")
    for options in ({}, {"trust_remote_code": True}):
        packed_calls.clear()
        extractor = pipeline("feature-extraction", model=str(tmp_path / "m"), **options)
        features = torch.tensor(extractor(TAGGED_TEXT)[0])
        assert packed_calls, options
        with torch.no_grad():
            public = in_the_public_form(copy.deepcopy(model))(**encoded([TAGGED_TEXT]))
        assert_same_numbers(features, public.last_hidden_state[0], rtol=TOLERANCE, what=f"features {options}")


def test_sentence_transformers_runs_the_packed_form_with_the_public_numbers(tmp_path, packed_calls):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    torch.manual_seed(0)
    model = ElmoModel(tiny_config_with()).eval()
    save_model_folder(model, ElmoTokenizer(), tmp_path / "encoder")
    encoder = sentence_transformers.SentenceTransformer(str(tmp_path / "encoder"), trust_remote_code=True, device="cpu")
    vectors = torch.as_tensor(encoder.encode(SENTENCES))
    assert packed_calls
    public = in_the_public_form(copy.deepcopy(model))
    inputs = encoded()
    with torch.no_grad():
        top = public(**inputs).last_hidden_state
    mask = inputs["attention_mask"].unsqueeze(-1).to(top.dtype)
    assert_same_numbers(vectors, (top * mask).sum(1) / mask.sum(1), rtol=TOLERANCE, what="sentence vectors")


def test_saving_and_reloading_a_model_that_found_the_packed_form_keeps_its_weights_and_numbers(tmp_path, packed_calls):
    model = saved_encoder(tmp_path / "m")
    assert set(model.state_dict()) == set(ElmoModel.from_pretrained(tmp_path / "m").state_dict())
    reloaded = folder_class(tmp_path / "m").from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        first = model(**encoded()).last_hidden_state
        again = reloaded(**encoded()).last_hidden_state
    assert_same_numbers(again, first)
    copied = copy.deepcopy(model)
    assert copied.encoder.recurrence_for(torch.zeros(2, 3, 4, 16), True) is modeling.packed_lstm


@pytest.mark.slow
def test_the_shipped_files_alone_run_the_public_form_with_the_packed_numbers(tmp_path):
    """Without the package the folder's own code finds no packed form and computes what the package form computes."""
    model = saved_encoder(tmp_path / "m")
    torch.save(encoded(), tmp_path / "inputs.pt")
    report = run_without_package(
        """
        import json, sys, torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
        batch = torch.load(sys.argv[2], weights_only=True)
        with torch.no_grad():
            layers = torch.stack(model(**batch, output_hidden_states=True).hidden_states)
            chosen = model.encoder.recurrence_for(layers[0], True).__name__
        installed = sys.modules[type(model).__module__].installed_kernels()
        print(json.dumps({"installed": installed, "chosen": chosen,
                          "layers": layers.tolist()}))
    """,
        tmp_path / "m",
        tmp_path / "inputs.pt",
        workdir=tmp_path / "work",
    )
    assert report["installed"] is None and report["chosen"] == "stacked_lstm"
    with torch.no_grad():
        packed = torch.stack(model(**encoded(), output_hidden_states=True).hidden_states)
    assert model.encoder.recurrence_for(packed[0], True) is modeling.packed_lstm
    assert_same_numbers(report["layers"], packed, rtol=TOLERANCE, what="shipped files alone against the package")


@pytest.mark.slow
def test_building_a_model_registers_nothing_with_transformers(tmp_path):
    """The lookup imports the package's kernels module only: no Auto class registration, no other process state."""
    script = (
        "import json, sys, torch, transformers\n"
        "from modeling_elmo.modeling_elmo import ElmoModel\n"
        "from modeling_elmo.configuration_elmo import ElmoConfig\n"
        "import modeling_elmo\n"
        "model = ElmoModel(ElmoConfig(projection_dim=8, cell_size=16, char_cnn_filters=[[1, 4]]))\n"
        "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
        "print(json.dumps({'registered': modeling_elmo._registered, 'elmo_in_auto': 'elmo' in CONFIG_MAPPING,\n"
        "                  'found': sys.modules[type(model).__module__].installed_kernels() is not None}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"registered": False, "elmo_in_auto": False, "found": packed_kernels.available()}


@pytest.mark.slow  # a Trainer step
def test_trainer_trains_and_evaluates_with_the_packed_form(tmp_path, packed_calls):
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    from modeling_elmo import ElmoForSequenceClassification

    tokenizer = ElmoTokenizer()
    data = Dataset.from_dict({"text": SENTENCES * 4, "labels": [0, 1, 0] * 4})
    data = data.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config_with(num_labels=2, freeze_elmo=False))
    args = TrainingArguments(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, per_device_train_batch_size=4, max_steps=1,
        per_device_eval_batch_size=4, save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data,
                      data_collator=DataCollatorWithPadding(tokenizer))  # fmt: skip
    trainer.train()
    assert packed_calls  # the training step: the package's form, its explicit backward
    packed_calls.clear()
    predicted = trainer.predict(data).predictions
    assert packed_calls  # evaluation
    public = in_the_public_form(copy.deepcopy(model).eval())
    with torch.no_grad():
        logits = public(**encoded(SENTENCES)).logits
    assert_same_numbers(predicted[:3], logits, rtol=TOLERANCE, what="Trainer.predict against the public form")
