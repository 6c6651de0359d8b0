"""`elmo pretrain` under faults: a full disk at a checkpoint and at the final save (safetensors reports it as its own
error type), Ctrl-C (a real SIGINT to a real process, and a second one), and a run stopped before its first
checkpoint. Each test reproduces a reported traceback or loss.

Small and offline: a few hundred generated lines and the elmo-tiny preset; in-process runs except the SIGINT test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import safetensors.torch
from safetensors import SafetensorError
from support import random_corpus, reset_accelerate_state, tiny_pretrain_args

from modeling_elmo.folders.run_folder import RunFolder
from modeling_elmo.pretraining import CheckpointManager, train_losses_by_step, trainer
from modeling_elmo.pretraining import loop as pretrain_loop
from modeling_elmo.pretraining import main as pretrain_main

REPO = Path(__file__).resolve().parents[2]
#: What safetensors raises when the disk is full (its message, as seen on a full tmpfs).
FULL = "Error while serializing: I/O error: No space left on device (os error 28)"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    return random_corpus(path, seed=1, words=100, lines=300, longest=12)


def _args(corpus: Path, out: Path, *extra: str) -> list[str]:
    return tiny_pretrain_args(corpus, out, *extra, checkpointing_steps=4, eval_examples=20)


def _run(*argv: str) -> int:
    try:
        return pretrain_main(list(argv))
    finally:
        reset_accelerate_state()


@pytest.fixture
def disk_full_when(monkeypatch):
    """``disk_full_when(predicate)``: safetensors' writers fail as on a full disk for the paths ``predicate``
    accepts."""
    import transformers.modeling_utils

    writers = [
        (safetensors.torch, "save_file"),
        (safetensors.torch, "save_model"),
        (transformers.modeling_utils, "safe_save_file"),
    ]  # save_pretrained's own reference to save_file
    real = {(module.__name__, name): getattr(module, name) for module, name in writers}

    def install(predicate):
        def failing(key):
            def write(obj, filename, *args, **kwargs):
                if predicate(str(filename)):
                    raise SafetensorError(FULL)
                return real[key](obj, filename, *args, **kwargs)

            return write

        for module, name in writers:
            monkeypatch.setattr(module, name, failing((module.__name__, name)))

    return install


@pytest.mark.slow
def test_full_disk_at_a_checkpoint_is_logged_and_training_goes_on(tmp_path, corpus, disk_full_when, caplog):
    out = tmp_path / "run"
    disk_full_when(lambda path: "step_00000008" in path)
    with caplog.at_level("ERROR"):
        assert _run(*_args(corpus, out, "--max-steps", "10")) == 0
    assert "could not write checkpoint" in caplog.text and "No space left on device" in caplog.text
    assert "the latest checkpoint is still" in caplog.text and "step_00000004" in caplog.text
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest", "step_00000004", "step_00000010"]
    assert sorted(train_losses_by_step(out / "metrics.jsonl")) == list(range(1, 11))  # training went on
    assert RunFolder(out).has_model()


@pytest.mark.slow
def test_full_disk_at_the_final_save_keeps_the_last_checkpoint_and_says_so(tmp_path, corpus, disk_full_when):
    out = tmp_path / "run"
    disk_full_when(lambda path: "step_" not in path)  # the checkpoints fit, the model folder does not
    with pytest.raises(SystemExit) as exit_:
        _run(*_args(corpus, out, "--max-steps", "10"))
    message = str(exit_.value.code)
    latest = out / "checkpoints" / "step_00000010"
    assert message == (
        f"elmo pretrain: error: could not save the final model into {str(out)!r} ({FULL}); nothing is "
        f"lost: the checkpoint {latest} holds all 10 updates (resume with --resume-from-checkpoint "
        "latest once there is space: it writes the model)."
    )
    assert not RunFolder(out).has_model()
    disk_full_when(lambda path: False)  # space again: the resume writes the model without training
    assert _run(*_args(corpus, out, "--max-steps", "10", "--resume-from-checkpoint", "latest")) == 0
    assert RunFolder(out).has_model()


@pytest.mark.slow
def test_full_disk_from_an_update_on_names_the_updates_lost(tmp_path, corpus, disk_full_when):
    out = tmp_path / "run"
    disk_full_when(lambda path: "step_00000004" not in path)  # only the first checkpoint fit
    with pytest.raises(SystemExit) as exit_:
        _run(*_args(corpus, out, "--max-steps", "10"))
    message = str(exit_.value.code)
    assert message.startswith(f"elmo pretrain: error: could not save the final model into {str(out)!r} ({FULL}); ")
    assert message.endswith(
        f"the latest checkpoint, {out / 'checkpoints' / 'step_00000004'}, holds update 4: the 6 "
        "updates after it are lost (resume with --resume-from-checkpoint latest once there is "
        "space)."
    )


def test_stop_flag_saves_on_the_first_ctrl_c_and_stops_at_once_on_the_second():
    # Python's own Ctrl-C handler before the flag (whatever an earlier test in this process left installed)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pretrain_loop.StopFlag() as flag:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
            assert flag.reason == "signal SIGINT"
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_second_ctrl_c_ends_the_command_with_one_line(monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "train", interrupted)
    with pytest.raises(SystemExit) as exit_:
        trainer.main(["--train-file", "x.txt", "--output-dir", "out"])
    message = str(exit_.value.code)
    assert message.startswith("elmo pretrain: error: interrupted (Ctrl-C) at once, without saving a checkpoint")
    assert "\n" not in message


@pytest.mark.parametrize("how", ["to the process", "from a terminal, with DataLoader workers"])
@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_exits_with_one_line(tmp_path, corpus, how):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    extra = ["--dataloader-num-workers", "2", "--gradient-accumulation-steps", "2"] if "workers" in how else []
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "scripts" / "pretrain.py"),
            *_args(corpus, out, "--max-steps", "100000", "--checkpointing-steps", "0", *extra),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.is_file() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.2)
    if "terminal" in how:  # a terminal's Ctrl-C reaches every process of the foreground group, workers included
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    latest = CheckpointManager(out / "checkpoints").latest()
    assert latest is not None
    step = CheckpointManager.read_state(latest)["state"]["global_step"]
    assert step >= 2
    assert stderr.strip().splitlines()[-1] == (
        f"elmo pretrain: interrupted (Ctrl-C) at update {step}; the checkpoint "
        f"{latest} holds it: resume with --resume-from-checkpoint latest."
    )


@pytest.mark.slow
def test_run_stopped_before_its_first_checkpoint_is_rerun_without_overwrite(tmp_path, corpus, monkeypatch):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:

        def interrupted(session, state):
            raise KeyboardInterrupt

        patch.setattr(trainer, "train_loop", interrupted)
        with pytest.raises(SystemExit, match=r"^elmo pretrain: error: interrupted \(Ctrl-C\) at once"):
            _run(*_args(corpus, out, "--max-steps", "6"))
    assert (out / "run.json").is_file() and CheckpointManager(out / "checkpoints").latest() is None
    assert _run(*_args(corpus, out, "--max-steps", "6")) == 0  # the same command again: no --overwrite needed
    assert RunFolder(out).has_model()
    assert sorted(train_losses_by_step(out / "metrics.jsonl")) == list(range(1, 7))
    with pytest.raises(SystemExit, match="already holds the finished model of a run with these arguments"):
        _run(*_args(corpus, out, "--max-steps", "6"))  # a finished run is still refused


@pytest.mark.slow
def test_truncated_weights_to_start_from_or_resume_are_one_line(tmp_path, corpus):
    first = tmp_path / "first"
    assert _run(*_args(corpus, first, "--max-steps", "8", "--stop-after-steps", "4")) == 0
    checkpoint = first / "checkpoints" / "step_00000004" / "model.safetensors"
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[:-40])
    with pytest.raises(SystemExit) as exit_:
        _run(*_args(corpus, first, "--max-steps", "8", "--resume-from-checkpoint", "latest"))
    assert str(exit_.value.code).startswith(f"elmo pretrain: error: weights file {str(checkpoint)!r} is truncated: ")
    checkpoint.write_bytes(data)
    assert _run(*_args(corpus, first, "--max-steps", "8", "--resume-from-checkpoint", "latest")) == 0
    weights = first / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-40])
    second = tmp_path / "second"
    with pytest.raises(SystemExit) as exit_:
        _run(*_args(corpus, second, "--max-steps", "2", "--init-from-model", str(first)))
    assert str(exit_.value.code).startswith(f"elmo pretrain: error: weights file {str(weights)!r} is truncated: ")
    assert not second.exists()
