"""Learning-rate schedules: transformers' `get_scheduler` over a number of updates, or the same shapes over a time
budget (``--max-train-minutes``), so that a fixed-minute run ends annealed.

Over a budget the position is the progress ``max(updates / max_steps, seconds / budget)`` (resumed runs' seconds
counted), read at the trainer's host syncs (the same on every process) and extrapolated between them at the last
measured rate. It never goes back; where it is ahead of the clock it advances by ``(1 - estimate) / (1 - clock)`` of
the measured rate, so that it reaches 1 when the clock does.
"""

from __future__ import annotations

import math
from typing import Any


def schedule_factor(kind: str, progress: float, warmup: float = 0.0) -> float:
    """The multiplier at ``progress`` in [0, 1] of transformers' ``constant`` (no warm-up, as there),
    ``constant_with_warmup``, ``linear`` and ``cosine`` shapes, warming up over the first ``warmup`` fraction."""
    progress = min(max(progress, 0.0), 1.0)
    if kind == "constant":
        return 1.0
    if progress < warmup:
        return progress / warmup
    if kind == "constant_with_warmup":
        return 1.0
    rest = (progress - warmup) / (1.0 - warmup) if warmup < 1.0 else 1.0
    if kind == "linear":
        return max(0.0, 1.0 - rest)
    if kind == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * rest)))
    raise ValueError(f"no time-budget form of the {kind!r} schedule.")


class BudgetScheduler:
    """A schedule over the run's progress (see the module docstring), with the interface of a torch scheduler
    (``step``, ``get_last_lr``, ``state_dict``/``load_state_dict``; the state is plain numbers)."""

    _STATE = ("last_step", "anchor_step", "anchor_progress", "anchor_clock", "progress_per_update", "base_lrs")

    def __init__(self, optimizer: Any, kind: str, warmup_steps: float, budget_seconds: float, max_steps=None):
        self.optimizer, self.kind, self.budget_seconds, self.max_steps = optimizer, kind, budget_seconds, max_steps
        # a fraction warms up over that share of the progress; a whole number over that many updates
        self.warmup_fraction = warmup_steps if 0 < warmup_steps < 1 else 0.0
        self.warmup_updates = int(warmup_steps) if warmup_steps >= 1 else 0
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.last_step = 0  # updates done
        # at the last sync: its update, the progress used then, the clock's progress then, the rate used since
        self.anchor_step, self.anchor_progress, self.anchor_clock, self.progress_per_update = 0, 0.0, 0.0, 0.0
        self._apply()

    def progress_at(self, step: int, seconds: float) -> float:
        by_time = seconds / self.budget_seconds
        by_steps = step / self.max_steps if self.max_steps else 0.0
        return min(1.0, max(by_time, by_steps))

    def observe(self, step: int, seconds: float) -> None:
        """Anchor the progress at a host sync: ``seconds`` of training after ``step`` updates (module docstring)."""
        clock = self.progress_at(step, seconds)
        progress = max(clock, self.current_progress())
        if step > self.anchor_step:
            measured = max(0.0, (clock - self.anchor_clock) / (step - self.anchor_step))  # the clock's, per update
            ahead = (1.0 - progress) / (1.0 - clock) if clock < 1.0 else 0.0
            self.progress_per_update = measured * min(1.0, ahead)
        self.anchor_step, self.anchor_progress, self.anchor_clock = step, progress, clock
        self._apply()

    def current_progress(self) -> float:
        estimate = self.anchor_progress + self.progress_per_update * (self.last_step - self.anchor_step)
        by_steps = self.last_step / self.max_steps if self.max_steps else 0.0
        return min(1.0, max(estimate, by_steps))

    def _factor(self) -> float:
        factor = schedule_factor(self.kind, self.current_progress(), self.warmup_fraction)
        if self.warmup_updates and self.kind != "constant":
            factor *= min(1.0, self.last_step / self.warmup_updates)
        return factor

    def _apply(self) -> None:
        factor = self._factor()
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=False):
            group["lr"] = base * factor

    def step(self) -> None:
        self.last_step += 1
        self._apply()

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self._STATE}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("last_step", "anchor_step", "anchor_progress", "progress_per_update", "base_lrs"):
            setattr(self, key, state[key])
        self.anchor_clock = state.get("anchor_clock", self.anchor_progress)  # checkpoints that predate the field
        self._apply()


def build_scheduler(
    optimizer: Any, kind: str, warmup_steps: float, total_updates: int, budget_seconds=None, max_steps=None
):
    """`BudgetScheduler` over ``budget_seconds`` of training (``--max-train-minutes``), else transformers'
    `get_scheduler` over ``total_updates`` (a fractional ``warmup_steps`` is that share of them)."""
    if budget_seconds is not None:
        return BudgetScheduler(optimizer, kind, warmup_steps, budget_seconds, max_steps=max_steps)
    from transformers import get_scheduler

    warmup = round(warmup_steps * total_updates) if 0 < warmup_steps < 1 else int(warmup_steps)
    return get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total_updates)
