"""Pretraining options: one dataclass, parsed from a YAML recipe plus command-line flags (flags win).

Every field is a flag (``--train-file`` and ``--train_file`` both work) and a recipe key (``train_file`` or
``train-file``); an unknown recipe key is an error naming the key.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def _f(default: Any, help: str, **kwargs: Any) -> Any:
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **kwargs})
    return field(default=default, metadata={"help": help, **kwargs})


@dataclass
class PretrainingArguments:
    # ------------------------------------------------------------------ data
    train_file: list[str] | None = _f(None, "Training text: files, globs or directories (one sentence or paragraph per line).", nargs="+")
    validation_file: list[str] | None = _f(None, "Validation text (files, globs or directories).", nargs="+")
    test_file: list[str] | None = _f(None, "Test text (files, globs or directories).", nargs="+")
    dataset_name: str | None = _f(None, "A `datasets` dataset, e.g. `wikitext` (loaded with `datasets.load_dataset`).")
    dataset_config_name: str | None = _f(None, "Its configuration, e.g. `wikitext-103-raw-v1`.")
    text_column: str = _f("text", "Column holding the text in a Hub dataset.")
    streaming: bool = _f(False, "Stream the data instead of loading it (corpora larger than memory); needs --max-steps.")
    validation_split_percentage: float = _f(1.0, "Percent of training lines held out when there is no validation split (0 = none).")
    max_train_examples: int | None = _f(None, "Use only the first N training lines (quick experiments).")
    max_eval_examples: int | None = _f(None, "Use only the first N lines of validation and test.")
    preprocessing_num_workers: int | None = _f(None, "Processes for reading, counting and tokenising (`num_proc`).")
    cache_dir: str | None = _f(None, "`datasets` cache folder (default: HF_DATASETS_CACHE).")
    overwrite_cache: bool = _f(False, "Re-tokenise even if a cached result exists.")
    # ------------------------------------------------------------------ vocabulary and batching
    vocab_file: str | None = _f(None, "Use this vocabulary (one word per line) instead of building one from the training data.")
    vocab_size: int | None = _f(None, "Keep at most this many words, the 4 special words included (most frequent first).")
    min_count: int = _f(1, "Keep only words seen at least this many times in the training data.")
    batching: str = _f("sentences", "`sentences`: length-bucketed sentences, boundaries added by the model; `windows`: fixed windows of the <S> w.. </S> stream (original).")
    window_size: int = _f(20, "Tokens per window with --batching windows (the original's unroll_steps).")
    max_sentence_length: int = _f(100, "Longer lines are cut into pieces of at most this many words.")
    per_device_train_batch_size: int = _f(64, "Sentences (or windows) per batch per process.")
    per_device_eval_batch_size: int = _f(64, "Sentences (or windows) per evaluation batch per process.")
    bucket_size: int = _f(100, "Length bucketing: sort inside pools of this many batches (1 = no bucketing).")
    dataloader_num_workers: int = _f(0, "DataLoader worker processes.")
    # ------------------------------------------------------------------ model
    model_config: str | None = _f(None, "Model preset name (`elmo-tiny`, `elmo-27m`, ...) or a config.json path (default: "
                                        "`elmo-tiny`, or the architecture of --init-from-model).")
    init_from_model: str | None = _f(None, "Start from the weights of this saved model folder (continued, e.g. domain-adaptive, "
                                           "pretraining): its architecture and vocabulary are used; optimiser, schedule and "
                                           "data position start afresh. A resumed checkpoint's weights take precedence.")
    lm_softmax: str | None = _f(None, "Override the preset's training softmax: `full` or `sampled`.")
    num_negative_samples: int | None = _f(None, "Override the number of negative samples of the sampled softmax.")
    dropout: float | None = _f(None, "Override hidden_dropout_prob.")
    # ------------------------------------------------------------------ optimisation
    output_dir: str = _f("outputs/elmo-pretrained", "Where the model, checkpoints, metrics and plots go.")
    seed: int = _f(42, "Random seed (data order, initialisation, dropout, sampling).")
    optimizer: str = _f("adagrad", "`adagrad` (original: lr 0.2, initial accumulator 1.0) or `adamw`.")
    learning_rate: float | None = _f(None, "Peak learning rate (default 0.2 for adagrad, 1e-3 for adamw).")
    adagrad_initial_accumulator: float = _f(1.0, "Adagrad's initial accumulator value.")
    weight_decay: float = _f(0.0, "AdamW weight decay (applied to matrices only).")
    adam_beta1: float = _f(0.9, "AdamW beta1.")
    adam_beta2: float = _f(0.999, "AdamW beta2.")
    lr_scheduler_type: str = _f("constant", "transformers `get_scheduler` name: constant, constant_with_warmup, linear, cosine, ...")
    warmup_steps: int = _f(0, "Warm-up updates.")
    num_train_epochs: float = _f(1.0, "Epochs (ignored when --max-steps is set).")
    max_steps: int | None = _f(None, "Total optimiser updates (overrides --num-train-epochs).")
    gradient_accumulation_steps: int = _f(1, "Micro-batches per update.")
    max_grad_norm: float | None = _f(10.0, "Clip the global gradient norm (original: 10.0); 0 or null = off.")
    loss_multiplier: float = _f(1.0, "Multiply the loss before backward (the original used unroll_steps = 20 with Adagrad).")
    mixed_precision: str | None = _f(None, "`no`, `fp16` or `bf16` (default: what `accelerate launch` says).")
    max_consecutive_nonfinite: int = _f(5, "Stop after this many consecutive updates with a NaN/inf loss or gradient.")
    # ------------------------------------------------------------------ checkpoints, logging, evaluation
    checkpointing_steps: int = _f(1000, "Save the training state every N updates (0 = only at the end).")
    checkpoints_total_limit: int = _f(2, "Keep the last K checkpoints.")
    resume_from_checkpoint: str | None = _f(None, "`latest` or a checkpoint folder to continue from.")
    stop_after_steps: int | None = _f(None, "Save a checkpoint and exit after this many updates without changing the schedule (time-sliced jobs).")
    max_train_minutes: float | None = _f(None, "Stop training after this many minutes of training in total, counting the runs a resumed checkpoint "
                                       "came from (checkpoint, evaluation and final save still happen).")
    logging_steps: int = _f(50, "Log train loss every N updates.")
    eval_steps: int = _f(0, "Evaluate on the validation split every N updates (0 = only at the end).")
    report_to: str = _f("none", "accelerate trackers: `none`, `tensorboard`, `all`, ...")
    log_example_ids: bool = _f(False, "Write the ids of the examples each process trained on to examples_rank<R>.jsonl.")
    plot: bool = _f(True, "Write perplexity.png (train and validation perplexity) at the end.")


ARGUMENT_NAMES = {f.name for f in dataclasses.fields(PretrainingArguments)}
_DEFAULTS = {f.name: (None if f.default is dataclasses.MISSING else f.default) for f in dataclasses.fields(PretrainingArguments)}
VALID_CHOICES = {
    "batching": ("sentences", "windows"),
    "optimizer": ("adagrad", "adamw"),
    "lm_softmax": (None, "full", "sampled"),
    "mixed_precision": (None, "no", "fp16", "bf16"),
}


def load_recipe(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML recipe; keys may use ``-`` or ``_``. Raises `ValueError` naming an unknown key."""
    if not os.path.isfile(path):
        raise ValueError(f"--config: recipe {os.fspath(path)!r} does not exist.")
    with open(path, encoding="utf-8") as handle:
        data = yaml.safe_load(handle) or {}
    if not isinstance(data, dict):
        raise ValueError(f"recipe {os.fspath(path)!r} must be a mapping of option names to values.")
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in ARGUMENT_NAMES:
            raise ValueError(f"recipe {os.fspath(path)!r}: unknown key {key!r}.")
        if name in ("train_file", "validation_file", "test_file") and isinstance(value, str):
            value = [value]
        out[name] = value
    return out


