"""The options of ``elmo pretrain``: one dataclass (`PretrainingArguments`, a field per flag and recipe key, with its
help, group and metavar), the valid choices, and the checks of every value and combination (`validate`,
`snapshot_minutes`). Parsing is `modeling_elmo.pretraining.arguments`; recipes and presets are
`modeling_elmo.pretraining.recipes`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

#: The learning rate of each optimiser when --learning-rate is not given.
DEFAULT_LEARNING_RATES = {"adamw": 2e-2, "adagrad": 0.2}


def _f(default: Any, help: str, **kwargs: Any) -> Any:
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **kwargs})
    return field(default=default, metadata={"help": help, **kwargs})


@dataclass
class PretrainingArguments:
    train_file: list[str] | None = _f(
        None,
        "Training text: files, globs, directories or a packaged corpus (`builtin:austen-emma`); one sentence or "
        "paragraph per line.",
        nargs="+",
        group="data",
    )
    validation_file: list[str] | None = _f(
        None, "Validation text (files, globs, directories, `builtin:NAME`).", nargs="+"
    )
    test_file: list[str] | None = _f(None, "Test text (files, globs, directories, `builtin:NAME`).", nargs="+")
    dataset_name: str | None = _f(
        None,
        "A `datasets` dataset, e.g. `wikitext` (loaded with `datasets.load_dataset`; replaces the recipe's files).",
    )
    dataset_config_name: str | None = _f(None, "Its configuration, e.g. `wikitext-2-raw-v1`.")
    data_license: list[str] | None = _f(
        None,
        "Licence of the training data, `LICENSE` or `DATA=LICENSE` per part (e.g. `gutenberg/*.txt=public-domain`): "
        "recorded for the model card (`elmo push` warns when it is unknown or research-only).",
        nargs="+",
        metavar="[DATA=]LICENSE",
    )
    text_column: str = _f("text", "Column holding the text in a Hub dataset.", metavar="NAME")
    streaming: bool = _f(
        False, "Stream the data instead of loading it (corpora larger than memory); needs --max-steps."
    )
    validation_split_percentage: float = _f(
        1.0, "Percent of training lines held out when there is no validation split (0 = none)."
    )
    max_train_examples: int | None = _f(None, "Use only the first N training lines (quick experiments).")
    max_eval_examples: int | None = _f(None, "Use only the first N lines of validation and test.")
    vocab_file: str | None = _f(
        None, "Use this vocabulary (one word per line) instead of building one from the training data."
    )
    vocab_size: int | None = _f(
        None, "Keep at most this many words, the 4 special words included (most frequent first)."
    )
    min_count: int = _f(1, "Keep only words seen at least this many times in the training data.")
    char_vocabulary: str = _f(
        "bytes",
        "`bytes`: words are read as UTF-8 bytes (the released English models' table); `unicode`: as characters, "
        "through a character vocabulary built from the training text (any script; saved with the tokenizer).",
    )
    max_characters: int = _f(
        2000,
        "With --char-vocabulary unicode: keep this many of the most frequent characters; rarer ones are read as "
        "unknown.",
    )
    batching: str = _f(
        "sentences",
        "`sentences`: length-bucketed sentences, boundaries added by the model; `windows`: fixed windows of the <S> "
        "w.. </S> stream (original).",
    )
    window_size: int = _f(20, "Tokens per window with --batching windows (the original's unroll_steps).")
    max_sentence_length: int = _f(100, "Longer lines are cut into pieces of at most this many words.")
    per_device_train_batch_size: int = _f(64, "Sentences (or windows) per batch per process.")
    per_device_eval_batch_size: int = _f(64, "Sentences (or windows) per evaluation batch per process.")
    max_tokens_per_batch: int | None = _f(
        None,
        "Batch by a token budget instead of a sentence count: each training batch holds as many "
        "length-sorted sentences as fit in N padded tokens (replaces --per-device-train-batch-size).",
    )
    bucket_size: int = _f(100, "Length bucketing: sort inside pools of this many batches (1 = no bucketing).")
    preprocessing_num_workers: int | None = _f(None, "Processes for reading, counting and tokenising (`num_proc`).")
    dataloader_num_workers: int = _f(0, "DataLoader worker processes.")
    cache_dir: str | None = _f(None, "`datasets` cache folder (default: HF_DATASETS_CACHE).")
    overwrite_cache: bool = _f(False, "Re-tokenise even if a cached result exists.")
    model_config: str | None = _f(
        None,
        "Model preset name (`elmo-tiny`, `elmo-27m`, ...) or a config.json path (default: "
        "`elmo-tiny`, or the architecture of --init-from-model).",
        group="model",
        metavar="PRESET|FILE",
    )
    init_from_model: str | None = _f(
        None,
        "Start from the weights of this saved model folder (continued, e.g. domain-adaptive, "
        "pretraining): its architecture and vocabulary are used; optimiser, schedule and "
        "data position start afresh. A resumed checkpoint's weights take precedence.",
        metavar="DIR",
    )
    lm_softmax: str | None = _f(None, "Override the preset's training softmax: `full` or `sampled`.")
    num_negative_samples: int | None = _f(
        None, "Override the number of negative samples of the sampled softmax (fewer than the vocabulary's words)."
    )
    dropout: float | None = _f(None, "Override hidden_dropout_prob, in [0, 1).")
    optimizer: str = _f(
        "adamw",
        "`adamw` (the recipes') or `adagrad` (the original's: lr 0.2, initial accumulator 1.0).",
        group="optimisation",
    )
    learning_rate: float | None = _f(
        None,
        f"Peak learning rate (default {DEFAULT_LEARNING_RATES['adamw']:g} for adamw, right for "
        f"elmo-tiny; the recipes of larger models use 4e-3; {DEFAULT_LEARNING_RATES['adagrad']:g} for adagrad).",
    )
    weight_decay: float = _f(0.0, "AdamW weight decay (applied to matrices only).")
    adam_beta1: float = _f(0.9, "AdamW beta1.")
    adam_beta2: float = _f(0.999, "AdamW beta2.")
    adagrad_initial_accumulator: float = _f(1.0, "Adagrad's initial accumulator value.")
    gradient_accumulation_steps: int = _f(1, "Micro-batches per update.")
    max_grad_norm: float | None = _f(10.0, "Clip the global gradient norm (original: 10.0); 0 or null = off.")
    loss_multiplier: float = _f(
        1.0, "Multiply the loss before backward (the original used unroll_steps = 20 with Adagrad)."
    )
    mixed_precision: str | None = _f(
        None,
        "`no`, `fp16` (a GPU), `bf16` (a GPU or a CPU with native bfloat16) or `auto` (bf16 where the device has it "
        "natively, else no); default: what `accelerate launch` says.",
    )
    max_consecutive_nonfinite: int = _f(5, "Stop after this many consecutive updates with a NaN/inf loss or gradient.")
    seed: int = _f(42, "Random seed (data order, initialisation, dropout, sampling).")
    lr_scheduler_type: str = _f(
        "constant",
        "transformers `get_scheduler` name: constant, constant_with_warmup, linear, cosine, ... "
        "With --max-train-minutes: constant, constant_with_warmup, linear or cosine over the time budget.",
        group="schedule and budget",
        metavar="NAME",
    )
    warmup_steps: float = _f(
        0,
        "Warm-up: a number of updates, or a fraction of the run in (0, 1) (of the time budget with "
        "--max-train-minutes).",
    )
    num_train_epochs: float = _f(1.0, "Epochs (ignored when --max-steps is set).")
    max_steps: int | None = _f(None, "Total optimiser updates (overrides --num-train-epochs).")
    max_train_minutes: float | None = _f(
        None,
        "Stop training after this many minutes of training in total, counting the runs a resumed checkpoint "
        "came from (checkpoint, evaluation and final save still happen); schedules run over this budget.",
    )
    stop_after_steps: int | None = _f(
        None, "Save a checkpoint and exit after this many updates without changing the schedule (time-sliced jobs)."
    )
    save_at_minutes: str | None = _f(
        None,
        "Save the model as it is when the training time (counted as --max-train-minutes counts it, resumed runs "
        "included) passes each of these minutes, e.g. `10,30`, into snapshots/minutes-M/ (a model folder `elmo "
        "evaluate` reads). A snapshot is the model an M-minute run would give only when the schedule does not depend "
        "on the run's length: constant or constant_with_warmup with --warmup-steps in updates (others are refused).",
        metavar="M,M,...",
    )
    eval_steps: int = _f(0, "Evaluate on the validation split every N updates (0 = only at the end).")
    early_stopping_patience: int | None = _f(
        None, "Stop after this many evaluations (--eval-steps) without a better validation perplexity."
    )
    load_best_model_at_end: bool = _f(
        False,
        "Save the model of the best validation perplexity (evaluated every --eval-steps and at the end), not the last "
        "one.",
    )
    output_dir: str = _f(
        "outputs/elmo-pretrained",
        "The run's folder: model, checkpoints, metrics and plots. One run per folder.",
        group="checkpoints and output",
    )
    overwrite: bool = _f(
        False, "Clear --output-dir first when it holds another run (only the files a run writes are removed)."
    )
    checkpointing_steps: int = _f(1000, "Save the training state every N updates (0 = only at the end).")
    checkpoints_total_limit: int = _f(2, "Keep the last K checkpoints.")
    resume_from_checkpoint: str | None = _f(
        None,
        "`latest` or a checkpoint folder to continue from (the run in --output-dir, same arguments).",
        metavar="latest|DIR",
    )
    plot: bool = _f(True, "Write perplexity.png (train and validation perplexity) at the end.")
    logging_steps: int = _f(
        50,
        "Log the train loss every N updates; the trainer reads device values (loss, non-finite updates, stop requests) "
        "only then.",
        group="logging",
    )
    report_to: str = _f("none", "accelerate trackers: `none`, `tensorboard`, `all`, ...", metavar="TRACKERS")
    log_example_ids: bool = _f(
        False, "Write the ids of the examples each process trained on to examples_rank<R>.jsonl."
    )


ARGUMENT_NAMES = {f.name for f in dataclasses.fields(PretrainingArguments)}
_DEFAULTS = {
    f.name: (None if f.default is dataclasses.MISSING else f.default) for f in dataclasses.fields(PretrainingArguments)
}
#: The data sources: a source given on the command line replaces the recipe's (a recipe's files do not linger
#: beside a --dataset-name, nor a recipe's dataset beside --train-file).
DATA_SOURCE_FIELDS = ("train_file", "validation_file", "test_file", "dataset_name", "dataset_config_name")
VALID_CHOICES = {
    "batching": ("sentences", "windows"),
    "char_vocabulary": ("bytes", "unicode"),
    "optimizer": ("adagrad", "adamw"),
    "lm_softmax": (None, "full", "sampled"),
    "mixed_precision": (None, "no", "fp16", "bf16", "auto"),
}
#: Schedules that run over the elapsed fraction of a --max-train-minutes budget (see `schedule.py`).
BUDGET_SCHEDULES = ("constant", "constant_with_warmup", "linear", "cosine")


def _option_groups() -> dict[str, tuple[str, ...]]:
    """How ``elmo pretrain --help`` groups the options: the sections of `PretrainingArguments`, each named by the
    ``group`` of its first field."""
    groups: dict[str, tuple[str, ...]] = {}
    title = ""
    for spec in dataclasses.fields(PretrainingArguments):
        title = spec.metadata.get("group", title)
        groups[title] = (*groups.get(title, ()), spec.name)
    return groups


OPTION_GROUPS = _option_groups()


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


#: The schedules whose learning rate at minute M does not depend on the run's length (`snapshot_minutes`).
LENGTH_FREE_SCHEDULES = ("constant", "constant_with_warmup")


def snapshot_minutes(args: PretrainingArguments) -> list[float]:
    """The training minutes of ``--save-at-minutes`` (ascending; empty when it is not given); raises `ValueError`
    for a value that is not a list of numbers > 0, a mark at or past --max-train-minutes (there is the final model),
    and a schedule that depends on the run's length (a snapshot of it is not the model of a shorter run)."""
    text = args.save_at_minutes
    if text is None or not str(text).strip():
        return []
    marks = []
    for item in str(text).split(","):
        try:
            mark = float(item)
        except ValueError:
            mark = math.nan
        if not (math.isfinite(mark) and mark > 0):
            raise ValueError(f"--save-at-minutes must be minutes > 0 separated by commas, e.g. 10,30; got {text!r}.")
        marks.append(mark)
    if args.max_train_minutes is not None and max(marks) >= args.max_train_minutes:
        raise ValueError(
            f"--save-at-minutes {text}: {max(marks):g} is not before --max-train-minutes {args.max_train_minutes:g} "
            "(the run's own model is the model at the end)."
        )
    if args.lr_scheduler_type not in LENGTH_FREE_SCHEDULES or 0 < args.warmup_steps < 1:
        what = (
            f"--warmup-steps {args.warmup_steps:g} is a fraction of the run"
            if args.lr_scheduler_type in LENGTH_FREE_SCHEDULES
            else f"--lr-scheduler-type {args.lr_scheduler_type} runs over the run's length"
        )
        raise ValueError(
            f"--save-at-minutes needs a schedule that does not depend on the run's length ({what}): a snapshot would "
            "not be the model of a shorter run; use constant or constant_with_warmup with --warmup-steps in updates."
        )
    return sorted(set(marks))


