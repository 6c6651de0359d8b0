"""The run folder of ``elmo pretrain`` as a hostile or careless user meets it: ``--overwrite`` deletes only the files
a run writes and refuses a folder holding anything else (at any depth); one run per folder at a time (a lock); a
rerun on other data files is told apart from a rerun; a starting model's foreign ``auto_map`` is not carried; the
files follow the umask. Small and offline: generated lines, the elmo-tiny preset, in-process runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import plant, random_corpus, reset_accelerate_state, tiny_pretrain_args

from modeling_elmo import AUTO_MAP
from modeling_elmo.folders.run_folder import RunFolder
from modeling_elmo.pretraining import main as pretrain_main
from modeling_elmo.pretraining.arguments import parse_args as pretrain_args
from modeling_elmo.pretraining.output import run_lock

USER_FILES = {
    "evaluation/my_analysis.md": "my analysis",
    "checkpoints/README-mine.txt": "my notes",
    ".tmp-mydata": "my data",
    ".bashrc.tmp": "my shell",
    "elmo-pretraining/notes.txt": "mine",
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "a.txt"
    return random_corpus(path, seed=0, words=80, lines=300, longest=12)


def _args(corpus: Path, out: Path, *extra: str) -> list[str]:
    return tiny_pretrain_args(corpus, out, "--max-steps", "4", *extra, checkpointing_steps=2, eval_examples=10)


def _run(*argv: str) -> int:
    try:
        return pretrain_main(list(argv))
    finally:
        reset_accelerate_state()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def finished(corpus, tmp_path) -> Path:
    out = tmp_path / "run"
    assert _run(*_args(corpus, out)) == 0
    return out


# ----------------------------------------------------------------------------------------------- the layout
def test_the_layout_tells_a_runs_files_from_the_users_at_any_depth(tmp_path):
    run = RunFolder(tmp_path / "run")
    own = [
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "run.json",
        "metrics.jsonl",
        "examples_rank1.jsonl",
        ".run.json.ab_cd123.tmp",
        ".tmp-final-model/model.safetensors",
        "checkpoints/latest",
        "checkpoints/step_00000004/trainer_state.json",
        "checkpoints/step_00000004/rng_state_0.safetensors",
        "checkpoints/.tmp-step_00000008/model.safetensors",
        "checkpoints/.old-step_00000004/optimizer.json",
        "checkpoints/step_00000004/.elmo-manifest.json",
        "checkpoints/.step_00000008.checkpoint-12-0123456789abcdef/.elmo-temporary.json",
        "checkpoints/.step_00000008.checkpoint-12-0123456789abcdef/content/model.safetensors",
        "checkpoints/.step_00000004.old-12-0123456789abcdef/content/trainer_state.json",
        "checkpoints/step_00000004/.scheduler.json.x1y2z3w4.tmp",
        "checkpoints/best/model.safetensors",
        "checkpoints/best/best.json",
        "evaluation/eval_results.json",
        "evaluation/layer_weights.png",
        "elmo-pretraining/events.out.tfevents.1.host.2.0",
        "elmo-pretraining/1733000000/events.out.tfevents.3.h",
        "elmo-pretraining/hparams.yml",
    ]
    for name in [*own, *USER_FILES, "checkpoints/step_00000004/custom_checkpoint_0.pkl", "notes/a.txt"]:
        (run.root / name).parent.mkdir(parents=True, exist_ok=True)
        (run.root / name).write_text("x")
    (run.root / "data").mkdir()
    (run.root / "data" / "corpus.txt").write_text("mine")  # never looked into: the whole folder is foreign
    (run.root / "perplexity.png").symlink_to(tmp_path / "elsewhere.png")  # a link named like a run file
    ours, foreign = run.run_entries()
    assert foreign == sorted([*USER_FILES, "checkpoints/step_00000004/custom_checkpoint_0.pkl", "data/", "notes/"])
    files = {p.relative_to(run.root).as_posix() for p in ours if not p.is_dir() or p.is_symlink()}
    assert files == {*own, "perplexity.png"}


def test_removing_a_runs_files_keeps_everything_else(tmp_path):
    run = RunFolder(tmp_path / "run")
    for name in [
        "model.safetensors",
        "checkpoints/latest",
        "checkpoints/step_00000002/model.safetensors",
        "checkpoints/README-mine.txt",
    ]:
        (run.root / name).parent.mkdir(parents=True, exist_ok=True)
        (run.root / name).write_text("x")
    run.remove_run_files()
    assert _snapshot(run.root) == {"checkpoints/README-mine.txt": b"x"}


# ----------------------------------------------------------------------------------------------- --overwrite
@pytest.mark.slow
def test_overwrite_refuses_a_folder_holding_the_users_files_and_deletes_nothing(corpus, finished, tmp_path):
    for name, text in USER_FILES.items():
        (finished / name).parent.mkdir(exist_ok=True)
        (finished / name).write_text(text)
    before = _snapshot(finished)
    with pytest.raises(
        SystemExit,
        match=r"holds files that pretraining does not write \(\.bashrc\.tmp, \.tmp-mydata, "
        r"checkpoints/README-mine\.txt, elmo-pretraining/notes\.txt, "
        r"evaluation/my_analysis\.md\); nothing was deleted",
    ):
        _run(*_args(corpus, finished, "--overwrite", "--learning-rate", "0.1"))
    assert _snapshot(finished) == before
    for name in USER_FILES:
        (finished / name).unlink()
    (finished / "evaluation" / "eval_results.json").write_text("{}")  # elmo evaluate's, of the old model
    assert _run(*_args(corpus, finished, "--overwrite", "--learning-rate", "0.1")) == 0
    assert json.loads((finished / "training_metadata.json").read_text())["args"]["learning_rate"] == 0.1
    assert not (finished / "evaluation").exists(), "the old model's evaluation results went with it"


@pytest.mark.slow
def test_a_rerun_on_other_data_files_is_told_apart_from_a_rerun(corpus, finished, tmp_path):
    other = tmp_path / "b.txt"
    other.write_text(corpus.read_text())
    args = _args(corpus, finished)
    args[1] = str(other)
    with pytest.raises(
        SystemExit,
        match=rf"already holds another run \(--train-file \['{other}'\] \(the run's: "
        rf"\['{corpus}'\]\)\)",
    ):
        _run(*args)


# ----------------------------------------------------------------------------------------------- one run at a time
@pytest.mark.slow
def test_a_second_run_on_a_folder_in_use_is_refused_at_once(corpus, tmp_path):
    out = tmp_path / "new" / "run"
    with run_lock(RunFolder(out)):  # the first run holds the folder
        with pytest.raises(SystemExit, match=f"another elmo pretrain run is writing '{out}'; wait for it to end"):
            _run(*_args(corpus, out))
        assert not out.exists()
    assert not (tmp_path / "new").exists(), "the parent made for the lock was removed again"
    assert _run(*_args(corpus, out)) == 0  # the lock was released
    assert not (out.parent / "run.lock").exists(), "the lock file is removed at the end"


@pytest.mark.parametrize("planted", ["link to a file outside", "dangling link", "FIFO"])
def test_a_lock_planted_as_a_link_or_fifo_is_refused_in_one_line_and_nothing_is_created_outside(
    corpus, tmp_path, planted
):
    out = tmp_path / "run"
    lock = tmp_path / "run.lock"
    outside = tmp_path / "elsewhere" / "victim"
    kind = plant(lock, planted, outside)
    with pytest.raises(SystemExit) as exit_:
        _run(*_args(corpus, out))
    assert str(exit_.value.code) == (
        f"elmo pretrain: error: lock file '{lock}' is {kind}, not a regular file; "
        "refusing to use it (remove it if it is not yours to keep)."
    )
    kept = ["another user's file"] if planted.startswith("link to") else []
    assert [p.read_text() for p in outside.parent.iterdir()] == kept
    assert not out.exists() and os.path.lexists(lock)


@pytest.mark.slow
def test_a_run_that_finds_its_new_folder_written_meanwhile_writes_nothing(corpus, tmp_path):
    from modeling_elmo.pretraining import output

    out = tmp_path / "run"
    run = RunFolder(out)
    args = pretrain_args(_args(corpus, out))
    assert output.check_output_folder(args, run) == output.NEW  # decided before the lock was taken ...
    assert _run(*_args(corpus, out)) == 0  # ... while another run wrote the folder and ended
    before = _snapshot(out)
    with pytest.raises(ValueError, match="was written by another run since this one started"):
        output.open_output_folder(run, output.NEW, {"arguments": {}})
    assert _snapshot(out) == before


@pytest.mark.slow
def test_two_runs_started_at_once_into_one_new_folder_give_one_run(corpus, tmp_path):
    """The report: both exited 0, metrics.jsonl interleaved both runs and the first model was replaced."""
    import subprocess
    import sys

    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    script = Path(__file__).resolve().parents[2] / "scripts" / "pretrain.py"
    argv = [sys.executable, str(script), *_args(corpus, out, "--max-steps", "30")]
    runs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    results = sorted((run.wait(timeout=600), run.stderr.read().strip().splitlines()[-1:]) for run in runs)
    assert [code for code, _ in results] == [0, 1], results
    (refusal,) = results[1][1]
    assert refusal.startswith("elmo pretrain: error: ") and (
        "another elmo pretrain run is writing" in refusal
        or "already holds" in refusal
        or "was written by another run" in refusal
    ), refusal
    steps = [
        json.loads(line)["step"]
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if "train_loss" in json.loads(line)
    ]
    assert steps == list(range(1, 31)), "one run's records, each update once"


# ----------------------------------------------------------------------------------------------- what is carried
@pytest.mark.slow
def test_a_starting_models_foreign_auto_map_is_not_carried(corpus, finished, tmp_path):
    start = tmp_path / "start"
    start.mkdir()
    for path in finished.iterdir():
        if path.is_file():
            (start / path.name).write_bytes(path.read_bytes())
    config = json.loads((start / "config.json").read_text())
    config["auto_map"]["AutoModel"] = "attacker/elmo-helpers--modeling_evil.ElmoModel"
    (start / "config.json").write_text(json.dumps(config))
    out = tmp_path / "continued"
    assert (
        _run(
            "--train-file",
            str(corpus),
            "--output-dir",
            str(out),
            "--init-from-model",
            str(start),
            "--per-device-train-batch-size",
            "8",
            "--max-steps",
            "1",
            "--max-eval-examples",
            "10",
            "--no-plot",
        )
        == 0
    )
    assert json.loads((out / "config.json").read_text())["auto_map"] == AUTO_MAP


@pytest.mark.slow
def test_a_runs_files_follow_the_umask(corpus, tmp_path):
    previous = os.umask(0o022)
    try:
        assert _run(*_args(corpus, tmp_path / "run")) == 0
    finally:
        os.umask(previous)
    modes = {
        p.relative_to(tmp_path / "run").as_posix(): p.stat().st_mode & 0o777
        for p in (tmp_path / "run").rglob("*")
        if p.is_file()
    }
    assert {name for name, mode in modes.items() if mode != 0o644} == set(), modes


@pytest.mark.slow
def test_a_starting_model_whose_vocabulary_does_not_fit_its_softmax_is_refused(corpus, finished, tmp_path):
    start = tmp_path / "start"
    start.mkdir()
    for path in finished.iterdir():
        if path.is_file():
            (start / path.name).write_bytes(path.read_bytes())
    words = (start / "vocab.txt").read_text().splitlines()
    (start / "vocab.txt").write_text("\n".join(words[:-5]) + "\n")
    with pytest.raises(
        SystemExit, match=rf"its vocab.txt has {len(words) - 5} words but its softmax has {len(words)} rows"
    ):
        _run(
            "--train-file",
            str(corpus),
            "--output-dir",
            str(tmp_path / "continued"),
            "--init-from-model",
            str(start),
            "--max-steps",
            "1",
        )
    assert not (tmp_path / "continued").exists()
