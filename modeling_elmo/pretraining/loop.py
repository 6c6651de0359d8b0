"""The training loop and its steps: micro-batches, one optimiser update, host syncs, evaluation, checkpoints.

Host syncs: the loop keeps its running numbers on the device (`DeviceCounters`) and reads them only at a *sync
point* (every ``--logging-steps`` updates, before an evaluation or a checkpoint, at the end), where stop requests
(SIGTERM, the time budget) are honoured too. Non-finite updates are skipped on the device (`NonfiniteGuard`), decided
from the global gradient norm clipping computes anyway (the same on every process) and the all-reduced loss flag:
fused optimisers take a ``found_inf`` tensor as with torch's GradScaler (weights and state untouched); the unfused
Adagrad gets zero gradients (no lr or weight decay: a no-op); any other optimiser reads the flag on the host. The
schedule advances on every update; ``--max-consecutive-nonfinite`` skipped in a row stop the run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..folders.run_folder import RunFolder
from .batching import BucketBatchSampler, Collator, FixedBatches, IndexedDataset, iter_stream_batches
from .checkpoint import FORMAT_VERSION, CheckpointManager, write_training_files
from .evaluation import evaluate, metrics_record
from .output import BestModel, recover_snapshots, save_snapshot
from .schedule import BudgetScheduler
from .settings import BatchSettings, LoopSettings
from .state import MetricsLog, TrainingState

logger = logging.getLogger("modeling_elmo.pretraining")


@dataclass
class Session:
    """Everything the loop works with, built by `modeling_elmo.pretraining.trainer.train`."""

    batches: BatchSettings
    loop: LoopSettings
    accelerator: Any
    model: torch.nn.Module
    optimizer: Any
    scheduler: Any
    splits: dict[str, Any]
    sampler: BucketBatchSampler | None
    collator: Collator
    run: RunFolder
    identity: dict[str, Any]
    vocab_text: str
    total_updates: int
    #: what each evaluation split is, for the results (`evaluation.dataset_description`)
    split_descriptions: dict[str, str] = field(default_factory=dict)
    #: the run's arguments as recorded (``training_metadata.json``'s ``args``, the trackers' config): only written
    recorded_arguments: dict[str, Any] = field(default_factory=dict)
    char_vocab_text: str | None = None  # the Unicode character vocabulary (JSON), saved in every checkpoint
    last_saved_step: int = -1
    last_evaluated_step: int = -1
    stop_requested: str = ""
    examples_log: Any = None
    progress: Any = None

    def __post_init__(self) -> None:
        self.checkpoints = CheckpointManager(self.run.checkpoints_dir, keep_last=self.loop.checkpoints_total_limit)
        self.metrics = MetricsLog(self.run.metrics_file, self.accelerator.is_main_process)
        self.best = BestModel(self.run.best_model_dir) if self.loop.load_best_model_at_end else None

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    def unwrapped(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self.model)

    def evaluate(self, split: str, baseline: Any = None) -> Any:
        batches = self.batches
        options = dict(batch_size=batches.per_device_eval_batch_size, layout=batches.batching)
        options.update(bucket_size=batches.bucket_size, num_workers=batches.dataloader_num_workers)
        options.update(baseline=baseline, split=split, description=self.split_descriptions.get(split, split))
        return evaluate(self.unwrapped(), self.splits[split], self.collator, self.accelerator, **options)


class NonfiniteGuard:
    """Skip the optimiser step on the device when ``bad`` is true (see the module docstring)."""

    def __init__(self, optimizer: Any):
        inner = getattr(optimizer, "optimizer", optimizer)
        self.inner = inner
        if inner.defaults.get("fused"):
            self.mode = "found_inf"
        elif isinstance(inner, torch.optim.Adagrad) and all(
            g["lr_decay"] == 0 and g["weight_decay"] == 0 for g in inner.param_groups
        ):
            self.mode = "zero_gradients"
        else:
            self.mode = "host"

    def step(self, optimizer: Any, bad: torch.Tensor) -> None:
        if self.mode == "found_inf":
            self.inner.found_inf = bad.to(torch.float32).reshape(())
            optimizer.step()
        elif self.mode == "zero_gradients":
            grads = [p.grad for group in self.inner.param_groups for p in group["params"] if p.grad is not None]
            for grad in grads:
                torch.nan_to_num_(grad, nan=0.0, posinf=0.0, neginf=0.0)
            torch._foreach_mul_(grads, (~bad).to(grads[0].dtype))
            optimizer.step()
        elif not bool(bad):  # one host read per update
            optimizer.step()


class DeviceCounters:
    """The window's numbers between two host syncs: on the device, except the token count, which the host knows."""

    def __init__(self, device: torch.device, consecutive: int = 0):
        self.device = device
        self.consecutive = torch.tensor(float(consecutive), dtype=torch.float64, device=device)
        self.last_bad, self.grad_norm = self._zero(), self._zero()
        self.reset()

    def _zero(self) -> torch.Tensor:
        return torch.zeros((), dtype=torch.float64, device=self.device)

    def reset(self) -> None:
        self.tokens, self.started = 0, time.time()  # training targets on this process (a host count), window start
        self.loss_sum, self.applied, self.skipped = self._zero(), self._zero(), self._zero()

    def add(self, loss: torch.Tensor, bad: torch.Tensor, step: int, grad_norm: torch.Tensor) -> None:
        bad64 = bad.to(torch.float64)
        self.loss_sum += torch.where(bad, torch.zeros_like(loss), loss).to(torch.float64)
        self.applied += 1.0 - bad64
        self.skipped += bad64
        self.consecutive = (self.consecutive + 1.0) * bad64
        self.last_bad = torch.where(bad, torch.full_like(self.last_bad, float(step)), self.last_bad)
        self.grad_norm = grad_norm.detach().to(torch.float64)

    def read(self) -> dict[str, float]:
        """One host sync: every number at once."""
        names = ("loss_sum", "applied", "skipped", "consecutive", "last_bad", "grad_norm")
        return dict(zip(names, torch.stack([getattr(self, n) for n in names]).tolist(), strict=True))


