"""``elmo evaluate`` adds to the results already in the evaluation folder, task by task: ``--task perplexity`` then
``--task wsd-probe`` used to leave only the second (and ``elmo push`` would have published a card without the
perplexities). A results file that cannot be merged (unreadable, another model's) is refused, never replaced."""

from __future__ import annotations

import json
import shutil

import pytest

from modeling_elmo.evaluation.cli import main
from modeling_elmo.folders.run_folder import RunFolder


@pytest.fixture
def model(tiny, tmp_path):  # noqa: F811
    folder = tmp_path / "model"
    shutil.copytree(tiny[3], folder)
    (tmp_path / "held-out.txt").write_text("the bank was good\na film is bad\n")
    (tmp_path / "other.txt").write_text("the river\n")
    return folder


def _results(model):
    (results,) = RunFolder(model).read_results()
    return results


def test_a_second_task_is_added_to_the_results_of_the_first(model, tmp_path):
    assert main([str(model), "--task", "perplexity", "--text", str(tmp_path / "held-out.txt"), "--no-progress"]) == 0
    first = _results(model).perplexity
    assert main([str(model), "--task", "wsd-probe", "--no-progress"]) == 0
    results = _results(model)
    assert results.perplexity == first, "the perplexity results are kept"
    assert {s.task for s in results.scores} == {"wsd-probe"}
    assert set(results.details["datasets"]) == {"perplexity", "wsd-probe"}
    report = RunFolder(model).evaluation.report_file.read_text()
    assert "## Perplexity" in report and "held-out.txt" in report and "Chance (random neighbour)" in report
    # running a task again replaces that task's records only
    assert main([str(model), "--task", "perplexity", "--text", str(tmp_path / "other.txt"), "--no-progress"]) == 0
    again = _results(model)
    assert [p.dataset.rsplit("/", 1)[-1] for p in again.perplexity] == ["other.txt"]
    assert again.scores == results.scores


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "cannot be read, so the new ones cannot be merged"),
        (
            json.dumps(
                {
                    "schema_version": 1,
                    "model": "someone-else",
                    "source": "elmo evaluate",
                    "created": "2026-01-01T00:00:00+00:00",
                    "perplexity": [],
                    "scores": [],
                    "details": {},
                }
            ),
            "holds the results of model 'someone-else', not 'model'",
        ),
    ],
)
def test_results_that_cannot_be_merged_are_refused_and_kept(model, tmp_path, capsys, content, message):
    results_file = RunFolder(model).evaluation.results_file
    results_file.parent.mkdir()
    results_file.write_text(content)
    with pytest.raises(SystemExit):
        main([str(model), "--task", "wsd-probe", "--no-progress"])
    assert message in capsys.readouterr().err
    assert results_file.read_text() == content
    assert sorted(p.name for p in results_file.parent.iterdir()) == ["eval_results.json"]


def test_a_report_or_plot_that_elmo_evaluate_did_not_write_is_never_replaced(model, tmp_path, capsys):
    evaluation = RunFolder(model).evaluation
    evaluation.root.mkdir()
    evaluation.report_file.write_text("my own report")
    with pytest.raises(SystemExit):
        main([str(model), "--task", "wsd-probe", "--no-progress"])
    assert f"{evaluation.report_file} was not written by elmo evaluate" in capsys.readouterr().err
    assert sorted(p.name for p in evaluation.root.iterdir()) == ["eval_results.md"]
    evaluation.report_file.unlink()
    assert main([str(model), "--task", "wsd-probe", "--no-progress"]) == 0
    assert main([str(model), "--task", "wsd-probe", "--no-progress"]) == 0  # its own files: replaced
    recorded = json.loads((evaluation.root / ".elmo-manifest.json").read_text())
    assert recorded["command"] == "elmo evaluate" and "eval_results.md" in recorded["files"]
    assert RunFolder(model).run_entries()[1] == [], "all of it is the run folder's (elmo pretrain --overwrite)"
    evaluation.report_file.write_text(evaluation.report_file.read_text() + "\nMy reading of these figures.\n")
    edited = evaluation.report_file.read_text()
    with pytest.raises(SystemExit):
        main([str(model), "--task", "wsd-probe", "--no-progress"])
    assert f"{evaluation.report_file} differs from what elmo evaluate wrote (changed since)" in capsys.readouterr().err
    assert evaluation.report_file.read_text() == edited
