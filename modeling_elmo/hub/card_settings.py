"""Which entries of a run's training metadata or of a conversion's metadata a model card lists: an allow-list of
dotted key paths (`CARD_SETTINGS`), so that a key this package does not write (``apikey``, ``credentials``,
``db_url``, ...) never reaches a public card; `card_settings` gives the listed entries of a metadata mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CARD_SETTINGS", "card_settings", "is_card_setting"]

#: The settings a card lists (dotted key paths of the training or conversion metadata): an allow-list, so that a
#: key this package does not write (``apikey``, ``credentials``, ``db_url``, ...) never reaches a public card.
#: ``published.<figure>`` of a conversion is listed too (`is_card_setting`); its checksums are in the source files
#: table.
_RUN_ARGUMENTS = (
    "train_file",
    "validation_file",
    "test_file",
    "dataset_name",
    "dataset_config_name",
    "validation_split_percentage",
    "max_train_examples",
    "max_eval_examples",
    "vocab_file",
    "vocab_size",
    "min_count",
    "batching",
    "window_size",
    "max_sentence_length",
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "max_tokens_per_batch",
    "bucket_size",
    "model_config",
    "init_from_model",
    "lm_softmax",
    "num_negative_samples",
    "dropout",
    "seed",
    "optimizer",
    "learning_rate",
    "adagrad_initial_accumulator",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "lr_scheduler_type",
    "warmup_steps",
    "num_train_epochs",
    "max_steps",
    "gradient_accumulation_steps",
    "max_grad_norm",
    "loss_multiplier",
    "mixed_precision",
    "checkpointing_steps",
    "max_train_minutes",
    "eval_steps",
    "early_stopping_patience",
    "load_best_model_at_end",
    "data_license",
)
CARD_SETTINGS = frozenset(
    {
        # elmo pretrain (training_metadata.json)
        "global_step",
        "model_step",
        "tokens_seen",
        "skipped_updates",
        "train_seconds",
        "wall_seconds",
        "num_processes",
        "mixed_precision",
        "vocab_size",
        "vocab_fingerprint",
        "data_fingerprint",
        "parameters",
        "stopped_early",
        "best_validation_perplexity",
        "best_step",
        "versions.torch",
        "versions.transformers",
        "versions.datasets",
        *(f"args.{name}" for name in _RUN_ARGUMENTS),
        # a classifier's training metadata (written by the user's own training script)
        "datasets",
        "data_licenses",
        "base_model",
        "epochs",
        "num_train_epochs",
        "learning_rate",
        "batch_size",
        "per_device_train_batch_size",
        "seed",
        "weight_decay",
        "warmup_steps",
        "max_steps",
        "optimizer",
        "lr_scheduler_type",
        "freeze_elmo",
        # elmo convert (conversion_metadata.json)
        "converted_from",
        "options_file",
        "weights_file",
        "validation_max_abs_difference",
        "validation_max_abs_difference_per_layer",
        "validation_atol",
        "num_parameters",
        "release",
        # elmo convert --efml / --release efml-LANG
        "language_name",
        "nlpl_repository_id",
        "architecture",
    }
)
#: The figures a release's authors published (`modeling_elmo.conversion.releases.Release.published_figures`).
_PUBLISHED_FIGURES = (
    "parameters",
    "parameters_in_weight_file",
    "srl_f1",
    "constituency_parsing_f1",
    "lm_perplexity",
    "lm_perplexity_note",
    "training_data",
)


def _flatten(obj: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(obj, Mapping):
        return [item for key, value in obj.items() for item in _flatten(value, prefix + (str(key),))]
    return [(prefix, obj)]


def is_card_setting(key_path: tuple[str, ...]) -> bool:
    """Whether the metadata entry at ``key_path`` is one a card lists: `CARD_SETTINGS` or a released figure
    (``published.<figure>``). A conversion's checksums are in the source files table of the card."""
    if ".".join(key_path) in CARD_SETTINGS:
        return True
    return len(key_path) == 2 and key_path[0] == "published" and key_path[1] in _PUBLISHED_FIGURES


def card_settings(metadata: Mapping[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
    """The entries of ``metadata`` a card lists, as (key path, value), in the metadata's order."""
    return [(key_path, value) for key_path, value in _flatten(metadata) if is_card_setting(key_path)]
