"""The ELMo pretraining loop on accelerate (one CPU, one GPU, many GPUs, many nodes: the same code).

Order of `train`: Accelerator and logging, seed, data (under ``main_process_first``), vocabulary, model, optimiser
and scheduler, ``prepare``, resume, the loop (``accelerator.accumulate``, clipping, non-finite guard, periodic
evaluation and atomic checkpoints, SIGTERM), then the final checkpoint, exact full-softmax evaluation with the
unigram baseline, ``save_pretrained``, ``eval_results.json``, ``training_metadata.json`` and the perplexity plot.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .arguments import PretrainingArguments, check_init_model_folder, model_config_path, parse_args
from .checkpoint import CheckpointManager
from .data import (
    BucketBatchSampler,
    Collator,
    FixedBatches,
    IndexedDataset,
    Vocabulary,
    build_vocabulary,
    example_lengths,
    iter_stream_batches,
    load_raw_splits,
    tokenize_splits,
)
from ..lm_scoring import UNK_HANDLING, PerplexityAccumulator, UnigramBaseline, dataset_target_counts
from ..results import EvaluationResults, PerplexityResult, write_results
from ..run_folder import RunFolder

logger = logging.getLogger("modeling_elmo.pretraining")

#: Config fields that must agree between a checkpoint and the run resuming it.
_ARCHITECTURE_KEYS = (
    "vocab_size", "hidden_size", "cell_size", "num_hidden_layers", "char_embedding_dim", "char_cnn_filters",
    "num_highway_layers", "char_cnn_activation", "max_characters_per_token", "num_characters", "use_skip_connections",
)


class _StopFlag:
    def __init__(self):
        self.requested = False
        self.reason = ""

    def __call__(self, signum, frame):  # signal handler
        self.requested = True
        self.reason = f"signal {signal.Signals(signum).name}"


class MetricsLog:
    """Append-only JSON lines on the main process."""

    def __init__(self, path: Path, enabled: bool):
        self.path = path
        self.enabled = enabled

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl; a step logged twice (after a resume) keeps its last record."""
    records = []
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle if line.strip()]
    return records


def train_losses_by_step(path: str | os.PathLike) -> dict[int, float]:
    return {r["step"]: r["train_loss"] for r in read_metrics(path) if "train_loss" in r}


