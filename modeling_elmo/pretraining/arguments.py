"""Pretraining options: one dataclass, parsed from a YAML recipe plus flags (flags win), every value range-checked.

Every field is a flag (``--train-file``, or ``--train_file``) and a recipe key (``train_file`` or ``train-file``);
unknown recipe keys and abbreviated flags are errors (with a suggestion). Presets, recipes and the quick-start
corpus are package data (`importlib.resources`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib.resources
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..utils.config_checks import shown
from ..utils.io_utils import error_line

#: ``--train-file builtin:NAME`` (or ``builtin:NAME/SPLIT``) names a corpus shipped in `modeling_elmo.corpora`.
BUILTIN_PREFIX = "builtin:"
BUILTIN_SPLITS = ("train", "validation", "test")


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


# ----------------------------------------------------------------------------------------------- packaged files
def _package_files(package: str) -> Any:
    try:
        return importlib.resources.files(package)
    except ModuleNotFoundError:
        raise ValueError(
            f"the package data {package} is not installed: install the package (`pip install -e .` in a "
            "checkout, or the wheel)."
        ) from None


def configuration_files() -> Any:
    """The packaged ``configuration/`` folder (presets, ``recipes/``, ``accelerate/``) as an importlib Traversable."""
    return _package_files("modeling_elmo.configuration")


def preset_names() -> list[str]:
    return sorted(
        p.name[:-5] for p in configuration_files().iterdir() if p.name.startswith("elmo-") and p.name.endswith(".json")
    )


def recipe_names() -> list[str]:
    return sorted(p.name[:-5] for p in (configuration_files() / "recipes").iterdir() if p.name.endswith(".yaml"))


def read_model_preset(name_or_path: str) -> dict[str, Any]:
    """The config dict of a preset name (``elmo-tiny`` or ``tiny``) or of a ``config.json`` path."""
    if os.path.isfile(name_or_path):
        text = Path(name_or_path).read_text(encoding="utf-8")
    else:
        stem = name_or_path[:-5] if name_or_path.endswith(".json") else name_or_path
        found = [configuration_files() / f"{n}.json" for n in (stem, f"elmo-{stem}")]
        found = [p for p in found if p.is_file()]
        if not found:
            raise ValueError(
                f"--model-config {name_or_path!r} is neither a file nor a preset ({', '.join(preset_names())})."
            )
        text = found[0].read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"--model-config {name_or_path!r} is not valid JSON ({error}).") from None
    if not isinstance(data, dict):
        raise ValueError(f"--model-config {name_or_path!r} must hold a JSON object.")
    return data


def recipe_path(name_or_path: str) -> Any:
    """A recipe file path, or the packaged recipe of that name (``quickstart``)."""
    if os.path.isfile(name_or_path):
        return Path(name_or_path)
    stem = name_or_path[:-5] if name_or_path.endswith(".yaml") else name_or_path
    packaged = configuration_files() / "recipes" / f"{stem}.yaml"
    if os.sep not in name_or_path and packaged.is_file():
        return packaged
    raise ValueError(
        f"--config: recipe {name_or_path!r} is neither a file nor a packaged recipe ({', '.join(recipe_names())})."
    )


def builtin_corpus_file(spec: str, default_split: str) -> str:
    """The file of ``builtin:NAME`` (split ``default_split``) or ``builtin:NAME/SPLIT``."""
    name, _, split = spec[len(BUILTIN_PREFIX) :].partition("/")
    split = split or default_split
    corpora = _package_files("modeling_elmo.corpora")
    available = sorted(p.name for p in corpora.iterdir() if (p / "README.md").is_file())
    if name not in available:
        raise ValueError(f"{spec!r}: no packaged corpus {name!r} (packaged: {', '.join(available)}).")
    if split not in BUILTIN_SPLITS:
        raise ValueError(f"{spec!r}: unknown split {split!r} (one of {', '.join(BUILTIN_SPLITS)}).")
    return str(corpora / name / f"{split}.txt")


# ----------------------------------------------------------------------------------------------- parsing
def load_recipe(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML recipe (a path or a packaged recipe name); keys may use ``-`` or ``_``. Raises `ValueError`
    naming an unknown key."""
    source = recipe_path(os.fspath(path))
    if source.stat().st_size > MAX_RECIPE_BYTES:
        raise ValueError(
            f"recipe {os.fspath(path)!r} has {source.stat().st_size:,} bytes; a recipe is a few option values "
            f"(at most {MAX_RECIPE_BYTES:,} bytes)."
        )
    try:
        data = yaml.load(source.read_text(encoding="utf-8"), Loader=_RecipeLoader) or {}  # noqa: S506 (safe, no alias)
    except (yaml.YAMLError, RecursionError) as error:  # RecursionError: nested deeper than the parser follows
        raise ValueError(f"recipe {os.fspath(path)!r} is not valid YAML ({error_line(str(error))}).") from None
    except _AliasError as error:
        raise ValueError(
            f"recipe {os.fspath(path)!r} uses the YAML alias *{shown(str(error))[1:-1]}: recipes take plain "
            "values (an alias can expand a small file into billions of values); write the value out."
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"recipe {os.fspath(path)!r} must be a mapping of option names to values.")
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in ARGUMENT_NAMES:
            raise ValueError(f"recipe {os.fspath(path)!r}: unknown key {shown(key)}.")
        if name in ("train_file", "validation_file", "test_file") and isinstance(value, str):
            value = [value]
        wanted = _recipe_value_kind(name)
        if wanted.startswith("a string") and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # `dataset_config_name: 2019`
        if not _is_of_kind(value, wanted):
            raise ValueError(
                f"recipe {os.fspath(path)!r}: {key} must be {wanted}, got {shown(value)} (a {type(value).__name__})."
            )
        out[name] = value
    return out