def validate(args: PretrainingArguments) -> None:
    """Raise `ValueError` naming the flag and its value for any value out of range or any impossible combination."""
    for name, choices in VALID_CHOICES.items():
        if getattr(args, name) not in choices:
            raise ValueError(f"{flag(name)} must be one of {[c for c in choices if c]}, got {getattr(args, name)!r}.")

    def integer(name: str, minimum: int, optional: bool = False) -> None:
        value = getattr(args, name)
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{flag(name)} must be an integer >= {minimum}, got {value!r}.")

    def number(name: str, low: float, high: float = math.inf, *, low_open: bool = False, optional: bool = False):
        value = getattr(args, name)
        if value is None and optional:
            return
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ok = ok and (value > low if low_open else value >= low) and value < high
        if not ok:
            interval = f"{'(' if low_open else '['}{low:g}, {high:g})"
            raise ValueError(f"{flag(name)} must be a number in {interval}, got {value!r}.")

    positive = "per_device_train_batch_size per_device_eval_batch_size gradient_accumulation_steps bucket_size"
    positive += " max_sentence_length checkpoints_total_limit logging_steps max_consecutive_nonfinite min_count"
    for name in (*positive.split(), "max_characters"):
        integer(name, 1)
    integer("window_size", 2)
    for name in ("checkpointing_steps", "eval_steps", "dataloader_num_workers", "seed"):
        integer(name, 0)
    optional = "max_steps stop_after_steps max_train_examples max_eval_examples num_negative_samples"
    for name in (*optional.split(), "max_tokens_per_batch", "preprocessing_num_workers", "early_stopping_patience"):
        integer(name, 1, optional=True)
    integer("vocab_size", 5, optional=True)
    number("learning_rate", 0, optional=True)
    for name in ("adagrad_initial_accumulator", "weight_decay", "warmup_steps"):
        number(name, 0)
    for name in ("adam_beta1", "adam_beta2"):
        number(name, 0, 1)
    number("dropout", 0, 1, optional=True)
    number("max_grad_norm", 0, optional=True)
    number("validation_split_percentage", 0, 100)
    for name in ("loss_multiplier", "num_train_epochs", "max_train_minutes"):
        number(name, 0, low_open=True, optional=name == "max_train_minutes")
    if args.warmup_steps >= 1 and args.warmup_steps != int(args.warmup_steps):
        raise ValueError(
            f"--warmup-steps must be a whole number of updates or a fraction in (0, 1), got {args.warmup_steps!r}."
        )

    from transformers import SchedulerType

    schedulers = [s.value for s in SchedulerType if s.value not in ("reduce_lr_on_plateau", "greedy")]
    if args.lr_scheduler_type not in schedulers:
        raise ValueError(f"--lr-scheduler-type must be one of {schedulers}, got {args.lr_scheduler_type!r}.")
    if args.max_train_minutes is not None and args.lr_scheduler_type not in BUDGET_SCHEDULES:
        raise ValueError(
            f"--lr-scheduler-type {args.lr_scheduler_type} cannot run over a --max-train-minutes budget; "
            f"use one of {list(BUDGET_SCHEDULES)}."
        )
    snapshot_minutes(args)
    if args.streaming and not args.max_steps:
        raise ValueError("--streaming needs --max-steps (a stream has no known length).")
    if not args.train_file and not args.dataset_name:
        raise ValueError("no training data: pass --train-file or --dataset-name (or a --config recipe that sets one).")
    if args.overwrite and args.resume_from_checkpoint:
        raise ValueError(
            "--overwrite (start the run afresh) and --resume-from-checkpoint (continue it) exclude each other."
        )
    for name in ("early_stopping_patience", "load_best_model_at_end"):
        if getattr(args, name) and not args.eval_steps:
            raise ValueError(f"{flag(name)} needs --eval-steps N (the validation perplexity every N updates).")
    if args.max_tokens_per_batch is not None:
        longest = args.max_sentence_length if args.batching == "sentences" else args.window_size
        if args.max_tokens_per_batch < longest:
            what = "--max-sentence-length" if args.batching == "sentences" else "--window-size"
            raise ValueError(
                f"--max-tokens-per-batch ({args.max_tokens_per_batch}) must hold at least one example of "
                f"{what} ({longest}) tokens."
            )
