"""`elmo pretrain --save-at-minutes`: the model as it is when the training time passes given minutes, as model folders
under ``snapshots/`` (written whole, never rewritten by a resumed run), refused for a schedule that runs over the
run's length.

Training runs are in-process on the elmo-tiny preset and a few hundred generated lines. The training clock is a
fake one (one second per reading) where a test needs to know in advance at which update a mark falls.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support import assert_same_numbers, random_corpus, reset_accelerate_state, tiny_pretrain_args

from modeling_elmo import ElmoForBidirectionalLM
from modeling_elmo.folders.run_folder import RunFolder
from modeling_elmo.pretraining import loop
from modeling_elmo.pretraining import main as pretrain_main
from modeling_elmo.pretraining.arguments import parse_args, snapshot_minutes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    return random_corpus(path, seed=0, words=120, lines=400, longest=15)


def _args(corpus: Path, out: Path, *extra: str) -> list[str]:
    schedule = ("--lr-scheduler-type", "constant_with_warmup", "--warmup-steps", "3")
    return tiny_pretrain_args(corpus, out, *schedule, *extra, checkpointing_steps=0, eval_examples=20)


def _run(*argv: str) -> int:
    try:
        return pretrain_main(list(argv))
    finally:
        reset_accelerate_state()


@pytest.fixture
def fake_clock(monkeypatch):
    """The training loop's clock advances one second each time it is read: the update a mark falls at is the same
    in every run with the same arguments."""
    ticks = iter(range(10**9))
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(time=lambda: float(next(ticks)), thread_time=lambda: 0.0))


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


# ----------------------------------------------------------------------------------------------- the option
@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--lr-scheduler-type", "cosine"], "--lr-scheduler-type cosine runs over the run's length"),
        (["--lr-scheduler-type", "linear", "--max-train-minutes", "50"], "--lr-scheduler-type linear runs over"),
        (["--warmup-steps", "0.1"], "--warmup-steps 0.1 is a fraction of the run"),
        (["--max-train-minutes", "10"], "10 is not before --max-train-minutes 10"),
        (["--save-at-minutes", "5,ten"], "got '5,ten'"),
        (["--save-at-minutes", "0"], "got '0'"),
        (["--save-at-minutes", "nan"], "got 'nan'"),
    ],
)
def test_save_at_minutes_refuses_a_schedule_over_the_run_and_bad_marks_in_one_line(corpus, tmp_path, extra, fragment):
    argv = ["--train-file", str(corpus), "--save-at-minutes", "1,10", "--lr-scheduler-type", "constant", *extra]
    with pytest.raises(ValueError) as error:
        parse_args(argv)
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_save_at_minutes_parses_to_sorted_marks_and_accepts_a_warmup_in_updates(corpus):
    args = parse_args(["--train-file", str(corpus), "--save-at-minutes", "30,10,30", "--max-train-minutes", "60"])
    assert snapshot_minutes(args) == [10.0, 30.0]
    args = parse_args(
        ["--train-file", str(corpus), "--save-at-minutes", "0.5", "--lr-scheduler-type", "constant_with_warmup"]
        + ["--warmup-steps", "100"]
    )
    assert snapshot_minutes(args) == [0.5]
    assert snapshot_minutes(parse_args(["--train-file", str(corpus)])) == []


def test_the_help_says_when_a_snapshot_is_the_model_of_a_shorter_run():
    from modeling_elmo.pretraining.arguments import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "--save-at-minutes" in text and "constant or constant_with_warmup with --warmup-steps in updates" in text


# ----------------------------------------------------------------------------------------------- the snapshots
@pytest.mark.slow
def test_snapshots_hold_the_weights_of_the_update_their_mark_fell_at_and_load(corpus, tmp_path, fake_clock):
    out = tmp_path / "run"
    assert _run(*_args(corpus, out, "--max-steps", "24", "--save-at-minutes", "0.2,0.5")) == 0
    run = RunFolder(out)
    snapshots = run.snapshots()
    assert list(snapshots) == [0.2, 0.5]
    steps = []
    for minutes, folder in snapshots.items():
        info = json.loads((folder / RunFolder.SNAPSHOT_INFO).read_text())
        assert info["minutes"] == minutes and info["train_seconds"] >= 60 * minutes
        steps.append(info["global_step"])
        model = ElmoForBidirectionalLM.from_pretrained(folder)  # a model folder, tokenizer included
        assert RunFolder(folder).has_tokenizer() and model.config.vocab_size > 0
    assert 1 <= steps[0] < steps[1] < 24, steps  # the fake clock: one second per reading, several per update
    assert not list((out / RunFolder.SNAPSHOTS).glob(".*")), "a temporary folder was left"
    # the same run stopped at the snapshot's update has the snapshot's weights
    for step, folder in zip(steps, snapshots.values(), strict=True):
        reference = tmp_path / f"reference-{step}"
        assert _run(*_args(corpus, reference, "--max-steps", str(step))) == 0
        expected, actual = _weights(reference), _weights(folder)
        assert set(actual) == set(expected)
        for name in expected:
            assert_same_numbers(actual[name], expected[name], what=name)
    assert run.run_entries()[1] == []  # every snapshot file is the run's (so --overwrite clears them)
    assert _run(*_args(corpus, out, "--max-steps", "24", "--overwrite")) == 0
    assert not (out / RunFolder.SNAPSHOTS).exists()


@pytest.mark.slow
def test_a_resumed_run_does_not_rewrite_a_snapshot_and_skips_a_mark_it_starts_past(
    corpus, tmp_path, fake_clock, caplog
):
    out = tmp_path / "run"
    keep = ["--checkpointing-steps", "2", "--checkpoints-total-limit", "50", "--max-steps", "30"]
    assert _run(*_args(corpus, out, *keep, "--save-at-minutes", "0.5", "--stop-after-steps", "20")) == 0
    snapshot = RunFolder(out).snapshot_dir(0.5)
    info = json.loads((snapshot / RunFolder.SNAPSHOT_INFO).read_text())
    assert 2 < info["global_step"] <= 20
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in snapshot.iterdir()}
    # resume from the checkpoint before the snapshot's update: training passes the mark again
    earlier = out / "checkpoints" / "step_00000002"
    trainer_state = json.loads((earlier / "trainer_state.json").read_text())
    assert trainer_state["state"]["train_seconds"] < 30
    caplog.clear()
    resumed = _args(corpus, out, *keep, "--save-at-minutes", "0.5,0.1", "--resume-from-checkpoint", str(earlier))
    with caplog.at_level("INFO", logger="modeling_elmo.pretraining"):
        assert _run(*resumed) == 0
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in snapshot.iterdir()}
    assert after == before and json.loads((snapshot / RunFolder.SNAPSHOT_INFO).read_text()) == info
    assert "minute snapshot" not in caplog.text  # nothing saved
    assert "no snapshot at 0.1 minutes: the resumed run starts after" in caplog.text
    assert list(RunFolder(out).snapshots()) == [0.5]


@pytest.mark.slow
def test_a_snapshot_left_half_written_by_a_kill_is_removed_and_written_by_the_resumed_run(
    corpus, tmp_path, fake_clock, monkeypatch
):
    from modeling_elmo.pretraining import output

    out = tmp_path / "run"
    argv = _args(corpus, out, "--max-steps", "24", "--save-at-minutes", "0.2", "--checkpointing-steps", "2")

    class Killed(BaseException):
        pass

    def dies_before_installing(staging, target, command, *, overwrite):
        raise Killed  # the snapshot is written whole in its temporary folder, with the record of its files

    with monkeypatch.context() as killed:
        killed.setattr(output, "install_folder", dies_before_installing)
        killed.setattr(output, "remove_temporary", lambda payload: None)  # a killed process cleans nothing up
        killed.setattr("modeling_elmo.folders.files._own_start_time", lambda: 1)  # as if it started at another time
        with pytest.raises(Killed):
            _run(*argv)
    left = list((out / RunFolder.SNAPSHOTS).iterdir())
    assert [p.name.startswith(".minutes-0.2.snapshot-") for p in left] == [True]
    assert not RunFolder(out).snapshot_dir(0.2).exists()
    assert RunFolder(out).run_entries()[1] == []  # the temporary is the run's: --overwrite may clear it
    # a new process (another run token) resumes: the leftover is proven by its marker and removed, the mark passed
    # again and the snapshot written whole
    monkeypatch.setattr("modeling_elmo.folders.files._run_token", lambda: "another-process")
    assert _run(*argv, "--resume-from-checkpoint", "latest") == 0
    assert [p.name for p in (out / RunFolder.SNAPSHOTS).iterdir()] == ["minutes-0.2"]
    assert RunFolder(out).snapshots() == {0.2: RunFolder(out).snapshot_dir(0.2)}


@pytest.mark.slow
def test_snapshots_beside_best_model_selection_say_they_hold_the_weights_of_their_minute(
    corpus, tmp_path, fake_clock, caplog
):
    argv = _args(corpus, tmp_path / "run", "--max-steps", "12", "--save-at-minutes", "0.2")
    argv += ["--eval-steps", "4", "--load-best-model-at-end"]
    with caplog.at_level("WARNING", logger="modeling_elmo.pretraining"):
        assert _run(*argv) == 0
    assert "a snapshot holds the weights of its minute, not the best validated ones" in caplog.text
    assert list(RunFolder(tmp_path / "run").snapshots()) == [0.2]