class StopFlag:
    """SIGTERM and SIGINT (Ctrl-C) handler: remember the request; the loop honours it at the next sync point (a
    checkpoint, then exit). A second SIGINT is not caught: it raises `KeyboardInterrupt` at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.reason, self.signum, self.previous = "", None, {}

    def __call__(self, signum: int, frame: Any) -> None:
        self.reason, self.signum = f"signal {signal.Signals(signum).name}", signum
        if signum == signal.SIGINT:  # the next Ctrl-C stops at once
            signal.signal(signal.SIGINT, self.previous.get(signal.SIGINT, signal.default_int_handler))
            logger.warning(
                "Ctrl-C: saving a checkpoint at the next update, then stopping (press Ctrl-C again to stop "
                "at once, without it)."
            )

    def __enter__(self) -> StopFlag:
        for signum in self.SIGNALS:
            with contextlib.suppress(ValueError):  # not in the main thread
                self.previous[signum] = signal.signal(signum, self)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)


# ----------------------------------------------------------------------------------------------- the steps
def micro_batches(s: Session, start_epoch: int, start_batch: int) -> Iterator[tuple[int, int, dict[str, torch.Tensor]]]:
    """(epoch, position in the epoch, batch) from ``start_batch`` of ``start_epoch`` on, epoch after epoch (the
    skipped batches are never read)."""
    batches, ep, skip = s.batches, start_epoch, start_batch
    while True:
        produced = False
        if batches.streaming:
            shard = dict(rank=s.accelerator.process_index, num_replicas=s.world, shuffle=True, seed=batches.seed)
            budget = dict(buffer_batches=batches.bucket_size, max_tokens=batches.max_tokens_per_batch)
            size = batches.per_device_train_batch_size
            stream = iter_stream_batches(s.splits["train"], size, **shard, epoch=ep, **budget)
            for position, examples in enumerate(stream, start=1):
                produced = True
                if position > skip:
                    yield ep, position, s.collator(examples)
        else:
            rank_batches = s.sampler.rank_batches(ep)
            loader = torch.utils.data.DataLoader(
                IndexedDataset(s.splits["train"]),
                batch_sampler=FixedBatches(rank_batches[skip:]),
                collate_fn=s.collator,
                num_workers=batches.dataloader_num_workers,
                pin_memory=s.accelerator.device.type == "cuda",
                # a private generator: creating the iterator must not consume the global RNG (exact resume)
                generator=torch.Generator().manual_seed(batches.seed + ep),
            )
            produced = len(rank_batches) > 0
            for position, batch in enumerate(loader, start=skip + 1):
                yield ep, position, batch
        if not produced:
            raise ValueError(
                "the training data produced no batch in an epoch (too little data for the batch size and process "
                "count)."
            )
        ep, skip = ep + 1, 0


def apply_update(s: Session, guard: NonfiniteGuard, loss: torch.Tensor, counters: DeviceCounters, step: int) -> None:
    """Clip, decide on the device whether the update is finite, step (or skip), schedule, zero the gradients."""
    settings, accelerator = s.loop, s.accelerator
    if settings.max_grad_norm:
        norm = accelerator.clip_grad_norm_(s.model.parameters(), settings.max_grad_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in s.model.parameters() if p.grad is not None])
    norm = torch.as_tensor(norm, device=accelerator.device)
    loss_bad = ~torch.isfinite(loss)
    if s.world > 1:
        loss_bad = accelerator.reduce(loss_bad.to(torch.float32), reduction="sum") > 0
    bad = loss_bad | ~torch.isfinite(norm)
    if accelerator.mixed_precision == "fp16":
        s.optimizer.step()  # the scaler skips non-finite gradients (reading its flag on the host) and lowers its scale
        bad = bad | torch.tensor(bool(accelerator.optimizer_step_was_skipped), device=accelerator.device)
    else:
        guard.step(s.optimizer, bad)
    s.scheduler.step()
    s.optimizer.zero_grad(set_to_none=True)
    counters.add(loss, bad, step, norm)


def host_sync(s: Session, state: TrainingState, counters: DeviceCounters, clock: TrainClock, *, log: bool) -> None:
    """Read the device counters into ``state``, stop a run of non-finite updates, log the window, and take the stop
    decisions (the same on every process)."""
    settings, accelerator = s.loop, s.accelerator
    numbers = counters.read()
    stats = [numbers["loss_sum"], numbers["applied"], float(counters.tokens), clock.seconds(), bool(s.stop_requested)]
    stats = torch.tensor(stats, dtype=torch.float64, device=accelerator.device)
    if s.world > 1:
        seconds = accelerator.reduce(stats[3:4].clone(), reduction="max")  # one clock for all: the slowest process's
        stats = accelerator.reduce(stats, reduction="sum")
        stats[3] = seconds[0]
    loss_sum, applied, tokens, seconds, stop_votes = stats.tolist()
    state.tokens_seen += int(tokens)
    state.train_seconds = seconds
    state.skipped_updates += int(numbers["skipped"])
    state.consecutive_nonfinite = int(numbers["consecutive"])
    if numbers["skipped"]:
        since = f" ({int(numbers['skipped'])} skipped since update {state.global_step - settings.logging_steps})"
        since = "" if numbers["skipped"] == 1 else since
        logger.warning("update %d skipped: non-finite loss or gradient%s.", int(numbers["last_bad"]), since)
    if state.consecutive_nonfinite >= settings.max_consecutive_nonfinite:
        latest = s.checkpoints.latest()
        raise SystemExit(
            f"elmo pretrain: error: stopping: {state.consecutive_nonfinite} consecutive updates had a non-finite loss "
            f"or gradient (last at update {int(numbers['last_bad'])}); their updates were not applied. The last good "
            f"checkpoint is {latest if latest else '(none was saved)'}; lower the learning rate or check the data, "
            "then resume with --resume-from-checkpoint."
        )
    if isinstance(s.scheduler, BudgetScheduler):
        s.scheduler.observe(state.global_step, state.train_seconds)
    if log and applied > 0:
        mean_loss, rate = loss_sum / applied, tokens / max(time.time() - counters.started, 1e-9)
        record = {"step": state.global_step, "epoch": state.epoch, "train_loss": mean_loss}
        record.update(train_ppl=math.exp(min(mean_loss, 50.0)), lr=s.scheduler.get_last_lr()[0], tokens_per_s=rate)
        record.update(tokens_seen=state.tokens_seen, grad_norm=numbers["grad_norm"])
        s.metrics.write(record)
        s.progress.set_postfix(loss=f"{mean_loss:.3f}", ppl=f"{record['train_ppl']:.1f}", tok_s=f"{rate:.0f}")
        if settings.report_to != "none":
            accelerator.log({k: v for k, v in record.items() if k != "step"}, step=state.global_step)
    counters.reset()
    if stop_votes > 0:
        s.stop_requested = s.stop_requested or "stop requested on another process"
    elif settings.max_train_minutes is not None and seconds > 60 * settings.max_train_minutes:
        s.stop_requested = f"time budget of {settings.max_train_minutes:g} minutes"


def evaluate_and_track(s: Session, state: TrainingState) -> str:
    """Validation perplexity at ``state.global_step``: log it, keep the best (and its weights with
    --load-best-model-at-end); returns ``"early stopping ..."`` once the patience is spent."""
    result = s.evaluate("validation")
    s.last_evaluated_step = state.global_step
    s.metrics.write({"step": state.global_step, "split": "validation", **metrics_record(result)})
    logger.info("update %d: validation perplexity %.2f", state.global_step, result.average)
    if s.loop.report_to != "none":
        s.accelerator.log({"validation_perplexity": result.average}, step=state.global_step)
    improved = state.record_evaluation(result.average)
    if improved and s.best is not None:
        if s.accelerator.is_main_process:
            s.best.save(s.unwrapped(), state.global_step, result.average)
        s.accelerator.wait_for_everyone()
    patience = s.loop.early_stopping_patience
    if patience and state.evaluations_since_best >= patience:
        return (
            f"early stopping: {patience} evaluations without a better validation perplexity than "
            f"{state.best_perplexity:.2f} (update {state.best_step})"
        )
    return ""


def save_checkpoint(s: Session, state: TrainingState) -> Path | None:
    """A checkpoint of ``state`` (collective; the counters must have been synced)."""
    if state.consecutive_nonfinite:
        logger.warning("update %d: no checkpoint during a run of non-finite updates.", state.global_step)
        return None
    if not all(bool(torch.isfinite(p).all()) for p in s.unwrapped().parameters()):  # the same on every process
        message = "update %d: the model holds non-finite weights: no checkpoint is written; the latest is still %s."
        logger.error(message, state.global_step, s.checkpoints.latest())
        return None
    positions = [[state.epoch, state.batch_in_epoch]]
    if s.world > 1:
        gathered = s.accelerator.gather(torch.tensor([positions[0]], device=s.accelerator.device))
        positions = gathered.cpu().tolist()
    trainer_state = {"format": FORMAT_VERSION, "state": state.to_dict(), "run": s.identity, "num_processes": s.world}
    trainer_state["positions"] = positions
    best = s.best.weights if s.best is not None and state.best_step is not None and s.best.weights.is_file() else None
    files = dict(model=s.unwrapped(), optimizer=s.optimizer, scheduler=s.scheduler, scaler=s.accelerator.scaler)
    files.update(rank=s.accelerator.process_index, is_main=s.accelerator.is_main_process, trainer_state=trainer_state)
    files.update(vocab_text=s.vocab_text, best_model=best, char_vocab_text=s.char_vocab_text)
    path = s.checkpoints.save(s.accelerator, state.global_step, lambda folder: write_training_files(folder, **files))
    if path is not None:
        s.last_saved_step = state.global_step
        logger.info("saved checkpoint %s", path)
    return path


class Snapshots:
    """The ``--save-at-minutes`` marks still to save: at a host sync (the clock the same on every process) each mark
    the training time has passed gets its snapshot (`modeling_elmo.pretraining.output.save_snapshot`). A mark whose
    snapshot exists is never saved again (a resumed run); one the resumed run starts past without it is skipped with
    a warning (the weights of that moment are gone). The seconds spent writing are taken off the clock."""

    def __init__(self, s: Session, seconds: float):
        self.s, marks = s, list(s.loop.snapshot_minutes)
        if s.accelerator.is_main_process:
            recover_snapshots(s.run, marks)
        written = [m for m in marks if RunFolder(s.run.snapshot_dir(m)).has_model()]
        missed = [m for m in marks if m not in written and 60 * m <= seconds]
        if missed:
            logger.warning(
                "no snapshot at %s minutes: the resumed run starts after %.2f minutes of training.",
                ", ".join(f"{m:g}" for m in missed),
                seconds / 60,
            )
        self.pending = [m for m in marks if m not in written and m not in missed]
        if self.pending and s.loop.load_best_model_at_end:
            logger.warning(
                "--save-at-minutes with --load-best-model-at-end: a snapshot holds the weights of its minute, not "
                "the best validated ones that a run of that many minutes would save."
            )
        if s.world > 1:  # the main process's view, so that every process waits for the same snapshots
            from accelerate.utils import broadcast_object_list

            self.pending = broadcast_object_list([self.pending])[0]

    def save_due(self, state: TrainingState, clock: TrainClock) -> None:
        s = self.s
        due = [m for m in self.pending if state.train_seconds >= 60 * m]
        if not due:
            return
        started = time.time()
        self.pending = [m for m in self.pending if m not in due]
        if s.accelerator.is_main_process:
            info = {"train_seconds": state.train_seconds, "global_step": state.global_step}
            info.update(tokens_seen=state.tokens_seen, epoch=state.epoch, num_processes=s.world)
            characters = None if s.char_vocab_text is None else json.loads(s.char_vocab_text)
            for mark in due:
                try:
                    path = save_snapshot(
                        s.unwrapped(), s.run.vocab_file, s.run, mark, {"minutes": mark, **info}, characters
                    )
                    logger.info("update %d: saved the %g-minute snapshot %s", state.global_step, mark, path)
                except ValueError as error:  # the run goes on: its checkpoints and model are worth more
                    logger.error("update %d: no %g-minute snapshot: %s", state.global_step, mark, error)
        s.accelerator.wait_for_everyone()
        clock.started += time.time() - started


class ProgressBar:
    """Updates out of the planned total or, under ``--max-train-minutes``, training minutes (resumed runs counted)
    out of the budget, at ``max(minutes / budget, updates / total)``, with the updates in its postfix."""

    def __init__(self, total_updates: int, step: int, budget_seconds: float | None, seconds: float, enabled=True):
        from tqdm.auto import tqdm

        self.total_updates, self.budget, self.step, self.postfix = total_updates, budget_seconds, step, {}
        shown = dict(disable=not enabled, dynamic_ncols=True)
        if budget_seconds is None:
            self.total, self.position = float(total_updates), float(step)
            self.bar = tqdm(total=total_updates, initial=step, desc="updates", **shown)
        else:
            self.total, self.position = budget_seconds, self._position(step, seconds)
            minutes = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} min [{elapsed}<{remaining}{postfix}]"
            shown.update(desc="training minutes", unit="min", unit_scale=1 / 60, bar_format=minutes)
            self.bar = tqdm(total=budget_seconds, initial=self.position, **shown)
            self.bar.set_postfix(updates=step, refresh=False)

    def _position(self, step: int, seconds: float) -> float:
        fraction = max(seconds / self.budget, step / self.total_updates if self.total_updates else 0.0)
        return min(1.0, fraction) * self.budget

    def advance(self, step: int, seconds: float) -> None:
        """Update ``step`` is done, after ``seconds`` of training in all."""
        self.step = step
        if self.budget is None:
            position = float(step)
        else:
            position = max(self.position, self._position(step, seconds))
            self.bar.set_postfix(updates=step, **self.postfix, refresh=False)
        self.bar.update(position - self.position)
        self.position = position

    def set_postfix(self, **values: Any) -> None:
        self.postfix = values
        self.bar.set_postfix(**({} if self.budget is None else {"updates": self.step}), **values)

    def close(self) -> None:
        self.bar.close()


class TrainClock:
    """Training seconds of this run plus those of the runs it resumed, and the training thread's CPU share."""

    def __init__(self, before: float):
        self.before, self.started, self.cpu_started = before, time.time(), time.thread_time()

    def seconds(self) -> float:
        return self.before + time.time() - self.started

    def cpu_share(self) -> tuple[float, float]:
        """(this run's wall seconds, the fraction of them the training thread ran on a core: near 1 when idle)."""
        wall = time.time() - self.started
        return wall, (time.thread_time() - self.cpu_started) / wall if wall > 0 else 1.0


