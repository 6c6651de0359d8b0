"""The ELMo pretraining command on accelerate (one CPU, one GPU, many GPUs, many nodes: the same code).

`train` is the skeleton of accelerate's ``nlp_example.py``: check the inputs, build the accelerator, the data, the
model, optimiser and schedule, ``prepare``, resume, the loop, finish. Each step is a named function here or in
`loop.py`; the run's files are named by `modeling_elmo.folders.run_folder.RunFolder`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..evaluation.lm_scoring import UNK_HANDLING, UnigramBaseline, dataset_target_counts
from ..folders.run_folder import RunFolder
from ..utils.capability import require_bf16
from ..utils.io_utils import atomic_write_text
from ..utils.launch import check_process_count, use_cpu_backend
from ..utils.results import EvaluationResults, write_results
from .arguments import DEFAULT_LEARNING_RATES, PretrainingArguments, parse_args, read_model_preset, validate
from .batching import BucketBatchSampler, Collator, example_lengths
from .checkpoint import WRITE_ERRORS, CheckpointManager, check_checkpoint_files, load_checkpoint, read_trainer_state
from .data import (
    Vocabulary,
    build_char_vocabulary,
    build_vocabulary,
    check_hub_dataset,
    expand_text_files,
    load_raw_splits,
    tokenize_splits,
)
from .evaluation import evaluate, metrics_record, plot_perplexity
from .loop import NonfiniteGuard, ProgressBar, Session, evaluate_and_track, save_checkpoint, train_loop
from .output import (
    BestModel,
    check_output_folder,
    data_file_arguments,
    open_output_folder,
    run_lock,
    save_final_model,
)
from .schedule import build_scheduler
from .state import MetricsLog, TrainingState, data_fingerprint, identity_differences, run_identity

logger = logging.getLogger("modeling_elmo.pretraining")

DEFAULT_MODEL_CONFIG = "elmo-tiny"
INIT_MODEL_FILES = ("config.json", "model.safetensors", "vocab.txt")
#: Flags that override a field of the model configuration.
CONFIG_OVERRIDES = {
    "lm_softmax": "lm_softmax",
    "num_negative_samples": "num_negative_samples",
    "dropout": "hidden_dropout_prob",
}
_ARCHITECTURE_KEYS = (
    "projection_dim",
    "cell_size",
    "num_hidden_layers",
    "char_embedding_dim",
    "char_cnn_filters",
    "num_highway_layers",
    "char_cnn_activation",
    "max_characters_per_token",
    "num_characters",
    "char_vocabulary",
    "use_skip_connections",
)


# ----------------------------------------------------------------------------------------------- inputs
@dataclass
class RunPlan:
    """What `check_inputs` established before anything is written."""

    run: RunFolder
    folder_mode: str
    model_config: dict[str, Any]  # the preset (or --init-from-model's config) with every override, without vocab_size
    split_files: dict[str, list[str]]
    resume_path: Path | None = None
    resume_state: dict[str, Any] | None = None
    fixed_vocab: tuple[Path, str] | None = None  # a vocabulary the run must use, and who fixes it
    unicode: bool = False  # a Unicode character vocabulary (--char-vocabulary unicode, or the starting model's)
    fixed_characters: tuple[Path, str] | None = None  # a character vocabulary the run must use, and who fixes it


def model_config_dict(args: PretrainingArguments) -> dict[str, Any]:
    """The model's configuration: --model-config's (or --init-from-model's, or elmo-tiny's) with the flags'
    overrides applied."""
    if args.model_config is not None:
        config = read_model_preset(args.model_config)
    elif args.init_from_model is not None:
        config = read_model_preset(str(Path(args.init_from_model) / "config.json"))
    else:
        config = read_model_preset(DEFAULT_MODEL_CONFIG)
    for name, key in CONFIG_OVERRIDES.items():
        if getattr(args, name) is not None:
            config[key] = getattr(args, name)
    return config


def _negative_samples(model_config: dict[str, Any]) -> int:
    import inspect

    from ..configuration_elmo import ElmoConfig

    default = inspect.signature(ElmoConfig.__init__).parameters["num_negative_samples"].default
    return model_config.get("num_negative_samples", default)


def build_config(model_config: dict[str, Any], vocab_size: int, characters: int | None = None):
    """The run's `ElmoConfig`, built once, validated by its construction; errors name the flags to change.
    ``characters``: the size of a Unicode character vocabulary (None: bytes)."""
    from ..configuration_elmo import UNICODE_FIRST_CHARACTER, ElmoConfig

    if characters is not None:
        model_config = {
            **model_config,
            "char_vocabulary": "unicode",
            "num_characters": UNICODE_FIRST_CHARACTER + characters,
        }

    negatives = _negative_samples(model_config)
    if model_config.get("lm_softmax") == "sampled" and isinstance(negatives, int) and negatives >= vocab_size:
        raise ValueError(
            f"--lm-softmax sampled draws {negatives} negative samples per batch, but the vocabulary has {vocab_size} "
            f"words: pass --num-negative-samples below {vocab_size}, or --lm-softmax full."
        )
    try:
        return ElmoConfig.from_dict({**model_config, "vocab_size": vocab_size})
    except (TypeError, ValueError) as error:
        raise ValueError(f"the model configuration is impossible: {error}") from None


def _planned_vocab_size(
    args: PretrainingArguments, model_config: dict[str, Any], fixed: tuple[Path, str] | None
) -> int:
    if fixed is not None:
        return len(Vocabulary.from_file(fixed[0]))
    if args.vocab_file:
        return len(Vocabulary.from_file(args.vocab_file))
    if args.vocab_size:
        return args.vocab_size
    if model_config.get("vocab_size", 4) > 4:
        return model_config["vocab_size"]
    # not known before the data are counted: check everything else now, the softmax size once the vocabulary exists
    sampled = model_config.get("lm_softmax") == "sampled" and isinstance(_negative_samples(model_config), int)
    return max(5, _negative_samples(model_config) + 1) if sampled else 5


def check_inputs(args: PretrainingArguments) -> RunPlan:
    """Everything that can be checked before any file is written or any data are read: every flag, the final model
    configuration, the starting model, the data sources, the checkpoint to resume and the output folder."""
    validate(args)
    from ..configuration_elmo import ElmoConfig
    from ..embedding.inference import check_weights_fit_config
    from ..modeling_elmo import ElmoForBidirectionalLM
    from ..utils.loading import refuse_pickled_weights

    fixed = fixed_characters = None
    if args.init_from_model is not None:
        folder = Path(args.init_from_model)
        missing = [name for name in INIT_MODEL_FILES if not (folder / name).is_file()]
        if missing:
            raise ValueError(
                f"--init-from-model {args.init_from_model!r} is not a saved ELMo language model folder: "
                f"{', '.join(missing)} missing (a folder written by pretraining or `save_pretrained` is needed)."
            )
        refuse_pickled_weights(folder)
        # a truncated or damaged file, or a config.json whose sizes its weights do not have: one line, before the
        # model is built
        check_weights_fit_config(folder, ElmoForBidirectionalLM, ElmoConfig.from_pretrained(folder))
        fixed = (folder / "vocab.txt", f"--init-from-model {args.init_from_model!r}")
        words, rows = (
            len(Vocabulary.from_file(fixed[0])),
            read_model_preset(str(folder / "config.json")).get("vocab_size"),
        )
        if words != rows:
            raise ValueError(
                f"--init-from-model {args.init_from_model!r}: its vocab.txt has {words} words but its softmax "
                f"has {rows} rows (config.json vocab_size); word ids would point at other words' rows."
            )
        if (folder / "char_vocab.json").is_file():
            fixed_characters = (folder / "char_vocab.json", f"--init-from-model {args.init_from_model!r}")
        if args.model_config is not None:
            from ..configuration_elmo import ElmoConfig

            own = ElmoConfig.upgraded_dict(read_model_preset(str(folder / "config.json")))
            given = ElmoConfig.upgraded_dict(read_model_preset(args.model_config))
            bad = [k for k in _ARCHITECTURE_KEYS if k in own and k in given and own[k] != given[k]]
            if bad:
                raise ValueError(
                    f"--model-config {args.model_config!r} differs from --init-from-model {args.init_from_model!r} "
                    f"in: {', '.join(bad)} (leave --model-config out to use the model's own architecture)."
                )
    model_config = model_config_dict(args)
    run = RunFolder(args.output_dir)
    resume_path = resume_state = None
    if args.resume_from_checkpoint:
        resume_path = CheckpointManager(run.checkpoints_dir).resolve(args.resume_from_checkpoint)
        resume_state = read_trainer_state(resume_path)  # JSON only; an earlier version's checkpoint is named as such
        check_checkpoint_files(resume_path)
        fixed = (resume_path / "vocab.txt", f"checkpoint {str(resume_path)!r}")
        fixed_characters = (
            (resume_path / "char_vocab.json", f"checkpoint {str(resume_path)!r}")
            if (resume_path / "char_vocab.json").is_file()
            else None
        )
    if (
        fixed is not None
        and args.vocab_file
        and Vocabulary.from_file(args.vocab_file) != Vocabulary.from_file(fixed[0])
    ):
        given, vocab = Vocabulary.from_file(args.vocab_file), Vocabulary.from_file(fixed[0])
        raise ValueError(
            f"--vocab-file {args.vocab_file!r} ({len(given)} words, fingerprint {given.fingerprint()}) does not "
            f"match the vocabulary of {fixed[1]} ({len(vocab)} words, fingerprint {vocab.fingerprint()})."
        )
    unicode = args.char_vocabulary == "unicode" or model_config.get("char_vocabulary") == "unicode"
    if args.init_from_model is not None and unicode != (fixed_characters is not None):
        raise ValueError(
            f"--char-vocabulary {args.char_vocabulary} does not fit --init-from-model {args.init_from_model!r}, "
            f"whose model reads {'characters' if fixed_characters else 'bytes'} (leave --char-vocabulary out "
            "to use the model's own)."
        )
    planned_characters = len(_read_characters(fixed_characters[0])) if fixed_characters else args.max_characters
    build_config(model_config, _planned_vocab_size(args, model_config, fixed), planned_characters if unicode else None)
    split_files = {}
    for split, given, name in (
        ("train", args.train_file, "--train-file"),
        ("validation", args.validation_file, "--validation-file"),
        ("test", args.test_file, "--test-file"),
    ):
        if given:
            split_files[split] = expand_text_files(given, name)
    if args.dataset_name:
        check_hub_dataset(args.dataset_name)
    folder_mode = check_output_folder(args, run)
    return RunPlan(
        run, folder_mode, model_config, split_files, resume_path, resume_state, fixed, unicode, fixed_characters
    )


def _read_characters(path: Path) -> list[str]:
    """A saved character vocabulary (``char_vocab.json``), checked as the tokenizer checks it."""
    from ..tokenization_elmo import ElmoTokenizer

    return ElmoTokenizer(char_vocab_file=str(path)).characters


# ----------------------------------------------------------------------------------------------- building
def check_mixed_precision(mixed_precision: str | None, device: Any) -> None:
    """Refuse, in one line, a precision the device cannot train in: bf16 autocast where ``device`` lacks native
    bfloat16 (`capability.require_bf16`: emulated, it is many times slower than fp32), fp16 on a CPU (accelerate
    has no loss scaler there and would train in fp32 without the non-finite update guard)."""
    if mixed_precision == "bf16":
        require_bf16(device, "--mixed-precision bf16")
    elif mixed_precision == "fp16" and torch.device(device).type == "cpu":
        raise ValueError(
            "--mixed-precision fp16: on a CPU accelerate has no fp16 autocast or loss scaler (the run would be fp32 "
            "under another name); use --mixed-precision bf16 on a CPU with native bfloat16, or no."
        )


def build_accelerator(args: PretrainingArguments) -> Any:
    """The Accelerator (gloo on the CPU for a multi-process launch without GPUs), checked against the launch, and
    per-process logging: INFO on the local main process, errors elsewhere."""
    import datasets
    import transformers
    from accelerate import Accelerator

    accelerator = Accelerator(
        cpu=use_cpu_backend(),
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        log_with=None if args.report_to == "none" else args.report_to,
        project_dir=args.output_dir,
    )
    check_process_count(accelerator.num_processes, accelerator.distributed_type)
    check_mixed_precision(accelerator.mixed_precision, accelerator.device)
    if accelerator.distributed_type.value == "FSDP":
        raise ValueError(
            "pretraining does not run under FSDP (its sharded state has no safe checkpoint format here); an "
            "ELMo model fits on one device: use DDP (configuration/accelerate/multi-gpu.yaml)."
        )
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO, stream=sys.stderr)
    main = accelerator.is_local_main_process
    logging.getLogger("modeling_elmo").setLevel(logging.INFO if main else logging.ERROR)
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    datasets.utils.logging.set_verbosity(logging.WARNING if main else logging.ERROR)
    transformers.utils.logging.set_verbosity(logging.WARNING if main else logging.ERROR)
    if not main:
        datasets.utils.disable_progress_bars()
    return accelerator


@dataclass
class PreparedData:
    splits: dict[str, Any]  # tokenised train / validation / test
    vocab: Vocabulary
    fingerprint: str
    characters: list[str] | None = None  # the Unicode character vocabulary (None: bytes)

    @property
    def vocabulary_fingerprint(self) -> str:
        """The word vocabulary's fingerprint, and the character vocabulary's when there is one."""
        if self.characters is None:
            return self.vocab.fingerprint()
        import hashlib

        return f"{self.vocab.fingerprint()}+{hashlib.sha256(''.join(self.characters).encode('utf-8')).hexdigest()[:16]}"


def _limit(ds: Any, n: int | None) -> Any:
    import datasets

    if n is None:
        return ds
    return ds.take(n) if isinstance(ds, datasets.IterableDataset) else ds.select(range(min(n, len(ds))))


@contextlib.contextmanager
def preprocessing_progress(enabled: bool) -> Iterator[Any]:
    """One progress bar for the whole preparation of the data (reading, vocabulary, tokenising), with the
    `datasets` library's own bars (one per split and per pass) switched off meanwhile through its public API and
    switched back on afterwards if they were on. The bar is drawn on a terminal only (never into a log file), and a
    preparation that fails erases it before its one line."""
    import datasets
    from tqdm.auto import tqdm

    were_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    bar = tqdm(
        total=len(PREPROCESSING_STAGES),
        desc="preparing data",
        unit="stage",
        disable=None if enabled else True,  # None: shown on a terminal only, never in a log file
        bar_format="{desc}: {n}/{total} stages [{elapsed}{postfix}]",
    )
    try:
        yield bar
    except BaseException:
        bar.leave = False  # a preparation that fails says so in one line, not under a half-drawn bar
        raise
    finally:
        bar.close()
        if were_enabled:
            datasets.enable_progress_bars()


#: The stages of `prepare_data`, as its progress bar names them.
PREPROCESSING_STAGES = ("reading the text", "building the vocabulary", "tokenising")


def prepare_data(args: PretrainingArguments, accelerator: Any, plan: RunPlan) -> PreparedData:
    """Read the splits, fix or build the vocabulary (main process; shared with the others), tokenise; one progress
    bar for all of it (`preprocessing_progress`)."""
    with preprocessing_progress(accelerator.is_local_main_process) as bar:
        return _prepare_data(args, accelerator, plan, bar)


def _prepare_data(args: PretrainingArguments, accelerator: Any, plan: RunPlan, bar: Any) -> PreparedData:
    from accelerate.utils import broadcast_object_list

    def stage(index: int) -> None:
        bar.n = index
        bar.set_postfix_str(PREPROCESSING_STAGES[index] if index < len(PREPROCESSING_STAGES) else "done")

    stage(0)
    with accelerator.main_process_first():
        raw = load_raw_splits(
            train_file=args.train_file,
            validation_file=args.validation_file,
            test_file=args.test_file,
            dataset_name=args.dataset_name,
            dataset_config_name=args.dataset_config_name,
            text_column=args.text_column,
            streaming=args.streaming,
            validation_split_percentage=args.validation_split_percentage,
            seed=args.seed,
            cache_dir=args.cache_dir,
            num_proc=args.preprocessing_num_workers,
        )
    raw["train"] = _limit(raw["train"], args.max_train_examples)
    for split in ("validation", "test"):
        if split in raw:
            raw[split] = _limit(raw[split], args.max_eval_examples)
    stage(1)
    if plan.fixed_vocab is not None:  # a checkpoint's or a starting model's (its softmax rows belong to its words)
        vocab = Vocabulary.from_file(plan.fixed_vocab[0])
    elif args.vocab_file:
        vocab = Vocabulary.from_file(args.vocab_file)
    else:
        words = [None]
        if accelerator.is_main_process:
            started = time.time()
            size = args.vocab_size or (
                plan.model_config.get("vocab_size", 4) if plan.model_config.get("vocab_size", 4) > 4 else None
            )
            words = [
                build_vocabulary(
                    raw["train"], max_size=size, min_count=args.min_count, num_proc=args.preprocessing_num_workers
                ).words
            ]
            logger.info("vocabulary built in %.1f s", time.time() - started)
        if accelerator.num_processes > 1:
            broadcast_object_list(words)
        vocab = Vocabulary(words[0])
    if len(vocab) <= 4:
        raise ValueError("the vocabulary has no words besides the 4 special ones.")
    characters = None
    if plan.unicode:
        if plan.fixed_characters is not None:
            characters = _read_characters(plan.fixed_characters[0])
        else:
            listed = [None]
            if accelerator.is_main_process:
                listed = [
                    build_char_vocabulary(
                        raw["train"], max_size=args.max_characters, num_proc=args.preprocessing_num_workers
                    )
                ]
            if accelerator.num_processes > 1:
                broadcast_object_list(listed)
            characters = listed[0]
    stage(2)
    with accelerator.main_process_first():
        splits = tokenize_splits(
            raw,
            vocab,
            mode=args.batching,
            max_sentence_length=args.max_sentence_length,
            window_size=args.window_size,
            num_proc=args.preprocessing_num_workers,
            overwrite_cache=args.overwrite_cache,
        )
    stage(3)
    files = {k: v for k, v in plan.split_files.items() if k in ("train", "validation")}
    dataset = " ".join(filter(None, (args.dataset_name, args.dataset_config_name))) or None
    return PreparedData(splits, vocab, data_fingerprint(files, dataset), characters)


def build_sampler(
    args: PretrainingArguments, accelerator: Any, data: PreparedData
) -> tuple[BucketBatchSampler | None, int]:
    """The training batches and the number of updates the run makes."""
    if args.streaming:
        return None, args.max_steps
    train = data.splits["train"]
    sampler = BucketBatchSampler(
        example_lengths(train),
        None if args.max_tokens_per_batch else args.per_device_train_batch_size,
        max_tokens=args.max_tokens_per_batch,
        shuffle=True,
        seed=args.seed,
        rank=accelerator.process_index,
        num_replicas=accelerator.num_processes,
        bucket_size=args.bucket_size,
        drop_last=True,
    )
    batches = sampler.num_batches()
    if batches == 0:
        raise ValueError(
            f"the training split has {len(train)} examples: fewer than one batch of "
            f"{args.per_device_train_batch_size} per process on {accelerator.num_processes} process(es)."
        )
    total = args.max_steps or max(1, int(args.num_train_epochs * batches) // args.gradient_accumulation_steps)
    return sampler, total


def build_optimizer(
    model: torch.nn.Module, args: PretrainingArguments, device_type: str = "cpu", sharded: bool = False
) -> torch.optim.Optimizer:
    """Adagrad (the original's) or AdamW with decay on matrices only. The fused implementations (one kernel over all
    parameters; on a CPU 5x faster for AdamW, 2.7x for Adagrad, equal to 1e-7) are used where torch has them:
    AdamW on CPU and CUDA, Adagrad on CPU, neither for sharded parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    if args.optimizer == "adagrad":
        lr = args.learning_rate if args.learning_rate is not None else DEFAULT_LEARNING_RATES["adagrad"]
        return torch.optim.Adagrad(
            params,
            lr=lr,
            initial_accumulator_value=args.adagrad_initial_accumulator,
            fused=True if device_type == "cpu" and not sharded else None,
        )
    lr = args.learning_rate if args.learning_rate is not None else DEFAULT_LEARNING_RATES["adamw"]
    groups = [  # decay matrices only (chosen by dimension, not by name)
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=lr,
        betas=(args.adam_beta1, args.adam_beta2),
        fused=True if device_type in ("cpu", "cuda") and not sharded else None,
    )


