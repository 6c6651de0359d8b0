"""Atomic, rotating training checkpoints on top of ``accelerator.save_state``.

Layout under ``<output_dir>/checkpoints/``::

    step_00001000/      accelerate state (model.safetensors, optimizer.bin, random_states_<rank>.pkl, ...)
                        + trainer_state.json (data position, counters) + vocab.txt
    step_00002000/
    latest              text file naming the newest complete checkpoint folder

A checkpoint is written into ``.tmp-step_N`` and renamed when every process has finished; only then is
``latest`` replaced (`os.replace`), and only then are old checkpoints deleted. A kill or a full disk at any moment
leaves ``latest`` naming a complete checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from .data import atomic_write_text

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointError(RuntimeError):
    pass


class CheckpointManager:
    def __init__(self, root: str | os.PathLike, keep_last: int = 2):
        self.root = Path(root)
        self.keep_last = max(1, keep_last)

    # ------------------------------------------------------------------ reading
    def checkpoints(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        found = [p for p in self.root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name) and (p / STATE_FILE).is_file()]
        return sorted(found, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))

    def latest(self) -> Path | None:
        pointer = self.root / LATEST
        if pointer.is_file():
            name = pointer.read_text(encoding="utf-8").strip()
            candidate = self.root / name
            if name and (candidate / STATE_FILE).is_file():
                return candidate
            logger.warning("%s names %r, which is not a complete checkpoint; using the newest complete one.", pointer, name)
        found = self.checkpoints()
        return found[-1] if found else None

    def resolve(self, spec: str) -> Path:
        """``latest`` or a path to a checkpoint folder; raises `ValueError` if there is none."""
        if spec == LATEST:
            path = self.latest()
            if path is None:
                raise ValueError(f"--resume-from-checkpoint latest: no checkpoint in {str(self.root)!r}.")
            return path
        path = Path(spec)
        if not (path / STATE_FILE).is_file():
            raise ValueError(f"--resume-from-checkpoint {spec!r} is not a checkpoint folder (no {STATE_FILE}).")
        return path

    @staticmethod
    def read_state(path: str | os.PathLike) -> dict[str, Any]:
        with open(Path(path) / STATE_FILE, encoding="utf-8") as handle:
            return json.load(handle)

    # ------------------------------------------------------------------ writing
    def save(self, accelerator: Any, step: int, state: dict[str, Any], extra_files: dict[str, str] | None = None) -> Path | None:
        """Save on every process (collective). Returns the folder, or `None` if writing failed anywhere.

        A failure (e.g. ``OSError(ENOSPC)``) is logged with the previous checkpoint that stays valid; the partial
        folder is removed.
        """
        name = f"step_{step:08d}"
        final = self.root / name
        tmp = self.root / f".tmp-{name}"
        error = ""
        if accelerator.is_main_process:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                if tmp.exists():
                    shutil.rmtree(tmp)
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc}"
        accelerator.wait_for_everyone()
        already = final.is_dir() and (final / STATE_FILE).is_file()
        if not already and not error:
            try:
                accelerator.save_state(str(tmp))
                if accelerator.is_main_process:
                    atomic_write_text(tmp / STATE_FILE, json.dumps(state, indent=1, sort_keys=True))
                    for filename, text in (extra_files or {}).items():
                        atomic_write_text(tmp / filename, text)
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc}"
        failed = torch.tensor([1.0 if error else 0.0], device=accelerator.device)
        failed = accelerator.reduce(failed, reduction="sum") if accelerator.num_processes > 1 else failed
        if float(failed.item()) > 0:
            if accelerator.is_main_process:
                shutil.rmtree(tmp, ignore_errors=True)
                previous = self.latest()
                logger.error(
                    "could not write checkpoint %s (%s); nothing was lost: the latest checkpoint is still %s.",
                    final, error or "failed on another process", previous if previous else "(none yet)",
                )
            accelerator.wait_for_everyone()
            return None
        if accelerator.is_main_process and not already:
            try:
                os.replace(tmp, final)
                atomic_write_text(self.root / LATEST, name + "\n")
            except OSError as exc:
                logger.error("could not finish checkpoint %s (%s); the latest checkpoint is still %s.", final, exc, self.latest())
                shutil.rmtree(tmp, ignore_errors=True)
                accelerator.wait_for_everyone()
                return None
            self._rotate(keep=final)
        accelerator.wait_for_everyone()
        return final

    def _rotate(self, keep: Path) -> None:
        found = self.checkpoints()
        for old in found[: max(0, len(found) - self.keep_last)]:
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)
        for stale in self.root.glob(".tmp-step_*"):
            shutil.rmtree(stale, ignore_errors=True)
