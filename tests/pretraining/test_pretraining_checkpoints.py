"""Issue 12: the hard edges of pretraining. Checkpoints load without unpickling; one run per output folder; a kill
during training, during a checkpoint write or during the final save loses nothing and resumes exactly.

Small and offline: a few hundred generated lines, the elmo-tiny preset, in-process runs (a kill is a BaseException
raised where the process would die, except in the SIGKILL test, which kills a real process).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from support import random_corpus, reset_accelerate_state, tiny_pretrain_args

from modeling_elmo.folders.run_folder import RunFolder
from modeling_elmo.pretraining import CheckpointManager, train_losses_by_step
from modeling_elmo.pretraining import checkpoint as ckpt
from modeling_elmo.pretraining import main as pretrain_main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    return random_corpus(path, seed=0, words=120, lines=400, longest=15)


def _args(corpus: Path, out: Path, *extra: str) -> list[str]:
    return tiny_pretrain_args(corpus, out, "--dropout", "0.1", *extra, checkpointing_steps=4, eval_examples=20)


def _run(*argv: str) -> int:
    try:
        return pretrain_main(list(argv))
    finally:
        reset_accelerate_state()


class Killed(BaseException):
    """Stands for SIGKILL: nothing after the raise point runs except `finally` blocks."""


# ----------------------------------------------------------------------------------------------- safe loading
class _WritesMarker:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):  # unpickling this object writes the marker file
        return (Path.write_text, (self.marker, "unpickled"))


@pytest.mark.slow
def test_resuming_never_unpickles_a_crafted_pickle_in_the_checkpoint(tmp_path, corpus, monkeypatch):
    out = tmp_path / "run"
    assert _run(*_args(corpus, out, "--max-steps", "8", "--stop-after-steps", "4")) == 0
    step = out / "checkpoints" / "step_00000004"
    marker = tmp_path / "marker"
    for name in ("custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin"):  # accelerate's pickled files
        (step / name).write_bytes(pickle.dumps(_WritesMarker(marker)))
    with pytest.raises(
        SystemExit,
        match="holds files that are not part of a checkpoint of this package: "
        "custom_checkpoint_0.pkl, optimizer.bin, random_states_0.pkl",
    ):
        _run(*_args(corpus, out, "--max-steps", "8", "--resume-from-checkpoint", "latest"))
    assert not marker.exists()
    (step / "pytorch_model.bin").write_bytes(pickle.dumps(_WritesMarker(marker)))
    with pytest.raises(SystemExit, match=r"holds pickled weights \['pytorch_model.bin'\]"):
        _run(*_args(corpus, out, "--max-steps", "8", "--resume-from-checkpoint", str(step)))
    assert not marker.exists()
    # without the foreign files the checkpoint resumes, and nothing on the way calls torch.load
    for name in ("custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin", "pytorch_model.bin"):
        (step / name).unlink()

    def no_torch_load(*args, **kwargs):
        raise AssertionError("torch.load called while resuming")

    monkeypatch.setattr(torch, "load", no_torch_load)
    assert _run(*_args(corpus, out, "--max-steps", "8", "--resume-from-checkpoint", "latest")) == 0
    assert not marker.exists() and RunFolder(out).has_model()


@pytest.mark.slow
def test_a_checkpoint_of_the_earlier_pickled_format_is_named_as_such(tmp_path, corpus):
    out = tmp_path / "run"
    assert _run(*_args(corpus, out, "--max-steps", "8", "--stop-after-steps", "4")) == 0
    step = out / "checkpoints" / "step_00000004"
    state = json.loads((step / ckpt.STATE_FILE).read_text())
    (step / ckpt.STATE_FILE).write_text(json.dumps({"global_step": 4, **state["state"]}))  # the earlier layout
    (step / "optimizer.bin").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(
        SystemExit,
        match="has format None, not 1 .a checkpoint of an earlier version cannot be resumed; "
        "start from a saved model with --init-from-model",
    ):
        _run(*_args(corpus, out, "--max-steps", "8", "--resume-from-checkpoint", "latest"))


def test_optimizer_and_random_states_survive_the_safetensors_json_round_trip_exactly():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    for kind in (torch.optim.AdamW, torch.optim.Adagrad):
        opt = kind(model.parameters(), lr=0.1)
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        tensors, meta = ckpt.optimizer_to_files(opt.state_dict())
        restored = kind(model.parameters(), lr=0.5)
        restored.load_state_dict(ckpt.optimizer_from_files(tensors, json.loads(json.dumps(meta))))
        assert restored.state_dict()["param_groups"] == opt.state_dict()["param_groups"]
        for a, b in zip(opt.state_dict()["state"].values(), restored.state_dict()["state"].values(), strict=False):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    tensors, meta = ckpt.rng_state()
    expected = (torch.rand(3), np.random.rand(3), __import__("random").random())
    ckpt.set_rng_state(tensors, json.loads(json.dumps(meta)))
    again = (torch.rand(3), np.random.rand(3), __import__("random").random())
    assert torch.equal(expected[0], again[0]) and np.array_equal(expected[1], again[1]) and expected[2] == again[2]


class _OneProcess:
    is_main_process, num_processes, device = True, 1, torch.device("cpu")

    def wait_for_everyone(self):
        pass


def test_a_checkpoint_of_the_same_step_is_replaced_never_kept(tmp_path, caplog):
    manager = CheckpointManager(tmp_path / "checkpoints")

    def writer(text):
        return lambda folder: (folder / ckpt.STATE_FILE).write_text(text)

    manager.save(_OneProcess(), 2, writer("first"))
    with caplog.at_level("WARNING"):
        path = manager.save(_OneProcess(), 2, writer("second"))
    assert (path / ckpt.STATE_FILE).read_text() == "second" and "replacing the existing checkpoint" in caplog.text
    assert sorted(p.name for p in manager.root.iterdir()) == ["latest", "step_00000002"]


# ----------------------------------------------------------------------------------------------- one run per folder
@pytest.mark.slow
def test_a_second_run_into_a_folder_that_holds_a_run_is_refused_and_overwrite_starts_afresh(tmp_path, corpus):
    """The report: a first run, then a second with another learning rate, then its resume, used to mix both runs."""
    out = tmp_path / "E"
    assert _run(*_args(corpus, out, "--max-steps", "12")) == 0
    first_model = (out / "model.safetensors").read_bytes()
    snapshot = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit, match=r"already holds another run \(--learning-rate 0.05 \(the run's: None\)\)"):
        _run(*_args(corpus, out, "--max-steps", "12", "--learning-rate", "0.05", "--stop-after-steps", "8"))
    with pytest.raises(SystemExit, match=r"holds a run with other arguments: --learning-rate 0.05"):
        _run(*_args(corpus, out, "--max-steps", "12", "--learning-rate", "0.05", "--resume-from-checkpoint", "latest"))
    with pytest.raises(SystemExit, match="already holds the finished model of a run with these arguments"):
        _run(*_args(corpus, out, "--max-steps", "12"))  # a plain rerun: no duplicate records
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == snapshot
    assert _run(*_args(corpus, out, "--max-steps", "12", "--learning-rate", "0.05", "--overwrite")) == 0
    metadata = json.loads((out / "training_metadata.json").read_text())
    assert metadata["args"]["learning_rate"] == 0.05 and (out / "model.safetensors").read_bytes() != first_model
    steps = [r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "train_loss" in r]
    assert steps == list(range(1, 13))
    latest = CheckpointManager(out / "checkpoints").latest()
    assert ckpt.read_trainer_state(latest)["run"]["arguments"]["learning_rate"] == 0.05


@pytest.mark.slow
def test_kill_during_a_checkpoint_write_resumes_exactly_without_duplicate_metrics(tmp_path, corpus, monkeypatch):
    full = tmp_path / "full"
    assert _run(*_args(corpus, full, "--max-steps", "12", "--log-example-ids")) == 0
    real_write = ckpt.write_training_files

    def dies_at_step_8(folder, **kwargs):
        if "step_00000008" in str(folder):
            (folder / "model.safetensors").write_bytes(b"half")
            raise Killed()
        return real_write(folder, **kwargs)

    monkeypatch.setattr("modeling_elmo.pretraining.loop.write_training_files", dies_at_step_8)
    split = tmp_path / "split"
    with pytest.raises(Killed):
        _run(*_args(corpus, split, "--max-steps", "12", "--log-example-ids"))
    assert CheckpointManager(split / "checkpoints").latest().name == "step_00000004"
    (writing,) = (split / "checkpoints").glob(".step_00000008.checkpoint-*")  # a fresh name of its own
    assert (writing / "content").is_dir() and not RunFolder(split).has_model()
    monkeypatch.setattr("modeling_elmo.pretraining.loop.write_training_files", real_write)
    with open(split / "metrics.jsonl", "a") as metrics:
        metrics.write('{"step": 9, "train_lo')  # a record cut short by the kill
    logged = [json.loads(line)["step"] for line in (split / "examples_rank0.jsonl").read_text().splitlines()]
    assert logged == list(range(1, 9)), "the batches of updates 5..8 were logged before the kill"
    assert (
        _run(*_args(corpus, split, "--max-steps", "12", "--resume-from-checkpoint", "latest", "--log-example-ids")) == 0
    )
    steps = [
        r["step"] for r in map(json.loads, (split / "metrics.jsonl").read_text().splitlines()) if "train_loss" in r
    ]
    assert steps == list(range(1, 13)), "records after the checkpoint are dropped, then written once"
    examples = (split / "examples_rank0.jsonl").read_text()
    assert examples == (full / "examples_rank0.jsonl").read_text(), "each batch logged once, in the uninterrupted order"
    assert train_losses_by_step(split / "metrics.jsonl") == train_losses_by_step(full / "metrics.jsonl")
    assert (split / "model.safetensors").read_bytes() == (full / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_sigkill_during_training_resumes_bit_identically(tmp_path, corpus):
    full = tmp_path / "full"
    assert _run(*_args(corpus, full, "--max-steps", "40")) == 0
    killed = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "pretrain.py"), *_args(corpus, killed, "--max-steps", "40")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    metrics, deadline = killed / "metrics.jsonl", time.time() + 120
    while time.time() < deadline and not (metrics.is_file() and metrics.read_text().count("\n") >= 6):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    latest = CheckpointManager(killed / "checkpoints").latest()
    assert latest is not None and not RunFolder(killed).has_model(), "killed before the end"
    assert _run(*_args(corpus, killed, "--max-steps", "40", "--resume-from-checkpoint", "latest")) == 0
    assert train_losses_by_step(killed / "metrics.jsonl") == train_losses_by_step(full / "metrics.jsonl")
    assert (killed / "model.safetensors").read_bytes() == (full / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_kill_during_the_final_save_leaves_no_half_model_and_a_resume_completes_it(tmp_path, corpus, monkeypatch):
    out = tmp_path / "run"
    real_replace = os.replace

    def dies_after_the_code_files(src, dst):
        if Path(dst).name == "model.safetensors":
            raise Killed()
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", dies_after_the_code_files)  # every replace goes through os
    with pytest.raises(Killed):
        _run(*_args(corpus, out, "--max-steps", "4"))
    folder = RunFolder(out)
    assert (out / "configuration_elmo.py").is_file() and not folder.config_file.exists() and not folder.has_model()
    monkeypatch.setattr(os, "replace", real_replace)
    assert _run(*_args(corpus, out, "--max-steps", "4", "--resume-from-checkpoint", "latest")) == 0
    from transformers import AutoModelForPreTraining

    model = AutoModelForPreTraining.from_pretrained(out, trust_remote_code=True)
    assert folder.has_model() and model.config.vocab_size == len((out / "vocab.txt").read_text().splitlines())
    assert not (out / ".tmp-final-model").exists()
