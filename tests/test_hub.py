"""Tests of the Hub publishing path (`modeling_elmo.hub`, ``scripts/push_to_hub.py``).

Everything runs offline. The network call itself is replaced by mocks of ``HfApi.create_repo`` /
``create_branch`` / ``create_commit`` (and the YAML validation and xet checks that ``upload_folder`` would do
online), so what is asserted is the exact file list that ``upload_folder`` would send.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest
import torch
from huggingface_hub import HfApi, ModelCard, ModelCardData, constants
from huggingface_hub import hf_api as hub_hf_api
from huggingface_hub.hf_api import CommitInfo, RepoUrl
from safetensors.torch import load_file

from support import assert_same_numbers, run_without_package

from modeling_elmo import (
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoTokenizer,
    save_model_folder,
)
from modeling_elmo import hub

REPO_ROOT = Path(__file__).resolve().parents[1]
FAKE_TOKEN = "hf_" + "Q" * 34  # the token of the environment in the upload tests
FOLDER_TOKEN = "hf_" + "Z" * 34  # a token planted in the model folder: it must never be used
SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["A", "naïve", "café", "!"], ["Short"]]
EXPECTED_LM_FILES = ["README.md", "config.json", "configuration_elmo.py", "lstm_kernels.py", "model.safetensors",
                     "modeling_elmo.py", "plots/perplexity.png", "tokenization_elmo.py", "tokenizer_config.json",
                     "vocab.txt"]


def make_config(**overrides) -> ElmoConfig:
    config = ElmoConfig.from_json_file(str(REPO_ROOT / "configuration" / "elmo-tiny.json"))
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def write_png(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(2, 1.5), dpi=40)
    axis.plot([1, 2, 3], [300, 120, 80])
    figure.savefig(path)
    plt.close(figure)


#: ``eval_results.json`` in the layout of ``elmo pretrain``.
PRETRAIN_EVAL_RESULTS = {
    "unk_handling": "Out-of-vocabulary words are targets of the single class <UNK> ...",
    "vocab_size": 12, "global_step": 100,
    "validation": {"perplexity": 81.37, "perplexity_forward": 80.5, "perplexity_backward": 82.25,
                   "nll_forward": 4.388, "nll_backward": 4.41, "num_targets_forward": 1234,
                   "num_targets_backward": 1234, "unigram_perplexity": 640.0, "unigram_perplexity_forward": 630.0,
                   "unigram_perplexity_backward": 650.0},
    "test": {"perplexity": 79.99, "perplexity_forward": 79.0, "perplexity_backward": 81.0, "nll_forward": 4.37,
             "nll_backward": 4.39, "num_targets_forward": 999, "num_targets_backward": 999},
}


# --------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def model_folders(tmp_path_factory):
    """A pretrained biLM folder (with the clutter of a training run) and a classifier folder."""
    root = tmp_path_factory.mktemp("models")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["the", "cat", "sat", "on", "mat", ".", "a", "!"]) + "\n", encoding="utf-8")
    tokenizer = ElmoTokenizer(vocab_file=str(vocab))

    torch.manual_seed(0)
    lm = ElmoForBidirectionalLM(make_config(vocab_size=tokenizer.vocab_size)).eval()
    lm_dir = root / "elmo-tiny-lm"
    save_model_folder(lm, tokenizer, lm_dir)
    # The two JSON files as `elmo pretrain` writes them (modeling_elmo/pretraining/trainer.py).
    (lm_dir / "eval_results.json").write_text(json.dumps(PRETRAIN_EVAL_RESULTS))
    (lm_dir / "training_metadata.json").write_text(json.dumps({
        "global_step": 100, "tokens_seen": 51200, "parameters": 22533, "num_processes": 1,
        "args": {"dataset_name": "tiny_corpus", "train_file": ["/home/someone/private/train.txt"],
                 "learning_rate": 0.2, "optimizer": "adagrad", "hub_token": FOLDER_TOKEN},
        "versions": {"torch": "2.13.0"},
    }))
    write_png(lm_dir / "perplexity.png")
    # Clutter of a training run and secrets that must never be published or read.
    (lm_dir / "optimizer.pt").write_bytes(b"not really an optimizer")
    (lm_dir / "training_args.bin").write_bytes(b"pickle")
    (lm_dir / "notes.txt").write_text("scratch notes")
    (lm_dir / ".env").write_text(f"HF_TOKEN={FOLDER_TOKEN}\n")
    (lm_dir / "token").write_text(FOLDER_TOKEN)
    (lm_dir / "checkpoints" / "step_00000100").mkdir(parents=True)
    (lm_dir / "checkpoints" / "step_00000100" / "optimizer.bin").write_bytes(b"state")

    torch.manual_seed(1)
    classifier = ElmoForSequenceClassification(
        make_config(vocab_size=tokenizer.vocab_size, num_labels=2, id2label={0: "negative", 1: "positive"},
                    label2id={"negative": 0, "positive": 1})).eval()
    with torch.no_grad():  # a trained-looking head and mix, so the comparison is not against an initial state
        for parameter in classifier.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    clf_dir = root / "elmo-tiny-sst"
    save_model_folder(classifier, tokenizer, clf_dir)
    (clf_dir / "training_metadata.json").write_text(json.dumps({"datasets": ["sst2"], "base_model": "me/elmo-tiny",
                                                                "epochs": 3}))
    (clf_dir / "evaluation").mkdir()
    (clf_dir / "evaluation" / "eval_results.json").write_text(json.dumps(SUITE_PAYLOAD))
    (clf_dir / "evaluation" / "predictions.json").write_text(json.dumps({"predictions": [0, 1, 1]}))  # not results
    return {"root": root, "lm": lm_dir, "classifier": clf_dir, "lm_model": lm, "classifier_model": classifier,
            "tokenizer": tokenizer}


@pytest.fixture(scope="module")
def published(model_folders):
    """The dry runs of both folders (the command line, as a user runs it)."""
    root = model_folders["root"]
    out = {"lm": root / "publish-lm", "classifier": root / "publish-clf"}
    assert hub.main([str(model_folders["lm"]), "--repo-id", "me/elmo-tiny", "--dry-run",
                     "--output-dir", str(out["lm"])]) == 0
    assert hub.main([str(model_folders["classifier"]), "--repo-id", "me/elmo-tiny-sst", "--dry-run",
                     "--output-dir", str(out["classifier"])]) == 0
    return out


@pytest.fixture
def no_stored_login(monkeypatch, tmp_path):
    """No HF_TOKEN and a stored-login path that holds nothing."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-login" / "token"))


