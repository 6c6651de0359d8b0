"""The results schema: one versioned JSON layout that pretraining (``eval_results.json`` in the run folder) and
``elmo evaluate`` (``MODEL/evaluation/eval_results.json``) write, and that publishing reads strictly.

A file holds one `EvaluationResults`: who wrote it and when, a list of `PerplexityResult` (one per dataset and
split) and a list of `ScoreResult` (one per probe task, representation and metric). Every field is documented,
field by field, in ``docs/results.md``. `write_results` checks a record and writes it atomically; `read_results`
reads a file and raises `ValueError` naming the file and the field that is missing, has the wrong type or an
impossible value, or an unknown ``schema_version``. The free-form ``details`` object is the only place for other
information (settings, timings, per-word counts); readers other than humans must not depend on it.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

from .io_utils import atomic_write_text, read_json_object

__all__ = [
    "MAX_RESULTS_BYTES",
    "MAX_RESULTS_ENTRIES",
    "SCHEMA_VERSION",
    "EvaluationResults",
    "PerplexityResult",
    "ScoreResult",
    "UnigramBaselineResult",
    "UntrainedComparison",
    "data_file_label",
    "read_results",
    "write_results",
]

#: Version of the layout below; `read_results` refuses any other.
SCHEMA_VERSION = 1
#: The largest results file `read_results` reads, and the most records (perplexities and scores together) it takes:
#: an evaluation writes tens of records in a few kilobytes, so a file past either is not one (`write_results` refuses
#: to write one, too). Checked before the file is parsed, and before any record is built.
MAX_RESULTS_BYTES = 16 << 20
MAX_RESULTS_ENTRIES = 10_000


def _finite(value: float | None, name: str, minimum: float | None = None, maximum: float | None = None) -> None:
    if value is None:
        return
    if (
        not math.isfinite(value)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        bounds = f"[{minimum if minimum is not None else '-inf'}, {maximum if maximum is not None else 'inf'}]"
        raise ValueError(f"{name} must be a finite number in {bounds}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class UnigramBaselineResult:
    """Perplexities of the word-frequency baseline on the same targets as the LM."""

    forward: float
    backward: float
    average: float
    fitted_on: str  # what the counts came from: "training data", "evaluation text (oracle)", file names
    smoothing: float  # add-k constant

    def __post_init__(self):
        for name in ("forward", "backward", "average"):
            _finite(getattr(self, name), name, minimum=1.0)
        _finite(self.smoothing, "smoothing", minimum=0.0)


@dataclasses.dataclass(frozen=True)
class PerplexityResult:
    """Exact (full-softmax) perplexity of the biLM on one split of one dataset (see
    `modeling_elmo.evaluation.lm_scoring`)."""

    dataset: str
    split: str  # "validation", "test", or "held-out" (a text file given to elmo evaluate)
    forward: float
    backward: float
    average: float  # exp of the mean of the two directions' mean NLLs (geometric mean)
    targets_per_direction: int
    examples: int  # sentences (or windows) scored
    unk_rate: float  # fraction of the targets that are <UNK>
    unigram: UnigramBaselineResult | None = None
    untrained_average: float | None = None  # average perplexity of an untrained model of the same shape

    def __post_init__(self):
        for name in ("forward", "backward", "average", "untrained_average"):
            _finite(getattr(self, name), name, minimum=1.0)
        _finite(self.unk_rate, "unk_rate", minimum=0.0, maximum=1.0)
        if self.targets_per_direction < 1 or self.examples < 0:
            raise ValueError(
                f"targets_per_direction must be >= 1 and examples >= 0, got {self.targets_per_direction} "
                f"and {self.examples}"
            )


@dataclasses.dataclass(frozen=True)
class UntrainedComparison:
    """The same score of a randomly initialised model of the same shape, and (for probes) McNemar's exact test of
    the paired predictions on the same examples."""

    value: float | None
    trained_only_correct: int | None = None  # examples only the trained model gets right
    untrained_only_correct: int | None = None
    mcnemar_p_value: float | None = None

    def __post_init__(self):
        _finite(self.value, "value")
        _finite(self.mcnemar_p_value, "mcnemar_p_value", minimum=0.0, maximum=1.0)


@dataclasses.dataclass(frozen=True)
class ScoreResult:
    """One score of a probe of the frozen representations (linear probes, the word-sense nearest-neighbour probe)."""

    task: str  # "probe-sentiment", "probe-pos", "wsd-probe"
    dataset: str
    split: str  # "validation", "test", "all" (the WSD probe scores every occurrence)
    representation: str  # "layer 0", "layer 1", ..., or "mix" (a learned scalar mix of all layers)
    metric: str  # "accuracy", "accuracy_ties_half"
    value: float | None  # None when undefined (e.g. every WSD occurrence tied)
    examples: int  # examples (tokens for POS, occurrences for WSD) scored
    baseline: float | None = None  # the same metric of a simple predictor that needs no model
    untrained: UntrainedComparison | None = None
    baseline_name: str | None = None  # which: "most frequent tag of the word", "majority class", "random neighbour"

    def __post_init__(self):
        _finite(self.value, "value")
        _finite(self.baseline, "baseline")
        if self.examples < 0:
            raise ValueError(f"examples must be >= 0, got {self.examples}")


@dataclasses.dataclass(frozen=True)
class EvaluationResults:
    """The content of one results file."""

    model: str  # the model's name (a folder name or Hub id, never an absolute path)
    source: str  # the tool that wrote the file: "elmo pretrain" or "elmo evaluate"
    created: str  # ISO 8601 time in UTC
    perplexity: list[PerplexityResult] = dataclasses.field(default_factory=list)
    scores: list[ScoreResult] = dataclasses.field(default_factory=list)
    untrained_seed: int | None = None  # torch.manual_seed of the untrained comparison model, if there is one
    details: dict[str, Any] = dataclasses.field(default_factory=dict)  # free-form: settings, timings, diagnostics
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self):
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"unknown schema_version {self.schema_version!r} (this version reads {SCHEMA_VERSION})")

    @classmethod
    def now(cls, model: str, source: str, **fields: Any) -> EvaluationResults:
        """A record created now (``created`` is the current UTC time)."""
        created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return cls(model=model, source=source, created=created, **fields)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def data_file_label(path: str) -> str:
    """A data file, folder or glob as results and model cards name it: its last part, with its folder when that part
    is a pattern (``gutenberg/*.txt``, not ``*.txt``); a packaged corpus (``builtin:NAME``) as given."""
    if path.startswith("builtin:"):
        return path
    parts = [part for part in re.split(r"[\\/]", path) if part]
    if not parts:
        return path
    if len(parts) > 1 and any(c in parts[-1] for c in "*?["):
        return f"{parts[-2]}/{parts[-1]}"
    return parts[-1]


# ----------------------------------------------------------------------------------------------- reading and writing
def write_results(path: str | os.PathLike, results: EvaluationResults, *, before_replace=None) -> Path:
    """Write ``results`` to ``path`` atomically (the old file or the complete new one, never a part;
    ``before_replace`` as `modeling_elmo.folders.files.atomic_write_bytes` takes it).

    The record is validated as `read_results` would read it back, so a file this writes is always readable."""
    path = Path(path)
    data = results.to_dict()
    try:
        text = json.dumps(data, indent=2, allow_nan=False) + "\n"
        _check_size(len(text.encode("utf-8")), data)
        _decode(EvaluationResults, json.loads(text), "")
    except (TypeError, ValueError) as error:
        raise ValueError(f"refusing to write {path}: {error}") from None
    atomic_write_text(path, text, before_replace=before_replace)
    return path


def read_results(path: str | os.PathLike) -> EvaluationResults:
    """Read a results file; raises `ValueError` naming the file and the first bad field."""
    path = Path(path)
    try:
        _check_size(path.stat().st_size if path.is_file() else 0)
    except ValueError as error:
        raise ValueError(f"results file {path}: {error}.") from None
    data = read_json_object(path, "results", required=True)
    if "schema_version" not in data:
        raise ValueError(
            f"results file {path}: missing field 'schema_version' (a file written before the results "
            "schema existed; run the evaluation again)."
        )
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"results file {path}: unknown schema_version {data.get('schema_version')!r} (this version "
            f"reads {SCHEMA_VERSION})."
        )
    try:
        _check_size(0, data)
        return _decode(EvaluationResults, data, "")
    except ValueError as error:
        raise ValueError(f"results file {path}: {error}.") from None


def _check_size(size: int, data: Any = None) -> None:
    """Refuse a results file of more than `MAX_RESULTS_BYTES` bytes or (``data``, parsed) `MAX_RESULTS_ENTRIES`."""
    if size > MAX_RESULTS_BYTES:
        raise ValueError(
            f"{size:,} bytes, more than the {MAX_RESULTS_BYTES:,} a results file may have (an evaluation writes a "
            "few kilobytes)"
        )
    if isinstance(data, dict):
        entries = sum(len(data.get(key)) for key in ("perplexity", "scores") if isinstance(data.get(key), list))
        if entries > MAX_RESULTS_ENTRIES:
            raise ValueError(
                f"{entries:,} perplexity and score records, more than the {MAX_RESULTS_ENTRIES:,} a results file may "
                "hold (an evaluation writes tens)"
            )


@functools.cache
def _fields_of(tp: Any) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """A schema dataclass's resolved type hints and fields, worked out once per class (not once per record)."""
    return typing.get_type_hints(tp), {f.name: f for f in dataclasses.fields(tp)}


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _decode(tp: Any, value: Any, where: str) -> Any:
    """``value`` (parsed JSON) as an instance of ``tp``; raises `ValueError` naming the field path ``where``."""
    name = where or "the top level"
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None:
            if type(None) in options:
                return None
            raise ValueError(f"field {name!r} must not be null")
        (inner,) = [option for option in options if option is not type(None)]
        return _decode(inner, value, where)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"field {name!r} must be an object, got {type(value).__name__}")
        hints, fields = _fields_of(tp)
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise ValueError(f"unknown field {(where + '.' if where else '') + unknown[0]!r}")
        kwargs = {}
        for field_name, field in fields.items():
            path = f"{where}.{field_name}" if where else field_name
            if field_name not in value:
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                    raise ValueError(f"missing field {path!r}")
                continue
            kwargs[field_name] = _decode(hints[field_name], value[field_name], path)
        try:
            return tp(**kwargs)
        except ValueError as error:
            raise ValueError(f"in {name!r}: {error}") from None
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"field {name!r} must be a list, got {type(value).__name__}")
        (inner,) = typing.get_args(tp)
        return [_decode(inner, item, f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ValueError(f"field {name!r} must be an object, got {type(value).__name__}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"field {name!r} must be a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"field {name!r} must be an integer, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str) or not value:
            raise ValueError(f"field {name!r} must be a non-empty string, got {value!r}")
        return value
    raise TypeError(f"the results schema has a field of unsupported type {_type_name(tp)} ({name})")
