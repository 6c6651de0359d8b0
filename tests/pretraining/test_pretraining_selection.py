"""Issue 15: the best model for a budget. Schedules over a time budget, validation-based early stopping and
best-model selection, each across a resume."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from support import reset_accelerate_state

from modeling_elmo.pretraining import CheckpointManager, TrainingState, loop
from modeling_elmo.pretraining import checkpoint as ckpt
from modeling_elmo.pretraining import main as pretrain_main
from modeling_elmo.pretraining.schedule import BudgetScheduler, schedule_factor


def _run(*argv: str) -> int:
    try:
        return pretrain_main(list(argv))
    finally:
        reset_accelerate_state()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(100)]
    folder = tmp_path_factory.mktemp("corpus")
    files = {}
    for name, count in (("train", 400), ("valid", 40)):
        files[name] = folder / f"{name}.txt"
        files[name].write_text(
            "\n".join(" ".join(rng.choice(words, size=rng.integers(3, 14))) for _ in range(count)) + "\n"
        )
    return files


def _args(corpus: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "--train-file",
        str(corpus["train"]),
        "--validation-file",
        str(corpus["valid"]),
        "--output-dir",
        str(out),
        "--cache-dir",
        str(out.parent / "hf-cache"),
        "--per-device-train-batch-size",
        "8",
        "--seed",
        "2",
        "--no-plot",
        *extra,
    ]


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------------------------- schedules
@pytest.mark.parametrize("kind", ["constant", "constant_with_warmup", "linear", "cosine"])
def test_progress_schedules_equal_transformers_schedules_at_every_step(kind):
    from transformers import get_scheduler

    total, warmup = 50, 7
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total)
    for step in range(total + 1):
        expected = optimizer.param_groups[0]["lr"]
        assert math.isclose(
            schedule_factor(kind, step / total, warmup / total), expected, rel_tol=1e-12, abs_tol=1e-12
        ), step
        optimizer.step()
        scheduler.step()


def test_budget_scheduler_follows_the_elapsed_fraction_between_and_across_syncs():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    schedule = BudgetScheduler(optimizer, "linear", 0, budget_seconds=100.0)
    for _ in range(10):
        schedule.step()
    schedule.observe(10, 20.0)  # 20 s after 10 updates: 2 % of the budget per update
    assert math.isclose(schedule.get_last_lr()[0], 2.0 * (1 - 0.2))
    for _ in range(10):
        schedule.step()
    assert math.isclose(schedule.get_last_lr()[0], 2.0 * (1 - 0.4))  # extrapolated, no clock read
    schedule.observe(20, 38.0)  # slower than predicted: the progress does not go back
    assert math.isclose(schedule.current_progress(), 0.4)
    resumed = BudgetScheduler(
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0), "linear", 0, budget_seconds=100.0
    )
    resumed.load_state_dict(json.loads(json.dumps(schedule.state_dict())))
    assert resumed.get_last_lr() == schedule.get_last_lr()
    for _ in range(5):
        schedule.step()
    schedule.observe(25, 120.0)
    assert schedule.get_last_lr()[0] == 0.0  # the budget is spent: annealed


def test_budget_schedule_is_not_spent_early_after_a_slow_stretch():
    """A slow first stretch (3 s per update, then 1 s) must not make the extrapolated progress run ahead of the
    clock for the rest of the run: the cosine reaches zero when the budget is spent, not before."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = BudgetScheduler(optimizer, "cosine", 0, budget_seconds=100.0)
    seconds, step, lrs, progress = 0.0, 0, [], []
    while seconds < 100.0:
        step += 1
        seconds += 3.0 if step <= 10 else 1.0
        schedule.step()
        if step % 10 == 0:
            schedule.observe(step, seconds)
        lrs.append(optimizer.param_groups[0]["lr"])
        progress.append(schedule.current_progress())
    assert step == 80  # 30 s for the first 10 updates, 70 s for the next 70
    assert all(b >= a for a, b in zip(progress, progress[1:], strict=False))  # never back
    clock = [min(1.0, (3.0 * min(k, 10) + max(0, k - 10)) / 100.0) for k in range(1, step + 1)]
    ahead = [p - c for p, c in zip(progress, clock, strict=False)]
    assert max(ahead) < 0.2 + 1e-9  # ahead by the slow stretch's extrapolation at most ...
    assert (
        all(b <= a + 1e-12 for a, b in zip(ahead[19:], ahead[20:], strict=False)) and ahead[-10] < 0.05
    )  # ... and catching up
    assert all(lr > 0.0 for lr in lrs[:-1]) and lrs[-1] == 0.0  # annealed to zero at the budget's end, not before
    assert lrs[-5] > 1e-4


@pytest.mark.slow
def test_fixed_minute_run_ends_annealed_and_a_resumed_stage_continues_the_schedule(tmp_path, corpus):
    out = tmp_path / "budget"
    common = (
        "--max-train-minutes",
        "0.08",
        "--lr-scheduler-type",
        "linear",
        "--optimizer",
        "adamw",
        "--learning-rate",
        "0.01",
        "--logging-steps",
        "2",
        "--checkpointing-steps",
        "0",
        "--max-steps",
        "100000",
    )
    assert _run(*_args(corpus, out, *common, "--stop-after-steps", "6")) == 0
    first = [r for r in _records(out) if "lr" in r]
    state = ckpt.read_trainer_state(CheckpointManager(out / "checkpoints").latest())["state"]
    assert state.global_step == 6 and 0 < state.train_seconds < 4.8
    assert _run(*_args(corpus, out, *common, "--resume-from-checkpoint", "latest")) == 0
    records = [r for r in _records(out) if "lr" in r]
    assert records[: len(first)] == first
    lrs = [r["lr"] for r in records]
    assert all(b <= a for a, b in zip(lrs, lrs[1:], strict=False)), "one decaying schedule across both stages"
    assert lrs[len(first)] < lrs[len(first) - 1] * 1.0000001
    assert lrs[-1] < 0.1 * 0.01, "the budget's end is the schedule's end"
    metadata = json.loads((out / "training_metadata.json").read_text())
    assert "time budget" in metadata["stopped_early"] and metadata["train_seconds"] >= 0.08 * 60