class HubRecorder:
    """Mocks of the Hub calls; records what `upload_folder` would send."""

    def __init__(self):
        self.calls: list[tuple[str, tuple, dict, str | None]] = []
        self.committed: list[str] | None = None

    def patches(self):
        recorder = self

        def create_repo(api, repo_id, **kwargs):
            recorder.calls.append(("create_repo", (repo_id,), kwargs, api.token))
            return RepoUrl(f"https://huggingface.co/{repo_id}")

        def create_branch(api, repo_id, **kwargs):
            recorder.calls.append(("create_branch", (repo_id,), kwargs, api.token))

        def create_commit(api, repo_id, operations, **kwargs):
            operations = list(operations)
            recorder.committed = sorted(op.path_in_repo for op in operations)
            recorder.calls.append(("create_commit", (repo_id,), kwargs, api.token))
            return CommitInfo(commit_url=f"https://huggingface.co/{repo_id}/commit/0123abc", commit_message="",
                              commit_description="", oid="0123abc", pr_url=None)

        return [
            mock.patch.object(HfApi, "create_repo", create_repo),
            mock.patch.object(HfApi, "create_branch", create_branch),
            mock.patch.object(HfApi, "create_commit", create_commit),
            mock.patch.object(HfApi, "_validate_yaml", lambda api, *a, **k: None),
            mock.patch.object(hub_hf_api, "is_xet_available", lambda: False),
        ]


@pytest.fixture
def hub_recorder():
    recorder = HubRecorder()
    patches = recorder.patches()
    for patch in patches:
        patch.start()
    yield recorder
    for patch in patches:
        patch.stop()


# --------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("repo_id", ["with space/name", "a/b/c", "name--with..dots", "-leading", "", "x" * 200])
def test_invalid_repo_id_is_rejected_before_anything_is_read(repo_id, tmp_path, hub_recorder):
    with pytest.raises(SystemExit, match="invalid repository id"):
        hub.main([str(tmp_path / "does-not-exist"), f"--repo-id={repo_id}"])
    assert hub_recorder.calls == []


@pytest.mark.parametrize("repo_id", ["elmo-tiny", "me/elmo-tiny", "org_name/elmo.tiny-v2"])
def test_valid_repo_ids_pass_the_validator(repo_id):
    assert hub.validate_repo_id(repo_id) == repo_id


def test_folder_that_is_not_a_model_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        hub.check_model_folder(tmp_path / "missing")
    with pytest.raises(ValueError, match="no config.json"):
        hub.check_model_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="model_type is 'bert'"):
        hub.check_model_folder(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        hub.check_model_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "elmo"}))
    with pytest.raises(ValueError, match="no model.safetensors"):
        hub.check_model_folder(tmp_path)


