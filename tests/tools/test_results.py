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


# ----------------------------------------------------------------------------------------------- issue 35, M7
# A valid results file of 130,000 entries (91 MB) ran `elmo push` past 300 s and 3 GB. A results file is now refused
# past MAX_RESULTS_BYTES before it is parsed, and past MAX_RESULTS_ENTRIES records before any record is built;
# `write_results` refuses to write what `read_results` would refuse.
def _scores(n: int) -> EvaluationResults:
    score = ScoreResult("probe-pos", "ud", "test", "layer 0", "accuracy", 0.5, 100)
    return EvaluationResults.now("m", "elmo evaluate", scores=[score] * n)


def test_a_results_file_past_the_size_limit_is_refused_in_one_line_before_it_is_parsed(tmp_path, monkeypatch):
    from modeling_elmo.utils import io_utils, results

    path = tmp_path / "eval_results.json"
    path.write_text(json.dumps(_scores(3).to_dict()) + " " * 2000)
    monkeypatch.setattr(results, "MAX_RESULTS_BYTES", 1000)
    monkeypatch.setattr(io_utils, "read_json", lambda *a: pytest.fail("the file was parsed"))
    with pytest.raises(ValueError) as error:
        read_results(path)
    size = path.stat().st_size
    assert str(error.value) == (
        f"results file {path}: {size:,} bytes, more than the 1,000 a results file may have (an evaluation writes a "
        "few kilobytes)."
    )


def test_a_results_file_past_the_entry_limit_is_refused_before_a_record_is_built(tmp_path, monkeypatch):
    from modeling_elmo.utils import results

    path = write_results(tmp_path / "eval_results.json", _scores(101))
    monkeypatch.setattr(results, "MAX_RESULTS_ENTRIES", 100)
    monkeypatch.setattr(results, "_decode", lambda *a: pytest.fail("records were built"))
    with pytest.raises(ValueError, match=r"eval_results.json: 101 perplexity and score records, more than the 100 "):
        read_results(path)
    with pytest.raises(ValueError, match=r"refusing to write .*: 101 perplexity and score records"):
        write_results(tmp_path / "again.json", _scores(101))
    assert not (tmp_path / "again.json").exists()


def test_the_limits_admit_a_results_file_of_the_most_entries():
    from modeling_elmo.utils.results import MAX_RESULTS_BYTES, MAX_RESULTS_ENTRIES

    text = json.dumps(_scores(MAX_RESULTS_ENTRIES).to_dict(), indent=2)
    assert len(text) < MAX_RESULTS_BYTES // 4  # the bytes limit never refuses what the entry limit admits


@pytest.mark.slow
def test_push_of_results_files_takes_memory_in_proportion_and_refuses_one_past_the_limit(tmp_path):
    """`elmo push --dry-run` of a model whose results file holds the most records a file may (10,000), and of one
    whose file is past the size limit (refused before it is parsed), against the same push with one record."""
    import torch
    from support import elmo_peak_memory

    from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, save_model_folder
    from modeling_elmo.utils.results import MAX_RESULTS_BYTES, MAX_RESULTS_ENTRIES

    config = ElmoConfig(projection_dim=8, cell_size=16, char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]])
    torch.manual_seed(0)
    peaks, sizes = {}, {}
    for name in ("one", "most", "over"):
        model = tmp_path / name / "model"
        save_model_folder(ElmoModel(config), ElmoTokenizer(), model)
        results = model / "eval_results.json"
        write_results(results, _scores(MAX_RESULTS_ENTRIES if name == "most" else 1))
        if name == "over":  # still valid JSON
            results.write_text(results.read_text() + " " * MAX_RESULTS_BYTES)
        sizes[name] = results.stat().st_size
        code, err, peaks[name] = elmo_peak_memory(
            "push", model, "--repo-id", "me/elmo", "--dry-run", "--output-dir", tmp_path / name / "out"
        )
        assert code == (1 if name == "over" else 0), err[-2000:]
    assert err.splitlines()[-1] == (
        f"elmo push: error: results file {tmp_path / 'over' / 'model' / 'eval_results.json'}: {sizes['over']:,} "
        f"bytes, more than the {MAX_RESULTS_BYTES:,} a results file may have (an evaluation writes a few kilobytes)."
    )
    card = (tmp_path / "most" / "out" / "README.md").read_text()
    assert len(card) < 100_000 and f"Not shown here: {MAX_RESULTS_ENTRIES - 100:,} more of these rows" in card
    assert peaks["most"] - peaks["one"] < 8 * sizes["most"], (peaks, sizes)
    assert peaks["over"] - peaks["one"] < sizes["over"] // 4, (peaks, sizes)
