"""ELMo pretraining with accelerate: data, vocabulary, batching, checkpoints and the training loop.

Launch with ``accelerate launch scripts/pretrain.py --config quickstart`` (or ``elmo pretrain ...``); see
docs/pretraining.md.

Modules: `arguments` (options, presets, recipes, packaged corpora), `plan` (the inputs resolved once: files,
vocabulary, model configuration, output folder), `data` (reading, vocabulary, tokenisation), `batching` (samplers,
collator), `state` (`TrainingState`, run identity, metrics), `schedule`, `checkpoint` (the safe checkpoint format),
`output` (one run per folder, the final model), `evaluation`, `loop` (the training loop and its steps) and `trainer`
(`train`, the skeleton, and `main`).
"""

from .arguments import PretrainingArguments, load_recipe, parse_args
from .batching import BucketBatchSampler, Collator
from .checkpoint import CheckpointManager
from .data import (
    Vocabulary,
    build_vocabularies,
    expand_text_files,
    iter_text_lines,
    load_raw_splits,
    tokenize_batch,
    tokenize_splits,
)
from .evaluation import evaluate
from .plan import Plan, build_config, plan_run
from .state import TrainingState, read_metrics, train_losses_by_step
from .trainer import build_optimizer, main, train

__all__ = [
    "BucketBatchSampler",
    "CheckpointManager",
    "Collator",
    "Plan",
    "PretrainingArguments",
    "TrainingState",
    "Vocabulary",
    "build_config",
    "build_optimizer",
    "build_vocabularies",
    "evaluate",
    "expand_text_files",
    "iter_text_lines",
    "load_raw_splits",
    "load_recipe",
    "main",
    "parse_args",
    "plan_run",
    "read_metrics",
    "tokenize_batch",
    "tokenize_splits",
    "train",
    "train_losses_by_step",
]