def test_missing_tokenizer_is_rejected_before_any_upload(model_folders, tmp_path, hub_recorder, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    folder = tmp_path / "no-tokenizer"
    shutil.copytree(model_folders["lm"], folder)
    (folder / "tokenizer_config.json").unlink()
    with pytest.raises(SystemExit, match="no tokenizer"):
        hub.main([str(folder), "--repo-id", "me/x"])
    assert hub_recorder.calls == []


def test_pickled_weights_are_refused_with_an_explanation(model_folders, tmp_path):
    folder = tmp_path / "pickled"
    shutil.copytree(model_folders["lm"], folder)
    hub.refuse_pickled_weights(folder)  # the optimizer/training-args pickles of a run are not weights: accepted
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    with pytest.raises(ValueError, match=r"pickled weights \['pytorch_model.bin'\].*arbitrary code"):
        hub.refuse_pickled_weights(folder)
    with pytest.raises(SystemExit, match="pytorch_model.bin"):
        hub.main([str(folder), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_no_token_without_dry_run_fails_before_any_upload(model_folders, tmp_path, hub_recorder, no_stored_login):
    # The folder holds `token` and `.env` files with a token: they must not be used.
    with pytest.raises(SystemExit, match="no Hugging Face token"):
        hub.main([str(model_folders["lm"]), "--repo-id", "me/x", "--output-dir", str(tmp_path / "out")])
    assert hub_recorder.calls == []
    assert not (tmp_path / "out").exists()


def test_token_file_inside_the_model_folder_is_refused(model_folders, tmp_path, hub_recorder, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(model_folders["lm"] / "token"))
    with pytest.raises(SystemExit, match="refusing to read a token from it"):
        hub.main([str(model_folders["lm"]), "--repo-id", "me/x", "--output-dir", str(tmp_path / "out")])
    assert hub_recorder.calls == []


def test_output_folder_with_foreign_files_is_not_overwritten(model_folders, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(SystemExit, match="did not write"):
        hub.main([str(model_folders["lm"]), "--repo-id", "me/x", "--dry-run", "--output-dir", str(out)])
    assert (out / "precious.txt").read_text() == "keep me"
    with pytest.raises(SystemExit, match="outside the model folder"):
        hub.main([str(model_folders["lm"]), "--repo-id", "me/x", "--dry-run",
                  "--output-dir", str(model_folders["lm"] / "hub")])


def test_secret_in_a_file_to_publish_is_refused(tmp_path):
    (tmp_path / "README.md").write_text(f"my token is {FOLDER_TOKEN}")
    with pytest.raises(ValueError, match="README.md contains what looks like a Hugging Face access token"):
        hub.scan_for_secrets(tmp_path, ["README.md"])


def test_upload_plan_refuses_files_outside_the_allow_list(published, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(published["lm"], folder)
    (folder / "optimizer.pt").write_bytes(b"x")
    with pytest.raises(ValueError, match="pickled weights|outside the upload allow-list"):
        hub.plan_upload(folder)
    (folder / "optimizer.pt").unlink()
    (folder / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"outside the upload allow-list: \['notes.txt'\]"):
        hub.plan_upload(folder)


# --------------------------------------------------------------------------------------------- evaluation readers
@pytest.mark.parametrize("payload, expected", [
    ({"validation_perplexity_forward": 80.1, "validation_perplexity_backward": 82.0, "validation_perplexity": 81.0},
     {"validation": {"forward": 80.1, "backward": 82.0, "average": 81.0}}),
    ({"test": {"perplexity": {"fwd": 70, "bwd": 72, "avg": 71}}, "eval_ppl": 75},
     {"test": {"forward": 70.0, "backward": 72.0, "average": 71.0}, "validation": {"average": 75.0}}),
    ({"dev/PerplexityForward": 90, "heldout perplexity backward": 95, "unigramPerplexity": 800,
      "untrained": {"validation_perplexity": 262.0}, "config": {"perplexity_target": 3}},
     {"validation": {"forward": 90.0, "unigram": 800.0}, "test": {"backward": 95.0}}),
])
def test_lm_eval_reader_reads_every_documented_layout(payload, expected, tmp_path):
    path = tmp_path / "eval_results.json"
    path.write_text(json.dumps(payload))
    assert hub.read_lm_eval_results(path).perplexity == expected


def test_lm_eval_reader_reads_the_file_written_by_pretraining(tmp_path):
    path = tmp_path / "eval_results.json"
    path.write_text(json.dumps(PRETRAIN_EVAL_RESULTS))
    results = hub.read_lm_eval_results(path)
    assert results.perplexity == {
        "validation": {"average": 81.37, "forward": 80.5, "backward": 82.25, "unigram": 640.0,
                       "unigram_forward": 630.0, "unigram_backward": 650.0},
        "test": {"average": 79.99, "forward": 79.0, "backward": 81.0},
    }
    assert results.num_tokens == {"validation": 1234, "test": 999}


def test_lm_eval_reader_rejects_conflicts_bad_values_and_files_without_perplexity(tmp_path):
    path = tmp_path / "eval_results.json"
    path.write_text(json.dumps({"validation_ppl": 80.0, "validation": {"perplexity": 81.0}}))
    with pytest.raises(ValueError, match="different average perplexities of the validation split"):
        hub.read_lm_eval_results(path)
    path.write_text(json.dumps({"test_perplexity": "low"}))
    with pytest.raises(ValueError, match="'test_perplexity' must be a finite number"):
        hub.read_lm_eval_results(path)
    path.write_text(json.dumps({"loss": 3.2}))
    with pytest.raises(ValueError, match="holds no perplexity"):
        hub.read_lm_eval_results(path)
    with pytest.raises(ValueError, match="does not exist"):
        hub.read_lm_eval_results(tmp_path / "missing.json")


#: The layout written by ``elmo evaluate`` (modeling_elmo/evaluation/report.py): a flat ``results`` list plus the
#: same numbers nested under ``tasks`` and an untrained model's numbers that must not be reported.
SUITE_PAYLOAD = {
    "format_version": 1,
    "model": "elmo-tiny-sst",
    "settings": {"probe_epochs": 3, "accuracy_target": 0.5},
    "datasets": {"probe-sentiment": "sentiment-sst2 dev", "wsd-probe": "wsd_small"},
    "results": [
        {"task": "perplexity", "dataset": "lm-corpus heldout", "metric": "perplexity", "value": 120.5, "layer": None},
        {"task": "perplexity", "dataset": "lm-corpus heldout", "metric": "perplexity_forward", "value": 118.0,
         "layer": None},
        {"task": "perplexity", "dataset": "lm-corpus heldout", "metric": "unigram_perplexity", "value": 700.0,
         "layer": None},
        {"task": "wsd-probe", "dataset": "wsd_small", "metric": "nn_sense_accuracy", "value": 0.71, "layer": 2},
        {"task": "wsd-probe", "dataset": "wsd_small", "metric": "nn_sense_accuracy", "value": None, "layer": 0},
        {"task": "wsd-probe", "dataset": "wsd_small", "metric": "nn_sense_ties", "value": 12, "layer": 2},
        {"task": "probe-sentiment", "dataset": "sentiment-sst2 dev", "metric": "accuracy", "value": 0.78,
         "layer": "mix"},
    ],
    "tasks": {"probe-sentiment": {"layers": {"mix": {"accuracy": 0.78}}, "seconds": 3.0}},
    "untrained": {"tasks": {"probe-sentiment": {"layers": {"mix": {"accuracy": 0.55}}}}},
    "untrained_results": [{"task": "probe-sentiment", "dataset": "x", "metric": "accuracy", "value": 0.55}],
}


def test_suite_reader_reads_the_results_list_and_skips_counts_and_untrained_models(tmp_path):
    path = tmp_path / "eval_results.json"
    path.write_text(json.dumps(SUITE_PAYLOAD))
    rows = {(r.task, r.metric, r.detail, r.value) for r in hub.read_suite_results(path)}
    assert rows == {
        ("perplexity", "perplexity", "average", 120.5),
        ("perplexity", "perplexity", "forward", 118.0),
        ("perplexity", "perplexity", "unigram", 700.0),
        ("wsd-probe", "accuracy", "layer 2, nn_sense_accuracy", 0.71),
        ("probe-sentiment", "accuracy", "layer mix", 0.78),
    }


def test_suite_reader_reads_nested_and_record_layouts(tmp_path):
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({
        "pos": {"ud-ewt": {"dev": {"layer_1": {"accuracy": 0.95, "num_examples": 2000}}}},
        "runs": [{"task": "sentiment", "dataset": "sst2", "split": "validation", "acc": 0.81, "seconds": 4.0},
                 {"probe": "chunking", "metric": "f1", "score": 0.9}],
        "timings": {"pos": {"accuracy": 1.0}},
    }))
    rows = sorted((r.task, r.dataset, r.split, r.metric, r.detail, r.value, r.task_type)
                  for r in hub.read_suite_results(path))
    assert rows == [
        ("chunking", "chunking", None, "f1", "", 0.9, "token-classification"),
        ("pos", "ud-ewt", "validation", "accuracy", "layer_1", 0.95, "token-classification"),
        ("sentiment", "sst2", "validation", "accuracy", "", 0.81, "text-classification"),
    ]
    path.write_text(json.dumps({"pos": {"num_examples": 3}}))
    with pytest.raises(ValueError, match="holds no evaluation result"):
        hub.read_suite_results(path)
    path.write_text(json.dumps({"pos": {"accuracy": "high"}}))
    with pytest.raises(ValueError, match="'pos/accuracy' must be a finite number"):
        hub.read_suite_results(path)


# --------------------------------------------------------------------------------------------- model cards
def card_inputs(**kwargs) -> hub.CardInputs:
    return hub.CardInputs(**kwargs)


def test_template_missing_a_required_field_is_an_error_naming_it(tmp_path):
    template = tmp_path / "card.md"
    template.write_text("---\n{{ card_data }}\n---\n# {{ model_id }}\n{{ training_section }}\n")
    with pytest.raises(ValueError, match=r"missing the field\(s\) \{\{ evaluation_section \}\}"):
        hub.build_model_card(make_config(), "me/x", card_inputs(template=str(template)), num_parameters=10)


def test_template_using_a_field_nobody_fills_is_an_error_naming_it(tmp_path):
    template = tmp_path / "card.md"
    template.write_text("---\n{{ card_data }}\n---\n# {{ model_id }}\n{{ evaluation_section }}\n"
                        "{{ training_section }}\n{{ favourite_colour }}\n")
    with pytest.raises(ValueError, match="uses the field\\(s\\) favourite_colour"):
        hub.build_model_card(make_config(), "me/x", card_inputs(template=str(template)), num_parameters=10)


def test_card_kind_is_detected_from_the_head_the_metadata_or_a_bare_bilm():
    assert hub.detect_card_kind(make_config(architectures=["ElmoForTokenClassification"]), None) == "classifier"
    assert hub.detect_card_kind(make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=50), None) == "pretrained"
    assert hub.detect_card_kind(make_config(architectures=["ElmoModel"]), None) == "converted"  # vocab_size 4
    assert hub.detect_card_kind(make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=50),
                                {"weights_file": "elmo_weights.hdf5"}) == "converted"


def test_token_classifier_card_uses_the_token_classification_pipeline_tag():
    config = make_config(architectures=["ElmoForTokenClassification"], id2label={0: "NOUN", 1: "VERB"})
    card, kind = hub.build_model_card(config, "me/elmo-pos", card_inputs(), num_parameters=10)
    assert kind == "classifier" and card.data.pipeline_tag == "token-classification"
    assert "`ElmoForTokenClassification`" in card.text and "0: NOUN, 1: VERB" in card.text


def test_card_kind_must_be_known():
    with pytest.raises(ValueError, match="card kind must be"):
        hub.build_model_card(make_config(), "me/x", card_inputs(kind="poem"), num_parameters=10)


def test_card_without_evaluation_results_says_so_and_has_no_model_index(tmp_path):
    config = make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=40)
    card, kind = hub.build_model_card(config, "me/elmo-none", card_inputs(), num_parameters=123)
    assert kind == "pretrained"
    assert "No evaluation results were supplied" in card.text
    assert card.data.eval_results is None and "model-index" not in card.data.to_yaml()
    assert "perplexity" not in card.data.to_yaml()


@pytest.mark.parametrize("kind", hub.CARD_KINDS)
def test_every_template_renders_a_card_with_valid_metadata(kind, tmp_path):
    config = make_config(architectures=["ElmoForSequenceClassification" if kind == "classifier" else "ElmoModel"],
                         id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    card, _ = hub.build_model_card(config, "me/elmo-card", card_inputs(kind=kind, base_model="me/elmo-base"),
                                   num_parameters=1000)
    path = tmp_path / "README.md"
    card.save(path)
    loaded = ModelCard.load(path)
    assert loaded.data.library_name == "transformers"
    assert "custom_code" in loaded.data.tags and loaded.data.license == "apache-2.0"
    assert loaded.data.language == ["en"]
    assert loaded.data.pipeline_tag == ("text-classification" if kind == "classifier" else "feature-extraction")
    assert loaded.data.base_model == "me/elmo-base"
    for section in ("## How to use", "## Limitations", "Shallow bidirectionality", "Sentence-level context",
                    "Recurrence", "trust_remote_code", "@inproceedings{peters-etal-2018-deep", "## Evaluation"):
        assert section in loaded.text, section
    assert "{{" not in loaded.content and "}}" not in loaded.content


# --------------------------------------------------------------------------------------------- shipped code
def test_shipped_code_imports_only_torch_transformers_numpy_tokenizers_and_each_other():
    problems = hub.audit_shipped_code(hub.PACKAGE_DIR / name for name in hub.SHIPPED_CODE_FILES)
    assert problems == []


def test_code_audit_catches_network_pickle_foreign_and_file_access(tmp_path):
    bad = tmp_path / "modeling_elmo.py"
    bad.write_text(textwrap.dedent("""
        import socket
        import requests
        from urllib.request import urlopen
        import pickle
        from .evaluation import metrics
        from ..other import x
        import torch
        CONFIG = open("settings.txt").read()
        def later():
            return torch.load("weights.bin")
    """))
    problems = "\n".join(hub.audit_shipped_code([bad]))
    for expected in ("imports socket", "imports requests", "imports urllib.request", "imports pickle",
                     "relative import of .evaluation", "relative import of ..other", "opens a file at import time",
                     "calls torch.load"):
        assert expected in problems, expected


IMPORT_GUARD = textwrap.dedent("""
    import ast, builtins, importlib, io, socket, sys
    from pathlib import Path

    package = Path(sys.argv[1])
    # The allowed third-party libraries may do what they like when imported: import every module the shipped
    # files name (and the names they take from it) before the guard goes up.
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    getattr(module, alias.name, None)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)

    def refuse(*args, **kwargs):
        raise AssertionError(f"blocked at import time: {args[:1]}")

    class NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            refuse("socket.socket")

    builtins.open = io.open = refuse
    socket.socket = NoSocket
    socket.create_connection = refuse
    sys.dont_write_bytecode = True
    sys.path.insert(0, str(package.parent))
    for name in ("configuration_elmo", "tokenization_elmo", "modeling_elmo"):
        importlib.import_module(f"{package.name}.{name}")
    if sys.argv[2:] == ["--build-model"]:  # building a model opens nothing either
        config = sys.modules[f"{package.name}.configuration_elmo"].ElmoConfig(hidden_size=8, cell_size=16,
            char_cnn_filters=[[1, 4]], num_highway_layers=0)
        sys.modules[f"{package.name}.modeling_elmo"].ElmoModel(config)
    print("IMPORT-OK")
""")


def test_shipped_code_opens_no_file_and_no_socket_at_import(tmp_path):
    package = tmp_path / "hub_code_under_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in hub.SHIPPED_CODE_FILES:
        shutil.copyfile(hub.PACKAGE_DIR / name, package / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", IMPORT_GUARD, str(package), "--build-model"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "IMPORT-OK" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("sneaky", ["_SNEAKY = open(__file__).read()",
                                    "import socket\n_SNEAKY = socket.socket()",
                                    "import pathlib\n_SNEAKY = pathlib.Path(__file__).read_text()"])
def test_import_guard_catches_a_file_or_socket_opened_at_import(sneaky, tmp_path):
    package = tmp_path / "hub_code_bad"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "configuration_elmo.py").write_text("import math\n" + sneaky + "\n")
    (package / "tokenization_elmo.py").write_text("import re\n")
    (package / "modeling_elmo.py").write_text("from .configuration_elmo import math\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", IMPORT_GUARD, str(package)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "blocked at import time" in result.stderr, result.stderr[-2000:]


# --------------------------------------------------------------------------------------------- dry run
def test_dry_run_writes_exactly_the_allow_list(published):
    assert hub.list_folder(published["lm"]) == EXPECTED_LM_FILES
    assert hub.list_folder(published["classifier"]) == [
        "README.md", "config.json", "configuration_elmo.py", "lstm_kernels.py", "model.safetensors", "modeling_elmo.py",
        "tokenization_elmo.py", "tokenizer_config.json", "vocab.txt"]
    for name in hub.SHIPPED_CODE_FILES:  # the code is this package's, byte for byte
        assert (published["lm"] / name).read_bytes() == (hub.PACKAGE_DIR / name).read_bytes()
    auto_map = json.loads((published["lm"] / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "configuration_elmo.ElmoConfig",
        "AutoModel": "modeling_elmo.ElmoModel",
        "AutoModelForPreTraining": "modeling_elmo.ElmoForBidirectionalLM",
        "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
        "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
    }
    tokenizer_config = json.loads((published["lm"] / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"] == {"AutoTokenizer": ["tokenization_elmo.ElmoTokenizer", None]}


def test_dry_run_keeps_the_weights_and_vocabulary_exactly(model_folders, published):
    for key in ("lm", "classifier"):
        original, copy = load_file(model_folders[key] / "model.safetensors"), load_file(published[key] / "model.safetensors")
        assert original.keys() == copy.keys()
        for name in original:
            assert torch.equal(original[name], copy[name]), name
    assert (published["lm"] / "vocab.txt").read_text() == (model_folders["lm"] / "vocab.txt").read_text()


def test_dry_run_prints_the_plan_and_touches_no_network(model_folders, tmp_path, capsys, hub_recorder,
                                                        no_stored_login, monkeypatch):
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("the dry run opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    out = tmp_path / "plan"
    assert hub.main([str(model_folders["lm"]), "--repo-id", "me/elmo-tiny", "--dry-run", "--private",
                     "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in EXPECTED_LM_FILES:
        assert f"  {name}  (" in printed
    assert "Dry run: would create me/elmo-tiny (private=True)" in printed
    assert hub_recorder.calls == []
    # A second dry run into the same folder replaces it (it holds only what this tool writes).
    assert hub.main([str(model_folders["lm"]), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir",
                     str(out)]) == 0
    assert hub.list_folder(out) == EXPECTED_LM_FILES


def test_published_files_hold_no_secret_and_no_local_path(published):
    for key in ("lm", "classifier"):
        for name in hub.list_folder(published[key]):
            if name.endswith((".json", ".md", ".txt", ".py")):
                text = (published[key] / name).read_text(encoding="utf-8")
                assert FOLDER_TOKEN not in text and "hf_***" not in text, name
                assert "/home/someone" not in text, name


# --------------------------------------------------------------------------------------------- model card of a real model
def test_card_metadata_round_trips_and_its_model_index_holds_the_json_numbers(published):
    card = ModelCard.load(published["lm"] / "README.md")
    data = card.data
    again = ModelCardData(**data.to_dict())  # the model-index is parsed back into EvalResult objects
    assert again.to_dict() == data.to_dict()
    assert data.library_name == "transformers" and data.pipeline_tag == "feature-extraction"
    assert "custom_code" in data.tags and data.license == "apache-2.0" and data.datasets == ["tiny_corpus"]
    assert data.base_model is None
    values = {(r.dataset_split, r.metric_name): r.metric_value for r in data.eval_results}
    assert values == {
        ("validation", "Perplexity (forward)"): 80.5, ("validation", "Perplexity (backward)"): 82.25,
        ("validation", "Perplexity (average)"): 81.37, ("test", "Perplexity (forward)"): 79.0,
        ("test", "Perplexity (backward)"): 81.0, ("test", "Perplexity (average)"): 79.99,
    }
    assert all(r.metric_type == "perplexity" and r.dataset_name == "tiny_corpus" for r in data.eval_results)
    assert "| tiny_corpus | test | 79 | 81 | 79.99 | — | 999 |" in card.text
    assert "| tiny_corpus | validation | 80.5 | 82.25 | 81.37 | 640 | 1234 |" in card.text  # unigram: text only
    assert "| args.optimizer | adagrad |" in card.text and "| args.train_file | train.txt |" in card.text
    assert "| global_step | 100 |" in card.text
    assert "hub_token" not in card.text
    assert "![perplexity](plots/perplexity.png)" in card.text


def test_classifier_card_names_its_base_model_labels_and_probe_results(published):
    card = ModelCard.load(published["classifier"] / "README.md")
    data = card.data
    assert data.pipeline_tag == "text-classification" and data.base_model == "me/elmo-tiny"
    assert data.datasets == ["sst2"]
    assert "0: negative, 1: positive" in card.text
    results = {(r.task_name, r.metric_type, r.metric_name, r.metric_value) for r in data.eval_results}
    assert results == {
        ("Bidirectional language modeling", "perplexity", "Perplexity (average)", 120.5),
        ("Bidirectional language modeling", "perplexity", "Perplexity (forward)", 118.0),
        ("wsd-probe", "accuracy", "Accuracy (layer 2, nn_sense_accuracy)", 0.71),
        ("probe-sentiment", "accuracy", "Accuracy (layer mix)", 0.78),
    }


# --------------------------------------------------------------------------------------------- upload (mocked)
def test_upload_sends_exactly_the_allow_list_with_the_environment_token(model_folders, tmp_path, hub_recorder,
                                                                        monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-login" / "token"))
    assert hub.main([str(model_folders["lm"]), "--repo-id", "me/elmo-tiny", "--private", "--revision", "v1",
                     "--commit-message", "First ELMo"]) == 0
    assert hub_recorder.committed == EXPECTED_LM_FILES
    names = [call[0] for call in hub_recorder.calls]
    assert names == ["create_repo", "create_branch", "create_commit"]
    create_repo, create_branch, commit = hub_recorder.calls
    assert create_repo[1] == ("me/elmo-tiny",)
    assert create_repo[2]["private"] is True and create_repo[2]["exist_ok"] is True
    assert create_branch[2]["branch"] == "v1"
    assert commit[2]["revision"] == "v1" and commit[2]["commit_message"] == "First ELMo"
    assert {call[3] for call in hub_recorder.calls} == {FAKE_TOKEN}  # never the token planted in the folder
    assert "Uploaded to https://huggingface.co/me/elmo-tiny/commit/0123abc" in capsys.readouterr().out


def test_upload_uses_the_stored_login_when_no_environment_token(model_folders, tmp_path, hub_recorder, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    login = tmp_path / "login" / "token"
    login.parent.mkdir()
    login.write_text(FAKE_TOKEN)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(login))
    assert hub.main([str(model_folders["classifier"]), "--repo-id", "me/elmo-tiny-sst"]) == 0
    assert hub_recorder.committed == [
        "README.md", "config.json", "configuration_elmo.py", "lstm_kernels.py", "model.safetensors", "modeling_elmo.py",
        "tokenization_elmo.py", "tokenizer_config.json", "vocab.txt"]
    assert [call[0] for call in hub_recorder.calls] == ["create_repo", "create_commit"]
    assert {call[3] for call in hub_recorder.calls} == {FAKE_TOKEN}


# --------------------------------------------------------------------------------------------- fresh-process load
FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import torch
    from safetensors.torch import save_file
    from transformers import (AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer,
                              DataCollatorWithPadding, Trainer, TrainingArguments, pipeline)

    lm_dir, clf_dir, out_file = sys.argv[1:4]
    sentences = json.loads(sys.argv[4])
    torch.set_num_threads(1)
    config = AutoConfig.from_pretrained(lm_dir, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(lm_dir, trust_remote_code=True)
    model = AutoModel.from_pretrained(lm_dir, trust_remote_code=True).eval()
    classifier = AutoModelForSequenceClassification.from_pretrained(clf_dir, trust_remote_code=True).eval()
    base_as_classifier = AutoModelForSequenceClassification.from_pretrained(lm_dir, trust_remote_code=True,
                                                                            num_labels=3).eval()
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    texts = [" ".join(words) for words in sentences]
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states
        logits = classifier(**tokenizer(texts, padding=True, return_tensors="pt")).logits
        inner = base_as_classifier.elmo(**batch).last_hidden_state
    extractor = pipeline("feature-extraction", model=lm_dir, trust_remote_code=True)
    features = torch.tensor(extractor(texts[0]))

    # The Trainer example of the model card, shortened to one step.
    from datasets import Dataset
    data = Dataset.from_dict({"text": texts, "label": [0, 1, 2]})
    data = data.map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])
    args = TrainingArguments(out_file + ".trainer", per_device_train_batch_size=2, max_steps=1, report_to="none",
                             use_cpu=True, save_strategy="no", disable_tqdm=True)
    result = Trainer(model=base_as_classifier, args=args, train_dataset=data,
                     data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer).train()

    tensors = {f"hidden_{i}": h.contiguous() for i, h in enumerate(hidden)}
    tensors.update(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], logits=logits,
                   classifier_elmo=inner, features=features)
    save_file(tensors, out_file)
    print(json.dumps({
        "config_class": type(config).__module__ + "." + type(config).__name__,
        "model_class": type(model).__module__ + "." + type(model).__name__,
        "classifier_class": type(classifier).__module__ + "." + type(classifier).__name__,
        "tokenizer_class": type(tokenizer).__module__ + "." + type(tokenizer).__name__,
        "package_imported": any(module is not None and (name == "modeling_elmo" or name.startswith("modeling_elmo."))
                            for name, module in sys.modules.items()),
        "hidden_size": config.hidden_size,
        "train_loss_finite": bool(torch.isfinite(torch.tensor(result.training_loss))),
    }))
""")


def test_published_folder_loads_in_a_fresh_process_with_the_same_outputs(model_folders, published, tmp_path):
    out_file = tmp_path / "outputs.safetensors"
    info = run_without_package(FRESH_PROCESS, published["lm"], published["classifier"], out_file, json.dumps(SENTENCES),
                               workdir=tmp_path / "elsewhere")
    assert info["package_imported"] is False
    for key in ("config_class", "model_class", "classifier_class", "tokenizer_class"):
        assert info[key].startswith("transformers_modules."), info[key]  # the Hub code, not this package
    assert info["model_class"].endswith("modeling_elmo.ElmoModel") and info["hidden_size"] == 16
    assert info["train_loss_finite"] is True
    got = load_file(out_file)

    # The same computations with the original objects in this process.
    tokenizer, lm, classifier = model_folders["tokenizer"], model_folders["lm_model"], model_folders["classifier_model"]
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    texts = [" ".join(words) for words in SENTENCES]
    with torch.no_grad():
        hidden = lm.elmo(**batch, output_hidden_states=True).hidden_states
        logits = classifier(**tokenizer(texts, padding=True, return_tensors="pt")).logits
        features = lm.elmo(**tokenizer([texts[0]], return_tensors="pt")).last_hidden_state
    assert torch.equal(got["input_ids"], batch["input_ids"]) and torch.equal(got["attention_mask"], batch["attention_mask"])
    assert len([k for k in got if k.startswith("hidden_")]) == len(hidden) == 3
    for i, layer in enumerate(hidden):
        assert_same_numbers(got[f"hidden_{i}"], layer, what=f"layer {i}")
    assert_same_numbers(got["logits"], logits, what="classifier logits")
    assert_same_numbers(got["classifier_elmo"], hidden[-1], what="the classifier's biLM")
    assert_same_numbers(got["features"], features, what="feature-extraction pipeline")


def test_script_reports_bad_input_as_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "push_to_hub.py"), str(tmp_path),
                             "--repo-id", "me/x", "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"push_to_hub: error: {tmp_path} is not a model folder: it has no config.json."


def test_extra_plots_are_published_under_safe_names(model_folders, tmp_path):
    odd = tmp_path / "_Loss curve (v2).PNG"
    write_png(odd)
    out = tmp_path / "out"
    assert hub.main([str(model_folders["lm"]), "--repo-id", "me/x", "--dry-run", "--output-dir", str(out),
                     "--plot", str(odd)]) == 0
    assert [n for n in hub.list_folder(out) if n.startswith("plots/")] == ["plots/Loss_curve__v2_.png",
                                                                          "plots/perplexity.png"]
    assert (out / "plots" / "Loss_curve__v2_.png").read_bytes() == odd.read_bytes()
    assert "![Loss_curve__v2_](plots/Loss_curve__v2_.png)" in (out / "README.md").read_text()
    with pytest.raises(SystemExit, match="is not an existing"):
        hub.main([str(model_folders["lm"]), "--repo-id", "me/x", "--dry-run", "--output-dir", str(out),
                  "--plot", str(tmp_path / "missing.png")])


@pytest.mark.slow
def test_wheel_ships_the_card_templates_and_the_installed_package_finds_them(tmp_path):
    """A wheel install (no source tree next to the package) still has the templates `elmo push` renders."""
    wheel_dir, site, source = tmp_path / "wheel", tmp_path / "site", tmp_path / "source"
    # a copy without build outputs: setuptools would reuse a stale build/lib of the working tree
    shutil.copytree(REPO_ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "runs", "outputs", "results", ".pytest_cache"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", str(source), "-w", str(wheel_dir)],
                   check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = wheel_dir.glob("modeling_elmo-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, cwd=tmp_path)
    probe = ("import modeling_elmo.hub as h; print(h.__file__); "
             "print(*[h.default_template_path(k) for k in h.CARD_KINDS], sep='\\n')")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path, env=env)
    module_file, *templates = out.stdout.split()
    assert Path(module_file).is_relative_to(site), "the installed wheel, not the source tree, must be imported"
    assert len(templates) == len(hub.CARD_KINDS)
    for template in map(Path, templates):
        assert template.is_relative_to(site / "modeling_elmo" / "model_cards")
        assert template.read_text(encoding="utf-8") == (REPO_ROOT / "model_cards" / template.name).read_text(encoding="utf-8")