#: The largest recipe file read (the packaged ones have a few hundred bytes).
MAX_RECIPE_BYTES = 1 << 20


class _AliasError(Exception):
    """A recipe used a YAML alias (carries its anchor's name)."""


class _RecipeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses aliases (``*name``) before composing anything from them: a few hundred bytes of
    nested aliases ("billion laughs") expand into gigabytes of values."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise _AliasError(self.peek_event().anchor)
        return super().compose_node(parent, index)


def _recipe_value_kind(name: str) -> str:
    """What a recipe value of option ``name`` must be, in words, from the field's annotation."""
    annotation = str(next(f.type for f in dataclasses.fields(PretrainingArguments) if f.name == name))
    kind = (
        "a list of file names"
        if annotation.startswith("list")
        else "true or false"
        if annotation.startswith("bool")
        else "an integer"
        if annotation.startswith("int")
        else "a number"
        if annotation.startswith("float")
        else "a string"
    )
    return f"{kind} or null" if "None" in annotation else kind


def _is_of_kind(value: Any, kind: str) -> bool:
    """Whether a recipe value fits; a string does for any single value (argparse converts it as a flag's text)."""
    if value is None:
        return kind.endswith(" or null")
    if kind.startswith("a list"):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if isinstance(value, str):
        return True
    if kind.startswith("true"):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind.startswith("an integer"):
        return isinstance(value, int)
    if kind.startswith("a number"):
        return isinstance(value, (int, float))
    return isinstance(value, str)


def _one_line_error(message: str) -> None:
    print(f"elmo pretrain: error: {error_line(message)} (`elmo pretrain --help` lists the options).", file=sys.stderr)
    raise SystemExit(2)


def _to_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _optional(kind: type) -> Any:
    """``kind``, or ``None`` for ``null``/``none`` (switching off a value a recipe set)."""

    def convert(value: str) -> Any:
        return None if value.strip().lower() in ("null", "none") else kind(value)

    convert.__name__ = kind.__name__  # argparse names the type in "invalid int value: 'abc'"
    return convert


class _Parser(argparse.ArgumentParser):
    """One error line (no fifty-line usage first), and a suggestion for a mistyped flag."""

    def error(self, message: str) -> None:  # type: ignore[override]
        _one_line_error(message)


