"""`scripts/recipe_study.py`, the study of what the training minutes buy: its table (each mark, before and after, POS
beside the most-frequent-tag baseline) from fabricated results, its plan of runs (snapshots where they apply, one run
per mark where not), and one tiny end-to-end study (a corpus slice, elmo-tiny, marks at fractions of a minute).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from modeling_elmo.folders.run_folder import RunFolder
from modeling_elmo.pretraining.arguments import parse_args, snapshot_minutes
from modeling_elmo.utils.results import EvaluationResults, PerplexityResult, ScoreResult, write_results

REPO = Path(__file__).resolve().parents[2]


def _study():
    spec = importlib.util.spec_from_file_location("recipe_study", REPO / "scripts" / "recipe_study.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _perplexity(split: str, value: float) -> PerplexityResult:
    return PerplexityResult(
        dataset="brown", split=split, forward=value, backward=value, average=value, targets_per_direction=1000,
        examples=50, unk_rate=0.1,
    )  # fmt: skip


def _fabricate_point(folder: Path, *, brown: float, pos: float, mft: float, sentiment: float, step: int, run=False):
    """A point of the study as `elmo pretrain` and `elmo evaluate` leave it, with made-up numbers."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "elmo"}))
    (folder / "model.safetensors").write_bytes(b"")
    record = {"global_step": step, "tokens_seen": 100 * step, "train_seconds": 6.0 * step}
    if run:
        (folder / "training_metadata.json").write_text(json.dumps({**record, "args": {"max_train_minutes": 60}}))
        validation = _perplexity("validation", brown)
        results = EvaluationResults.now(model="m", source="elmo pretrain", perplexity=[validation])
        write_results(folder / "eval_results.json", results)
    else:
        (folder / "snapshot.json").write_text(json.dumps(record))
    scores = [
        ScoreResult(task="probe-pos", dataset="ud", split="validation", representation="mix", metric="accuracy",
                    value=pos, examples=500, baseline=mft, baseline_name="most frequent tag of the word"),
        ScoreResult(task="probe-sentiment", dataset="sst2", split="validation", representation="mix",
                    metric="accuracy", value=sentiment, examples=50, baseline=0.5, baseline_name="majority class"),
    ]  # fmt: skip
    (folder / "evaluation").mkdir()
    results = EvaluationResults.now(
        model="m", source="elmo evaluate", perplexity=[_perplexity("held-out", brown)], scores=scores
    )
    write_results(folder / "evaluation" / "eval_results.json", results)


def test_the_study_table_puts_each_mark_before_and_after_with_pos_beside_the_most_frequent_tag(tmp_path):
    study = _study()
    out = tmp_path / "study"
    before = tmp_path / "before-env" / "python"  # never started: the table is made from the folders alone
    before.parent.mkdir()
    before.write_text("#!/bin/sh\nexit 1\n")
    before.chmod(0o755)
    numbers = {"after": (300.0, 0.85, 0.60), "before": (400.0, 0.80, 0.55)}
    for package, folder in (("after", out / "baseline"), ("before", out / "baseline@before")):
        brown, pos, sentiment = numbers[package]
        for minutes, step in ((10, 100), (30, 300)):
            point = RunFolder(folder).snapshot_dir(minutes)
            _fabricate_point(point, brown=brown + minutes, pos=pos, mft=0.826, sentiment=sentiment, step=step)
        (folder / "snapshots").mkdir(exist_ok=True)
        folder.mkdir(exist_ok=True)
        for name in ("config.json", "model.safetensors", "training_metadata.json", "eval_results.json", "evaluation"):
            assert not (folder / name).exists()
        staging = tmp_path / f"final-{package}"
        _fabricate_point(staging, brown=brown + 60, pos=pos, mft=0.826, sentiment=sentiment, step=600, run=True)
        for item in staging.iterdir():
            item.rename(folder / item.name)
    argv = ["--data-dir", str(tmp_path), "--output-dir", str(out), "--variants", "baseline", "--minutes", "10,30,60"]
    assert study.main([*argv, "--before-python", str(before), "--table-only"]) == 0
    table = (out / "study.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| variant"))
    assert "updates after | updates before" in header and "POS dev (most frequent tag) before" in header
    rows = [line for line in table.splitlines() if line.startswith("| baseline")]
    assert [row.split(" | ")[1] for row in rows] == ["10", "30", "60"]
    assert (
        "| 100 | 100 | 10,000 | 10,000 | 310.0 (—) | 410.0 (—) | 60.0% | 55.0% | 85.0% (82.6%) | 80.0% (82.6%) |"
        in (rows[0])
    )
    assert "| 600 | 600 |" in rows[2] and "360.0 (—) | 460.0 (—)" in rows[2]
    saved = json.loads((out / "study.json").read_text())
    assert {(r["package"], r["minutes"]) for r in saved} == {(p, m) for p in ("after", "before") for m in (10, 30, 60)}
    assert all(r["probe-pos_most_frequent_tag"] == 0.826 for r in saved)


