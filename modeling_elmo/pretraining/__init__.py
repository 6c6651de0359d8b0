"""ELMo pretraining with accelerate: data, vocabulary, batching, checkpoints and the training loop.

Launch with ``accelerate launch scripts/pretrain.py --config configuration/recipes/quickstart.yaml`` (or
``elmo pretrain ...``); see the README section "Pretraining an ELMo biLM".
"""

from .arguments import PretrainingArguments, load_recipe, parse_args
from .checkpoint import CheckpointManager
from .data import (
    BucketBatchSampler,
    Collator,
    Vocabulary,
    build_vocabulary,
    expand_text_files,
    iter_text_lines,
    load_raw_splits,
    tokenize_batch,
    tokenize_splits,
)
from .trainer import evaluate, main, read_metrics, train, train_losses_by_step

__all__ = [
    "BucketBatchSampler",
    "CheckpointManager",
    "Collator",
    "PretrainingArguments",
    "Vocabulary",
    "build_vocabulary",
    "evaluate",
    "expand_text_files",
    "iter_text_lines",
    "load_raw_splits",
    "load_recipe",
    "main",
    "parse_args",
    "read_metrics",
    "tokenize_batch",
    "tokenize_splits",
    "train",
    "train_losses_by_step",
]