# ----------------------------------------------------------------------------------------------- building blocks
def build_optimizer(model: torch.nn.Module, args: PretrainingArguments, device_type: str = "cpu",
                    sharded: bool = False) -> torch.optim.Optimizer:
    """Adagrad (the original's) or AdamW with decay on matrices only. The fused implementations (one kernel over all
    parameters; on a CPU 5x faster for AdamW, 2.7x for Adagrad, equal to 1e-7) are used where torch has them:
    AdamW on CPU and CUDA, Adagrad on CPU, neither for sharded (FSDP) parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    if args.optimizer == "adagrad":
        lr = args.learning_rate if args.learning_rate is not None else 0.2
        return torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=args.adagrad_initial_accumulator,
                                   fused=True if device_type == "cpu" and not sharded else None)
    lr = args.learning_rate if args.learning_rate is not None else 1e-3
    # Decay matrices only (by dimension, not by name).
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(args.adam_beta1, args.adam_beta2),
                             fused=True if device_type in ("cpu", "cuda") and not sharded else None)


def build_config(args: PretrainingArguments, vocab_size: int):
    from ..configuration_elmo import ElmoConfig

    config = ElmoConfig.from_json_file(str(model_config_path(args)))
    config.vocab_size = vocab_size
    if args.lm_softmax is not None:
        config.lm_softmax = args.lm_softmax
    if args.num_negative_samples is not None:
        config.num_negative_samples = args.num_negative_samples
    if args.dropout is not None:
        config.hidden_dropout_prob = args.dropout
    config.stateful = False
    return config


def load_initial_weights(model: torch.nn.Module, folder: Path) -> None:
    """Copy a saved language model's weights (``model.safetensors``) into ``model``; every tensor must match by name
    and shape (a feature-only or differently shaped model is an error, not a partial load)."""
    from safetensors.torch import load_file

    state = load_file(str(folder / "model.safetensors"))
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or shapes:
        problems = [f"{label}: {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''}"
                    for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape differs", shapes)) if keys]
        raise ValueError(f"--init-from-model {str(folder)!r} does not fit the model being trained ({'; '.join(problems)}).")
    model.load_state_dict(state, strict=True)


def _preset_vocab_size(args: PretrainingArguments) -> int | None:
    if args.vocab_size is not None:
        return args.vocab_size
    with open(model_config_path(args), encoding="utf-8") as handle:
        size = json.load(handle).get("vocab_size", 4)
    return size if size and size > 4 else None


def _limit(ds: Any, n: int | None) -> Any:
    import datasets

    if n is None:
        return ds
    if isinstance(ds, datasets.IterableDataset):
        return ds.take(n)
    return ds.select(range(min(n, len(ds))))


def _dataset_description(args: PretrainingArguments, split: str) -> str:
    """What the ``split`` data is, for the results file: its file names, the Hub dataset, or the held-out share."""
    files = {"validation": args.validation_file, "test": args.test_file}.get(split)
    if files:
        return ", ".join(Path(f).name for f in files)
    if args.dataset_name:
        return " ".join(filter(None, (Path(args.dataset_name).name, args.dataset_config_name)))
    names = ", ".join(Path(f).name for f in args.train_file or [])
    return f"{names} ({args.validation_split_percentage:g}% of the lines held out)"


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    dataset: Any,
    collator: Collator,
    accelerator: Any,
    args: PretrainingArguments,
    baseline: UnigramBaseline | None = None,
    split: str = "validation",
) -> PerplexityResult:
    """Exact full-softmax perplexity of ``dataset`` (each process scores its share; the totals are reduced), with the
    unigram ``baseline``'s on the same targets when given (`modeling_elmo.lm_scoring`)."""
    import datasets

    was_training = model.training
    model.eval()
    accumulator = PerplexityAccumulator(layout=args.batching, baseline=baseline)
    if isinstance(dataset, datasets.IterableDataset):
        batches: Iterator = (
            collator(examples)
            for examples in iter_stream_batches(
                dataset, args.per_device_eval_batch_size, seed=args.seed, epoch=0, rank=accelerator.process_index,
                num_replicas=accelerator.num_processes, shuffle=False, drop_last=False,
            )
        )
    else:
        sampler = BucketBatchSampler(
            example_lengths(dataset), args.per_device_eval_batch_size, shuffle=False, rank=accelerator.process_index,
            num_replicas=accelerator.num_processes, bucket_size=args.bucket_size, drop_last=False,
        )
        batches = iter(
            torch.utils.data.DataLoader(
                IndexedDataset(dataset), batch_sampler=FixedBatches(sampler.rank_batches(0)), collate_fn=collator,
                num_workers=args.dataloader_num_workers,
            )
        )
    for batch in batches:
        inputs = {k: batch[k].to(accelerator.device) for k in ("input_ids", "attention_mask", "labels")}
        with accelerator.autocast():
            out = model(**inputs, add_sentence_boundaries=args.batching == "sentences")
        accumulator.update(out, batch["labels"])
    if accelerator.num_processes > 1:
        accumulator = accumulator.from_tensor(
            accelerator.reduce(accumulator.to_tensor(accelerator.device), reduction="sum").cpu())
    if was_training:
        model.train()
    return accumulator.result(dataset=_dataset_description(args, split), split=split)


def _metrics_record(result: PerplexityResult) -> dict[str, float]:
    """The perplexities of ``result`` as a flat ``metrics.jsonl`` record."""
    record = {"perplexity": result.average, "perplexity_forward": result.forward,
              "perplexity_backward": result.backward}
    if result.unigram is not None:
        record["unigram_perplexity"] = result.unigram.average
    return record