@pytest.mark.slow
def test_the_study_trains_one_run_per_mark_where_snapshots_do_not_apply(tmp_path):
    study = _study()
    old = tmp_path / "old-python"  # an environment whose `elmo pretrain` has no --save-at-minutes
    old.write_text("#!/bin/sh\necho 'usage: elmo pretrain [--config RECIPE] [options]'\n")
    old.chmod(0o755)
    args = study.argparse.Namespace(
        output_dir=tmp_path, minutes=[10.0, 30.0, 60.0], before_python=old, before_label="before", table_only=False
    )
    jobs = study.plan_jobs(["baseline", "cosine-budget"], args)
    assert [name for name in study.VARIANTS if not study.snapshots_apply(name)] == [
        "cosine-budget",
        "early-stopping",
        "windows-cosine-lr-0.004",
        "windows-cosine",
        "windows-cosine-lr-0.004-seed-2",
    ]
    shown = [(j.variant, j.package, j.run.name, j.minutes, j.save_at) for j in jobs]
    assert shown == [
        ("baseline", "after", "baseline", 60.0, [10.0, 30.0]),
        ("baseline", "before", "baseline@before-10min", 10.0, []),
        ("baseline", "before", "baseline@before-30min", 30.0, []),
        ("baseline", "before", "baseline@before-60min", 60.0, []),
        ("cosine-budget", "after", "cosine-budget-10min", 10.0, []),
        ("cosine-budget", "after", "cosine-budget-30min", 30.0, []),
        ("cosine-budget", "after", "cosine-budget-60min", 60.0, []),
        ("cosine-budget", "before", "cosine-budget@before-10min", 10.0, []),
        ("cosine-budget", "before", "cosine-budget@before-30min", 30.0, []),
        ("cosine-budget", "before", "cosine-budget@before-60min", 60.0, []),
    ]
    command = study.pretrain_command(jobs[0], study.argparse.Namespace(data_dir=tmp_path, seed=1, extra_flags=""))
    parsed = parse_args(command[4:])
    assert parsed.max_train_minutes == 60.0 and snapshot_minutes(parsed) == [10.0, 30.0]


@pytest.mark.slow
def test_a_tiny_study_trains_snapshots_and_scores_every_point(tmp_path):
    """End to end in seconds: a slice of lm-corpus, the elmo-tiny preset, marks at fractions of a minute, this
    environment as both "after" and "before" (the script is what is tested, not a speed)."""
    shared = Path(os.environ.get("ELMO_SHARED_DATA", REPO.parent / "shared" / "data"))
    if not (shared / "lm-corpus" / "brown.txt").is_file() or not (shared / "pos-ud-ewt").is_dir():
        pytest.skip("needs the shared data folder (ELMO_SHARED_DATA)")
    data = tmp_path / "data"
    (data / "lm-corpus" / "gutenberg").mkdir(parents=True)
    for name in ("kjv_bible.txt", "state_union.txt", "inaugural.txt", "reuters_training.txt", "masc.txt"):
        with open(shared / "lm-corpus" / name, encoding="utf-8") as source:
            lines = [next(source) for _ in range(200)]
        (data / "lm-corpus" / name).write_text("".join(lines), encoding="utf-8")
    (data / "lm-corpus" / "gutenberg" / "austen.txt").write_text("a short line of text .\n" * 50, encoding="utf-8")
    for name in ("reuters_test.txt", "brown.txt"):
        with open(shared / "lm-corpus" / name, encoding="utf-8") as source:
            (data / "lm-corpus" / name).write_text("".join(next(source) for _ in range(100)), encoding="utf-8")
    for folder in shared.iterdir():
        if folder.is_dir() and folder.name != "lm-corpus":
            (data / folder.name).symlink_to(folder)
    out = tmp_path / "study"
    tiny = "--model-config elmo-tiny --vocab-size 500 --per-device-train-batch-size 8 --logging-steps 1 --max-steps 400"
    command = [sys.executable, str(REPO / "scripts" / "recipe_study.py"), "--data-dir", str(data)]
    command += ["--output-dir", str(out), "--variants", "baseline", "--minutes", "0.05,0.1", "--parallel", "2"]
    command += ["--before-python", sys.executable, "--brown-sentences", "50", "--probe-train-examples", "40"]
    command += ["--probe-dev-examples", "20", "--extra-flags", tiny]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    logs = "".join(p.read_text() for p in out.glob("*.log")) if out.is_dir() else ""
    assert done.returncode == 0, done.stderr[-3000:] + logs[-3000:]
    saved = json.loads((out / "study.json").read_text())
    assert {(r["package"], r["minutes"]) for r in saved} == {(p, m) for p in ("after", "before") for m in (0.05, 0.1)}
    for row in saved:
        assert row["updates"] >= 1 and row["brown_ppl"] > 1 and 0 <= row["probe-pos_mix"] <= 1
        assert 0 < row["probe-pos_most_frequent_tag"] <= 1
    by_point = {(r["package"], r["minutes"]): r for r in saved}
    assert by_point[("after", 0.05)]["updates"] <= by_point[("after", 0.1)]["updates"]
    assert RunFolder(out / "baseline").snapshot_dir(0.05).is_dir()
    assert RunFolder(out / "baseline@before").snapshot_dir(0.05).is_dir()
    assert "| baseline | 0.05 |" in done.stdout