def rename_legacy_keys(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` with the LSTM keys of older folders renamed (`LEGACY_KEY_MAPPING`), as loading does."""
    from ..modeling_elmo import LEGACY_KEY_MAPPING

    renamed = {}
    for key, tensor in state_dict.items():
        for pattern, replacement in LEGACY_KEY_MAPPING.items():
            key = re.sub(pattern, replacement, key)
        renamed[key] = tensor
    return renamed


def build_model(args: PretrainingArguments, config: Any, plan: RunPlan) -> torch.nn.Module:
    from safetensors.torch import load_file

    from ..acceleration.packed_kernels import use_packed_kernels
    from ..modeling_elmo import ElmoForBidirectionalLM

    model = use_packed_kernels(ElmoForBidirectionalLM(config))  # the package's fast recurrence (docs/model.md)
    if args.init_from_model is not None and plan.resume_path is None:
        folder = Path(args.init_from_model)
        state, own = rename_legacy_keys(load_file(str(folder / "model.safetensors"))), model.state_dict()
        problems = [
            f"{label}: {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''}"
            for label, keys in (
                ("missing", sorted(set(own) - set(state))),
                ("unexpected", sorted(set(state) - set(own))),
                ("shape differs", sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)),
            )
            if keys
        ]
        if problems:
            raise ValueError(
                f"--init-from-model {str(folder)!r} does not fit the model being trained ({'; '.join(problems)})."
            )
        model.load_state_dict(state, strict=True)
        logger.info("initialised the weights from %s", folder)
    return model


def resume(s: Session, plan: RunPlan) -> TrainingState:
    """The state to start from: fresh, or everything a checkpoint holds (weights, optimiser, schedule, random
    generators, data position, counters, best-so-far, training seconds)."""
    if plan.resume_path is None:
        return TrainingState()
    saved = load_checkpoint(
        plan.resume_path,
        model=s.unwrapped(),
        optimizer=s.optimizer,
        scheduler=s.scheduler,
        scaler=s.accelerator.scaler,
        rank=s.accelerator.process_index,
    )
    state: TrainingState = saved["state"]
    differences = identity_differences(saved.get("run") or {}, s.identity)
    if differences:
        raise ValueError(f"checkpoint {str(plan.resume_path)!r} belongs to another run: {'; '.join(differences)}.")
    saved_world, positions = saved.get("num_processes", 1), saved["positions"]
    if saved_world == s.world and len(positions) == s.world:  # every process continues its own shard
        state.epoch, state.batch_in_epoch = positions[s.accelerator.process_index]
    else:
        state.batch_in_epoch = state.batch_in_epoch * saved_world // s.world
        logger.warning(
            "resuming with %d processes instead of %d: the data position is converted, RNG streams differ.",
            s.world,
            saved_world,
        )
    s.metrics.truncate_after(state.global_step)
    # each process's example-id log, likewise: the batches of the interrupted continuation are trained again
    MetricsLog(s.run.examples_log_file(s.accelerator.process_index), s.args.log_example_ids).truncate_after(
        state.global_step
    )
    if s.best is not None and state.best_step is not None and s.accelerator.is_main_process:
        s.best.restore(plan.resume_path, state.best_step, state.best_perplexity)
    s.last_saved_step = state.global_step
    logger.info(
        "resumed from %s at update %d (epoch %d, batch %d)",
        plan.resume_path,
        state.global_step,
        state.epoch,
        state.batch_in_epoch,
    )
    return state


def fit_unigram_baseline(args: PretrainingArguments, data: PreparedData) -> UnigramBaseline:
    """The add-one unigram model of the training targets every perplexity is compared with."""
    counted = 100_000 if args.streaming else None
    counts = dataset_target_counts(data.splits["train"], len(data.vocab), args.batching, max_examples=counted)
    return UnigramBaseline.fit(
        counts, fitted_on="training data" + (f" (first {counted:,} examples)" if counted else "")
    )


def start_logging(s: Session, state: TrainingState, data: PreparedData, config: Any) -> None:
    """Trackers, the "Running" summary, the progress bar and the example-id log."""
    args, accelerator = s.args, s.accelerator
    if args.report_to != "none":
        accelerator.init_trackers(
            RunFolder.TRACKER_LOGS,
            config={k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in vars(args).items()},
        )
    log_summary(s, data, config)
    budget = 60.0 * args.max_train_minutes if args.max_train_minutes is not None else None
    s.progress = ProgressBar(
        s.total_updates, state.global_step, budget, state.train_seconds, enabled=accelerator.is_local_main_process
    )
    if args.log_example_ids:
        s.examples_log = open(s.run.examples_log_file(accelerator.process_index), "a", encoding="utf-8")


def stop_logging(s: Session) -> None:
    s.progress.close()
    if s.examples_log is not None:
        s.examples_log.close()


def log_summary(s: Session, data: PreparedData, config: Any) -> None:
    args = s.args
    batch = (
        f"{args.max_tokens_per_batch} tokens"
        if args.max_tokens_per_batch
        else f"{args.per_device_train_batch_size} sequences"
    )
    logger.info("***** Running ELMo pretraining *****")
    logger.info(
        "  processes = %d, device = %s, distributed type = %s, mixed precision = %s",
        s.world,
        s.accelerator.device,
        s.accelerator.distributed_type.value,
        s.accelerator.mixed_precision,
    )
    logger.info(
        "  vocabulary = %d words, parameters = %d (%s softmax in training)",
        len(data.vocab),
        sum(p.numel() for p in s.unwrapped().parameters()),
        config.lm_softmax,
    )
    logger.info(
        "  training examples = %s, batching = %s",
        "streamed" if args.streaming else len(data.splits["train"]),
        args.batching,
    )
    logger.info("  batch per process = %s, accumulation = %d", batch, args.gradient_accumulation_steps)
    logger.info(
        "  updates = %d (%s batches per process per epoch)",
        s.total_updates,
        s.sampler.num_batches() if s.sampler else "streamed",
    )


# ----------------------------------------------------------------------------------------------- finishing
def finish(
    s: Session, state: TrainingState, stop_reason: str, preempted: bool, baseline: UnigramBaseline, started: float
) -> int:
    """The last checkpoint; then, unless pre-empted: the final validation (and best-model choice), test, the model
    folder, ``training_metadata.json``, ``eval_results.json`` and the plot."""
    import datasets
    import transformers

    if s.last_saved_step != state.global_step and save_checkpoint(s, state) is None and preempted:
        raise SystemExit(
            f"elmo pretrain: error: stopping ({stop_reason}) but the checkpoint at update {state.global_step} could "
            f"not be written; the latest is {s.checkpoints.latest()}."
        )
    if preempted:
        logger.info(
            "stopped at update %d (%s); resume with --resume-from-checkpoint latest.", state.global_step, stop_reason
        )
        s.accelerator.end_training()
        if stop_reason == "signal SIGINT":  # Ctrl-C: one line, and the shell's status for an interrupted command
            if s.accelerator.is_main_process:
                print(
                    f"elmo pretrain: interrupted (Ctrl-C) at update {state.global_step}; the checkpoint "
                    f"{s.checkpoints.latest()} holds it: resume with --resume-from-checkpoint latest.",
                    file=sys.stderr,
                )
            return 130
        return 0
    if stop_reason:
        logger.info("stopped at update %d: %s.", state.global_step, stop_reason)
    model = s.unwrapped()
    chosen_step = state.global_step
    if "validation" in s.splits and (s.args.load_best_model_at_end or s.args.early_stopping_patience):
        if s.last_evaluated_step != state.global_step:
            evaluate_and_track(s, state)
        if s.args.load_best_model_at_end and state.best_step != state.global_step:
            s.best.load_into(model, state.best_step)
            logger.info(
                "loaded the best model: update %d, validation perplexity %.2f", state.best_step, state.best_perplexity
            )
        chosen_step = state.best_step if s.args.load_best_model_at_end else state.global_step
    perplexities = []
    for split in ("validation", "test"):
        if split in s.splits:
            result = evaluate(model, s.splits[split], s.collator, s.accelerator, s.args, baseline, split)
            perplexities.append(result)
            s.metrics.write(
                {"step": state.global_step, "split": split, "model_step": chosen_step, **metrics_record(result)}
            )
            logger.info(
                "%s: perplexity %.2f (forward %.2f, backward %.2f); unigram baseline %.2f",
                split,
                result.average,
                result.forward,
                result.backward,
                result.unigram.average,
            )
    s.accelerator.wait_for_everyone()
    if s.accelerator.is_main_process:
        try:
            characters = None if s.char_vocab_text is None else json.loads(s.char_vocab_text)
            save_final_model(model, s.run.vocab_file, s.run, characters)
            s.run.write_training_metadata(
                {
                    "global_step": state.global_step,
                    "model_step": chosen_step,
                    "tokens_seen": state.tokens_seen,
                    "skipped_updates": state.skipped_updates,
                    "train_seconds": state.train_seconds,
                    "wall_seconds": time.time() - started,
                    "num_processes": s.world,
                    "mixed_precision": s.accelerator.mixed_precision,
                    "vocab_size": len(s.vocab_text.splitlines()),
                    "vocab_fingerprint": s.identity["vocabulary"],
                    "data_fingerprint": s.identity["data"],
                    "parameters": sum(p.numel() for p in model.parameters()),
                    "stopped_early": stop_reason or None,
                    "best_validation_perplexity": state.best_perplexity,
                    "best_step": state.best_step,
                    "args": dataclasses.asdict(s.args),
                    "versions": {
                        "torch": torch.__version__,
                        "transformers": transformers.__version__,
                        "datasets": datasets.__version__,
                    },
                }
            )
            write_results(
                s.run.eval_results_file,
                EvaluationResults.now(
                    model=s.run.root.name,
                    source="elmo pretrain",
                    perplexity=perplexities,
                    details={
                        "global_step": state.global_step,
                        "model_step": chosen_step,
                        "vocab_size": len(s.vocab_text.splitlines()),
                        "unk_handling": UNK_HANDLING,
                    },
                ),
            )
            if s.args.plot:
                plot_perplexity(s.run.metrics_file, s.run.perplexity_plot_file)
        except WRITE_ERRORS as exc:  # a full disk: say what the kept checkpoint holds
            raise SystemExit(
                f"elmo pretrain: error: could not save the final model into {str(s.run.root)!r} "
                f"({' '.join(str(exc).split())}); {_kept_checkpoint(s, state)}"
            ) from None
        logger.info("saved the model into %s", s.run.root)
    s.accelerator.wait_for_everyone()
    s.accelerator.end_training()
    return 0


def _kept_checkpoint(s: Session, state: TrainingState) -> str:
    """What is kept when the final model cannot be written: the latest checkpoint and the updates it holds."""
    latest = s.checkpoints.latest()
    if latest is None:
        return (
            f"no checkpoint could be written either: the {state.global_step} updates of this run are lost "
            "(free some space and run the command again)."
        )
    step = int(CheckpointManager.read_state(latest)["state"]["global_step"])
    advice = "resume with --resume-from-checkpoint latest once there is space"
    if step >= state.global_step:
        return f"nothing is lost: the checkpoint {latest} holds all {step} updates ({advice}: it writes the model)."
    return (
        f"the latest checkpoint, {latest}, holds update {step}: the {state.global_step - step} updates after it are "
        f"lost ({advice})."
    )


# ----------------------------------------------------------------------------------------------- the skeleton
def train(args: PretrainingArguments) -> int:
    """Pretrain an ELMo biLM as ``args`` say; returns the exit status."""
    started = time.time()
    plan = check_inputs(args)  # bad input fails here, in seconds, before anything is written
    accelerator = build_accelerator(args)
    with run_lock(plan.run) if accelerator.is_main_process else contextlib.nullcontext():  # one run per folder
        return _train(args, plan, accelerator, started)


def _train(args: PretrainingArguments, plan: Any, accelerator: Any, started: float) -> int:
    from accelerate.utils import set_seed

    set_seed(args.seed)
    data = prepare_data(args, accelerator, plan)
    config = build_config(plan.model_config, len(data.vocab), None if data.characters is None else len(data.characters))
    sampler, total_updates = build_sampler(args, accelerator, data)
    model = build_model(args, config, plan)
    optimizer = build_optimizer(model, args, accelerator.device.type)
    scheduler = build_scheduler(args, optimizer, total_updates)  # stepped once per update by the loop
    identity = run_identity(args, config, data.fingerprint, data.vocabulary_fingerprint)
    char_vocab_text = None if data.characters is None else json.dumps(data.characters, ensure_ascii=False) + "\n"
    if accelerator.is_main_process:
        open_output_folder(plan.run, plan.folder_mode, identity, data_file_arguments(args))  # inputs good: the folder
        data.vocab.save(plan.run.vocab_file)
        if char_vocab_text is not None:
            atomic_write_text(plan.run.char_vocab_file, char_vocab_text)
    accelerator.wait_for_everyone()
    model, optimizer = accelerator.prepare(model, optimizer)
    s = Session(
        args=args,
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        splits=data.splits,
        sampler=sampler,
        collator=Collator(
            data.vocab.char_table(config.max_characters_per_token, data.characters), characters=data.characters
        ),
        run=plan.run,
        checkpoints=CheckpointManager(plan.run.checkpoints_dir, keep_last=args.checkpoints_total_limit),
        metrics=MetricsLog(plan.run.metrics_file, accelerator.is_main_process),
        identity=identity,
        vocab_text="".join(w + "\n" for w in data.vocab.words),
        total_updates=total_updates,
        best=BestModel(plan.run.best_model_dir) if args.load_best_model_at_end else None,
        guard=NonfiniteGuard(optimizer),
        char_vocab_text=char_vocab_text,
    )
    state = resume(s, plan)
    baseline = fit_unigram_baseline(args, data)
    start_logging(s, state, data, config)
    try:
        stop_reason, preempted = train_loop(s, state)
    finally:
        stop_logging(s)
    return finish(s, state, stop_reason, preempted, baseline, started)


def main(argv: list[str] | None = None) -> int:
    """``elmo pretrain`` / ``scripts/pretrain.py``: bad input ends with one line ``elmo pretrain: error: ...``."""
    try:
        return train(parse_args(argv))
    except (ValueError, OSError) as error:
        raise SystemExit(f"elmo pretrain: error: {error}") from None
    except KeyboardInterrupt:  # Ctrl-C before training started, or a second Ctrl-C while the first was handled
        raise SystemExit(
            "elmo pretrain: error: interrupted (Ctrl-C) at once, without saving a checkpoint; rerun the "
            "command to start again, or resume an earlier checkpoint with --resume-from-checkpoint "
            "latest."
        ) from None