def parse_args(argv: list[str] | None = None) -> PretrainingArguments:
    """Parse ``[--config recipe.yaml] [flags]``: recipe values become defaults, flags override them."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(PretrainingArguments, description="Pretrain an ELMo biLM with accelerate.")
    parser.add_argument("--config", default=None, help="A YAML recipe (configuration/recipes/*.yaml); flags override it.")
    pre, _ = parser.parse_known_args(argv)
    if pre.config:
        recipe = load_recipe(pre.config)
        parser.set_defaults(**recipe)
    namespace = parser.parse_args(argv)
    values = {k: v for k, v in vars(namespace).items() if k in ARGUMENT_NAMES}
    for name, value in values.items():
        # `--dataset-name null` (or none / an empty string) switches off an option set by a recipe
        if isinstance(value, str) and value.strip().lower() in ("null", "none", "") and _DEFAULTS[name] is None:
            values[name] = None
    args = PretrainingArguments(**values)
    validate(args)
    return args


def validate(args: PretrainingArguments) -> None:
    for name, choices in VALID_CHOICES.items():
        if getattr(args, name) not in choices:
            raise ValueError(f"--{name.replace('_', '-')} must be one of {[c for c in choices if c]}, got {getattr(args, name)!r}.")
    positive = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps", "window_size",
                "max_sentence_length", "checkpoints_total_limit", "logging_steps", "max_consecutive_nonfinite")
    for name in positive:
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    for name in ("max_steps", "stop_after_steps", "max_train_examples", "max_eval_examples"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}.")
    if args.streaming and not args.max_steps:
        raise ValueError("--streaming needs --max-steps (a stream has no known length).")
    if not args.train_file and not args.dataset_name:
        raise ValueError("no training data: pass --train-file or --dataset-name (or a --config recipe that sets one).")


INIT_MODEL_FILES = ("config.json", "model.safetensors", "vocab.txt")
DEFAULT_MODEL_CONFIG = "elmo-tiny"


def check_init_model_folder(args: PretrainingArguments) -> None:
    """--init-from-model must name a complete saved language model (checked when a run starts, not when a recipe
    is parsed: the folder may be the output of an earlier stage)."""
    if args.init_from_model is None:
        return
    folder = Path(args.init_from_model)
    missing = [name for name in INIT_MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"--init-from-model {args.init_from_model!r} is not a saved ELMo language model folder: "
                         f"{', '.join(missing)} missing (a folder written by pretraining or `save_pretrained` is needed).")


def model_config_path(args: PretrainingArguments) -> Path:
    """The config.json the run's architecture comes from: --model-config, else --init-from-model's, else elmo-tiny."""
    if args.model_config is not None:
        return resolve_model_config(args.model_config)
    if args.init_from_model is not None:
        return Path(args.init_from_model) / "config.json"
    return resolve_model_config(DEFAULT_MODEL_CONFIG)


def resolve_model_config(name_or_path: str) -> Path:
    """A preset name (``elmo-tiny``) or a path to a ``config.json``."""
    candidates = [Path(name_or_path)]
    stem = name_or_path[:-5] if name_or_path.endswith(".json") else name_or_path
    candidates += [REPO_ROOT / "configuration" / f"{stem}.json", REPO_ROOT / "configuration" / f"elmo-{stem}.json"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    presets = sorted(p.stem for p in (REPO_ROOT / "configuration").glob("elmo-*.json"))
    raise ValueError(f"--model-config {name_or_path!r} is neither a file nor a preset ({', '.join(presets) or 'none found'}).")
