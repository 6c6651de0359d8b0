"""ELMo pretraining with accelerate (``elmo pretrain`` or ``accelerate launch scripts/pretrain.py``; see
docs/pretraining.md): `options` (the options and their checks), `recipes` (presets, recipes, packaged corpora),
`arguments` (the command-line parser), `plan` and `settings` (the inputs, checked and resolved once), `data` and
`batching`, `state`, `schedule`, `checkpoint`, `output`, `evaluation`, `loop` (the training loop) and `trainer`
(`train`, `main`).
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