def build_parser() -> argparse.ArgumentParser:
    """The ``elmo pretrain`` parser: the fields of `PretrainingArguments` in the groups of `OPTION_GROUPS`, with
    dash spellings, their real defaults, and no abbreviations."""
    parser = _Parser(
        prog="elmo pretrain",
        allow_abbrev=False,
        usage="elmo pretrain [--config RECIPE] [options]",
        description="Pretrain an ELMo biLM on your text (one process as it is; several processes or machines under "
        "`accelerate launch`). Flags override the values of a --config recipe. See docs/pretraining.md.",
        formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=34, width=110),
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="RECIPE",
        help=f"A YAML recipe: a file, or a packaged recipe name ({', '.join(recipe_names())}); flags override it.",
    )
    fields = {f.name: f for f in dataclasses.fields(PretrainingArguments)}
    for title, names in OPTION_GROUPS.items():
        group = parser.add_argument_group(title)
        for name in names:
            spec, default = fields[name], _DEFAULTS[name]
            annotation, meta = str(spec.type), dict(spec.metadata)
            help_text, metavar = meta.pop("help"), meta.pop("metavar", None)
            meta.pop("group", None)
            if "bool" in annotation:
                if default:
                    help_text += f" (default: on; {flag('no_' + name)} turns it off)"
                group.add_argument(
                    flag(name), dest=name, nargs="?", const=True, type=_to_bool, metavar="true|false", help=help_text
                )
                if default:
                    group.add_argument(flag("no_" + name), dest=name, action="store_false", help=argparse.SUPPRESS)
                continue
            kind = int if annotation.startswith("int") else float if annotation.startswith("float") else str
            if default is not None:
                help_text += f" (default: {default:g})" if isinstance(default, float) else f" (default: {default})"
            if name in VALID_CHOICES:
                metavar = "{" + ",".join(c for c in VALID_CHOICES[name] if c) + "}"
            else:
                metavar = metavar or (name.upper().split("_")[-1] if kind is str else "N" if kind is int else "X")
            convert = _optional(kind) if "None" in annotation and kind is not str else kind
            group.add_argument(flag(name), dest=name, type=convert, metavar=metavar, help=help_text, **meta)
    parser.set_defaults(**_DEFAULTS)
    return parser


def _dash_spellings(argv: list[str]) -> list[str]:
    """``--train_file`` -> ``--train-file`` for the known options (values and anything after ``--`` untouched)."""
    known = {"--" + name for name in ARGUMENT_NAMES} | {"--no_" + name for name in ARGUMENT_NAMES}
    out = []
    for position, token in enumerate(argv):
        if token == "--":
            return out + argv[position:]
        option, equals, value = token.partition("=")
        out.append(option.replace("_", "-") + equals + value if option in known else token)
    return out


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:
        first = unknown[0]
        if first.startswith("-"):
            options = sorted({o for action in parser._actions for o in action.option_strings if o.startswith("--")})
            typed = first.partition("=")[0]
            extensions = [o for o in options if o.startswith(typed)]  # an abbreviation: never taken, but named
            close = (
                extensions[:1] if len(extensions) == 1 else difflib.get_close_matches(typed, options, n=1, cutoff=0.75)
            )
            hint = f"; did you mean {close[0]}?" if close else ""
            _one_line_error(f"unknown option {first}{hint}")
        _one_line_error(f"unexpected argument {first!r}")
    return namespace


def parse_args(argv: list[str] | None = None) -> PretrainingArguments:
    """Parse ``[--config recipe] [flags]``: recipe values become defaults, flags override them, and a data source
    on the command line replaces the recipe's data sources."""
    argv = _dash_spellings(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    pre = _parse(parser, argv)
    if pre.config:
        recipe = load_recipe(pre.config)
        given = {k for k in DATA_SOURCE_FIELDS if getattr(pre, k) != _DEFAULTS[k]}
        if given:
            recipe = {k: v for k, v in recipe.items() if k not in DATA_SOURCE_FIELDS}
        parser.set_defaults(**recipe)
    namespace = _parse(parser, argv)
    values = {k: v for k, v in vars(namespace).items() if k in ARGUMENT_NAMES}
    for name, value in values.items():
        # `--dataset-name null` (or none / an empty string) switches off an option set by a recipe
        if isinstance(value, str) and value.strip().lower() in ("null", "none", "") and _DEFAULTS[name] is None:
            values[name] = None
    args = PretrainingArguments(**values)
    validate(args)
    return args


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