def plot_perplexity(metrics_path: Path, out_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    train = {r["step"]: r["train_ppl"] for r in records if "train_ppl" in r}
    valid = {r["step"]: r["perplexity"] for r in records if r.get("split") == "validation"}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if train:
        steps = sorted(train)
        ax.plot(steps, [train[s] for s in steps], label="train (training loss)")
    if valid:
        steps = sorted(valid)
        ax.plot(steps, [valid[s] for s in steps], "o-", label="validation (exact)")
    ax.set_xlabel("update")
    ax.set_ylabel("perplexity (geometric mean of directions)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title("ELMo pretraining")
    fig.tight_layout()
    tmp = out_path.with_name(out_path.name + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, out_path)


def save_final_model(model: torch.nn.Module, vocab_path: Path, output_dir: Path) -> None:
    """``save_pretrained`` (model, tokenizer with vocab.txt, code files, full auto_map) into ``output_dir``, atomically
    per file: written into a temporary folder first, then moved with `os.replace`."""
    from .. import ElmoTokenizer, save_model_folder

    tmp = output_dir / ".tmp-final-model"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tokenizer = ElmoTokenizer(vocab_file=str(vocab_path), split_pattern="whitespace")
        save_model_folder(model, tokenizer, tmp)
        for item in sorted(tmp.iterdir()):
            os.replace(item, output_dir / item.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _config_mismatch(saved: dict[str, Any], config: Any) -> list[str]:
    current = config.to_dict()
    return [k for k in _ARCHITECTURE_KEYS if k in saved and saved[k] != current.get(k)]


# ----------------------------------------------------------------------------------------------- main loop
def train(args: PretrainingArguments) -> int:
    import datasets
    import transformers
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm
    from transformers import get_scheduler

    from ..modeling_elmo import ElmoForBidirectionalLM

    check_init_model_folder(args)
    started = time.time()
    launched_world = int(os.environ.get("WORLD_SIZE", "1"))
    # A torchrun-style launch on a machine without GPUs must use gloo on the CPU (MULTI_CPU); without cpu=True
    # accelerate would start `launched_world` independent single-process runs writing the same files.
    force_cpu = launched_world > 1 and not torch.cuda.is_available()
    accelerator = Accelerator(
        cpu=force_cpu,
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        log_with=None if args.report_to == "none" else args.report_to,
        project_dir=args.output_dir,
    )
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO, stream=sys.stderr)
    level = logging.INFO if accelerator.is_local_main_process else logging.ERROR
    logger.setLevel(level)
    logging.getLogger("modeling_elmo").setLevel(level)
    datasets.utils.logging.set_verbosity(logging.WARNING if accelerator.is_local_main_process else logging.ERROR)
    transformers.utils.logging.set_verbosity(logging.WARNING if accelerator.is_local_main_process else logging.ERROR)
    if not accelerator.is_local_main_process:
        datasets.utils.disable_progress_bars()

    if accelerator.num_processes != launched_world:
        raise ValueError(f"launched as {launched_world} processes but accelerate set up {accelerator.num_processes}.")
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    set_seed(args.seed)
    output_dir = Path(args.output_dir)
    run = RunFolder(output_dir)
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    checkpoints = CheckpointManager(run.checkpoints_dir, keep_last=args.checkpoints_total_limit)
    resume_path = checkpoints.resolve(args.resume_from_checkpoint) if args.resume_from_checkpoint else None
    resume_state = CheckpointManager.read_state(resume_path) if resume_path else None

    # ---------------------------------------------------------------- data and vocabulary
    with accelerator.main_process_first():
        raw = load_raw_splits(
            train_file=args.train_file, validation_file=args.validation_file, test_file=args.test_file,
            dataset_name=args.dataset_name, dataset_config_name=args.dataset_config_name, text_column=args.text_column,
            streaming=args.streaming, validation_split_percentage=args.validation_split_percentage, seed=args.seed,
            cache_dir=args.cache_dir, num_proc=args.preprocessing_num_workers,
        )
    raw["train"] = _limit(raw["train"], args.max_train_examples)
    for split in ("validation", "test"):
        if split in raw:
            raw[split] = _limit(raw[split], args.max_eval_examples)

    vocab_path = run.vocab_file
    # A checkpoint's or a starting model's vocabulary is fixed (its softmax rows belong to its words).
    if resume_path is not None and (resume_path / "vocab.txt").is_file():
        fixed_vocab, fixed_by = resume_path / "vocab.txt", f"checkpoint {str(resume_path)!r}"
    elif args.init_from_model:
        fixed_vocab, fixed_by = Path(args.init_from_model) / "vocab.txt", f"--init-from-model {args.init_from_model!r}"
    else:
        fixed_vocab = None
    if fixed_vocab is not None:
        vocab = Vocabulary.from_file(fixed_vocab)
        if args.vocab_file and Vocabulary.from_file(args.vocab_file) != vocab:
            given = Vocabulary.from_file(args.vocab_file)
            raise ValueError(
                f"--vocab-file {args.vocab_file!r} ({len(given)} words, fingerprint {given.fingerprint()}) does not match "
                f"the vocabulary of {fixed_by} ({len(vocab)} words, fingerprint {vocab.fingerprint()})."
            )
        if accelerator.is_main_process:
            vocab.save(vocab_path)
    elif args.vocab_file:
        vocab = Vocabulary.from_file(args.vocab_file)
        if accelerator.is_main_process:
            vocab.save(vocab_path)
    else:
        if accelerator.is_main_process:
            t0 = time.time()
            vocab = build_vocabulary(raw["train"], max_size=_preset_vocab_size(args), min_count=args.min_count, num_proc=args.preprocessing_num_workers)
            vocab.save(vocab_path)
            logger.info("vocabulary built in %.1f s", time.time() - t0)
        accelerator.wait_for_everyone()
        vocab = Vocabulary.from_file(vocab_path)
    if resume_state is not None and resume_state.get("vocab_fingerprint") not in (None, vocab.fingerprint()):
        raise ValueError(f"the vocabulary ({vocab.fingerprint()}) does not match checkpoint {str(resume_path)!r} ({resume_state['vocab_fingerprint']}).")
    if len(vocab) <= 4:
        raise ValueError("the vocabulary has no words besides the 4 special ones.")

    with accelerator.main_process_first():
        data = tokenize_splits(
            raw, vocab, mode=args.batching, max_sentence_length=args.max_sentence_length, window_size=args.window_size,
            num_proc=args.preprocessing_num_workers, overwrite_cache=args.overwrite_cache,
        )
    train_data = data["train"]

    # ---------------------------------------------------------------- model and optimisation
    config = build_config(args, len(vocab))
    if resume_state is not None:
        bad = _config_mismatch(resume_state.get("model_config", {}), config)
        if bad:
            raise ValueError(f"the model configuration differs from checkpoint {str(resume_path)!r} in: {', '.join(bad)}.")
    if args.init_from_model is not None and args.model_config is not None:
        with open(Path(args.init_from_model) / "config.json", encoding="utf-8") as handle:
            bad = _config_mismatch(json.load(handle), config)
        if bad:
            raise ValueError(f"--model-config {args.model_config!r} differs from --init-from-model {args.init_from_model!r} "
                             f"in: {', '.join(bad)} (leave --model-config out to use the model's own architecture).")
    model = ElmoForBidirectionalLM(config)
    if args.init_from_model is not None and resume_path is None:
        load_initial_weights(model, Path(args.init_from_model))
        logger.info("initialised the weights from %s", args.init_from_model)
    optimizer = build_optimizer(model, args, accelerator.device.type, sharded=accelerator.distributed_type.value == "FSDP")

    world = accelerator.num_processes
    if args.streaming:
        sampler = None
        batches_per_epoch = None
        total_updates = args.max_steps
    else:
        sampler = BucketBatchSampler(
            example_lengths(train_data), args.per_device_train_batch_size, shuffle=True, seed=args.seed,
            rank=accelerator.process_index, num_replicas=world, bucket_size=args.bucket_size, drop_last=True,
        )
        batches_per_epoch = sampler.num_batches()
        if batches_per_epoch == 0:
            raise ValueError(
                f"the training split has {len(train_data)} examples: fewer than one batch of "
                f"{args.per_device_train_batch_size} per process on {world} process(es)."
            )
        total_updates = args.max_steps or max(1, int(args.num_train_epochs * batches_per_epoch) // args.gradient_accumulation_steps)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=total_updates)
    model, optimizer = accelerator.prepare(model, optimizer)
    # The scheduler is stepped by hand once per update (accelerate's wrapper would step it once per process).
    accelerator.register_for_checkpointing(scheduler)

    counted = 100_000 if args.streaming else None
    baseline = UnigramBaseline.fit(dataset_target_counts(train_data, len(vocab), args.batching, max_examples=counted),
                                   fitted_on="training data" + (f" (first {counted:,} examples)" if counted else ""))
    collator = Collator(vocab.char_table(config.max_characters_per_token))

    # ---------------------------------------------------------------- resume
    global_step, epoch, batch_in_epoch, tokens_seen, skipped_updates, elapsed_before = 0, 0, 0, 0, 0, 0.0
    if resume_path is not None:
        accelerator.load_state(str(resume_path))
        global_step = int(resume_state["global_step"])
        epoch = int(resume_state["epoch"])
        batch_in_epoch = int(resume_state["batch_in_epoch"])
        tokens_seen = int(resume_state.get("tokens_seen", 0))
        skipped_updates = int(resume_state.get("skipped_updates", 0))
        elapsed_before = float(resume_state.get("train_seconds", 0.0))
        saved_world = int(resume_state.get("num_processes", world))
        positions = resume_state.get("positions")
        if positions and saved_world == world:  # streaming: every process has its own position in its shard
            epoch, batch_in_epoch = positions[accelerator.process_index]
        if saved_world != world:
            batch_in_epoch = batch_in_epoch * saved_world // world
            logger.warning("resuming with %d processes instead of %d: the data position is converted, RNG streams differ.", world, saved_world)
        for key in ("seed", "per_device_train_batch_size", "batching", "gradient_accumulation_steps"):
            if key in resume_state.get("args", {}) and resume_state["args"][key] != getattr(args, key):
                logger.warning("resuming with %s=%r (checkpoint: %r): the continuation is not exact.", key, getattr(args, key), resume_state["args"][key])
        logger.info("resumed from %s at update %d (epoch %d, batch %d)", resume_path, global_step, epoch, batch_in_epoch)

    if args.report_to != "none":
        accelerator.init_trackers(RunFolder.TRACKER_LOGS, config={k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in vars(args).items()})

    n_params = sum(p.numel() for p in accelerator.unwrap_model(model).parameters())
    logger.info("***** Running ELMo pretraining *****")
    logger.info("  processes = %d, device = %s, distributed type = %s, mixed precision = %s", world, accelerator.device,
                accelerator.distributed_type.value, accelerator.mixed_precision)
    logger.info("  vocabulary = %d words, parameters = %d (%s softmax in training)", len(vocab), n_params, config.lm_softmax)
    logger.info("  training examples = %s, batching = %s", "streamed" if args.streaming else len(train_data), args.batching)
    logger.info("  batch per process = %d, accumulation = %d, sequences per update = %d",
                args.per_device_train_batch_size, args.gradient_accumulation_steps, args.per_device_train_batch_size * args.gradient_accumulation_steps * world)
    logger.info("  updates = %d (%s batches per process per epoch)", total_updates, batches_per_epoch)

    # ---------------------------------------------------------------- the loop
    def micro_batches(start_epoch: int, start_batch: int) -> Iterator[tuple[int, int, dict[str, torch.Tensor]]]:
        ep, skip = start_epoch, start_batch
        while True:
            produced = False
            if args.streaming:
                stream = iter_stream_batches(
                    train_data, args.per_device_train_batch_size, seed=args.seed, epoch=ep, rank=accelerator.process_index,
                    num_replicas=world, shuffle=True, buffer_batches=args.bucket_size,
                )
                position = 0
                for examples in stream:
                    position += 1
                    produced = True
                    if position <= skip:
                        continue
                    yield ep, position, collator(examples)
            else:
                rank_batches = sampler.rank_batches(ep)
                loader = torch.utils.data.DataLoader(
                    IndexedDataset(train_data), batch_sampler=FixedBatches(rank_batches[skip:]), collate_fn=collator,
                    num_workers=args.dataloader_num_workers, pin_memory=accelerator.device.type == "cuda",
                    # a private generator: creating the iterator must not consume the global RNG (exact resume)
                    generator=torch.Generator().manual_seed(args.seed + ep),
                )
                produced = len(rank_batches) > 0
                for position, batch in enumerate(loader, start=skip + 1):
                    yield ep, position, batch
            if not produced:
                raise ValueError("the training data produced no batch in an epoch (too little data for the batch size and process count).")
            ep, skip = ep + 1, 0

    stop = _StopFlag()
    previous_handler = None
    try:
        previous_handler = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not in the main thread
        pass
    metrics = MetricsLog(run.metrics_file, accelerator.is_main_process)
    examples_log = open(run.examples_log_file(accelerator.process_index), "a", encoding="utf-8") if args.log_example_ids else None
    add_boundaries = args.batching == "sentences"
    fp16 = accelerator.mixed_precision == "fp16"
    progress = tqdm(total=total_updates, initial=global_step, disable=not accelerator.is_local_main_process, desc="updates", dynamic_ncols=True)
    window_loss, window_updates, window_tokens, window_start = 0.0, 0, 0, time.time()
    update_loss, update_micro, bad_update, consecutive_bad = 0.0, 0, False, 0
    last_saved_step = global_step if resume_path is not None else -1
    train_started = time.time()
    stop_reason = ""
    stopping = ""  # "", "preempt" (signal, --stop-after-steps) or "budget" (--max-train-minutes)
    exit_code = 0
    model.train()

    def state_dict() -> dict[str, Any]:
        return {
            "global_step": global_step, "epoch": epoch, "batch_in_epoch": batch_in_epoch, "tokens_seen": tokens_seen,
            "skipped_updates": skipped_updates, "num_processes": world, "vocab_fingerprint": vocab.fingerprint(),
            "vocab_size": len(vocab), "model_config": {k: config.to_dict().get(k) for k in _ARCHITECTURE_KEYS},
            "train_seconds": elapsed_before + time.time() - train_started,
            "args": {k: v for k, v in dataclasses.asdict(args).items()},
        }

    def save_checkpoint() -> Path | None:
        nonlocal last_saved_step
        state = state_dict()
        if world > 1:  # collective: all processes save together
            gathered = accelerator.gather(torch.tensor([[epoch, batch_in_epoch]], device=accelerator.device))
            state["positions"] = gathered.cpu().tolist()
        path = checkpoints.save(accelerator, global_step, state, extra_files={"vocab.txt": "".join(w + "\n" for w in vocab.words)})
        if path is not None:
            last_saved_step = global_step
            logger.info("saved checkpoint %s", path)
        return path

    if global_step < total_updates:
        for epoch_of_batch, position, batch in micro_batches(epoch, batch_in_epoch):
            if args.log_example_ids and examples_log is not None and "example_ids" in batch:
                examples_log.write(json.dumps({"epoch": epoch_of_batch, "ids": batch["example_ids"].tolist()}) + "\n")
            inputs = {k: batch[k].to(accelerator.device, non_blocking=True) for k in ("input_ids", "attention_mask", "labels")}
            with accelerator.accumulate(model):
                out = model(**inputs, add_sentence_boundaries=add_boundaries)
                loss = out.loss
                local_bad = not bool(torch.isfinite(loss.detach()))
                if world > 1:  # every process must take the same decision
                    flag = accelerator.reduce(torch.tensor([float(local_bad)], device=accelerator.device), reduction="sum")
                    any_bad = bool(flag[0] > 0)
                else:
                    any_bad = local_bad
                accelerator.backward(loss * args.loss_multiplier if args.loss_multiplier != 1.0 else loss)
                bad_update = bad_update or any_bad
                if not local_bad:
                    update_loss += float(loss.detach())
                    update_micro += 1
                n_tok = int((inputs["labels"] != -100).sum())
                tokens_seen += n_tok * world
                window_tokens += n_tok
                epoch, batch_in_epoch = epoch_of_batch, position
                if not accelerator.sync_gradients:
                    continue
                grad_norm = None
                if args.max_grad_norm:
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                grad_ok = grad_norm is None or bool(torch.isfinite(torch.as_tensor(grad_norm)))
                if fp16:
                    optimizer.step()  # the scaler skips non-finite gradients and lowers its scale
                    stepped = not accelerator.optimizer_step_was_skipped and not bad_update
                elif bad_update or not grad_ok:
                    stepped = False
                else:
                    optimizer.step()
                    stepped = True
                if stepped:
                    scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            global_step += 1
            progress.update(1)
            if bad_update or (not grad_ok and not fp16):
                skipped_updates += 1
                consecutive_bad += 1
                logger.warning("update %d skipped: non-finite %s.", global_step, "loss" if bad_update else "gradient norm")
                if consecutive_bad >= args.max_consecutive_nonfinite:
                    latest = checkpoints.latest()
                    progress.close()
                    raise SystemExit(
                        f"stopping: {consecutive_bad} consecutive updates had a non-finite loss or gradient (last at update "
                        f"{global_step}). The last good checkpoint is {latest if latest else '(none was saved)'}; "
                        "lower the learning rate or check the data, then resume with --resume-from-checkpoint."
                    )
            else:
                consecutive_bad = 0
                window_loss += update_loss / max(update_micro, 1)
                window_updates += 1
            update_loss, update_micro, bad_update = 0.0, 0, False

            if global_step % args.logging_steps == 0 or global_step == total_updates:
                stats = torch.tensor([window_loss, float(window_updates), float(window_tokens)], dtype=torch.float64, device=accelerator.device)
                if world > 1:
                    stats = accelerator.reduce(stats, reduction="sum")
                loss_sum, n_upd, n_tokens = stats.tolist()
                now = time.time()
                if n_upd > 0:
                    mean_loss = loss_sum / n_upd
                    record = {
                        "step": global_step, "epoch": epoch, "train_loss": mean_loss,
                        "train_ppl": math.exp(min(mean_loss, 50.0)), "lr": scheduler.get_last_lr()[0],
                        "tokens_per_s": n_tokens / max(now - window_start, 1e-9), "tokens_seen": tokens_seen,
                    }
                    if grad_norm is not None:
                        record["grad_norm"] = float(grad_norm)
                    metrics.write(record)
                    progress.set_postfix(loss=f"{mean_loss:.3f}", ppl=f"{record['train_ppl']:.1f}", tok_s=f"{record['tokens_per_s']:.0f}")
                    if args.report_to != "none":
                        accelerator.log({k: v for k, v in record.items() if k != "step"}, step=global_step)
                window_loss, window_updates, window_tokens, window_start = 0.0, 0, 0, now

            if args.eval_steps and global_step % args.eval_steps == 0 and "validation" in data:
                result = evaluate(accelerator.unwrap_model(model), data["validation"], collator, accelerator, args)
                metrics.write({"step": global_step, "split": "validation", **_metrics_record(result)})
                logger.info("update %d: validation perplexity %.2f", global_step, result.average)
                if args.report_to != "none":
                    accelerator.log({"validation_perplexity": result.average}, step=global_step)

            if args.checkpointing_steps and global_step % args.checkpointing_steps == 0:
                if consecutive_bad:
                    logger.warning("update %d: no checkpoint during a run of non-finite updates.", global_step)
                else:
                    save_checkpoint()
            if args.stop_after_steps is not None and global_step >= args.stop_after_steps and global_step < total_updates:
                stop.requested, stop.reason = True, f"--stop-after-steps {args.stop_after_steps}"
            # Stop decisions are reduced over processes so that all of them leave the loop at the same update.
            over_budget = (
                args.max_train_minutes is not None and accelerator.is_main_process
                and elapsed_before + time.time() - train_started > 60 * args.max_train_minutes
            )
            flags = torch.tensor([float(stop.requested), float(over_budget)], device=accelerator.device)
            if world > 1:
                flags = accelerator.reduce(flags, reduction="sum")
            if bool(flags[0] > 0):
                stopping = "preempt"
                stop_reason = stop.reason or "stop requested on another process"
            elif bool(flags[1] > 0):
                stopping = "budget"
                stop_reason = f"time budget of {args.max_train_minutes} minutes"
            if stopping or global_step >= total_updates:
                break
    progress.close()
    if previous_handler is not None:
        signal.signal(signal.SIGTERM, previous_handler)
    if examples_log is not None:
        examples_log.close()

    if last_saved_step != global_step:
        saved = save_checkpoint()
        if saved is None and stopping == "preempt":
            raise SystemExit(f"stopping ({stop_reason}) but the checkpoint at update {global_step} could not be written; the latest is {checkpoints.latest()}.")
    if stopping == "preempt":
        logger.info("stopped at update %d (%s); resume with --resume-from-checkpoint latest.", global_step, stop_reason)
        accelerator.end_training()
        return exit_code
    if stopping == "budget":
        logger.info("stopped at update %d: %s.", global_step, stop_reason)

    # ---------------------------------------------------------------- final evaluation and saving
    perplexities = []
    for split in ("validation", "test"):
        if split in data:
            result = evaluate(accelerator.unwrap_model(model), data[split], collator, accelerator, args, baseline, split)
            perplexities.append(result)
            metrics.write({"step": global_step, "split": split, **_metrics_record(result)})
            logger.info("%s: perplexity %.2f (forward %.2f, backward %.2f); unigram baseline %.2f",
                        split, result.average, result.forward, result.backward, result.unigram.average)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        try:
            save_final_model(accelerator.unwrap_model(model), vocab_path, output_dir)
            total_seconds = elapsed_before + time.time() - train_started
            metadata = {
                "global_step": global_step, "tokens_seen": tokens_seen, "skipped_updates": skipped_updates,
                "train_seconds": total_seconds, "wall_seconds": time.time() - started, "num_processes": world,
                "mixed_precision": accelerator.mixed_precision, "vocab_size": len(vocab),
                "vocab_fingerprint": vocab.fingerprint(), "parameters": n_params, "stopped_early": stop_reason or None,
                "args": dataclasses.asdict(args),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "datasets": datasets.__version__},
            }
            run.write_training_metadata(metadata)
            write_results(run.eval_results_file, EvaluationResults.now(
                model=output_dir.name, source="elmo pretrain", perplexity=perplexities,
                details={"global_step": global_step, "vocab_size": len(vocab), "unk_handling": UNK_HANDLING}))
            if args.plot:
                plot_perplexity(run.metrics_file, run.perplexity_plot_file)
        except OSError as exc:
            raise SystemExit(
                f"could not save the final model into {str(output_dir)!r} ({exc}); nothing is lost: the training state is "
                f"in {checkpoints.latest()} (resume with --resume-from-checkpoint latest once there is space)."
            ) from exc
        logger.info("saved the model into %s", output_dir)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return exit_code


def main(argv: list[str] | None = None) -> int:
    """``elmo pretrain`` / ``scripts/pretrain.py``: parse a recipe and flags, then `train`."""
    try:
        args = parse_args(argv)
        return train(args)
    except ValueError as exc:
        raise SystemExit(f"pretrain: error: {exc}") from exc
