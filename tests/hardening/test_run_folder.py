"""`modeling_elmo.folders.run_folder`: what a model folder, a run and a conversion hold, and where each artefact is."""

from __future__ import annotations

import json

import pytest

from modeling_elmo.folders.run_folder import RunFolder
from modeling_elmo.utils.results import EvaluationResults, write_results


def test_a_folder_holds_a_model_only_with_a_config_and_safetensors_weights(tmp_path):
    run = RunFolder(tmp_path)
    assert not run.has_model() and not run.is_run() and not run.is_conversion() and run.model_type() is None
    run.config_file.write_text(json.dumps({"model_type": "elmo"}))
    assert not run.has_model() and run.model_type() == "elmo"
    run.weights_index_file.write_text("{}")  # a sharded model
    assert run.has_model()
    run.config_file.write_text("[1, 2]")
    with pytest.raises(ValueError, match="config file .*config.json' must hold a JSON object"):
        run.model_type()


def test_a_run_is_recognised_by_its_metadata_checkpoints_or_metrics(tmp_path):
    for make in (
        lambda r: r.write_training_metadata({"global_step": 3}),
        lambda r: r.checkpoints_dir.mkdir(),
        lambda r: r.metrics_file.write_text(""),
    ):
        folder = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        run = RunFolder(folder)
        make(run)
        assert run.is_run(), folder
    assert RunFolder(tmp_path / "run0").read_training_metadata() == {"global_step": 3}
    (tmp_path / "converted").mkdir()
    (tmp_path / "converted" / "conversion_metadata.json").write_text(json.dumps({"weights_file": "w.hdf5"}))
    converted = RunFolder(tmp_path / "converted")
    assert converted.is_conversion() and not converted.is_run()
    assert converted.read_conversion_metadata() == {"weights_file": "w.hdf5"}
    assert converted.read_training_metadata() is None


def test_results_and_plots_are_found_in_the_run_and_its_evaluation_folder(tmp_path):
    run = RunFolder(tmp_path)
    assert run.results_files() == [] and run.read_results() == [] and run.plot_files() == []
    write_results(run.evaluation.results_file, EvaluationResults.now(model="m", source="elmo evaluate"))
    write_results(run.eval_results_file, EvaluationResults.now(model="m", source="elmo pretrain"))
    assert run.results_files() == [tmp_path / "eval_results.json", tmp_path / "evaluation" / "eval_results.json"]
    assert [r.source for r in run.read_results()] == ["elmo pretrain", "elmo evaluate"]
    for path in (
        run.perplexity_plot_file,
        run.evaluation.plot_file("layer_weights"),
        tmp_path / "evaluation" / "other.png",
    ):
        path.write_bytes(b"png")
    assert run.plot_files() == [tmp_path / "perplexity.png", tmp_path / "evaluation" / "layer_weights.png"]
    with pytest.raises(ValueError, match="unknown evaluation plot 'loss'"):
        run.evaluation.plot_file("loss")


def test_metrics_records_are_read_and_a_corrupt_line_is_named(tmp_path):
    run = RunFolder(tmp_path)
    assert run.read_metrics() == []
    run.metrics_file.write_text('{"step": 1, "train_loss": 5.0}\n\n{"step": 2, "split": "validation"}\n')
    assert run.read_metrics() == [{"step": 1, "train_loss": 5.0}, {"step": 2, "split": "validation"}]
    run.metrics_file.write_text('{"step": 1}\n{"step": \n')
    with pytest.raises(ValueError, match="metrics.jsonl:2: not valid JSON"):
        run.read_metrics()