#: Below this share of a core (`TrainClock.cpu_share`) over at least `BUSY_MACHINE_MIN_SECONDS`, a CPU run says the
#: machine is busy: its throughput, and the updates a --max-train-minutes budget buys, are that much lower.
BUSY_MACHINE_SHARE, BUSY_MACHINE_MIN_SECONDS = 0.6, 30.0


def busy_machine_warning(wall_seconds: float, share: float, updates: int) -> str | None:
    """The line a CPU run logs when its training thread had a core for less than `BUSY_MACHINE_SHARE` of the time."""
    if wall_seconds < BUSY_MACHINE_MIN_SECONDS or share >= BUSY_MACHINE_SHARE:
        return None
    rate = 60.0 * updates / wall_seconds
    return (
        f"the machine is busy: the training thread had a CPU core for only {share:.0%} of these "
        f"{wall_seconds / 60:.1f} minutes (other processes took the rest), so {updates} updates ran "
        f"({rate:.0f} per minute), about {share:.0%} of what this machine does idle; the documented rates and "
        "the updates a --max-train-minutes budget buys were measured on an idle machine."
    )


# ----------------------------------------------------------------------------------------------- the loop
def train_loop(s: Session, state: TrainingState) -> tuple[str, bool]:
    """Train from ``state`` until ``total_updates`` or a stop; returns why it stopped early (``""``: it did not) and
    whether it was pre-empted (a signal, ``--stop-after-steps``) rather than finished (budget, early stopping)."""
    settings, accelerator = s.loop, s.accelerator
    counters, guard = DeviceCounters(accelerator.device, state.consecutive_nonfinite), NonfiniteGuard(s.optimizer)
    clock, first_step = TrainClock(state.train_seconds), state.global_step
    snapshots = Snapshots(s, state.train_seconds)
    add_boundaries = s.batches.batching == "sentences"
    update_loss, micro = torch.zeros((), device=accelerator.device), 0
    preempted, synced = False, True
    s.model.train()
    if state.global_step >= s.total_updates:
        return "", False
    with StopFlag() as flag:
        for epoch, position, batch in micro_batches(s, state.epoch, state.batch_in_epoch):
            if s.examples_log is not None and "example_ids" in batch:
                record = {"step": state.global_step + 1, "epoch": epoch, "ids": batch["example_ids"].tolist()}
                s.examples_log.write(json.dumps(record) + "\n")  # "step": the update this batch goes into
            inputs = {k: batch[k].to(accelerator.device, non_blocking=True) for k in ("input_ids", "attention_mask")}
            inputs["labels"] = batch["labels"].to(accelerator.device, non_blocking=True)
            with accelerator.accumulate(s.model):
                loss = s.model(**inputs, add_sentence_boundaries=add_boundaries).loss
                multiplier = settings.loss_multiplier
                accelerator.backward(loss * multiplier if multiplier != 1.0 else loss)
                update_loss, micro = update_loss + loss.detach(), micro + 1
                counters.tokens += int(batch["lengths"].sum())  # a host tensor: no device sync
                state.epoch, state.batch_in_epoch = epoch, position
                if not accelerator.sync_gradients:
                    continue
                apply_update(s, guard, update_loss / micro, counters, state.global_step + 1)
                update_loss, micro = torch.zeros((), device=accelerator.device), 0
            state.global_step += 1
            s.progress.advance(state.global_step, clock.seconds())
            step, done = state.global_step, state.global_step >= s.total_updates
            evaluating = bool(settings.eval_steps) and step % settings.eval_steps == 0 and "validation" in s.splits
            checkpointing = bool(settings.checkpointing_steps) and step % settings.checkpointing_steps == 0
            logging_point = step % settings.logging_steps == 0 or done
            synced = logging_point or evaluating or checkpointing
            if flag.reason and not s.stop_requested:
                s.stop_requested, preempted = flag.reason, True
            if synced:  # after this, every process has the same stop_requested
                host_sync(s, state, counters, clock, log=logging_point)
                snapshots.save_due(state, clock)
                preempted = preempted or s.stop_requested == "stop requested on another process"
            if evaluating and not s.stop_requested:
                s.stop_requested = evaluate_and_track(s, state)
            if checkpointing:
                save_checkpoint(s, state)
            stop_after = settings.stop_after_steps
            if stop_after is not None and step >= stop_after and not (done or s.stop_requested):
                s.stop_requested, preempted = f"--stop-after-steps {stop_after}", True
                if not synced:
                    host_sync(s, state, counters, clock, log=False)
                    snapshots.save_due(state, clock)
                    synced = True
            if done or (s.stop_requested and synced):
                break
        if not synced:
            host_sync(s, state, counters, clock, log=False)
            snapshots.save_due(state, clock)
    if accelerator.device.type == "cpu":
        warning = busy_machine_warning(*clock.cpu_share(), state.global_step - first_step)
        if warning:
            logger.warning(warning)
    return s.stop_requested, preempted
