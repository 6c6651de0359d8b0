"""The layout of a model folder: the only place that names the files a run, a conversion and an evaluation leave.

A folder written by ``elmo pretrain --output-dir RUN``::

    config.json, model.safetensors        the model (save_pretrained; a large model may be sharded:
                                          model.safetensors.index.json + model-0000N-of-0000M.safetensors)
    tokenizer_config.json, vocab.txt      the tokenizer (special_tokens_map.json, added_tokens.json when written;
                                          char_vocab.json with --char-vocabulary unicode)
    configuration_elmo.py, modeling_elmo.py, pipeline_elmo.py,
    tokenization_elmo.py                  the code files (trust_remote_code loading)
    checkpoints/                          training state: step_NNNNNNNN/ folders and ``latest`` naming the newest
                                          (see modeling_elmo.pretraining.checkpoint); best/ holds the best validated
                                          weights so far (--load-best-model-at-end)
    metrics.jsonl                         one JSON object per line: per logged update {step, epoch, train_loss,
                                          train_ppl, lr, tokens_per_s, tokens_seen[, grad_norm]}; per
                                          evaluation {step, split, perplexity, perplexity_forward,
                                          perplexity_backward[, unigram_perplexity]}
    examples_rank<R>.jsonl                the example ids process R trained on, per batch (--log-example-ids)
    elmo-pretraining/                     tracker logs (--report-to tensorboard: its event files and hparams.yml)
    training_metadata.json                the run's arguments, data and vocabulary fingerprints, counters
    run.json                              what defines the run (arguments, model, data and vocabulary fingerprints,
                                          and the data files it was given): written when it starts; one run per
                                          folder (RUN.lock, beside the folder, while a run writes it)
    eval_results.json                     the final perplexities (docs/results.md)
    perplexity.png                        the training curve
    evaluation/                           what ``elmo evaluate RUN`` writes (`EvaluationFolder`)
    snapshots/minutes-M/                  the model when the training time passed M minutes (--save-at-minutes):
                                          a model folder with snapshot.json (minutes, updates, tokens) and, once
                                          ``elmo evaluate`` has scored it, its evaluation/

A folder written by ``elmo convert`` holds the model, tokenizer and code files, a ``README.md``,
``conversion_metadata.json`` (the source files, their checksums, the numerical check) and ``.elmo-manifest.json``,
the list of the files it wrote (`modeling_elmo.folders.manifest`).

``RunFolder(path).has_model()`` says whether a finished model can be loaded from it, ``is_run()`` whether a
training run wrote it; the ``*_file`` properties name each artefact, present or not. ``run_entries()`` sorts every
entry of the folder (recursively) into the files a run writes and the others: ``elmo pretrain --overwrite`` deletes
the first kind only, and refuses a folder holding any of the second.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ..utils.io_utils import check_json_files, read_json_object
from ..utils.results import EvaluationResults, read_results
from .files import (
    CONTENT,
    MANIFEST,
    TEMPORARY_FILE,
    TEMPORARY_MARKER,
    atomic_write_text,
    remove_empty_folder,
    remove_file,
)

__all__ = ["CHECKPOINT_FILE", "CODE_FILES", "EvaluationFolder", "RunFolder", "read_json_object"]

#: The custom-code files saved with every model (``trust_remote_code`` loads them).
CODE_FILES = (
    "configuration_elmo.py",
    "modeling_elmo.py",
    "pipeline_elmo.py",
    "tokenization_elmo.py",
)
#: The files of a training checkpoint (``checkpoints/step_NNNNNNNN/``; docs/security.md lists them).
CHECKPOINT_FILE = re.compile(
    r"trainer_state\.json|model\.safetensors|best_model\.safetensors|optimizer\.(safetensors|json)|"
    r"scheduler\.json|scaler\.json|vocab\.txt|char_vocab\.json|rng_state_\d+\.(safetensors|json)"
)
#: A file being written atomically (`modeling_elmo.folders.files.atomic_write_bytes`): ``.NAME.TOKEN.tmp``.
_ATOMIC_TEMPORARY = TEMPORARY_FILE
#: A snapshot's folder name (``snapshots/minutes-M``) and the temporary folder one is written in
#: (`modeling_elmo.folders.files.new_temporary`: ``.minutes-M.snapshot-PID-TOKEN``).
_SNAPSHOT = re.compile(r"minutes-(?P<minutes>[0-9][0-9.e+-]*)")
_SNAPSHOT_TEMPORARY = re.compile(r"\.minutes-[0-9][0-9.e+-]*\.snapshot-\d+-[A-Za-z0-9_]+")
#: The temporary folder a checkpoint is written in, or an earlier one of the same step moved aside
#: (`modeling_elmo.folders.files.new_temporary`: ``.step_N.checkpoint-PID-TOKEN``, ``.step_N.old-PID-TOKEN``).
_CHECKPOINT_TEMPORARY = re.compile(r"\.step_\d+\.[a-z]+-\d+-[A-Za-z0-9_]+")


def _checkpoint_file(name: str) -> bool:
    """A file of a checkpoint folder: `CHECKPOINT_FILE`, or its manifest."""
    return bool(CHECKPOINT_FILE.fullmatch(name)) or name == MANIFEST


#: What tensorboard (``--report-to tensorboard``) writes into the tracker folder.
_TRACKER_FILE = re.compile(r"events\.out\.tfevents\..+|hparams\.yml")


def _written(name: str, is_ours) -> bool:
    """Whether file ``name`` is one ``is_ours`` accepts, or the temporary file of an atomic write of one."""
    if is_ours(name):
        return True
    match = _ATOMIC_TEMPORARY.fullmatch(name)
    return bool(match and is_ours(match.group("name")))


class EvaluationFolder:
    """What ``elmo evaluate`` writes: ``eval_results.json`` (docs/results.md), ``eval_results.md`` (the same numbers
    as Markdown tables) and the plots of `PLOTS`, each present only when it applies, and ``.elmo-manifest.json``,
    the list of the files it wrote (it never replaces a file it did not write)."""

    RESULTS = "eval_results.json"
    REPORT = "eval_results.md"
    #: Plot name -> file: probe accuracy per representation, the learned scalar-mix weights, the training curve.
    PLOTS = {
        "probe_accuracy": "probe_accuracy.png",
        "layer_weights": "layer_weights.png",
        "training_perplexity": "training_perplexity.png",
    }

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @property
    def results_file(self) -> Path:
        return self.root / self.RESULTS

    @property
    def report_file(self) -> Path:
        return self.root / self.REPORT

    def plot_file(self, name: str) -> Path:
        """The file of plot ``name`` (a key of `PLOTS`)."""
        if name not in self.PLOTS:
            raise ValueError(f"unknown evaluation plot {name!r}; known: {', '.join(self.PLOTS)}.")
        return self.root / self.PLOTS[name]

    def plot_files(self) -> list[Path]:
        """The plots that exist, in the order of `PLOTS`."""
        return [path for path in (self.root / f for f in self.PLOTS.values()) if path.is_file()]

    @classmethod
    def is_own_file(cls, name: str) -> bool:
        """Whether a file ``name`` in the folder is one ``elmo evaluate`` writes (or is writing): its results, report,
        plots (``.NAME.tmp.png`` while one is saved) and its manifest of them (`modeling_elmo.folders.manifest`)."""
        plot = re.fullmatch(r"\.(?P<stem>.+)\.tmp\.png", name)
        return _written(name, lambda n: n in (cls.RESULTS, cls.REPORT, MANIFEST, *cls.PLOTS.values())) or bool(
            plot and f"{plot.group('stem')}.png" in cls.PLOTS.values()
        )


class RunFolder:
    """A model folder: a training run's output, a conversion's, or any ``save_pretrained`` folder of this package."""

    CONFIG = "config.json"
    WEIGHTS = "model.safetensors"
    WEIGHTS_INDEX = "model.safetensors.index.json"
    TOKENIZER_CONFIG = "tokenizer_config.json"
    VOCAB = "vocab.txt"
    CHAR_VOCAB = "char_vocab.json"  # a Unicode character vocabulary (--char-vocabulary unicode)
    TOKENIZER_FILES = (
        TOKENIZER_CONFIG,
        VOCAB,
        CHAR_VOCAB,
        "word_input_vocab.json",
        "special_tokens_map.json",
        "added_tokens.json",
    )
    CODE_FILES = CODE_FILES
    README = "README.md"
    CHECKPOINTS = "checkpoints"
    METRICS = "metrics.jsonl"
    TRACKER_LOGS = "elmo-pretraining"
    TRAINING_METADATA = "training_metadata.json"
    RUN_IDENTITY = "run.json"
    CONVERSION_METADATA = "conversion_metadata.json"
    EVAL_RESULTS = "eval_results.json"
    PERPLEXITY_PLOT = "perplexity.png"
    EVALUATION = "evaluation"
    SNAPSHOTS = "snapshots"
    SNAPSHOT_INFO = "snapshot.json"

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.root)!r})"

    # ------------------------------------------------------------------ names
    @property
    def config_file(self) -> Path:
        return self.root / self.CONFIG

    @property
    def weights_file(self) -> Path:
        return self.root / self.WEIGHTS

    @property
    def weights_index_file(self) -> Path:
        return self.root / self.WEIGHTS_INDEX

    @property
    def tokenizer_config_file(self) -> Path:
        return self.root / self.TOKENIZER_CONFIG

    @property
    def vocab_file(self) -> Path:
        return self.root / self.VOCAB

    @property
    def char_vocab_file(self) -> Path:
        return self.root / self.CHAR_VOCAB

    @property
    def checkpoints_dir(self) -> Path:
        return self.root / self.CHECKPOINTS

    @property
    def best_model_dir(self) -> Path:
        """The best validated weights of a run so far (``elmo pretrain --load-best-model-at-end``)."""
        return self.checkpoints_dir / "best"

    @property
    def metrics_file(self) -> Path:
        return self.root / self.METRICS

    def examples_log_file(self, rank: int) -> Path:
        """The ids of the examples process ``rank`` trained on, one JSON record per batch."""
        return self.root / f"examples_rank{rank}.jsonl"

    @property
    def training_metadata_file(self) -> Path:
        return self.root / self.TRAINING_METADATA

    @property
    def run_identity_file(self) -> Path:
        """What defines the training run that writes the folder (``elmo pretrain``)."""
        return self.root / self.RUN_IDENTITY

    @property
    def conversion_metadata_file(self) -> Path:
        return self.root / self.CONVERSION_METADATA

    @property
    def eval_results_file(self) -> Path:
        """The perplexities written at the end of a training run."""
        return self.root / self.EVAL_RESULTS

    @property
    def perplexity_plot_file(self) -> Path:
        return self.root / self.PERPLEXITY_PLOT

    @property
    def evaluation(self) -> EvaluationFolder:
        """Where ``elmo evaluate`` writes by default."""
        return EvaluationFolder(self.root / self.EVALUATION)

    def snapshot_dir(self, minutes: float) -> Path:
        """The model of the run when its training time passed ``minutes`` (``elmo pretrain --save-at-minutes``)."""
        return self.root / self.SNAPSHOTS / f"minutes-{minutes:g}"

    def snapshots(self) -> dict[float, Path]:
        """The complete snapshots of the run, by their minutes (ascending)."""
        found = {}
        folder = self.root / self.SNAPSHOTS
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            match = _SNAPSHOT.fullmatch(entry.name)
            if match and not entry.is_symlink() and RunFolder(entry).has_model():
                with contextlib.suppress(ValueError):
                    found[float(match.group("minutes"))] = entry
        return dict(sorted(found.items()))

    # ------------------------------------------------------------------ what the folder holds
    def has_weights(self) -> bool:
        return self.weights_file.is_file() or self.weights_index_file.is_file()

    def has_model(self) -> bool:
        """Whether a finished model can be loaded: ``config.json`` and safetensors weights."""
        return self.config_file.is_file() and self.has_weights()

    def has_tokenizer(self) -> bool:
        return self.tokenizer_config_file.is_file()

    def require_elmo_model(self, *, tokenizer: bool = False) -> None:
        """Raise `ValueError` unless the folder holds a saved ELMo model: the message names what is missing (the
        folder, ``config.json``), a config of another model type, or no safetensors weights (and, with ``tokenizer``,
        no tokenizer)."""
        if not self.root.is_dir():
            raise ValueError(f"model folder {str(self.root)!r} does not exist or is not a folder.")
        if not self.config_file.is_file():
            what = "is empty" if not any(self.root.iterdir()) else f"has no {self.CONFIG}"
            raise ValueError(f"{self.root} is not a model folder: it {what}.")
        check_json_files(self.root)
        model_type = self.model_type()
        if model_type != "elmo":
            raise ValueError(f"{self.root} holds a model of type {model_type!r} ({self.CONFIG}), not an ELMo model.")
        if not self.has_weights():
            raise ValueError(
                f"{self.root} has no {self.WEIGHTS} (nor a sharded {self.WEIGHTS_INDEX}): this package "
                "loads safetensors weights only."
            )
        if tokenizer and not self.has_tokenizer():
            raise ValueError(
                f"{self.root} has no tokenizer ({self.TOKENIZER_CONFIG} is missing): save it into the "
                "model folder (`tokenizer.save_pretrained(folder)`)."
            )

    def is_run(self) -> bool:
        """Whether a training run wrote the folder (its identity, metadata, checkpoints or metrics), finished or not."""
        return (
            self.run_identity_file.is_file()
            or self.training_metadata_file.is_file()
            or self.checkpoints_dir.is_dir()
            or self.metrics_file.is_file()
        )

    def is_run_artefact(self, name: str) -> bool:
        """Whether a top-level entry ``name`` is one a training run writes (model, tokenizer, code, logs, results,
        checkpoints, the evaluation folder, temporary files of an interrupted save); `run_entries` looks inside."""
        path = self.root / name
        return self._is_run_entry((name,), path.is_dir() and not path.is_symlink())

    def entries(self) -> list[Path]:
        """The folder's top-level entries (none when it does not exist)."""
        return sorted(self.root.iterdir()) if self.root.is_dir() else []

    def _model_file(self, name: str) -> bool:
        return name in {self.CONFIG, self.WEIGHTS, self.WEIGHTS_INDEX, *self.TOKENIZER_FILES, *self.CODE_FILES} or bool(
            re.fullmatch(r"model-\d+-of-\d+\.safetensors", name)
        )

    def _run_file(self, name: str) -> bool:
        return (
            self._model_file(name)
            or name
            in {self.METRICS, self.TRAINING_METADATA, self.RUN_IDENTITY, self.EVAL_RESULTS, self.PERPLEXITY_PLOT}
            or bool(re.fullmatch(r"examples_rank\d+\.jsonl", name))
        )

    def _is_run_entry(self, parts: tuple[str, ...], is_dir: bool) -> bool:
        """Whether the entry at ``parts`` (relative to the folder; a folder when ``is_dir``) is one a training run
        writes: the files of `is_run_artefact`, the checkpoint folders and their files, the best model, the
        evaluation files, tensorboard's logs, and the temporary files and folders of an interrupted save."""
        top, rest = parts[0], parts[1:]
        if not rest:
            if is_dir:
                return top in (self.CHECKPOINTS, self.EVALUATION, self.TRACKER_LOGS, ".tmp-final-model", self.SNAPSHOTS)
            return _written(top, self._run_file)
        if top == self.SNAPSHOTS:
            return self._is_snapshot_entry(rest, is_dir)
        if top == ".tmp-final-model":  # the final model being saved
            return len(rest) == 1 and not is_dir and self._model_file(rest[0])
        if top == self.EVALUATION:
            return len(rest) == 1 and not is_dir and EvaluationFolder.is_own_file(rest[0])
        if top == self.TRACKER_LOGS:
            return is_dir or bool(_TRACKER_FILE.fullmatch(rest[-1]))
        if top == self.CHECKPOINTS:
            step = re.fullmatch(r"(\.tmp-|\.old-)?step_\d+", rest[0])
            temporary = _CHECKPOINT_TEMPORARY.fullmatch(rest[0])  # a checkpoint being written, or one moved aside
            if len(rest) == 1:
                if is_dir:
                    return bool(step or temporary) or rest[0] == "best"
                return _written(rest[0], lambda n: n == "latest")
            if temporary:
                if len(rest) == 2:
                    return rest[1] == CONTENT if is_dir else rest[1] == TEMPORARY_MARKER
                return len(rest) == 3 and rest[1] == CONTENT and not is_dir and _written(rest[2], _checkpoint_file)
            if len(rest) == 2 and not is_dir:
                if step:
                    return _written(rest[1], _checkpoint_file)
                if rest[0] == "best":
                    return rest[1] == ".model.safetensors.tmp" or _written(
                        rest[1], lambda n: n in ("model.safetensors", "best.json")
                    )
        return False

    def _is_snapshot_entry(self, parts: tuple[str, ...], is_dir: bool) -> bool:
        """`_is_run_entry` under ``snapshots/``: a snapshot folder (model files, ``snapshot.json``, its evaluation) or
        the temporary folder one is written in (its marker, and the same files in its payload folder)."""
        name, rest = parts[0], parts[1:]
        if _SNAPSHOT.fullmatch(name):
            if not rest:
                return is_dir
            if rest[0] == self.EVALUATION:
                return (
                    len(rest) == 1 and is_dir or len(rest) == 2 and not is_dir and EvaluationFolder.is_own_file(rest[1])
                )
            return len(rest) == 1 and not is_dir and _written(rest[0], self._snapshot_file)
        if _SNAPSHOT_TEMPORARY.fullmatch(name):
            if not rest:
                return is_dir
            if rest == (TEMPORARY_MARKER,):
                return not is_dir
            if rest[0] == CONTENT:
                return (
                    len(rest) == 1
                    and is_dir
                    or len(rest) == 2
                    and not is_dir
                    and _written(rest[1], self._snapshot_file)
                )
        return False

    def _snapshot_file(self, name: str) -> bool:
        return self._model_file(name) or name in (self.SNAPSHOT_INFO, MANIFEST)

    def run_entries(self) -> tuple[list[Path], list[str]]:
        """The entries of the folder that a training run writes (files, then their folders, deepest first), and
        the others (sorted POSIX paths relative to the folder). A link is never followed: a link named like a
        run's file is the run's (removing it leaves its target alone); a link to a folder is never the run's."""
        ours_files, ours_dirs, foreign = [], [], []
        if not self.root.is_dir():
            return [], []
        for top, dirs, files in os.walk(self.root):
            base = Path(top)
            for name in sorted(dirs):
                path = base / name
                parts = path.relative_to(self.root).parts
                if path.is_symlink():  # the link itself, as a file: its target is never looked into
                    if self._is_run_entry(parts, False):
                        ours_files.append(path)
                    else:
                        foreign.append("/".join(parts))
                elif self._is_run_entry(parts, True):
                    ours_dirs.append(path)
                else:
                    foreign.append("/".join(parts) + "/")
            dirs[:] = [d for d in dirs if (base / d) in ours_dirs]  # a foreign folder is not looked into
            for name in sorted(files):
                path = base / name
                parts = path.relative_to(self.root).parts
                if self._is_run_entry(parts, False):
                    ours_files.append(path)
                else:
                    foreign.append("/".join(parts))
        ours_dirs.sort(key=lambda p: len(p.parts), reverse=True)
        return ours_files + ours_dirs, sorted(foreign)

    def remove_run_files(self) -> None:
        """Delete the entries of `run_entries` that a run writes (its folders only once they are empty)."""
        ours, _ = self.run_entries()
        for path in ours:
            if path.is_dir() and not path.is_symlink():
                remove_empty_folder(path)  # a folder that still holds something that is not the run's stays
            else:
                remove_file(path)

    def is_conversion(self) -> bool:
        """Whether ``elmo convert`` wrote the folder."""
        return self.conversion_metadata_file.is_file()

    def model_type(self) -> str | None:
        """``model_type`` of ``config.json`` (None when there is no config); raises `ValueError` on a config that is
        not a JSON object."""
        config = read_json_object(self.config_file, "config")
        if config is None:
            return None
        return config.get("model_type")

    # ------------------------------------------------------------------ metadata and results
    def read_training_metadata(self) -> dict[str, Any] | None:
        return read_json_object(self.training_metadata_file, "training metadata")

    def write_training_metadata(self, metadata: dict[str, Any]) -> None:
        atomic_write_text(self.training_metadata_file, json.dumps(metadata, indent=1, sort_keys=True) + "\n")

    def read_conversion_metadata(self) -> dict[str, Any] | None:
        return read_json_object(self.conversion_metadata_file, "conversion metadata")

    def results_files(self) -> list[Path]:
        """The results files present: the run's ``eval_results.json``, then the evaluation suite's."""
        return [path for path in (self.eval_results_file, self.evaluation.results_file) if path.is_file()]

    def read_results(self) -> list[EvaluationResults]:
        """Every results file of the folder, read strictly (`modeling_elmo.utils.results.read_results`)."""
        return [read_results(path) for path in self.results_files()]

    def read_metrics(self) -> list[dict[str, Any]]:
        """The records of ``metrics.jsonl`` (empty when there is none); raises `ValueError` naming the line of a
        record that is not a JSON object."""
        records = []
        if self.metrics_file.is_file():
            with open(self.metrics_file, encoding="utf-8") as handle:
                for number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except (json.JSONDecodeError, RecursionError) as error:
                        raise ValueError(
                            f"{self.metrics_file}:{number}: not valid JSON ({getattr(error, 'msg', error)})."
                        ) from None
                    if not isinstance(record, dict):
                        raise ValueError(f"{self.metrics_file}:{number}: expected a JSON object.")
                    records.append(record)
        return records

    def plot_files(self) -> list[Path]:
        """The plots present: the training curve, then the evaluation suite's plots (without its copy of the training
        curve when the run's own is there: one perplexity plot)."""
        if not self.perplexity_plot_file.is_file():
            return self.evaluation.plot_files()
        copy = self.evaluation.plot_file("training_perplexity")
        return [self.perplexity_plot_file] + [path for path in self.evaluation.plot_files() if path != copy]
