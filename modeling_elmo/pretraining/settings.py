"""The settings of a pretraining run in small typed groups, each read by one part of the trainer: `DataSettings`
by the data builder (reading, vocabulary, tokenising), `BatchSettings` by the batching of training and evaluation,
`LoopSettings` by the training loop (updates, host syncs, stops, saves). The entry point
(`modeling_elmo.pretraining.trainer.train`) makes them from the parsed `PretrainingArguments` once
(`settings_from_arguments`); the builders and the loop take them, never the whole argument namespace.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .options import PretrainingArguments, snapshot_minutes

__all__ = ["BatchSettings", "DataSettings", "LoopSettings", "settings_from_arguments"]


@dataclass(frozen=True)
class DataSettings:
    """How the text is read, counted into vocabularies and tokenised (`trainer.prepare_data`)."""

    dataset_name: str | None = None
    dataset_config_name: str | None = None
    text_column: str = "text"
    streaming: bool = False
    validation_split_percentage: float = 1.0
    seed: int = 42
    cache_dir: str | None = None
    preprocessing_num_workers: int | None = None
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    min_count: int = 1
    max_characters: int = 2000
    batching: str = "sentences"
    max_sentence_length: int = 100
    window_size: int = 20
    overwrite_cache: bool = False

    def reading_options(self) -> dict[str, Any]:
        """The keyword arguments of `modeling_elmo.pretraining.data.load_raw_splits` besides the files."""
        names = "dataset_name dataset_config_name text_column streaming validation_split_percentage seed cache_dir"
        return {name: getattr(self, name) for name in names.split()}


@dataclass(frozen=True)
class BatchSettings:
    """The batches of training (`trainer.build_sampler`, `loop.micro_batches`) and of evaluation."""

    batching: str = "sentences"
    per_device_train_batch_size: int = 64
    per_device_eval_batch_size: int = 64
    max_tokens_per_batch: int | None = None
    bucket_size: int = 100
    dataloader_num_workers: int = 0
    streaming: bool = False
    seed: int = 42


@dataclass(frozen=True)
class LoopSettings:
    """What the training loop does at each update and when it stops or saves (`modeling_elmo.pretraining.loop`)."""

    gradient_accumulation_steps: int = 1
    loss_multiplier: float = 1.0
    max_grad_norm: float | None = 10.0
    logging_steps: int = 50
    max_consecutive_nonfinite: int = 5
    report_to: str = "none"
    max_train_minutes: float | None = None
    eval_steps: int = 0
    checkpointing_steps: int = 1000
    checkpoints_total_limit: int = 2
    stop_after_steps: int | None = None
    early_stopping_patience: int | None = None
    load_best_model_at_end: bool = False
    log_example_ids: bool = False
    plot: bool = True
    #: the ``--save-at-minutes`` marks, ascending (`arguments.snapshot_minutes`)
    snapshot_minutes: tuple[float, ...] = ()

    @property
    def budget_seconds(self) -> float | None:
        """The ``--max-train-minutes`` budget in seconds (None: no budget)."""
        return 60.0 * self.max_train_minutes if self.max_train_minutes is not None else None


def _group(kind: type, args: PretrainingArguments, **computed: Any) -> Any:
    names = [f.name for f in dataclasses.fields(kind) if f.name not in computed]
    return kind(**{name: getattr(args, name) for name in names}, **computed)


def settings_from_arguments(args: PretrainingArguments) -> tuple[DataSettings, BatchSettings, LoopSettings]:
    """The three groups of ``args`` (checked by `arguments.validate` first)."""
    loop = _group(LoopSettings, args, snapshot_minutes=tuple(snapshot_minutes(args)))
    return _group(DataSettings, args), _group(BatchSettings, args), loop