# ----------------------------------------------------------------------------------------------- selection
@pytest.mark.slow
def test_early_stopping_after_patience_evaluations_without_improvement(tmp_path, corpus):
    out = tmp_path / "patience"
    # a learning rate of 0 never improves the validation perplexity: evaluations at 2 (best), 4 and 6, stop at 6
    assert (
        _run(
            *_args(
                corpus,
                out,
                "--optimizer",
                "adamw",
                "--learning-rate",
                "0",
                "--max-steps",
                "50",
                "--eval-steps",
                "2",
                "--early-stopping-patience",
                "2",
                "--logging-steps",
                "2",
            )
        )
        == 0
    )
    metadata = json.loads((out / "training_metadata.json").read_text())
    assert metadata["global_step"] == 6 and metadata["stopped_early"].startswith("early stopping: 2 evaluations")
    assert metadata["best_step"] == 2
    assert [r["step"] for r in _records(out) if r.get("split") == "validation" and "model_step" not in r] == [2, 4, 6]


SCRIPTED = {2: 50.0, 4: 30.0, 6: 40.0, 8: 60.0, 10: 45.0}  # validation perplexity by update: the best is update 4


@pytest.fixture
def scripted_validation(monkeypatch):
    """Validation perplexities chosen by the test (the real evaluation runs; its average is replaced)."""
    real = loop.evaluate

    def scripted(*args, **kwargs):
        result = real(*args, **kwargs)
        step = scripted.step()
        return dataclasses.replace(result, average=SCRIPTED[step], forward=SCRIPTED[step], backward=SCRIPTED[step])

    monkeypatch.setattr(loop, "evaluate", scripted)
    return scripted


def _state_steps(out: Path) -> int:
    records = [r for r in _records(out) if "train_loss" in r]
    return records[-1]["step"] if records else 0


@pytest.mark.slow
def test_load_best_model_at_end_saves_the_best_validated_weights_also_across_a_resume(
    tmp_path, corpus, scripted_validation
):
    from safetensors.torch import load_file

    from modeling_elmo.pretraining import train_losses_by_step

    common = (
        "--max-steps",
        "10",
        "--eval-steps",
        "2",
        "--load-best-model-at-end",
        "--checkpointing-steps",
        "2",
        "--checkpoints-total-limit",
        "10",
        "--logging-steps",
        "1",
        "--max-tokens-per-batch",
        "120",
        "--optimizer",
        "adamw",
        "--learning-rate",
        "0.01",
    )
    whole, split = tmp_path / "whole", tmp_path / "split"
    scripted_validation.step = lambda: _state_steps(whole)
    assert _run(*_args(corpus, whole, *common)) == 0
    scripted_validation.step = lambda: _state_steps(split)
    assert _run(*_args(corpus, split, *common, "--stop-after-steps", "5")) == 0
    state = ckpt.read_trainer_state(CheckpointManager(split / "checkpoints").latest())["state"]
    assert (state.global_step, state.best_step, state.best_perplexity, state.evaluations_since_best) == (5, 4, 30.0, 0)
    assert _run(*_args(corpus, split, *common, "--resume-from-checkpoint", "latest")) == 0
    for out in (whole, split):
        metadata = json.loads((out / "training_metadata.json").read_text())
        assert (metadata["global_step"], metadata["model_step"], metadata["best_step"]) == (10, 4, 4)
        saved = load_file(str(out / "model.safetensors"))
        best = load_file(str(out / "checkpoints" / "step_00000004" / "model.safetensors"))
        last = load_file(str(out / "checkpoints" / "step_00000010" / "model.safetensors"))
        assert saved.keys() == best.keys() and all(torch.equal(saved[k], best[k]) for k in saved)
        assert not all(torch.equal(saved[k], last[k]) for k in saved)
    # the same run in two stages: the same losses (token-budget batches included) and the same best weights
    assert train_losses_by_step(split / "metrics.jsonl") == train_losses_by_step(whole / "metrics.jsonl")
    assert (split / "model.safetensors").read_bytes() == (whole / "model.safetensors").read_bytes()


def test_training_state_round_trips_and_refuses_malformed_values():
    state = TrainingState(global_step=7, best_perplexity=12.5, best_step=6, evaluations_since_best=1, train_seconds=3.5)
    assert TrainingState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    assert state.record_evaluation(12.5) is False and state.evaluations_since_best == 2
    assert state.record_evaluation(11.0) is True and (state.best_step, state.evaluations_since_best) == (7, 0)
    for bad in ({"global_step": -1}, {"train_seconds": float("nan")}, {"global_step": "7"}, {"surprise": 1}):
        with pytest.raises(ValueError):
            TrainingState.from_dict(bad)
