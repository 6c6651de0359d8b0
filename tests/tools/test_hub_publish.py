"""`modeling_elmo.hub.publish` and `modeling_elmo.hub.cli` (``elmo push``, ``scripts/push_to_hub.py``): input
checks, the allow-listed repository folder, the card of a real model folder, the upload, and loading the published
folder elsewhere.

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
from support import assert_same_numbers, in_the_public_form, run_without_package

from modeling_elmo import (
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoTokenizer,
    hub,
    save_model_folder,
)
from modeling_elmo.folders.run_folder import CODE_FILES, RunFolder
from modeling_elmo.hub.card import escape_markdown
from modeling_elmo.utils.results import (
    EvaluationResults,
    PerplexityResult,
    ScoreResult,
    UnigramBaselineResult,
    UntrainedComparison,
    write_results,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO_ROOT / "modeling_elmo"
FAKE_TOKEN = "hf_" + "Q" * 34  # the token of the environment in the upload tests
FOLDER_TOKEN = "hf_" + "Z" * 34  # a token planted in the model folder: it must never be used
SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["A", "naïve", "café", "!"], ["Short"]]
EXPECTED_LM_FILES = [
    "README.md",
    "config.json",
    "configuration_elmo.py",
    "model.safetensors",
    "modeling_elmo.py",
    "pipeline_elmo.py",
    "plots/perplexity.png",
    "tokenization_elmo.py",
    "tokenizer_config.json",
    "vocab.txt",
]


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


#: What ``elmo pretrain`` writes at the end of a run (``eval_results.json``).
PRETRAIN_RESULTS = EvaluationResults(
    model="elmo-tiny-lm",
    source="elmo pretrain",
    created="2026-12-01T10:00:00+00:00",
    perplexity=[
        PerplexityResult(
            dataset="tiny_corpus",
            split="validation",
            forward=80.5,
            backward=82.25,
            average=81.37,
            targets_per_direction=1234,
            examples=100,
            unk_rate=0.01,
            unigram=UnigramBaselineResult(
                forward=630.0, backward=650.0, average=640.0, fitted_on="training data", smoothing=1.0
            ),
        ),
        PerplexityResult(
            dataset="tiny_corpus",
            split="test",
            forward=79.0,
            backward=81.0,
            average=79.99,
            targets_per_direction=999,
            examples=80,
            unk_rate=0.01,
        ),
    ],
    details={"global_step": 100},
)
#: What ``elmo evaluate`` writes into ``evaluation/eval_results.json`` (here of the classifier).
SUITE_RESULTS = EvaluationResults(
    model="elmo-tiny-sst",
    source="elmo evaluate",
    created="2026-12-01T11:00:00+00:00",
    untrained_seed=0,
    scores=[
        ScoreResult(
            task="probe-sentiment",
            dataset="sentiment-sst2 dev",
            split="validation",
            representation="mix",
            metric="accuracy",
            value=0.78,
            examples=872,
            baseline=0.509,
            untrained=UntrainedComparison(
                value=0.55, trained_only_correct=250, untrained_only_correct=50, mcnemar_p_value=1e-30
            ),
        ),
        ScoreResult(
            task="wsd-probe",
            dataset="wsd_small",
            split="all",
            representation="layer 2",
            metric="accuracy",
            value=0.71,
            examples=300,
            baseline=0.33,
        ),
    ],
    details={"settings": {"probe_epochs": 3}},
)


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
    write_results(RunFolder(lm_dir).eval_results_file, PRETRAIN_RESULTS)
    RunFolder(lm_dir).write_training_metadata(
        {
            "global_step": 100,
            "tokens_seen": 51200,
            "parameters": 22533,
            "num_processes": 1,
            "args": {
                "dataset_name": "tiny_corpus",
                "train_file": ["/home/someone/private/train.txt"],
                "learning_rate": 0.2,
                "optimizer": "adagrad",
                "hub_token": FOLDER_TOKEN,
            },
            "versions": {"torch": "2.13.0"},
        }
    )
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
        make_config(
            vocab_size=tokenizer.vocab_size,
            num_labels=2,
            id2label={0: "negative", 1: "positive"},
            label2id={"negative": 0, "positive": 1},
        )
    ).eval()
    with torch.no_grad():  # a trained-looking head and mix, so the comparison is not against an initial state
        for parameter in classifier.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    clf_dir = root / "elmo-tiny-sst"
    save_model_folder(classifier, tokenizer, clf_dir)
    (clf_dir / "training_metadata.json").write_text(
        json.dumps({"datasets": ["sst2"], "base_model": "me/elmo-tiny", "epochs": 3})
    )
    write_results(RunFolder(clf_dir).evaluation.results_file, SUITE_RESULTS)
    (clf_dir / "evaluation" / "predictions.json").write_text(json.dumps({"predictions": [0, 1, 1]}))  # not results
    return {
        "root": root,
        "lm": lm_dir,
        "classifier": clf_dir,
        "lm_model": lm,
        "classifier_model": classifier,
        "tokenizer": tokenizer,
    }


@pytest.fixture(scope="module")
def published(model_folders):
    """The dry runs of both folders (the command line, as a user runs it)."""
    root = model_folders["root"]
    out = {"lm": root / "publish-lm", "classifier": root / "publish-clf"}
    assert (
        hub.main([str(model_folders["lm"]), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(out["lm"])])
        == 0
    )
    assert (
        hub.main(
            [
                str(model_folders["classifier"]),
                "--repo-id",
                "me/elmo-tiny-sst",
                "--dry-run",
                "--output-dir",
                str(out["classifier"]),
            ]
        )
        == 0
    )
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
            return CommitInfo(
                commit_url=f"https://huggingface.co/{repo_id}/commit/0123abc",
                commit_message="",
                commit_description="",
                oid="0123abc",
                pr_url=None,
            )

        return [
            mock.patch.object(HfApi, "create_repo", create_repo),
            mock.patch.object(HfApi, "create_branch", create_branch),
            mock.patch.object(HfApi, "create_commit", create_commit),
            mock.patch.object(HfApi, "_validate_yaml", lambda api, *a, **k: None),
        ] + (
            # huggingface_hub 1.x asks whether Xet uploads are available (0.x's HfApi does not ask there)
            [mock.patch.object(hub_hf_api, "is_xet_available", lambda: False)]
            if hasattr(hub_hf_api, "is_xet_available")
            else []
        )


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
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "elmo"}))
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert hub.check_model_folder(tmp_path).root == tmp_path  # a sharded model
    for name in ("config.json", "model.safetensors.index.json", "tokenizer_config.json"):
        (tmp_path / name).unlink()
    with pytest.raises(ValueError, match="is not a model folder: it is empty"):
        hub.check_model_folder(tmp_path)
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ValueError, match="is not a model folder: it has no config.json"):
        hub.check_model_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="holds a model of type 'bert'"):
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


def test_pickled_weights_stop_the_push_before_anything_is_written(model_folders, tmp_path):
    folder = tmp_path / "pickled"
    shutil.copytree(model_folders["lm"], folder)
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    with pytest.raises(SystemExit, match="pickled weights .*pytorch_model.bin"):
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
        hub.main(
            [
                str(model_folders["lm"]),
                "--repo-id",
                "me/x",
                "--dry-run",
                "--output-dir",
                str(model_folders["lm"] / "hub"),
            ]
        )


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


def test_results_that_do_not_follow_the_schema_stop_the_push_naming_the_file_and_field(model_folders, tmp_path):
    folder = tmp_path / "old-results"
    shutil.copytree(model_folders["lm"], folder)
    (folder / "eval_results.json").write_text(json.dumps({"validation": {"perplexity": 81.0}}))
    with pytest.raises(SystemExit, match=r"results file .*eval_results.json: missing field 'schema_version'"):
        hub.main([str(folder), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "out")])
    data = PRETRAIN_RESULTS.to_dict()
    data["perplexity"][0]["forward"] = "80.5"
    (folder / "eval_results.json").write_text(json.dumps(data))
    with pytest.raises(SystemExit, match=r"'perplexity\[0\].forward' must be a number, got '80.5'"):
        hub.main([str(folder), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------- dry run
def test_dry_run_writes_exactly_the_allow_list(published):
    assert hub.list_folder(published["lm"]) == EXPECTED_LM_FILES
    assert hub.list_folder(published["classifier"]) == [
        "README.md",
        "config.json",
        "configuration_elmo.py",
        "model.safetensors",
        "modeling_elmo.py",
        "pipeline_elmo.py",
        "tokenization_elmo.py",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    for name in CODE_FILES:  # the code is this package's, byte for byte
        assert (published["lm"] / name).read_bytes() == (PACKAGE_DIR / name).read_bytes()
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
        original, copy = (
            load_file(model_folders[key] / "model.safetensors"),
            load_file(published[key] / "model.safetensors"),
        )
        assert original.keys() == copy.keys()
        for name in original:
            assert torch.equal(original[name], copy[name]), name
    assert (published["lm"] / "vocab.txt").read_text() == (model_folders["lm"] / "vocab.txt").read_text()


def test_dry_run_prints_the_plan_and_touches_no_network(
    model_folders, tmp_path, capsys, hub_recorder, no_stored_login, monkeypatch
):
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("the dry run opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    out = tmp_path / "plan"
    assert (
        hub.main(
            [str(model_folders["lm"]), "--repo-id", "me/elmo-tiny", "--dry-run", "--private", "--output-dir", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    for name in EXPECTED_LM_FILES:
        assert f"  {name}  (" in printed
    assert "Dry run: would create me/elmo-tiny (private=True)" in printed
    assert hub_recorder.calls == []
    # A second dry run into the same folder replaces it (it holds only what this tool writes).
    assert hub.main([str(model_folders["lm"]), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(out)]) == 0
    assert hub.list_folder(out) == EXPECTED_LM_FILES


def test_published_files_hold_no_secret_and_no_local_path(published):
    for key in ("lm", "classifier"):
        for name in hub.list_folder(published[key]):
            if name.endswith((".json", ".md", ".txt", ".py")):
                text = (published[key] / name).read_text(encoding="utf-8")
                assert FOLDER_TOKEN not in text and "hf_***" not in text, name
                assert "/home/someone" not in text, name


# --------------------------------------------------------------------------------------------- model card of a real
# model
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
        ("validation", "Perplexity (forward)"): 80.5,
        ("validation", "Perplexity (backward)"): 82.25,
        ("validation", "Perplexity (average)"): 81.37,
        ("test", "Perplexity (forward)"): 79.0,
        ("test", "Perplexity (backward)"): 81.0,
        ("test", "Perplexity (average)"): 79.99,
    }
    assert all(r.metric_type == "perplexity" and r.dataset_name == "tiny_corpus" for r in data.eval_results)
    assert "| tiny_corpus | test | 79 | 81 | 79.99 | — | — | 999 | 1.0% |" in card.text
    assert (
        "| tiny_corpus | validation | 80.5 | 82.25 | 81.37 | 640 (fitted on training data) | — | 1234 | 1.0% |"
        in card.text
    )
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
    results = {(r.task_type, r.dataset_name, r.metric_type, r.metric_name, r.metric_value) for r in data.eval_results}
    assert results == {
        ("token-classification", "wsd_small", "accuracy", "Accuracy (layer 2)", 0.71),
        ("text-classification", "sentiment-sst2 dev", "accuracy", "Accuracy (mix)", 0.78),
    }
    assert (
        "| probe-sentiment | sentiment-sst2 dev | validation | mix | accuracy | 0.78 | 872 | 0.509 | 0.55 | 1e-30 |"
        in card.text
    )


def test_the_card_tells_the_files_shipped_the_training_files_their_licences_and_shows_one_perplexity_plot(
    model_folders, tmp_path, capsys
):
    """A run trained on files and a glob (no dataset name), with a research-only part, published under apache-2.0:
    the card lists exactly the Python files of the published folder, names the training files (the glob with its
    folder), their licences and a warning (printed too), and shows the training curve once."""
    run = tmp_path / "run"
    shutil.copytree(model_folders["lm"], run)
    RunFolder(run).write_training_metadata(
        {
            "global_step": 10,
            "args": {
                "train_file": ["/data/lm-corpus/gutenberg/*.txt", "/data/lm-corpus/masc.txt"],
                "data_license": ["gutenberg/*.txt=public-domain", "masc.txt=research-only"],
            },
        }
    )
    (run / "evaluation").mkdir()
    write_png(run / "evaluation" / "training_perplexity.png")  # the evaluation's copy of perplexity.png
    out = tmp_path / "hub"
    assert hub.main([str(run), "--repo-id", "me/elmo-run", "--dry-run", "--output-dir", str(out)]) == 0
    text = (out / "README.md").read_text(encoding="utf-8")
    shipped = sorted(p.name for p in out.glob("*.py"))
    assert (
        len(shipped) == 4  # configuration, modeling, pipeline, tokenization
        and f"This repository ships {len(shipped)} Python files: " + ", ".join(f"`{name}`" for name in shipped) + "."
        in text
    )
    assert "Training data: gutenberg/\\*.txt, masc.txt." in text and "not recorded" not in text
    assert "Data licences: gutenberg/\\*.txt: public-domain; masc.txt: research-only." in text
    warning = (
        "the model is published under apache-2.0, but the licence of part of its training data is unknown or "
        "restricts its use (masc.txt: research-only)"
    )
    assert f"**Warning:** {escape_markdown(warning)}" in text and warning in capsys.readouterr().err
    assert [n for n in hub.list_folder(out) if n.startswith("plots/")] == ["plots/perplexity.png"]
    assert text.count("![") == 1
    # the licences given to elmo push replace the recorded ones; all known and open: no warning
    again = tmp_path / "hub-again"
    assert (
        hub.main(
            [
                str(run),
                "--repo-id",
                "me/elmo-run",
                "--dry-run",
                "--output-dir",
                str(again),
                "--data-license",
                "cc-by-4.0",
            ]
        )
        == 0
    )
    text = (again / "README.md").read_text(encoding="utf-8")
    assert "Data licences: all training data: cc-by-4.0." in text and "Warning" not in text
    assert "licence" not in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- upload (mocked)
def test_upload_sends_exactly_the_allow_list_with_the_environment_token(
    model_folders, tmp_path, hub_recorder, monkeypatch, capsys
):
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-login" / "token"))
    assert (
        hub.main(
            [
                str(model_folders["lm"]),
                "--repo-id",
                "me/elmo-tiny",
                "--private",
                "--revision",
                "v1",
                "--commit-message",
                "First ELMo",
            ]
        )
        == 0
    )
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
        "README.md",
        "config.json",
        "configuration_elmo.py",
        "model.safetensors",
        "modeling_elmo.py",
        "pipeline_elmo.py",
        "tokenization_elmo.py",
        "tokenizer_config.json",
        "vocab.txt",
    ]
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


@pytest.mark.slow
def test_published_folder_loads_in_a_fresh_process_with_the_same_outputs(model_folders, published, tmp_path):
    out_file = tmp_path / "outputs.safetensors"
    info = run_without_package(
        FRESH_PROCESS,
        published["lm"],
        published["classifier"],
        out_file,
        json.dumps(SENTENCES),
        workdir=tmp_path / "elsewhere",
    )
    assert info["package_imported"] is False
    for key in ("config_class", "model_class", "classifier_class", "tokenizer_class"):
        assert info[key].startswith("transformers_modules."), info[key]  # the Hub code, not this package
    assert info["model_class"].endswith("modeling_elmo.ElmoModel") and info["hidden_size"] == 32  # 2P
    assert info["train_loss_finite"] is True
    got = load_file(out_file)

    # The same computations with the original objects in this process.
    tokenizer, lm, classifier = model_folders["tokenizer"], model_folders["lm_model"], model_folders["classifier_model"]
    lm, classifier = in_the_public_form(lm), in_the_public_form(classifier)  # the form the shipped files run alone
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    texts = [" ".join(words) for words in SENTENCES]
    with torch.no_grad():
        hidden = lm.elmo(**batch, output_hidden_states=True).hidden_states
        logits = classifier(**tokenizer(texts, padding=True, return_tensors="pt")).logits
        features = lm.elmo(**tokenizer([texts[0]], return_tensors="pt")).last_hidden_state
    assert torch.equal(got["input_ids"], batch["input_ids"]) and torch.equal(
        got["attention_mask"], batch["attention_mask"]
    )
    assert len([k for k in got if k.startswith("hidden_")]) == len(hidden) == 3
    for i, layer in enumerate(hidden):
        assert_same_numbers(got[f"hidden_{i}"], layer, what=f"layer {i}")
    assert_same_numbers(got["logits"], logits, what="classifier logits")
    assert_same_numbers(got["classifier_elmo"], hidden[-1], what="the classifier's biLM")
    assert_same_numbers(got["features"], features, what="feature-extraction pipeline")


@pytest.mark.slow
def test_script_reports_bad_input_as_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "push_to_hub.py"),
            str(tmp_path),
            "--repo-id",
            "me/x",
            "--dry-run",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"elmo push: error: {tmp_path} is not a model folder: it is empty."


def test_extra_plots_are_published_under_safe_names(model_folders, tmp_path):
    odd = tmp_path / "_Loss curve (v2).PNG"
    write_png(odd)
    out = tmp_path / "out"
    assert (
        hub.main(
            [str(model_folders["lm"]), "--repo-id", "me/x", "--dry-run", "--output-dir", str(out), "--plot", str(odd)]
        )
        == 0
    )
    assert [n for n in hub.list_folder(out) if n.startswith("plots/")] == [
        "plots/Loss_curve__v2_.png",
        "plots/perplexity.png",
    ]
    assert (out / "plots" / "Loss_curve__v2_.png").read_bytes() == odd.read_bytes()
    assert "![Loss_curve__v2_](plots/Loss_curve__v2_.png)" in (out / "README.md").read_text()
    with pytest.raises(SystemExit, match="is not an existing"):
        hub.main(
            [
                str(model_folders["lm"]),
                "--repo-id",
                "me/x",
                "--dry-run",
                "--output-dir",
                str(out),
                "--plot",
                str(tmp_path / "missing.png"),
            ]
        )


@pytest.mark.slow
def test_wheel_ships_the_card_templates_and_the_installed_package_finds_them(tmp_path, installed_wheel):
    """A wheel install (no source tree next to the package) still has the templates `elmo push` renders."""
    site = installed_wheel
    probe = (
        "import modeling_elmo.hub as h; print(h.__file__); "
        "print(*[h.default_template_path(k) for k in h.CARD_KINDS], sep='\\n')"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path, env=env
    )
    module_file, *templates = out.stdout.split()
    assert Path(module_file).is_relative_to(site), "the installed wheel, not the source tree, must be imported"
    assert len(templates) == len(hub.CARD_KINDS)
    for template in map(Path, templates):
        assert template.is_relative_to(site / "modeling_elmo" / "model_cards")
        assert template.read_text(encoding="utf-8") == (REPO_ROOT / "model_cards" / template.name).read_text(
            encoding="utf-8"
        )
