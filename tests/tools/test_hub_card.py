"""`modeling_elmo.hub.card`: the model card's kind, template checks, metadata, and its numbers taken from the results
schema (the model's own numbers in the ``model-index``; baselines and untrained models in the text only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import ModelCard, ModelCardData

from modeling_elmo import ElmoConfig
from modeling_elmo.hub.card import CARD_KINDS, MIN_INDEXED_EXAMPLES, CardInputs, build_model_card, detect_card_kind
from modeling_elmo.utils.results import (
    EvaluationResults,
    PerplexityResult,
    ScoreResult,
    UnigramBaselineResult,
    UntrainedComparison,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def make_config(**overrides) -> ElmoConfig:
    config = ElmoConfig.from_json_file(str(REPO_ROOT / "configuration" / "elmo-tiny.json"))
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def test_template_missing_a_required_field_is_an_error_naming_it(tmp_path):
    template = tmp_path / "card.md"
    template.write_text("---\n{{ card_data }}\n---\n# {{ model_id }}\n{{ training_section }}\n")
    with pytest.raises(ValueError, match=r"missing the field\(s\) \{\{ evaluation_section \}\}"):
        build_model_card(make_config(), "me/x", CardInputs(template=str(template)), num_parameters=10)


def test_template_using_a_field_nobody_fills_is_an_error_naming_it(tmp_path):
    template = tmp_path / "card.md"
    template.write_text(
        "---\n{{ card_data }}\n---\n# {{ model_id }}\n{{ evaluation_section }}\n"
        "{{ training_section }}\n{{ favourite_colour }}\n"
    )
    with pytest.raises(ValueError, match="uses the field\\(s\\) favourite_colour"):
        build_model_card(make_config(), "me/x", CardInputs(template=str(template)), num_parameters=10)


def test_card_kind_is_detected_from_the_head_a_conversion_or_a_bare_bilm():
    assert detect_card_kind(make_config(architectures=["ElmoForTokenClassification"])) == "classifier"
    assert detect_card_kind(make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=50)) == "pretrained"
    assert detect_card_kind(make_config(architectures=["ElmoModel"])) == "converted"  # vocab_size 4
    assert (
        detect_card_kind(make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=50), converted=True)
        == "converted"
    )


def test_token_classifier_card_uses_the_token_classification_pipeline_tag():
    config = make_config(architectures=["ElmoForTokenClassification"], id2label={0: "NOUN", 1: "VERB"})
    card, kind = build_model_card(config, "me/elmo-pos", CardInputs(), num_parameters=10)
    assert kind == "classifier" and card.data.pipeline_tag == "token-classification"
    assert "`ElmoForTokenClassification`" in card.text and "0: NOUN, 1: VERB" in card.text


def test_card_kind_must_be_known():
    with pytest.raises(ValueError, match="card kind must be"):
        build_model_card(make_config(), "me/x", CardInputs(kind="poem"), num_parameters=10)


def test_card_without_evaluation_results_says_so_and_has_no_model_index(tmp_path):
    config = make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=40)
    card, kind = build_model_card(config, "me/elmo-none", CardInputs(), num_parameters=123)
    assert kind == "pretrained"
    assert "No evaluation results were supplied" in card.text
    assert card.data.eval_results is None and "model-index" not in card.data.to_yaml()
    assert "perplexity" not in card.data.to_yaml()


@pytest.mark.parametrize("kind", CARD_KINDS)
def test_every_template_renders_a_card_with_valid_metadata(kind, tmp_path):
    config = make_config(
        architectures=["ElmoForSequenceClassification" if kind == "classifier" else "ElmoModel"],
        id2label={0: "neg", 1: "pos"},
        label2id={"neg": 0, "pos": 1},
    )
    card, _ = build_model_card(
        config, "me/elmo-card", CardInputs(kind=kind, base_model="me/elmo-base"), num_parameters=1000
    )
    path = tmp_path / "README.md"
    card.save(path)
    loaded = ModelCard.load(path)
    assert loaded.data.library_name == "transformers"
    assert "custom_code" in loaded.data.tags and loaded.data.license == "apache-2.0"
    assert loaded.data.language == ["en"]
    assert loaded.data.pipeline_tag == ("text-classification" if kind == "classifier" else "feature-extraction")
    assert loaded.data.base_model == "me/elmo-base"
    for section in (
        "## How to use",
        "## Limitations",
        "Shallow bidirectionality",
        "Sentence-level context",
        "Recurrence",
        "trust_remote_code",
        "@inproceedings{peters-etal-2018-deep",
        "## Evaluation",
    ):
        assert section in loaded.text, section
    assert "{{" not in loaded.content and "}}" not in loaded.content


def _results() -> list[EvaluationResults]:
    pretraining = EvaluationResults.now(
        model="elmo-tiny",
        source="elmo pretrain",
        perplexity=[
            PerplexityResult(
                dataset="wikitext",
                split="validation",
                forward=80.5,
                backward=82.25,
                average=81.37,
                targets_per_direction=1234,
                examples=50,
                unk_rate=0.05,
                unigram=UnigramBaselineResult(
                    forward=630.0, backward=650.0, average=640.0, fitted_on="training data", smoothing=1.0
                ),
            )
        ],
    )
    suite = EvaluationResults.now(
        model="elmo-tiny",
        source="elmo evaluate",
        untrained_seed=0,
        perplexity=[
            PerplexityResult(
                dataset="heldout.txt",
                split="held-out",
                forward=118.0,
                backward=123.0,
                average=120.5,
                targets_per_direction=99,
                examples=9,
                unk_rate=0.0,
                untrained_average=262.0,
            )
        ],
        scores=[
            ScoreResult(
                task="probe-sentiment",
                dataset="sst2",
                split="validation",
                representation="mix",
                metric="accuracy",
                value=0.78,
                examples=872,
                baseline=0.509,
                baseline_name="majority class",
                untrained=UntrainedComparison(
                    value=0.55, trained_only_correct=250, untrained_only_correct=50, mcnemar_p_value=1e-30
                ),
            ),
            ScoreResult(
                task="wsd-probe",
                dataset="wsd_small",
                split="all",
                representation="layer 0",
                metric="accuracy",
                value=None,
                examples=0,
                baseline=0.33,
            ),
            ScoreResult(
                task="wsd-probe",
                dataset="wsd_small",
                split="all",
                representation="layer 0",
                metric="accuracy_ties_half",
                value=0.0,
                examples=3,
                baseline=0.33,
            ),  # 357 of 360 tied
            ScoreResult(
                task="wsd-probe",
                dataset="wsd_small",
                split="all",
                representation="layer 2",
                metric="accuracy_ties_half",
                value=0.71,
                examples=360,
                baseline=0.33,
            ),
        ],
    )
    return [pretraining, suite]


def test_the_model_index_holds_the_models_own_numbers_and_the_text_the_baselines():
    config = make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=40)
    card, kind = build_model_card(config, "me/elmo-tiny", CardInputs(results=_results()), num_parameters=10)
    data = ModelCardData(**card.data.to_dict())  # the model-index parsed back into EvalResult objects
    values = {
        (r.task_type, r.dataset_name, r.dataset_split, r.metric_type, r.metric_name): r.metric_value
        for r in data.eval_results
    }
    assert values == {
        ("text-generation", "wikitext", "validation", "perplexity", "Perplexity (forward)"): 80.5,
        ("text-generation", "wikitext", "validation", "perplexity", "Perplexity (backward)"): 82.25,
        ("text-generation", "wikitext", "validation", "perplexity", "Perplexity (average)"): 81.37,
        ("text-generation", "heldout.txt", None, "perplexity", "Perplexity (forward)"): 118.0,
        ("text-generation", "heldout.txt", None, "perplexity", "Perplexity (backward)"): 123.0,
        ("text-generation", "heldout.txt", None, "perplexity", "Perplexity (average)"): 120.5,
        ("text-classification", "sst2", "validation", "accuracy", "Accuracy (mix)"): 0.78,
        ("token-classification", "wsd_small", None, "accuracy", "Accuracy, ties as half (layer 2)"): 0.71,
    }  # the undefined WSD accuracy, the score on 3 items, the unigram baseline and the untrained model are not there
    assert data.metrics == ["accuracy", "perplexity"] and data.model_name == "elmo-tiny"
    assert (
        "| wikitext | validation | 80.5 | 82.25 | 81.37 | 640 (fitted on training data) | — | 1234 | 5.0% |"
        in card.text
    )
    assert "| heldout.txt | held-out | 118 | 123 | 120.5 | — | 262 | 99 | 0.0% |" in card.text
    assert (
        "| probe-sentiment | sst2 | validation | mix | accuracy | 0.78 | 872 | 0.509 (majority class) | 0.55 | 1e-30 |"
    ) in card.text
    assert (
        "| wsd-probe | wsd_small | all | layer 0 | accuracy | undefined (all tied) | 0 (too few: not indexed) | "
        "0.33 | — | — |"
    ) in card.text
    assert (
        "| wsd-probe | wsd_small | all | layer 0 | accuracy_ties_half | 0 | 3 (too few: not indexed) | 0.33 | — | — |"
    ) in card.text
    assert f"fewer than {MIN_INDEXED_EXAMPLES} examples is shown here but left out of the `model-index`" in card.text


def test_the_training_section_lists_metadata_without_paths_or_credentials():
    metadata = {
        "global_step": 100,
        "args": {
            "dataset_name": "wikitext",
            "train_file": ["/home/someone/train.txt"],
            "hub_token": "hf_" + "Z" * 34,
            "learning_rate": 0.2,
        },
    }
    card, _ = build_model_card(
        make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=40),
        "me/x",
        CardInputs(metadata=metadata),
        num_parameters=10,
    )
    assert "| global_step | 100 |" in card.text and "| args.learning_rate | 0.2 |" in card.text
    assert "| args.train_file | train.txt |" in card.text and "/home/someone" not in card.text
    assert "hub_token" not in card.text and "hf_ZZZ" not in card.text
    assert card.data.datasets == ["wikitext"]
    converted, kind = build_model_card(
        make_config(architectures=["ElmoModel"]),
        "me/y",
        CardInputs(metadata={"converted_from": "original ELMo release", "weights_file": "w.hdf5"}, converted=True),
        num_parameters=10,
    )
    assert kind == "converted" and "Source: original ELMo release." in converted.text


def test_the_cards_trainer_examples_use_the_readmes_learning_rate():
    import re

    [readme_rate] = set(re.findall(r"learning_rate=([0-9.e-]+)", (REPO_ROOT / "README.md").read_text()))
    for template in sorted((REPO_ROOT / "model_cards").glob("*.md")):
        assert set(re.findall(r"learning_rate=([0-9.e-]+)", template.read_text())) <= {readme_rate}, template.name


def test_the_source_files_table_reads_four_checked_keys_of_each_file_and_escapes_them():
    digest = "ab" * 32
    metadata = {
        "converted_from": "original ELMo release",
        "files": [
            {
                "name": "weights.hdf5",
                "origin": "https://user:secret@example.org/w.hdf5",
                "bytes": 1234,
                "sha256": digest,
            },
            {"name": "<img src=x>|evil", "origin": "hf_" + "Q" * 34, "bytes": "many", "sha256": "not a digest"},
            {"name": "options.json", "api_key": "k-123", "bytes": True},
            "not a record",
        ],
    }
    card, kind = build_model_card(
        make_config(architectures=["ElmoModel"]),
        "me/y",
        CardInputs(metadata=metadata, converted=True),
        num_parameters=1,
    )
    assert kind == "converted"
    assert f"| weights.hdf5 | https://\\*\\*\\*@example.org/w.hdf5 | 1,234 | {digest} |" in card.text
    assert "| &lt;img src=x&gt;\\|evil | hf\\_\\*\\*\\* | — | — |" in card.text
    assert "| options.json | — | — | — |" in card.text
    assert "secret" not in card.text and "k-123" not in card.text and "QQQ" not in card.text
    assert "not a record" not in card.text


def test_an_earlier_conversion_without_a_files_list_gets_its_checksums_in_the_table():
    digest = "0f" * 32
    metadata = {"converted_from": "original ELMo release", "sha256": {"weights.hdf5": digest, "x.json": "bad"}}
    card, _ = build_model_card(
        make_config(architectures=["ElmoModel"]),
        "me/y",
        CardInputs(metadata=metadata, converted=True),
        num_parameters=1,
    )
    assert f"| weights.hdf5 | — | — | {digest} |" in card.text and "| x.json | — | — | — |" in card.text


def test_a_dataset_name_of_megabytes_is_cut_in_the_card_and_its_metadata():
    """Issue 35 (Minor): a 5 MB dataset name in a results file was published twice in the card (the table and the
    model-index); each place now shows at most a couple of hundred characters of it."""
    from modeling_elmo.hub.card import MAX_SHOWN_CHARACTERS

    name = "corpus" + "x" * 5_000_000
    results = EvaluationResults.now(
        "elmo-tiny",
        "elmo evaluate",
        perplexity=[PerplexityResult(name, "test", 80.0, 82.0, 81.0, 1000, 10, 0.05)],
        scores=[ScoreResult("probe-pos", name, "test", "layer 0", "accuracy", 0.9, 5000)],
    )
    config = make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=40)
    card, _ = build_model_card(config, "me/elmo-tiny", CardInputs(results=[results]), num_parameters=10)
    text = str(card)
    assert len(text) < 40_000, len(text)
    assert "corpus" + "x" * (MAX_SHOWN_CHARACTERS - 6) + "…" in text
    for entry in ModelCardData(**card.data.to_dict()).eval_results:
        assert len(entry.dataset_name) <= MAX_SHOWN_CHARACTERS and len(entry.dataset_type) <= MAX_SHOWN_CHARACTERS


def test_a_card_shows_a_bounded_number_of_rows_and_counts_the_rest(tmp_path):
    """Issue 35, M7: the card listed every row of a results file (130,000) in the text and the model-index; each
    table now shows the first MAX_CARD_ROWS rows and says how many more the results file holds, and the model-index
    holds the first MAX_INDEXED_RESULTS entries."""
    from modeling_elmo.hub.card import MAX_CARD_ROWS, MAX_INDEXED_RESULTS

    scores = [
        ScoreResult("probe-pos", "ud", "test", f"layer {i}", "accuracy", i / 1000, MIN_INDEXED_EXAMPLES)
        for i in range(MAX_CARD_ROWS + 150)
    ]
    perplexity = [
        PerplexityResult(f"text{i}.txt", "held-out", 20.0, 21.0, 20.5, 100, 3, 0.01) for i in range(MAX_CARD_ROWS + 1)
    ]
    results = EvaluationResults.now("m", "elmo evaluate", perplexity=perplexity, scores=scores)
    config = make_config(architectures=["ElmoForBidirectionalLM"], vocab_size=40)
    card, _ = build_model_card(config, "me/elmo", CardInputs(results=[results]), num_parameters=10)
    assert sum(line.startswith("| probe-pos |") for line in card.text.splitlines()) == MAX_CARD_ROWS
    assert sum(line.startswith("| text") for line in card.text.splitlines()) == MAX_CARD_ROWS
    assert "Not shown here: 1 more of these rows, in eval_results.json." in card.text
    assert "Not shown here: 150 more of these rows, in eval_results.json." in card.text
    total = 3 * len(perplexity) + len(scores)
    assert f"The `model-index` holds the first {MAX_INDEXED_RESULTS} of these {total:,} numbers." in card.text
    assert len(card.data.eval_results) == MAX_INDEXED_RESULTS
    assert [e.metric_name for e in card.data.eval_results[:3]] == [
        f"Perplexity ({c})" for c in ("forward", "backward", "average")
    ]


@pytest.mark.slow  # a template outside the package renders in a child interpreter
@pytest.mark.parametrize("name", [*CARD_KINDS, "converted_efml"])
def test_a_user_template_renders_in_the_child_exactly_as_in_process(name, tmp_path):
    """Issue 35: a --template (a copy of a built-in one) rendered in the isolated child gives the very card the
    built-in one gives in this process, with results, labels and non-ASCII text in its values."""
    from modeling_elmo.hub.card import TEMPLATE_DIR

    kind = name.split("_")[0]
    config = make_config(
        architectures=["ElmoForSequenceClassification" if kind == "classifier" else "ElmoModel"],
        id2label={0: "négatif", 1: "pos | <b>"},
        label2id={"négatif": 0, "pos | <b>": 1},
    )
    builtin = TEMPLATE_DIR / f"{name}.md"
    copy = tmp_path / f"{name}.md"
    copy.write_text(builtin.read_text(encoding="utf-8"), encoding="utf-8")
    inputs = dict(kind=kind, base_model="me/elmo-base", results=_results(), datasets=["wikitext", "données <b>"])
    in_process, _ = build_model_card(
        config, "me/elmo-card", CardInputs(**inputs, template=str(builtin)), num_parameters=9
    )
    in_child, _ = build_model_card(config, "me/elmo-card", CardInputs(**inputs, template=str(copy)), num_parameters=9)
    assert in_child.content == in_process.content
    assert "données" in in_child.content and "wikitext" in in_child.content


@pytest.mark.slow  # a template outside the package renders in a child interpreter
def test_the_template_child_gets_nothing_of_the_environment(tmp_path, monkeypatch):
    """Issue 35: even a sandbox escape would find no HF_TOKEN: the child runs isolated (``-I``: no PYTHON* variables,
    no user site, no script folder on the path) with an empty environment. The child script is replaced by one that
    does what an escape could (reads the environment, the flags and the path) and writes it into the card."""
    from modeling_elmo.hub import card_sandbox

    monkeypatch.setenv("HF_TOKEN", "hf_" + "s" * 34)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    escaped = tmp_path / "escaped.py"
    escaped.write_text(
        "import json, os, sys\nsys.stdin.read()\n"
        "seen = {'environ': dict(os.environ), 'isolated': sys.flags.isolated, 'path': sys.path}\n"
        "print('---\\n---\\n' + json.dumps(seen))\n"
    )
    monkeypatch.setattr(card_sandbox, "__file__", str(escaped))
    template = tmp_path / "card.md"
    template.write_text(
        "---\n{{ card_data }}\n---\n# {{ model_id }}\n{{ evaluation_section }}\n{{ training_section }}\n"
    )
    card, _ = build_model_card(make_config(), "me/x", CardInputs(template=str(template)), num_parameters=10)
    seen = json.loads(card.content.split("---\n")[-1])
    assert seen["isolated"] == 1
    assert set(seen["environ"]) <= {"LC_CTYPE"}, seen["environ"]  # at most the locale Python itself sets
    assert str(tmp_path) not in seen["path"]


@pytest.mark.slow  # a template outside the package renders in a child interpreter
def test_a_template_child_that_dies_is_one_line_naming_the_template(tmp_path, monkeypatch):
    """A child that ends otherwise (a traceback, a signal) is one line naming the template, not its traceback."""
    from modeling_elmo.hub import card_sandbox

    dying = tmp_path / "dying.py"
    dying.write_text("import sys\nsys.stdin.read()\nraise RuntimeError('the child broke')\n")
    monkeypatch.setattr(card_sandbox, "__file__", str(dying))
    template = tmp_path / "card.md"
    template.write_text(
        "---\n{{ card_data }}\n---\n# {{ model_id }}\n{{ evaluation_section }}\n{{ training_section }}\n"
    )
    with pytest.raises(ValueError) as error:
        build_model_card(make_config(), "me/x", CardInputs(template=str(template)), num_parameters=10)
    assert str(error.value) == (
        f"model-card template {template}: rendering ended with exit status 1 (RuntimeError: the child broke)."
    )
