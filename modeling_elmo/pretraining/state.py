"""What a run is and where it stands: `TrainingState`, the run's identity (arguments, model, data, vocabulary) and
the metrics log."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..folders.run_folder import RunFolder, read_json_object
from ..utils.io_utils import atomic_write_text

#: Arguments that define a run: a run resumed (or a folder reused) with other values is another run. Data files,
#: the vocabulary and the model are compared by their fingerprints and configuration instead of their paths.
IDENTITY_ARGUMENTS = tuple(
    """dataset_name dataset_config_name text_column streaming validation_split_percentage max_train_examples
    vocab_size min_count char_vocabulary max_characters batching window_size max_sentence_length
    per_device_train_batch_size max_tokens_per_batch bucket_size seed optimizer learning_rate
    adagrad_initial_accumulator weight_decay adam_beta1 adam_beta2 lr_scheduler_type warmup_steps
    gradient_accumulation_steps max_grad_norm loss_multiplier""".split()
)
#: Config fields that define the architecture (a starting model's and --model-config's must agree on them).
ARCHITECTURE_KEYS = tuple(
    """projection_dim cell_size num_hidden_layers char_embedding_dim char_cnn_filters num_highway_layers
    char_cnn_activation max_characters_per_token num_characters char_vocabulary use_skip_connections""".split()
)
#: Config fields that define the model a run trains.
_CLIPS_AND_SOFTMAX = ("cell_clip", "proj_clip", "lm_softmax", "num_negative_samples", "hidden_dropout_prob")
MODEL_KEYS = ("vocab_size", *ARCHITECTURE_KEYS, *_CLIPS_AND_SOFTMAX)
#: Bytes of each data file that enter the data fingerprint (with its name and size).
_FINGERPRINT_BYTES = 1 << 20


#: The largest count (update, epoch, batch, token) a saved state may hold: a seed plus an epoch stays a 64-bit
#: integer, which torch's and numpy's generators take (``10**30`` stopped a resumed run in the generator).
MAX_COUNT = 2**62


def shown_count(value: int) -> str:
    """``value`` for a message: its digits, or how many there are when that is too long to read."""
    return str(value) if value < 10**40 else f"a number of {len(str(value)):,} digits"


@dataclass
class TrainingState:
    """Where a run stands; saved in every checkpoint (``trainer_state.json``) and restored on resume."""

    # position
    global_step: int = 0  # optimiser updates done (applied or skipped as non-finite)
    epoch: int = 0
    batch_in_epoch: int = 0  # micro-batches of `epoch` this process has consumed
    # counters
    tokens_seen: int = 0  # training targets per direction, all processes
    skipped_updates: int = 0  # updates not applied: non-finite loss or gradient
    consecutive_nonfinite: int = 0
    # best so far (validation perplexity every --eval-steps)
    best_perplexity: float | None = None
    best_step: int | None = None
    evaluations_since_best: int = 0
    # budget
    train_seconds: float = 0.0  # training time of this run and of the runs it resumed

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainingState:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown training state fields {unknown}.")
        state = cls(**data)
        for f in dataclasses.fields(cls):
            value = getattr(state, f.name)
            if f.name in ("best_perplexity", "best_step") and value is None:
                continue
            kind = float if f.name in ("best_perplexity", "train_seconds") else int
            if isinstance(value, bool) or not isinstance(value, int if kind is int else (int, float)):
                raise ValueError(f"training state field {f.name} must be a number, got {value!r}.")
            if value < 0 or (isinstance(value, float) and not math.isfinite(value)):
                raise ValueError(f"training state field {f.name} must be finite and >= 0, got {value!r}.")
            if kind is int and value > MAX_COUNT:
                raise ValueError(f"training state field {f.name} is {shown_count(value)}, above {MAX_COUNT:,}.")
        return state

    def record_evaluation(self, perplexity: float) -> bool:
        """Count a validation perplexity at ``global_step``; True when it is the best so far (strictly lower)."""
        if self.best_perplexity is None or perplexity < self.best_perplexity:
            self.best_perplexity, self.best_step, self.evaluations_since_best = perplexity, self.global_step, 0
            return True
        self.evaluations_since_best += 1
        return False


# ----------------------------------------------------------------------------------------------- identity
def file_fingerprint(path: str) -> str:
    """sha256 of a file's name, size and first megabyte (cheap, and independent of where the file lies)."""
    digest = hashlib.sha256(f"{Path(path).name}|{os.path.getsize(path)}|".encode())
    with open(path, "rb") as handle:
        digest.update(handle.read(_FINGERPRINT_BYTES))
    return digest.hexdigest()[:16]


def data_fingerprint(split_files: dict[str, list[str]], dataset: str | None) -> str:
    """One fingerprint of the training (and validation) data: each file's `file_fingerprint`, and the Hub dataset."""
    parts = [f"dataset={dataset}"] + [
        f"{split}={','.join(file_fingerprint(f) for f in files)}" for split, files in sorted(split_files.items())
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def argument_identity(args: Any) -> dict[str, Any]:
    """The run-defining arguments, as plain JSON values."""
    return json.loads(json.dumps({name: getattr(args, name) for name in IDENTITY_ARGUMENTS}))


def run_identity(args: Any, config: Any, data: str, vocabulary: str) -> dict[str, Any]:
    """What makes a run this run: its arguments, its model, its data and its vocabulary."""
    model = config.to_dict()
    return {
        "arguments": argument_identity(args),
        "model": json.loads(json.dumps({k: model.get(k) for k in MODEL_KEYS})),
        "data": data,
        "vocabulary": vocabulary,
    }


def identity_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``name: now X, the run's Y`` for every difference (only the parts present in both)."""
    out = []
    for part in ("arguments", "model"):
        mine, theirs = current.get(part) or {}, saved.get(part) or {}
        for key in sorted(set(mine) & set(theirs)):
            if mine[key] != theirs[key]:
                label = f"--{key.replace('_', '-')}" if part == "arguments" else f"model {key}"
                out.append(f"{label} {mine[key]!r} (the run's: {theirs[key]!r})")
    for part, label in (("data", "the training data"), ("vocabulary", "the vocabulary")):
        if current.get(part) and saved.get(part) and current[part] != saved[part]:
            out.append(f"{label} (fingerprint {current[part]}, the run's: {saved[part]})")
    return out


def read_run_identity(run: RunFolder) -> dict[str, Any] | None:
    return read_json_object(run.run_identity_file, "run identity")


def write_run_identity(run: RunFolder, identity: dict[str, Any]) -> None:
    atomic_write_text(run.run_identity_file, json.dumps(identity, indent=1, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------------------------- metrics
class MetricsLog:
    """``metrics.jsonl`` (or an example-id log), appended to by one process; a resume first drops the records after
    its checkpoint, so every step is logged once."""

    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled

    def truncate_after(self, step: int) -> None:
        """Keep the records up to ``step``; a line cut short by a kill is dropped too."""
        if not self.enabled or not self.path.is_file():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(record, dict) and record.get("step", 0) <= step:
                kept.append(line)
        atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl (empty when there is none)."""
    records = []
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle if line.strip()]
    return records


def train_losses_by_step(path: str | os.PathLike) -> dict[int, float]:
    return {r["step"]: r["train_loss"] for r in read_metrics(path) if "train_loss" in r}
