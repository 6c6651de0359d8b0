"""`modeling_elmo.utils.results`: the schema round-trips, and the strict reader names the file and the bad field."""

from __future__ import annotations

import json
import math

import pytest

from modeling_elmo.utils.results import (
    SCHEMA_VERSION,
    EvaluationResults,
    PerplexityResult,
    ScoreResult,
    UnigramBaselineResult,
    UntrainedComparison,
    read_results,
    write_results,
)


def example_results() -> EvaluationResults:
    return EvaluationResults.now(
        model="elmo-tiny",
        source="elmo evaluate",
        perplexity=[
            PerplexityResult(
                dataset="heldout.txt",
                split="held-out",
                forward=80.5,
                backward=82.25,
                average=81.37,
                targets_per_direction=1234,
                examples=100,
                unk_rate=0.02,
                unigram=UnigramBaselineResult(
                    forward=640.0, backward=640.0, average=640.0, fitted_on="training data", smoothing=1.0
                ),
                untrained_average=262.0,
            )
        ],
        scores=[
            ScoreResult(
                task="probe-pos",
                dataset="UD EWT",
                split="validation",
                representation="mix",
                metric="accuracy",
                value=0.91,
                examples=2000,
                baseline=0.17,
                untrained=UntrainedComparison(
                    value=0.8, trained_only_correct=300, untrained_only_correct=80, mcnemar_p_value=1e-30
                ),
            ),
            ScoreResult(
                task="wsd-probe",
                dataset="wsd_small",
                split="all",
                representation="layer 0",
                metric="accuracy",
                value=None,
                examples=360,
            ),
        ],
        untrained_seed=0,
        details={"settings": {"batch_size": 32}},
    )


def test_results_round_trip_through_the_file(tmp_path):
    results = example_results()
    path = write_results(tmp_path / "eval_results.json", results)
    assert read_results(path) == results
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["scores"][1]["value"] is None
    assert data["created"].endswith("+00:00")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["perplexity"][0].pop("split"), "missing field 'perplexity[0].split'"),
        (lambda d: d.pop("model"), "missing field 'model'"),
        (
            lambda d: d["perplexity"][0].update(forward="low"),
            "field 'perplexity[0].forward' must be a number, got 'low'",
        ),
        (
            lambda d: d["perplexity"][0].update(targets_per_direction=12.5),
            "'perplexity[0].targets_per_direction' must be an integer",
        ),
        (lambda d: d["perplexity"][0]["unigram"].pop("fitted_on"), "missing field 'perplexity[0].unigram.fitted_on'"),
        (lambda d: d["scores"][0].update(layer=2), "unknown field 'scores[0].layer'"),
        (lambda d: d["scores"][0].update(task=""), "'scores[0].task' must be a non-empty string"),
        (
            lambda d: d["scores"][0]["untrained"].update(mcnemar_p_value=1.5),
            "mcnemar_p_value must be a finite number in",
        ),
        (
            lambda d: d["perplexity"][0].update(average=0.5),
            "in 'perplexity[0]': average must be a finite number in [1.0",
        ),
        (lambda d: d.update(scores={}), "field 'scores' must be a list"),
        (lambda d: d.update(schema_version=2), "unknown schema_version 2 (this version reads 1)"),
        (lambda d: d.pop("schema_version"), "missing field 'schema_version'"),
    ],
)
def test_reader_names_the_file_and_the_bad_field(edit, message, tmp_path):
    path = write_results(tmp_path / "eval_results.json", example_results())
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as error:
        read_results(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_reader_refuses_a_missing_file_and_a_file_that_is_not_json(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_results(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_bytes(b"\x89PNG\x00")
    with pytest.raises(ValueError, match="bad.json' is not valid JSON"):
        read_results(tmp_path / "bad.json")


def test_nan_or_impossible_values_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="forward must be a finite number"):
        PerplexityResult(
            dataset="d",
            split="test",
            forward=math.nan,
            backward=2.0,
            average=2.0,
            targets_per_direction=3,
            examples=1,
            unk_rate=0.0,
        )
    with pytest.raises(ValueError, match="unk_rate must be a finite number in \\[0.0, 1.0\\]"):
        PerplexityResult(
            dataset="d",
            split="test",
            forward=2.0,
            backward=2.0,
            average=2.0,
            targets_per_direction=3,
            examples=1,
            unk_rate=1.5,
        )
    bad = EvaluationResults.now(model="m", source="elmo evaluate", details={"loss": math.inf})
    with pytest.raises(ValueError, match="refusing to write"):
        write_results(tmp_path / "eval_results.json", bad)
    assert not (tmp_path / "eval_results.json").exists()


def test_a_data_file_is_named_by_its_last_part_and_a_glob_keeps_its_folder():
    from modeling_elmo.utils.results import data_file_label

    assert data_file_label("/data/lm-corpus/gutenberg/*.txt") == "gutenberg/*.txt"
    assert data_file_label("../shared/data/lm-corpus/masc.txt") == "masc.txt"
    assert data_file_label("C:\\data\\books\\part-?.txt") == "books/part-?.txt"
    assert data_file_label("corpus/") == "corpus" and data_file_label("*.txt") == "*.txt"
    assert data_file_label("builtin:austen-emma") == "builtin:austen-emma"


def test_reading_a_results_file_resolves_each_schema_class_once_not_once_per_entry(tmp_path, monkeypatch):
    """Issue 35, M7: a valid results file of 130,000 entries ran for minutes (type hints resolved per entry); reading
    is now linear in the entries, with a fixed cost per schema class."""
    import typing

    from modeling_elmo.utils import results as results_module

    results_module._fields_of.cache_clear()
    resolved = []
    real = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda tp, *a, **k: resolved.append(tp) or real(tp, *a, **k))
    score = ScoreResult("probe-pos", "ud", "test", "layer 0", "accuracy", 0.5, 10)
    path = write_results(
        tmp_path / "eval_results.json", EvaluationResults.now("m", "elmo evaluate", scores=[score] * 5000)
    )
    assert len(read_results(path).scores) == 5000
    assert len(resolved) == len(set(resolved)) <= 5
