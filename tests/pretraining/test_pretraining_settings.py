"""Pretraining through fewer hands: only the entry point (`trainer.train`, `trainer._train`, `trainer.main`) reads
the parsed argument namespace; the data, model and optimiser builders and the training loop take the typed groups
of `modeling_elmo.pretraining.settings` (carried by the resolved `Plan`) or explicit values."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from modeling_elmo.pretraining import parse_args, plan_run
from modeling_elmo.pretraining.settings import BatchSettings, DataSettings, LoopSettings, settings_from_arguments

PRETRAINING = Path(__file__).resolve().parents[2] / "modeling_elmo" / "pretraining"
ENTRY_POINTS = {"train", "_train", "main"}
BUILDERS = {"prepare_data", "_prepare_data", "build_sampler", "build_optimizer", "build_model"}


def _argument_reads(node: ast.AST) -> list[int]:
    """Lines that read a name ``args`` or an attribute ``.args`` (``s.args``) inside ``node``."""
    return sorted(
        child.lineno
        for child in ast.walk(node)
        if (isinstance(child, ast.Name) and child.id == "args")
        or (isinstance(child, ast.Attribute) and child.attr == "args")
        or (isinstance(child, ast.arg) and child.arg == "args")
    )


def test_the_training_loop_and_the_builders_read_no_field_of_the_argument_namespace():
    loop = ast.parse((PRETRAINING / "loop.py").read_text(encoding="utf-8"))
    assert _argument_reads(loop) == []
    trainer = ast.parse((PRETRAINING / "trainer.py").read_text(encoding="utf-8"))
    functions = {node.name: node for node in trainer.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert BUILDERS <= set(functions)
    readers = {name for name, node in functions.items() if _argument_reads(node)}
    assert readers <= ENTRY_POINTS, sorted(readers - ENTRY_POINTS)
    assert "_train" in readers  # the entry point is where the namespace is read (the check sees the reads)


def test_the_settings_groups_carry_the_parsed_values_and_the_plan_holds_them(tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("the cat sat on the mat .\na dog ran .\n" * 20, encoding="utf-8")
    argv = ["--train-file", str(corpus), "--output-dir", str(tmp_path / "run"), "--batching", "windows"]
    argv += ["--window-size", "7", "--per-device-eval-batch-size", "3", "--logging-steps", "4", "--seed", "9"]
    argv += ["--save-at-minutes", "2,1", "--max-train-minutes", "5", "--no-plot", "--min-count", "2"]
    args = parse_args(argv)
    data, batches, loop = settings_from_arguments(args)
    for group in (data, batches, loop):
        for spec in dataclasses.fields(group):
            if spec.name != "snapshot_minutes":
                assert getattr(group, spec.name) == getattr(args, spec.name), spec.name
    assert (data.window_size, data.min_count, batches.batching, batches.seed) == (7, 2, "windows", 9)
    assert (batches.per_device_eval_batch_size, loop.logging_steps, loop.plot) == (3, 4, False)
    assert loop.snapshot_minutes == (1.0, 2.0) and loop.budget_seconds == 300.0
    assert data.reading_options()["seed"] == 9
    plan = plan_run(args)
    assert (plan.data, plan.batches, plan.loop) == (data, batches, loop)
    assert isinstance(plan.data, DataSettings) and isinstance(plan.batches, BatchSettings)
    assert isinstance(plan.loop, LoopSettings)
