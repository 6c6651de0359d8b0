"""The ELMo pretraining command on accelerate: `train` is the skeleton of accelerate's ``nlp_example.py`` (plan,
accelerator, data, model, optimiser, schedule, ``prepare``, resume, `loop.train_loop`, finish)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..evaluation.lm_scoring import UNK_HANDLING, UnigramBaseline, dataset_target_counts
from ..folders.run_folder import RunFolder
from ..utils.capability import bf16_supported, require_bf16
from ..utils.io_utils import atomic_write_text, command_error
from ..utils.launch import check_process_count, use_cpu_backend
from ..utils.results import EvaluationResults, write_results
from .arguments import parse_args
from .batching import BucketBatchSampler, Collator, example_lengths
from .checkpoint import WRITE_ERRORS, CheckpointManager, load_checkpoint
from .data import Vocabulary, build_vocabularies, load_raw_splits, tokenize_splits
from .evaluation import dataset_description, metrics_record, plot_perplexity
from .loop import ProgressBar, Session, evaluate_and_track, save_checkpoint, train_loop
from .options import DEFAULT_LEARNING_RATES, PretrainingArguments
from .output import data_file_arguments, open_output_folder, run_lock, save_final_model
from .plan import Plan, build_config, plan_run
from .schedule import build_scheduler
from .settings import DataSettings
from .state import MetricsLog, TrainingState, identity_differences, run_identity

logger = logging.getLogger("modeling_elmo.pretraining")


# ----------------------------------------------------------------------------------------------- building
def check_mixed_precision(mixed_precision: str | None, device: Any) -> None:
    """Refuse a precision the device cannot train in: bf16 without native bfloat16 (emulated: many times slower),
    fp16 on a CPU (no loss scaler: fp32 without the non-finite update guard)."""
    if mixed_precision == "bf16":
        require_bf16(device, "--mixed-precision bf16")
    elif mixed_precision == "fp16" and torch.device(device).type == "cpu":
        raise ValueError(
            "--mixed-precision fp16: on a CPU accelerate has no fp16 autocast or loss scaler (the run would be fp32 "
            "under another name); use --mixed-precision bf16 on a CPU with native bfloat16, or no."
        )


def resolve_mixed_precision(mixed_precision: str | None, cpu: bool) -> str | None:
    """``auto``: ``bf16`` where the device the run trains on multiplies bfloat16 natively (`bf16_supported`: a CPU with
    AVX512-BF16, AMX or Arm BF16, or a GPU with bf16), else ``no``; any other value as given. ``cpu``: accelerate is
    told to run on the CPU (`use_cpu_backend`)."""
    if mixed_precision != "auto":
        return mixed_precision
    device = "cpu" if cpu or not torch.cuda.is_available() else "cuda"
    return "bf16" if bf16_supported(device) else "no"


def build_accelerator(
    mixed_precision: str | None, gradient_accumulation_steps: int, report_to: str, project_dir: str
) -> Any:
    """The Accelerator, checked against the launch, and logging: INFO on the local main process, errors elsewhere."""
    import datasets
    import transformers
    from accelerate import Accelerator

    cpu = use_cpu_backend()
    options = dict(mixed_precision=resolve_mixed_precision(mixed_precision, cpu))
    options.update(gradient_accumulation_steps=gradient_accumulation_steps)
    log_with = None if report_to == "none" else report_to
    accelerator = Accelerator(cpu=cpu, log_with=log_with, project_dir=project_dir, **options)
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
    characters: list[str] | None = None  # the Unicode character vocabulary (None: bytes)

    @property
    def vocabulary_fingerprint(self) -> str:
        """The word vocabulary's fingerprint, and the character vocabulary's when there is one."""
        if self.characters is None:
            return self.vocab.fingerprint()
        return f"{self.vocab.fingerprint()}+{hashlib.sha256(''.join(self.characters).encode('utf-8')).hexdigest()[:16]}"


def _limit(ds: Any, n: int | None) -> Any:
    import datasets

    if n is None:
        return ds
    return ds.take(n) if isinstance(ds, datasets.IterableDataset) else ds.select(range(min(n, len(ds))))


@contextlib.contextmanager
def preprocessing_progress(enabled: bool) -> Iterator[Any]:
    """One progress bar for the whole data preparation (on a terminal only; erased when it fails), the `datasets`
    bars switched off meanwhile; yields ``stage(index)``, which shows `PREPROCESSING_STAGES` ``[index]``."""
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

    def stage(index: int) -> None:
        bar.n = index
        bar.set_postfix_str(PREPROCESSING_STAGES[index] if index < len(PREPROCESSING_STAGES) else "done")

    try:
        yield stage
    except BaseException:
        bar.leave = False  # a preparation that fails says so in one line, not under a half-drawn bar
        raise
    finally:
        bar.close()
        if were_enabled:
            datasets.enable_progress_bars()


#: The stages of `prepare_data`, as its progress bar names them.
PREPROCESSING_STAGES = ("reading the text", "building the vocabulary", "tokenising")


def prepare_data(settings: DataSettings, accelerator: Any, plan: Plan) -> PreparedData:
    """Read the splits of ``plan`` as ``settings`` say, fix or build the vocabulary (main process; shared with the
    others), tokenise."""
    with preprocessing_progress(accelerator.is_local_main_process) as stage:
        return _prepare_data(settings, accelerator, plan, stage)


def _prepare_data(settings: DataSettings, accelerator: Any, plan: Plan, stage: Any) -> PreparedData:
    from accelerate.utils import broadcast_object_list

    stage(0)
    plan.check_files_unchanged()
    with accelerator.main_process_first():
        options = settings.reading_options()
        raw = load_raw_splits(plan.files, **options, num_proc=settings.preprocessing_num_workers)
    raw["train"] = _limit(raw["train"], settings.max_train_examples)
    for split in ("validation", "test"):
        if split in raw:
            raw[split] = _limit(raw[split], settings.max_eval_examples)
    stage(1)
    vocab, characters = plan.vocab, plan.characters  # a checkpoint's, a starting model's, --vocab-file's
    count_characters = plan.unicode and characters is None
    if vocab is None or count_characters:  # from one count of the training words, on the main process
        counted = [None]
        if accelerator.is_main_process:
            counted[0] = build_vocabularies(
                raw["train"],
                words=vocab is None,
                max_size=plan.max_vocab_size,
                min_count=settings.min_count,
                max_characters=settings.max_characters if count_characters else None,
                num_proc=settings.preprocessing_num_workers,
            )
        if accelerator.num_processes > 1:
            broadcast_object_list(counted)
        built, characters_built = counted[0]
        vocab = built if vocab is None else vocab
        characters = characters_built if count_characters else characters
    if len(vocab) <= 4:
        raise ValueError("the vocabulary has no words besides the 4 special ones.")
    stage(2)
    with accelerator.main_process_first():
        lengths = dict(max_sentence_length=settings.max_sentence_length, window_size=settings.window_size)
        workers = dict(num_proc=settings.preprocessing_num_workers, overwrite_cache=settings.overwrite_cache)
        splits = tokenize_splits(raw, vocab, mode=settings.batching, **lengths, **workers)
    stage(3)
    return PreparedData(splits, vocab, None if characters is None else list(characters))


def build_sampler(
    train: Any, accelerator: Any, *, batch_size: int, max_tokens: int | None, seed: int, bucket_size: int
) -> BucketBatchSampler:
    """The training batches of this process: ``batch_size`` sequences or ``max_tokens`` padded tokens each."""
    shard = dict(rank=accelerator.process_index, num_replicas=accelerator.num_processes, shuffle=True, drop_last=True)
    sizes = dict(max_tokens=max_tokens, seed=seed, bucket_size=bucket_size)
    sampler = BucketBatchSampler(example_lengths(train), None if max_tokens else batch_size, **sizes, **shard)
    if sampler.num_batches() == 0:
        raise ValueError(
            f"the training split has {len(train)} examples: fewer than one batch of {batch_size} per process on "
            f"{accelerator.num_processes} process(es)."
        )
    return sampler


def build_optimizer(
    model: torch.nn.Module,
    optimizer: str,
    learning_rate: float | None = None,
    *,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    initial_accumulator: float = 1.0,
    device_type: str = "cpu",
    sharded: bool = False,
) -> torch.optim.Optimizer:
    """Adagrad (the original's) or AdamW with decay on matrices only, fused where torch has it and the parameters
    are not sharded (AdamW on CPU and CUDA, Adagrad on CPU: on a CPU 5x and 2.7x faster, equal to 1e-7)."""
    params = [p for p in model.parameters() if p.requires_grad]
    lr = learning_rate if learning_rate is not None else DEFAULT_LEARNING_RATES[optimizer]
    if optimizer == "adagrad":
        fused = True if device_type == "cpu" and not sharded else None
        return torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=initial_accumulator, fused=fused)
    groups = [  # decay matrices only (chosen by dimension, not by name)
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = True if device_type in ("cpu", "cuda") and not sharded else None
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused)


def build_model(config: Any, init_from: Path | None = None) -> torch.nn.Module:
    """The biLM of ``config`` (its recurrence as ``config.use_packed_kernels`` says), with the weights of the model
    folder ``init_from``."""
    from safetensors.torch import load_file

    from ..modeling_elmo import ElmoForBidirectionalLM
    from .sampled_softmax import use_configured_softmax

    model = use_configured_softmax(ElmoForBidirectionalLM(config))
    if (folder := init_from) is not None:
        weights = load_file(str(folder / "model.safetensors"))
        state, own = weights, model.state_dict()  # older names: refused by the plan (`check_weights_fit_config`)
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


def resume(s: Session, checkpoint: Path | None) -> TrainingState:
    """The state to start from: fresh, or everything ``checkpoint`` holds."""
    if checkpoint is None:
        return TrainingState()
    saved = load_checkpoint(
        checkpoint,
        model=s.unwrapped(),
        optimizer=s.optimizer,
        scheduler=s.scheduler,
        scaler=s.accelerator.scaler,
        rank=s.accelerator.process_index,
    )
    state: TrainingState = saved["state"]
    differences = identity_differences(saved.get("run") or {}, s.identity)
    if differences:
        raise ValueError(f"checkpoint {str(checkpoint)!r} belongs to another run: {'; '.join(differences)}.")
    saved_world, positions = saved.get("num_processes", 1), saved["positions"]
    if saved_world == s.world and len(positions) == s.world:  # every process continues its own shard
        state.epoch, state.batch_in_epoch = positions[s.accelerator.process_index]
    else:
        state.batch_in_epoch = state.batch_in_epoch * saved_world // s.world
        message = "resuming with %d processes instead of %d: the data position is converted, RNG streams differ."
        logger.warning(message, s.world, saved_world)
    s.metrics.truncate_after(state.global_step)
    # each process's example-id log, likewise: the batches of the interrupted continuation are trained again
    examples_log = MetricsLog(s.run.examples_log_file(s.accelerator.process_index), s.loop.log_example_ids)
    examples_log.truncate_after(state.global_step)
    if s.best is not None and state.best_step is not None and s.accelerator.is_main_process:
        s.best.restore(checkpoint, state.best_step, state.best_perplexity)
    s.last_saved_step = state.global_step
    where = (state.global_step, state.epoch, state.batch_in_epoch)
    logger.info("resumed from %s at update %d (epoch %d, batch %d)", checkpoint, *where)
    return state


def fit_unigram_baseline(train: Any, vocab_size: int, layout: str, streaming: bool) -> UnigramBaseline:
    """The add-one unigram model of the training targets (of a stream's first 100,000 examples)."""
    counted = 100_000 if streaming else None
    counts = dataset_target_counts(train, vocab_size, layout, max_examples=counted)
    return UnigramBaseline.fit(
        counts, fitted_on="training data" + (f" (first {counted:,} examples)" if counted else "")
    )


def start_logging(s: Session, state: TrainingState, data: PreparedData, config: Any) -> None:
    """Trackers, the "Running" summary, the progress bar and the example-id log."""
    accelerator = s.accelerator
    if s.loop.report_to != "none":
        values = s.recorded_arguments.items()
        accelerator.init_trackers(
            RunFolder.TRACKER_LOGS,
            config={k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in values},
        )
    log_summary(s, data, config)
    s.progress = ProgressBar(
        s.total_updates,
        state.global_step,
        s.loop.budget_seconds,
        state.train_seconds,
        enabled=accelerator.is_local_main_process,
    )
    if s.loop.log_example_ids:
        s.examples_log = open(s.run.examples_log_file(accelerator.process_index), "a", encoding="utf-8")


def stop_logging(s: Session) -> None:
    s.progress.close()
    if s.examples_log is not None:
        s.examples_log.close()


def log_summary(s: Session, data: PreparedData, config: Any) -> None:
    batches = s.batches
    accelerator, parameters = s.accelerator, sum(p.numel() for p in s.unwrapped().parameters())
    batch = f"{batches.max_tokens_per_batch} tokens" if batches.max_tokens_per_batch else None
    batch = batch or f"{batches.per_device_train_batch_size} sequences"
    logger.info("***** Running ELMo pretraining *****")
    devices = (s.world, accelerator.device, accelerator.distributed_type.value, accelerator.mixed_precision)
    logger.info("  processes = %d, device = %s, distributed type = %s, mixed precision = %s", *devices)
    vocabulary = (len(data.vocab), parameters, config.lm_softmax)
    logger.info("  vocabulary = %d words, parameters = %d (%s softmax in training)", *vocabulary)
    examples = "streamed" if batches.streaming else len(data.splits["train"])
    logger.info("  training examples = %s, batching = %s", examples, batches.batching)
    logger.info("  batch per process = %s, accumulation = %d", batch, s.loop.gradient_accumulation_steps)
    epoch = s.sampler.num_batches() if s.sampler else "streamed"
    logger.info("  updates = %d (%s batches per process per epoch)", s.total_updates, epoch)


# ----------------------------------------------------------------------------------------------- finishing
def finish(
    s: Session, state: TrainingState, stop_reason: str, preempted: bool, baseline: UnigramBaseline, started: float
) -> int:
    """The last checkpoint; then, unless pre-empted: the final evaluations and the run's files."""
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
    if "validation" in s.splits and (s.loop.load_best_model_at_end or s.loop.early_stopping_patience):
        if s.last_evaluated_step != state.global_step:
            evaluate_and_track(s, state)
        if s.loop.load_best_model_at_end and state.best_step != state.global_step:
            s.best.load_into(model, state.best_step)
            best = (state.best_step, state.best_perplexity)
            logger.info("loaded the best model: update %d, validation perplexity %.2f", *best)
        chosen_step = state.best_step if s.loop.load_best_model_at_end else state.global_step
    perplexities = []
    for split in ("validation", "test"):
        if split in s.splits:
            result = s.evaluate(split, baseline)
            perplexities.append(result)
            s.metrics.write(
                {"step": state.global_step, "split": split, "model_step": chosen_step, **metrics_record(result)}
            )
            numbers = (result.average, result.forward, result.backward, result.unigram.average)
            logger.info("%s: perplexity %.2f (forward %.2f, backward %.2f); unigram baseline %.2f", split, *numbers)
    s.accelerator.wait_for_everyone()
    if s.accelerator.is_main_process:
        try:
            characters = None if s.char_vocab_text is None else json.loads(s.char_vocab_text)
            save_final_model(model, s.run.vocab_file, s.run, characters)
            steps = {
                "global_step": state.global_step,
                "model_step": chosen_step,
                "vocab_size": len(s.vocab_text.split()),
            }
            metadata = dict(steps, tokens_seen=state.tokens_seen, skipped_updates=state.skipped_updates)
            metadata.update(
                train_seconds=state.train_seconds, wall_seconds=time.time() - started, num_processes=s.world
            )
            metadata.update(mixed_precision=s.accelerator.mixed_precision, vocab_fingerprint=s.identity["vocabulary"])
            metadata.update(data_fingerprint=s.identity["data"], parameters=sum(p.numel() for p in model.parameters()))
            metadata.update(stopped_early=stop_reason or None, best_validation_perplexity=state.best_perplexity)
            metadata.update(best_step=state.best_step, args=dict(s.recorded_arguments))
            metadata["versions"] = {m.__name__: m.__version__ for m in (torch, transformers, datasets)}
            s.run.write_training_metadata(metadata)
            details = dict(steps, unk_handling=UNK_HANDLING)
            results = EvaluationResults.now(
                model=s.run.root.name, source="elmo pretrain", perplexity=perplexities, details=details
            )
            write_results(s.run.eval_results_file, results)
            if s.loop.plot:
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
    plan = plan_run(args)  # bad input fails here, in seconds, before anything is written
    accelerator = build_accelerator(
        args.mixed_precision, args.gradient_accumulation_steps, args.report_to, args.output_dir
    )
    with run_lock(plan.run) if accelerator.is_main_process else contextlib.nullcontext():  # one run per folder
        return _train(args, plan, accelerator, started)


def _train(args: PretrainingArguments, plan: Plan, accelerator: Any, started: float) -> int:
    from accelerate.utils import set_seed

    set_seed(args.seed)
    data = prepare_data(plan.data, accelerator, plan)
    config = build_config(plan.model_config, len(data.vocab), None if data.characters is None else len(data.characters))
    sampler, total_updates = None, args.max_steps
    if not args.streaming:
        sampler = build_sampler(
            data.splits["train"],
            accelerator,
            batch_size=plan.batches.per_device_train_batch_size,
            max_tokens=plan.batches.max_tokens_per_batch,
            seed=plan.batches.seed,
            bucket_size=plan.batches.bucket_size,
        )
        epoch_updates = int(args.num_train_epochs * sampler.num_batches()) // args.gradient_accumulation_steps
        total_updates = args.max_steps or max(1, epoch_updates)
    model = build_model(config, plan.init_from)
    optimizer = build_optimizer(
        model,
        args.optimizer,
        args.learning_rate,
        weight_decay=args.weight_decay,
        betas=(args.adam_beta1, args.adam_beta2),
        initial_accumulator=args.adagrad_initial_accumulator,
        device_type=accelerator.device.type,
    )
    scheduler = build_scheduler(
        optimizer, args.lr_scheduler_type, args.warmup_steps, total_updates, plan.loop.budget_seconds, args.max_steps
    )
    identity = run_identity(args, config, plan.data_fingerprint, data.vocabulary_fingerprint)
    char_vocab_text = None if data.characters is None else json.dumps(data.characters, ensure_ascii=False) + "\n"
    if accelerator.is_main_process:
        open_output_folder(plan.run, plan.folder_mode, identity, data_file_arguments(args))  # inputs good: the folder
        data.vocab.save(plan.run.vocab_file)
        if char_vocab_text is not None:
            atomic_write_text(plan.run.char_vocab_file, char_vocab_text)
    accelerator.wait_for_everyone()
    model, optimizer = accelerator.prepare(model, optimizer)
    s = Session(
        batches=plan.batches,
        loop=plan.loop,
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
        identity=identity,
        vocab_text="".join(w + "\n" for w in data.vocab.words),
        total_updates=total_updates,
        char_vocab_text=char_vocab_text,
        split_descriptions={split: dataset_description(args, split) for split in ("validation", "test")},
        recorded_arguments=dataclasses.asdict(args),
    )
    state = resume(s, plan.resume_path)
    baseline = fit_unigram_baseline(data.splits["train"], len(data.vocab), args.batching, args.streaming)
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
        raise command_error("pretrain", error) from None
    except KeyboardInterrupt:  # Ctrl-C before training started, or a second Ctrl-C while the first was handled
        raise SystemExit(
            "elmo pretrain: error: interrupted (Ctrl-C) at once, without saving a checkpoint; rerun the "
            "command to start again, or resume an earlier checkpoint with --resume-from-checkpoint "
            "latest."
        ) from None
