"""Publishing an ELMo model folder to the Hugging Face Hub.

``python scripts/push_to_hub.py MODEL_DIR --repo-id NAME`` (or ``elmo push``) runs `main`:

1. checks the input: the repository id (huggingface_hub's validator), the model folder (an ELMo
   ``config.json``, safetensors weights, a tokenizer; pickled weights such as ``pytorch_model.bin`` are refused),
   and, unless ``--dry-run``, that a token exists (``HF_TOKEN`` or the stored login, never a file in the folder);
2. assembles the repository folder (`assemble_repo_folder`): the model and tokenizer are loaded with the
   package's classes (safetensors only) and saved again, with the three custom-code files and a ``config.json``
   whose ``auto_map`` lists every auto class, plus a ``README.md`` model card rendered from a template in
   ``model_cards/`` and the plots. Only the files of the allow-list (`is_allowed_file`) are written;
3. uploads exactly that file list (`upload_repo_folder`: ``HfApi.create_repo(exist_ok=True)``, then
   ``upload_folder``). ``--dry-run`` stops after step 2 and prints the plan; it never touches the network.

Model cards. `build_model_card` fills one of three templates (``pretrained``, ``converted``, ``classifier``)
and the YAML metadata (``ModelCardData`` with ``EvalResult`` entries for the ``model-index``) from:

* the language-model evaluation JSON (``eval_results.json``, read by `read_lm_eval_results`);
* evaluation-suite JSON files (probe results, read by `read_suite_results`);
* a training-metadata JSON (`read_training_metadata`).

The readers are tolerant about layout (nested or flat keys, several spellings); their accepted keys are
documented on each function. A model without evaluation files gets a card that says so and no ``model-index``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------- constants
PACKAGE_DIR = Path(__file__).resolve().parent
#: Model-card templates: ``model_cards/<kind>.md`` next to the package in a source tree; a wheel ships the same
#: files as ``modeling_elmo/model_cards/``.
TEMPLATE_DIR = next(
    (d for d in (PACKAGE_DIR.parent / "model_cards", PACKAGE_DIR / "model_cards") if (d / "pretrained.md").is_file()),
    PACKAGE_DIR.parent / "model_cards",
)

#: The custom-code files shipped with every model; they import only each other, torch, transformers, numpy and
#: tokenizers (checked by `audit_shipped_code`).
SHIPPED_CODE_FILES = ("configuration_elmo.py", "lstm_kernels.py", "modeling_elmo.py", "tokenization_elmo.py")
ALLOWED_CODE_IMPORTS = frozenset({"torch", "transformers", "numpy", "tokenizers"})
#: Standard-library modules the shipped code must not import: network, processes, pickling, native code,
#: dynamic imports.
FORBIDDEN_STDLIB_IMPORTS = frozenset({
    "socket", "ssl", "http", "urllib", "ftplib", "smtplib", "poplib", "imaplib", "telnetlib", "xmlrpc",
    "socketserver", "asyncio", "selectors", "webbrowser", "subprocess", "multiprocessing", "pty",
    "pickle", "cPickle", "shelve", "marshal", "dill", "ctypes", "importlib", "runpy", "code", "codeop",
    "zipimport", "tempfile", "shutil",
})
#: Calls the shipped code must not contain anywhere (not only at import time).
FORBIDDEN_CALLS = frozenset({"eval", "exec", "compile", "__import__", "torch.load", "torch.hub.load",
                             "pickle.load", "pickle.loads", "numpy.load", "np.load"})

MODEL_ARCHITECTURES = ("ElmoModel", "ElmoForBidirectionalLM", "ElmoForSequenceClassification",
                       "ElmoForTokenClassification")

CARD_KINDS = ("pretrained", "converted", "classifier")
#: Placeholders every template must use (a card without them would lose its metadata or its numbers).
REQUIRED_TEMPLATE_FIELDS = ("card_data", "model_id", "evaluation_section", "training_section")

#: The allow-list: exact names, plus safetensors shards and plots.
ALLOWED_FILES = frozenset({
    "README.md", "config.json", "model.safetensors", "model.safetensors.index.json",
    *SHIPPED_CODE_FILES,
    "tokenizer_config.json", "vocab.txt", "added_tokens.json", "special_tokens_map.json",
})
_SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
_PLOT = re.compile(r"plots/[A-Za-z0-9][A-Za-z0-9._-]*\.(png|svg|jpg|jpeg)")
PLOT_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg")
MAX_PLOT_BYTES = 5 * 2**20

#: Weight files that would be unpickled by a loader (arbitrary code execution): refused everywhere.
_PICKLED_WEIGHTS = re.compile(r"(pytorch_model.*\.bin|.*\.(pt|pth|ckpt)|pytorch_model\.bin\.index\.json)")
#: Files of a training run that are pickles but are never loaded nor uploaded here.
_TRAINING_STATE = re.compile(r"(optimizer|scheduler|scaler|rng_state.*|training_args|random_states_\d+)\.(pt|pth|bin|pkl)")
#: A Hugging Face access token (user or organisation) inside a file means a leaked secret.
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")

DEFAULT_LM_EVAL_FILE = "eval_results.json"
DEFAULT_TRAINING_METADATA_FILES = ("training_metadata.json", "conversion_metadata.json", "train_metadata.json")
DEFAULT_SUITE_GLOBS = ("evaluation/*.json", "eval_suite*.json", "probe*_results.json", "suite_results*.json")

PAPER_CITATION = """@inproceedings{peters-etal-2018-deep,
    title = "Deep Contextualized Word Representations",
    author = "Peters, Matthew E.  and
      Neumann, Mark  and
      Iyyer, Mohit  and
      Gardner, Matt  and
      Clark, Christopher  and
      Lee, Kenton  and
      Zettlemoyer, Luke",
    booktitle = "Proceedings of the 2018 Conference of the North {A}merican Chapter of the Association for Computational Linguistics: Human Language Technologies, Volume 1 (Long Papers)",
    month = jun,
    year = "2018",
    address = "New Orleans, Louisiana",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/N18-1202",
    doi = "10.18653/v1/N18-1202",
    pages = "2227--2237",
}"""


# ----------------------------------------------------------------------------------------------- input checks
def refuse_pickled_weights(folder: str | os.PathLike) -> None:
    """Raise `ValueError` if ``folder`` holds weights that only a pickle loader can read.

    ``pytorch_model.bin`` (and ``*.pt``/``*.pth``/``*.ckpt`` files other than a training run's optimizer,
    scheduler and RNG states) are pickles: loading one runs whatever code its author put in it. This package
    loads and publishes ``model.safetensors`` only. Call it from every load path of untrusted folders.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    found = sorted(p.name for p in folder.iterdir()
                   if p.is_file() and _PICKLED_WEIGHTS.fullmatch(p.name) and not _TRAINING_STATE.fullmatch(p.name))
    if found:
        raise ValueError(
            f"{folder} holds pickled weights {found}: loading a pickle can run arbitrary code, so this package "
            "refuses it and loads safetensors only. If you trust the file, convert it once in a trusted "
            "environment (load it, then `model.save_pretrained(folder)` writes model.safetensors) and remove the "
            "pickle."
        )


def check_model_folder(model_dir: str | os.PathLike) -> Path:
    """Check that ``model_dir`` is an ELMo model folder that can be published; return it as a `Path`.

    Raises `ValueError` naming what is wrong: not a folder, no ``config.json`` or one of another model type,
    pickled weights, no safetensors weights, no tokenizer (``tokenizer_config.json``).
    """
    path = Path(model_dir)
    if not path.is_dir():
        raise ValueError(f"model folder {str(model_dir)!r} does not exist or is not a folder.")
    refuse_pickled_weights(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{path} is not a model folder: it has no config.json.")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{config_file} is not valid JSON: {error}.") from None
    if not isinstance(config, dict) or config.get("model_type") != "elmo":
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise ValueError(f"{config_file} is not an ELMo config: model_type is {found!r}, expected 'elmo'.")
    if not (path / "model.safetensors").is_file() and not (path / "model.safetensors.index.json").is_file():
        raise ValueError(f"{path} has no model.safetensors (nor a sharded model.safetensors.index.json).")
    if not (path / "tokenizer_config.json").is_file():
        raise ValueError(
            f"{path} has no tokenizer (tokenizer_config.json is missing): save the tokenizer into the model folder "
            "(`tokenizer.save_pretrained(model_dir)`) before publishing."
        )
    return path


def validate_repo_id(repo_id: str) -> str:
    """Return ``repo_id`` if huggingface_hub accepts it as a model repository id, else raise `ValueError`."""
    from huggingface_hub.utils import HFValidationError
    from huggingface_hub.utils import validate_repo_id as hub_validate

    if not isinstance(repo_id, str) or not repo_id:
        raise ValueError(f"invalid repository id {repo_id!r}: expected 'name' or 'namespace/name'.")
    try:
        hub_validate(repo_id)
    except HFValidationError as error:
        raise ValueError(f"invalid repository id {repo_id!r}: {error}") from None
    return repo_id


def _is_within(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def resolve_token(forbidden_dirs: Iterable[str | os.PathLike] = ()) -> str:
    """The Hub token from ``HF_TOKEN`` or the stored login (``hf auth login``); raise `ValueError` if none.

    The token is never read from the folders being published: if the stored-login file
    (``huggingface_hub.constants.HF_TOKEN_PATH``) lies inside one of ``forbidden_dirs``, this raises instead.
    """
    from huggingface_hub import constants, get_token

    token_file = Path(constants.HF_TOKEN_PATH)
    for folder in forbidden_dirs:
        if _is_within(token_file, Path(folder)):
            raise ValueError(
                f"the token file {token_file} lies inside {folder}, a folder being published; refusing to read a "
                "token from it. Set HF_TOKEN or log in with `hf auth login` (stored outside the folder)."
            )
    token = get_token()
    if not token:
        raise ValueError(
            "no Hugging Face token: set the HF_TOKEN environment variable or run `hf auth login` "
            "(or use --dry-run to only write the folder)."
        )
    return token


# ----------------------------------------------------------------------------------------------- code audit
def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def audit_shipped_code(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Problems in the custom-code files shipped to the Hub (an empty list means they pass).

    A shipped file may import torch, transformers, numpy, tokenizers, the other shipped files (relative
    imports) and standard-library modules other than `FORBIDDEN_STDLIB_IMPORTS` (network, processes,
    pickling, native code, dynamic imports); it may not call any of `FORBIDDEN_CALLS` (``eval``, ``exec``,
    ``torch.load``, ...), and its module level (outside functions and classes) may not call ``open``.
    """
    paths = [Path(p) for p in paths]
    shipped_modules = {Path(name).stem for name in SHIPPED_CODE_FILES}
    stdlib = set(sys.stdlib_module_names)
    problems = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
                relative = False
            elif isinstance(node, ast.ImportFrom):
                relative = node.level > 0
                if relative:
                    names = [node.module] if node.module else [alias.name for alias in node.names]
                else:
                    names = [node.module or ""]
            else:
                if isinstance(node, ast.Call):
                    called = _dotted(node.func)
                    if called in FORBIDDEN_CALLS:
                        problems.append(f"{path.name}:{node.lineno}: calls {called}")
                continue
            for name in names:
                top = name.split(".")[0]
                if relative:
                    if node.level != 1 or top not in shipped_modules:
                        problems.append(f"{path.name}:{node.lineno}: relative import of {'.' * node.level}{name}, "
                                        f"not one of the shipped files {sorted(shipped_modules)}")
                elif top == "__future__" or top in ALLOWED_CODE_IMPORTS:
                    continue
                elif top in FORBIDDEN_STDLIB_IMPORTS:
                    problems.append(f"{path.name}:{node.lineno}: imports {name} (network, process, pickle or "
                                    "dynamic-import module)")
                elif top not in stdlib:
                    problems.append(f"{path.name}:{node.lineno}: imports {name}, which is not torch, transformers, "
                                    "numpy, tokenizers nor the standard library")
        for statement in tree.body:  # module level only; function bodies run later
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for node in ast.walk(statement):
                if isinstance(node, ast.Call) and _dotted(node.func) in ("open", "io.open", "builtins.open"):
                    problems.append(f"{path.name}:{node.lineno}: opens a file at import time")
    return problems


# ----------------------------------------------------------------------------------------------- JSON readers
def _load_json(path: str | os.PathLike, what: str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what} file {str(path)!r} does not exist.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{what} file {path} is not valid JSON: {error}.") from None


def _words(key: str) -> list[str]:
    """``"eval/Perplexity-fwd"`` -> ``["eval", "perplexity", "fwd"]`` (camelCase is split too)."""
    key = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key))
    return [w for w in re.split(r"[^a-z0-9]+", key.lower()) if w]


def _flatten(obj: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(obj, Mapping):
        out = []
        for key, value in obj.items():
            out.extend(_flatten(value, prefix + (str(key),)))
        return out
    return [(prefix, obj)]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_SPLITS = {"validation": "validation", "valid": "validation", "val": "validation", "dev": "validation",
           "eval": "validation", "evaluation": "validation", "test": "test", "heldout": "test",
           "train": "train", "training": "train"}
_DIRECTIONS = {"forward": "forward", "forwards": "forward", "fwd": "forward", "fw": "forward",
               "backward": "backward", "backwards": "backward", "bwd": "backward", "bw": "backward",
               "reverse": "backward", "average": "average", "avg": "average", "mean": "average",
               "geometric": "average", "geo": "average", "combined": "average", "both": "average",
               "bidirectional": "average"}
PERPLEXITY_COLUMNS = ("forward", "backward", "average", "unigram")
#: Subtrees that never hold this model's own results (other models, settings, timings).
_SKIPPED_WORDS = frozenset({"untrained", "random", "config", "args", "arguments", "hyperparameters", "settings",
                            "options", "metadata", "timing", "timings", "environment", "env", "model_config"})


def _perplexity_column(words: Sequence[str]) -> str:
    """``forward``/``backward``/``average``, or ``unigram`` (the baseline's average; its directional values are
    ``unigram_forward``/``unigram_backward``, kept but not shown)."""
    direction = next((_DIRECTIONS[w] for w in words if w in _DIRECTIONS), "average")
    if "unigram" in words:
        return "unigram" if direction == "average" else f"unigram_{direction}"
    return direction


@dataclasses.dataclass
class LmEvalResults:
    """Perplexities per split: ``perplexity[split][column]`` with column in `PERPLEXITY_COLUMNS`."""

    perplexity: dict[str, dict[str, float]]
    num_tokens: dict[str, int]
    dataset: str | None = None
    source: str = ""

    def add(self, split: str, column: str, value: Any, key: str, path: Any) -> None:
        if not _is_number(value) or not math.isfinite(value) or value < 1.0:
            raise ValueError(f"{path}: perplexity {key!r} must be a finite number >= 1, got {value!r}.")
        previous = self.perplexity.get(split, {}).get(column)
        if previous is not None and not math.isclose(previous, value, rel_tol=1e-9):
            raise ValueError(f"{path}: two entries give different {column} perplexities of the {split} split "
                             f"({previous} and {value}, the latter from {key!r}).")
        self.perplexity.setdefault(split, {})[column] = float(value)


def _is_suite_payload(data: Any) -> bool:
    return isinstance(data, Mapping) and isinstance(data.get("results"), list) and "tasks" in data


def read_lm_eval_results(path: str | os.PathLike) -> LmEvalResults:
    """Read the language-model evaluation JSON written by pretraining (``eval_results.json``).

    Tolerant about layout: nested objects are flattened and each key path is split into words (separators
    ``_ - / . space`` and camelCase). A numeric value is a perplexity when its path contains ``perplexity`` or
    ``ppl``; its split is the first split word (``validation``/``valid``/``val``/``dev``/``eval`` ->
    validation, ``test``/``heldout`` -> test, ``train``), else validation; its column is ``unigram`` when the
    path contains ``unigram``, else the first direction word (``forward``/``fwd``, ``backward``/``bwd``/
    ``reverse``, ``average``/``avg``/``mean``/``geometric``), else ``average`` (a directional unigram value is
    kept as ``unigram_forward``/``unigram_backward``). A ``num_tokens``/``num_targets``(``_forward``)/``tokens``
    number is the split's count of scored targets per direction; a string under ``dataset``/``dataset_name`` names
    the data. This reads the file ``elmo pretrain`` writes: ``{"validation": {"perplexity", "perplexity_forward",
    "perplexity_backward", "unigram_perplexity", "unigram_perplexity_forward", ..., "num_targets_forward"},
    "test": {...}, "global_step": ..., "unk_handling": "..."}``.
    Subtrees about other models or settings (``untrained``, ``random``, ``config``, ``args``, ``settings``,
    ``timings``, ...) are skipped. Examples that all work: ``{"validation_perplexity_forward": 80.1}``,
    ``{"test": {"perplexity": {"fwd": 70, "bwd": 72, "avg": 71}}}``, ``{"eval_ppl": 71}``,
    ``{"unigram_perplexity_test": 900}``. An evaluation-suite file (``elmo evaluate`` output, recognised by its
    ``results`` list and ``tasks`` object) is read through `read_suite_results` instead: its perplexity rows
    form the split ``held-out``.

    Raises `ValueError` naming the file and key when a perplexity is not a finite number >= 1, when two keys
    give different values for the same split and column, or when the file holds no perplexity at all.
    """
    data = _load_json(path, "language-model evaluation")
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}.")
    result = LmEvalResults(perplexity={}, num_tokens={}, source=str(path))
    if _is_suite_payload(data):
        for row in read_suite_results(path):
            if row.metric == "perplexity":
                result.dataset = result.dataset or row.dataset
                result.add("held-out", row.detail or "average", row.value, row.detail, path)
    else:
        for key_path, value in _flatten(data):
            words = [w for part in key_path for w in _words(part)]
            key = "/".join(key_path)
            if set(words) & _SKIPPED_WORDS:
                continue
            if isinstance(value, str) and "dataset" in words and words[-1] in ("dataset", "name"):
                result.dataset = value
                continue
            split = next((_SPLITS[w] for w in words if w in _SPLITS), "validation")
            if "perplexity" in words or "ppl" in words:
                if value is not None:
                    result.add(split, _perplexity_column(words), value, key, path)
            elif _is_number(value) and {"tokens", "targets"} & set(words) and (
                    {"num", "n"} & set(words) or words[-1] in ("tokens", "targets")):
                if "backward" not in words and "bwd" not in words:  # targets per direction: the forward count
                    result.num_tokens[split] = int(value)
    if not result.perplexity:
        keys = ["/".join(k) for k, _ in _flatten(data)]
        raise ValueError(f"{path} holds no perplexity (no key containing 'perplexity' or 'ppl'); keys: {keys[:30]}.")
    return result


#: Metric words and the metric type they give (the type is what the Hub's model-index shows).
_METRIC_WORDS = {"accuracy": "accuracy", "acc": "accuracy", "f1": "f1", "precision": "precision",
                 "recall": "recall", "mcc": "matthews_correlation", "matthews": "matthews_correlation",
                 "em": "exact_match", "exact": "exact_match", "pearson": "pearsonr", "pearsonr": "pearsonr",
                 "spearman": "spearmanr", "spearmanr": "spearmanr", "perplexity": "perplexity", "ppl": "perplexity",
                 "error": "error_rate"}
#: Words that make a number a count or a time, not a score (``nn_sense_ties``, ``num_examples``, ``seconds``).
_COUNT_WORDS = frozenset({"ties", "count", "counts", "num", "n", "examples", "seconds", "time", "scored",
                          "skipped", "correct", "wrong", "tokens", "sentences", "size", "epoch", "epochs", "step",
                          "steps", "chance", "majority"})
_TASK_FIELDS = ("task", "task_name", "probe", "benchmark")
_DATASET_FIELDS = ("dataset", "dataset_name", "data", "corpus")
_SPLIT_FIELDS = ("split", "dataset_split", "eval_split")
_METRIC_FIELDS = ("metric", "metric_name", "metric_type")
_VALUE_FIELDS = ("value", "score", "metric_value", "result")
_DETAIL_FIELDS = ("layer", "representation", "setting")
_TASK_TYPES = (
    (("pos", "upos", "xpos", "tag", "tagging", "tagger", "chunk", "chunking", "ner", "wsd", "sense", "senses"),
     "token-classification"),
    (("sentiment", "sst", "sst2", "polarity", "subjectivity", "classification", "review", "reviews", "rt"),
     "text-classification"),
    (("lm", "perplexity", "language"), "text-generation"),
)


def _metric_type(name: str) -> str | None:
    """The metric type of a key such as ``nn_sense_accuracy`` (accuracy) or ``num_examples`` (None: a count)."""
    words = _words(name)
    if not words or set(words) & _COUNT_WORDS:
        return None
    return next((_METRIC_WORDS[w] for w in words if w in _METRIC_WORDS), None)


class NoResultsError(ValueError):
    """An evaluation file that holds no result at all (as opposed to a malformed one)."""


@dataclasses.dataclass(frozen=True)
class SuiteResult:
    """One number of an evaluation suite. For ``metric == "perplexity"`` the detail is the column
    (forward/backward/average/unigram)."""

    task: str
    dataset: str
    metric: str  # metric type (accuracy, f1, perplexity, ...)
    value: float
    split: str | None = None
    detail: str = ""  # the layer, the metric's own name when it differs from the type, ...

    @property
    def task_type(self) -> str:
        words = set(_words(self.task)) | set(_words(self.dataset))
        for keys, task_type in _TASK_TYPES:
            if words & set(keys):
                return task_type
        return "other"


def read_suite_results(path: str | os.PathLike) -> list[SuiteResult]:
    """Read one evaluation-suite JSON file (probe results) into `SuiteResult` rows.

    The file of ``elmo evaluate`` (``MODEL/evaluation/eval_results.json``) has a flat ``results`` list of
    ``{"task", "dataset", "metric", "value", "layer"}`` records; when the top level has such a list only it is
    read (its ``tasks`` and ``untrained`` objects repeat or compare the numbers). Other accepted layouts, nested
    to any depth:

    * records anywhere: objects with a task (``task``/``task_name``/``probe``), optional dataset (``dataset``/
      ``dataset_name``/``corpus``), split (``split``/``dataset_split``) and detail (``layer``/``representation``),
      and either ``metric`` + ``value`` (or ``score``/``metric_value``) or metric keys with numbers
      (``{"task": "pos", "accuracy": 0.95}``);
    * nested objects: ``{"pos": {"ud-ewt": {"dev": {"layer_1": {"accuracy": 0.95}}}}}``: a key that is a split
      name sets the split; otherwise the first key sets the task, the next the dataset, further ones the detail.

    A number is a result when its key (or ``metric``) contains a metric word (accuracy/acc, f1, precision, recall,
    mcc, exact match, pearson, spearman, perplexity/ppl, error) and no count word (ties, num, examples, seconds,
    correct, chance, majority, ...): ``nn_sense_accuracy`` is an accuracy with that detail, ``nn_sense_ties`` is
    skipped. For perplexities the detail is the column (forward/backward/average/unigram). Subtrees about other
    models or settings (``untrained``, ``random``, ``config``, ``settings``, ``timings``, ...) and ``null`` values
    (an undefined metric) are skipped. Raises `ValueError` naming the file when it holds no result, or a metric
    value that is not a finite number.
    """
    data = _load_json(path, "evaluation-suite")
    rows: list[SuiteResult] = []

    def field(node: Mapping, names: Sequence[str]) -> str | None:
        for name in names:
            value = node.get(name)
            if isinstance(value, str) and value:
                return value
            if _is_number(value) and name in _DETAIL_FIELDS:
                return str(value)
        return None

    def emit(context: dict, metric_key: str, value: Any, where: str) -> None:
        metric = _metric_type(metric_key)
        if metric is None or value is None:
            return
        if not _is_number(value) or not math.isfinite(value):
            raise ValueError(f"{path}: metric {where!r} must be a finite number, got {value!r}.")
        task = context.get("task")
        if task is None:
            raise ValueError(f"{path}: metric {where!r} has no task (no 'task' field and no enclosing key).")
        detail = list(context.get("detail", []))
        if metric == "perplexity":
            detail = [_perplexity_column(_words(metric_key))]
        elif "_".join(_words(metric_key)) not in (metric, *[k for k, v in _METRIC_WORDS.items() if v == metric]):
            detail.append(metric_key)
        rows.append(SuiteResult(task=task, dataset=context.get("dataset") or task, metric=metric,
                                value=float(value), split=context.get("split"), detail=", ".join(detail)))

    def walk(node: Any, context: dict, where: str) -> None:
        if isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, context, f"{where}[{index}]")
            return
        if not isinstance(node, Mapping):
            return
        context = dict(context)
        for key, names in (("task", _TASK_FIELDS), ("dataset", _DATASET_FIELDS), ("split", _SPLIT_FIELDS)):
            value = field(node, names)
            if value is not None:
                context[key] = value
        for name in _DETAIL_FIELDS:
            detail = field(node, (name,))
            if detail is not None:
                context["detail"] = list(context.get("detail", [])) + [f"{name} {detail}"]
        metric_name = field(node, _METRIC_FIELDS)
        if metric_name is not None:
            emit(context, metric_name, next((node[k] for k in _VALUE_FIELDS if k in node), None), where or "<top>")
        consumed = set(_TASK_FIELDS + _DATASET_FIELDS + _SPLIT_FIELDS + _METRIC_FIELDS + _VALUE_FIELDS
                       + _DETAIL_FIELDS)
        for key, value in node.items():
            child_where = f"{where}/{key}" if where else str(key)
            words = _words(key)
            if set(words) & _SKIPPED_WORDS or (key in consumed and not isinstance(value, (Mapping, list))):
                continue
            if not isinstance(value, (Mapping, list)):
                if metric_name is None:
                    emit(context, str(key), value, child_where)
                continue
            child = dict(context)
            if isinstance(value, list) or key == "results":
                pass
            elif "_".join(words) in _SPLITS:
                child["split"] = _SPLITS["_".join(words)]
            elif child.get("task") is None:
                child["task"] = str(key)
            elif child.get("dataset") is None:
                child["dataset"] = str(key)
            else:
                child["detail"] = list(child.get("detail", [])) + [str(key)]
            walk(value, child, child_where)

    if isinstance(data, Mapping) and isinstance(data.get("results"), list):
        walk(data["results"], {}, "results")
    else:
        walk(data, {}, "")
    if not rows:
        raise NoResultsError(f"{path} holds no evaluation result (no numeric key named like a metric, e.g. "
                             "'accuracy').")
    return rows


def read_training_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """Read a training- or conversion-metadata JSON object (any keys).

    The card shows its scalar entries (nested keys joined with ``.``) in the training section. Keys read for the
    metadata header when present: ``dataset``/``datasets``/``train_datasets`` (dataset names), ``language``,
    ``license``, ``base_model``, and for converted models ``source``/``source_url``/``options_file``/
    ``weights_file``; ``args.dataset_name`` (the ``elmo pretrain`` metadata) when no dataset is named.
    """
    data = _load_json(path, "training-metadata")
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: training metadata must be a JSON object, got {type(data).__name__}.")
    return dict(data)


# ----------------------------------------------------------------------------------------------- model card
def _slug(text: str) -> str:
    return "-".join(_words(text)) or "unknown"


def _scrub(value: Any) -> Any:
    """A value safe to print in a public card: absolute paths become their last part, tokens are masked."""
    if isinstance(value, str):
        value = _HF_TOKEN.sub("hf_***", value)
        if os.path.isabs(value) or re.match(r"^[A-Za-z]:[\\/]", value) or value.startswith("~"):
            value = Path(value).name or value
    return value


def _markdown_cell(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, (list, tuple)):
        text = ", ".join(str(_scrub(v)) for v in value)
    else:
        text = str(_scrub(value))
    return text.replace("|", "\\|").replace("\n", " ")


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(_scrub(v)) for v in value if isinstance(v, (str, int, float))]
    return []


def _metadata_value(metadata: Mapping[str, Any] | None, *names: str) -> Any:
    if not metadata:
        return None
    for name in names:
        if metadata.get(name) not in (None, "", []):
            return metadata[name]
    return None


def _split_order(split: str) -> tuple[int, str]:
    order = {"validation": 0, "test": 1, "held-out": 2, "train": 3}
    return order.get(split, 4), split


def _perplexity_groups(lm: LmEvalResults | None, suite: Sequence[SuiteResult], default_dataset: str) -> list[LmEvalResults]:
    """The pretraining perplexities and the suite's perplexity rows, one `LmEvalResults` per dataset."""
    groups = []
    if lm is not None:
        groups.append(dataclasses.replace(lm, dataset=lm.dataset or default_dataset))
    by_dataset: dict[str, LmEvalResults] = {}
    for row in suite:
        if row.metric == "perplexity":
            group = by_dataset.setdefault(row.dataset, LmEvalResults(perplexity={}, num_tokens={}, dataset=row.dataset))
            group.add(row.split or "held-out", row.detail or "average", row.value, row.task, row.dataset)
    return groups + list(by_dataset.values())


def lm_eval_results_to_hub(results: LmEvalResults) -> list:
    """`EvalResult` entries for the perplexities of ``results`` (the unigram baseline is not the model's: left out)."""
    from huggingface_hub import EvalResult

    dataset_name = results.dataset or "held-out text"
    entries = []
    for split in sorted(results.perplexity, key=_split_order):
        for column in ("forward", "backward", "average"):
            value = results.perplexity[split].get(column)
            if value is None:
                continue
            entries.append(EvalResult(
                task_type="text-generation", task_name="Bidirectional language modeling",
                dataset_type=_slug(dataset_name), dataset_name=dataset_name,
                dataset_split=None if split == "held-out" else split,
                metric_type="perplexity", metric_name=f"Perplexity ({column})", metric_value=round(value, 4),
            ))
    return entries


def suite_results_to_hub(rows: Sequence[SuiteResult]) -> list:
    """`EvalResult` entries for evaluation-suite rows other than perplexities (the metric name carries the detail,
    e.g. the layer)."""
    from huggingface_hub import EvalResult

    entries = []
    for row in rows:
        if row.metric == "perplexity":
            continue
        name = row.metric.replace("_", " ").capitalize() + (f" ({row.detail})" if row.detail else "")
        entries.append(EvalResult(
            task_type=row.task_type, task_name=row.task, dataset_type=_slug(row.dataset), dataset_name=row.dataset,
            dataset_split=row.split, metric_type=row.metric, metric_name=name, metric_value=round(row.value, 6),
        ))
    return entries


def _evaluation_section(perplexities: Sequence[LmEvalResults], suite: Sequence[SuiteResult]) -> str:
    probes = [row for row in suite if row.metric != "perplexity"]
    if not perplexities and not probes:
        return ("No evaluation results were supplied when this card was written, so it reports no numbers "
                "(and no `model-index`). Evaluate the model before relying on it.")
    parts = []
    if perplexities:
        parts.append("Language-model perplexity (exact full softmax; lower is better; the unigram baseline is the "
                     "perplexity of word frequencies alone, for scale; it is not in the `model-index`):\n")
        parts.append("| data | split | forward | backward | average | unigram baseline | targets per direction |")
        parts.append("|---|---|---|---|---|---|---|")
        for group in perplexities:
            for split in sorted(group.perplexity, key=_split_order):
                cells = [_markdown_cell(group.perplexity[split][c]) if c in group.perplexity[split] else "—"
                         for c in PERPLEXITY_COLUMNS]
                tokens = group.num_tokens.get(split)
                parts.append(f"| {_markdown_cell(group.dataset)} | {split} | " + " | ".join(cells)
                             + f" | {tokens if tokens is not None else '—'} |")
        parts.append("")
    if probes:
        parts.append("Evaluation suite (probes on the frozen representations unless the task says otherwise):\n")
        parts.append("| task | dataset | split | metric | detail | value |")
        parts.append("|---|---|---|---|---|---|")
        for row in probes:
            parts.append("| " + " | ".join(_markdown_cell(v) for v in (
                row.task, row.dataset, row.split or "—", row.metric, row.detail or "—", row.value)) + " |")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def _training_section(metadata: Mapping[str, Any] | None, kind: str) -> str:
    if not metadata:
        if kind == "converted":
            return "No conversion metadata was supplied; see the source release for its training details."
        return "No training metadata was supplied when this card was written."
    rows = []
    for key_path, value in _flatten(metadata):
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, bool)) for v in value):
            pass
        elif not isinstance(value, (str, int, float, bool)) or value is None:
            continue
        if any(_words(part) and set(_words(part)) & {"token", "secret", "password", "key"} for part in key_path):
            continue  # never print credentials, even masked
        rows.append(f"| {_markdown_cell('.'.join(key_path))} | {_markdown_cell(value)} |")
    if not rows:
        return "The training metadata holds no scalar entries."
    return "| setting | value |\n|---|---|\n" + "\n".join(rows[:80]) + "\n"


def _architecture_table(config: Any, num_parameters: int) -> str:
    filters = config.char_cnn_filters
    rows = [
        ("LSTM layers per direction (L)", config.num_hidden_layers),
        ("LSTM cell size (H)", config.cell_size),
        ("projection size (P)", config.hidden_size),
        ("output size per layer (2P)", config.output_size),
        ("representation layers (L+1)", config.num_representation_layers),
        ("character CNN filters [width, count]", json.dumps(filters)),
        ("character CNN output (F)", config.num_char_cnn_filters),
        ("highway layers", config.num_highway_layers),
        ("cell clip / projection clip", f"{config.cell_clip} / {config.proj_clip}"),
        ("skip connections", config.use_skip_connections),
        ("word vocabulary of the LM softmax", config.vocab_size),
        ("parameters", f"{num_parameters:,}"),
    ]
    return "| | |\n|---|---|\n" + "\n".join(f"| {a} | {_markdown_cell(b)} |" for a, b in rows) + "\n"


def _plots_section(plot_names: Sequence[str]) -> str:
    if not plot_names:
        return "No plots were supplied."
    return "\n".join(f"![{Path(name).stem}]({name})" for name in plot_names) + "\n"


def default_template_path(kind: str) -> Path:
    if kind not in CARD_KINDS:
        raise ValueError(f"card kind must be one of {', '.join(CARD_KINDS)}; got {kind!r}.")
    return TEMPLATE_DIR / f"{kind}.md"


def render_model_card(template: str | os.PathLike, card_data: Any, context: Mapping[str, Any]):
    """Render a Jinja template into a `huggingface_hub.ModelCard` (the same rendering as
    ``ModelCard.from_template``, but strict).

    Raises `ValueError` naming the field when the template lacks one of `REQUIRED_TEMPLATE_FIELDS` or uses a
    field that neither ``context`` nor ``card_data`` provides.
    """
    import jinja2
    from jinja2 import meta
    from huggingface_hub import ModelCard

    template_path = Path(template)
    if not template_path.is_file():
        raise ValueError(f"model-card template {str(template)!r} does not exist.")
    source = template_path.read_text(encoding="utf-8")
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    try:
        parsed = environment.parse(source)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(f"model-card template {template_path} has a syntax error on line {error.lineno}: "
                         f"{error.message}.") from None
    used = meta.find_undeclared_variables(parsed)
    missing_required = [name for name in REQUIRED_TEMPLATE_FIELDS if name not in used]
    if missing_required:
        raise ValueError(f"model-card template {template_path} is missing the field(s) "
                         f"{', '.join('{{ ' + n + ' }}' for n in missing_required)}.")
    values = dict(card_data.to_dict())
    values.update(context)
    values["card_data"] = card_data.to_yaml()
    unknown = sorted(used - set(values))
    if unknown:
        raise ValueError(f"model-card template {template_path} uses the field(s) {', '.join(unknown)}, which no "
                         f"value fills (known fields: {', '.join(sorted(values))}).")
    try:
        content = environment.from_string(source).render(**values)
    except jinja2.UndefinedError as error:
        raise ValueError(f"model-card template {template_path}: {error.message}.") from None
    if not content.lstrip().startswith("---"):
        raise ValueError(f"model-card template {template_path} must start with the YAML block "
                         "'---\\n{{ card_data }}\\n---'.")
    return ModelCard(content)


def detect_card_kind(config: Any, metadata: Mapping[str, Any] | None) -> str:
    """``classifier`` for a classification head; ``converted`` when the metadata names an original release
    (``source``/``options_file``/``weights_file``/``converted_from``) or the model is a bare ``ElmoModel`` without
    a word vocabulary (what ``elmo convert`` writes); else ``pretrained``."""
    architectures = list(getattr(config, "architectures", None) or [])
    if any(a.endswith("Classification") for a in architectures):
        return "classifier"
    if _metadata_value(metadata, "converted_from", "source", "options_file", "weights_file", "source_url"):
        return "converted"
    if architectures == ["ElmoModel"] and getattr(config, "vocab_size", None) == 4:
        return "converted"  # a bare biLM without word vocabulary: what the converter writes
    return "pretrained"


@dataclasses.dataclass
class CardInputs:
    """What a model card is built from, beyond the model itself (all optional)."""

    kind: str = "auto"
    license: str | None = None
    language: list[str] | None = None
    datasets: list[str] | None = None
    base_model: str | None = None
    lm_eval_file: str | None = None
    suite_files: list[str] = dataclasses.field(default_factory=list)
    training_metadata_file: str | None = None
    template: str | None = None
    lm_dataset_name: str | None = None


def build_model_card(config: Any, repo_id: str, inputs: CardInputs, *, num_parameters: int,
                     plot_names: Sequence[str] = ()):
    """The `ModelCard` (metadata + text) of a model with ``config`` published as ``repo_id``."""
    from huggingface_hub import ModelCardData

    metadata = read_training_metadata(inputs.training_metadata_file) if inputs.training_metadata_file else None
    kind = detect_card_kind(config, metadata) if inputs.kind == "auto" else inputs.kind
    if kind not in CARD_KINDS:
        raise ValueError(f"card kind must be 'auto' or one of {', '.join(CARD_KINDS)}; got {inputs.kind!r}.")
    lm = read_lm_eval_results(inputs.lm_eval_file) if inputs.lm_eval_file else None
    suite = [row for file in inputs.suite_files for row in read_suite_results(file)]

    args = metadata.get("args") if metadata and isinstance(metadata.get("args"), Mapping) else None
    datasets = (inputs.datasets or _as_list(_metadata_value(metadata, "datasets", "dataset", "train_datasets"))
                or _as_list(_metadata_value(args, "dataset_name")))
    lm_dataset = inputs.lm_dataset_name or (lm.dataset if lm else None) or (datasets[0] if datasets else "held-out text")
    if lm is not None:
        lm.dataset = lm_dataset
    perplexities = _perplexity_groups(lm, suite, lm_dataset)
    eval_results = [e for group in perplexities for e in lm_eval_results_to_hub(group)] + suite_results_to_hub(suite)

    architectures = list(getattr(config, "architectures", None) or [])
    token_head = any(a.endswith("TokenClassification") for a in architectures)
    pipeline_tag = ("token-classification" if token_head else "text-classification") if kind == "classifier" \
        else "feature-extraction"
    base_model = inputs.base_model or _metadata_value(metadata, "base_model", "base_model_name_or_path")
    if kind != "classifier":
        base_model = inputs.base_model  # a biLM is its own base unless the user says otherwise
    language = inputs.language or _as_list(_metadata_value(metadata, "language")) or ["en"]
    license_ = inputs.license or _metadata_value(metadata, "license") or "apache-2.0"
    tags = ["elmo", "bilm", "custom_code", "character-cnn", "lstm", "contextual-embeddings"]
    tags.append({"pretrained": "language-model", "converted": "converted", "classifier": pipeline_tag}[kind])
    model_name = repo_id.split("/")[-1]
    card_data = ModelCardData(
        language=language, license=str(license_), library_name="transformers", tags=tags,
        datasets=datasets or None, pipeline_tag=pipeline_tag, base_model=base_model or None,
        metrics=sorted({e.metric_type for e in eval_results}) or None,
        model_name=model_name if eval_results else None, eval_results=eval_results or None,
    )
    id2label = getattr(config, "id2label", None) or {}
    labels = ", ".join(f"{k}: {v}" for k, v in sorted(id2label.items(), key=lambda kv: int(kv[0])))
    source = _metadata_value(metadata, "converted_from", "source", "source_url", "weights_file", "options_file")
    context = {
        "model_id": repo_id,
        "model_name": model_name,
        "kind": kind,
        "architecture_table": _architecture_table(config, num_parameters),
        "num_parameters": f"{num_parameters:,}",
        "output_size": config.output_size,
        "num_layers": config.num_representation_layers,
        "evaluation_section": _evaluation_section(perplexities, suite),
        "training_section": _training_section(metadata, kind),
        "training_data": ", ".join(datasets) if datasets else "not recorded",
        "plots_section": _plots_section(plot_names),
        "base_model_text": base_model or "not recorded",
        "labels": labels or "not recorded",
        "num_labels": len(id2label),
        "head_class": next((a for a in architectures if a.endswith("Classification")),
                           "ElmoForSequenceClassification"),
        "source": _markdown_cell(source) if source else "the original AllenNLP/bilm-tf release",
        "citation": PAPER_CITATION,
    }
    template = inputs.template or default_template_path(kind)
    return render_model_card(template, card_data, context), kind


# ----------------------------------------------------------------------------------------------- folder assembly
def is_allowed_file(relative_path: str) -> bool:
    """Whether ``relative_path`` (POSIX, relative to the repository root) is on the upload allow-list."""
    return relative_path in ALLOWED_FILES or bool(_SHARD.fullmatch(relative_path) or _PLOT.fullmatch(relative_path))


def list_folder(folder: str | os.PathLike) -> list[str]:
    """Every file under ``folder`` as sorted POSIX paths relative to it."""
    folder = Path(folder)
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def scan_for_secrets(folder: str | os.PathLike, files: Iterable[str]) -> None:
    """Raise `ValueError` naming the file if a text file of ``files`` contains a Hugging Face token."""
    for name in files:
        if name.endswith((".json", ".md", ".py", ".txt")):
            text = (Path(folder) / name).read_text(encoding="utf-8", errors="replace")
            if _HF_TOKEN.search(text):
                raise ValueError(f"{name} contains what looks like a Hugging Face access token (hf_...); "
                                 "refusing to publish it.")


def plan_upload(folder: str | os.PathLike) -> list[str]:
    """The exact list of files to upload from an assembled ``folder``.

    Raises `ValueError` if the folder holds a file outside the allow-list, pickled weights, a token, or a plot
    over `MAX_PLOT_BYTES`, or lacks one of the files every published model needs.
    """
    folder = Path(folder)
    refuse_pickled_weights(folder)
    files = list_folder(folder)
    stray = [name for name in files if not is_allowed_file(name)]
    if stray:
        raise ValueError(f"{folder} holds files outside the upload allow-list: {stray}.")
    needed = ["README.md", "config.json", "tokenizer_config.json", *SHIPPED_CODE_FILES]
    missing = [name for name in needed if name not in files]
    if not any(name == "model.safetensors" or _SHARD.fullmatch(name) for name in files):
        missing.append("model.safetensors")
    if missing:
        raise ValueError(f"{folder} lacks {missing}, which every published model needs.")
    for name in files:
        if name.startswith("plots/") and (folder / name).stat().st_size > MAX_PLOT_BYTES:
            raise ValueError(f"plot {name} is larger than {MAX_PLOT_BYTES // 2**20} MiB.")
    scan_for_secrets(folder, files)
    return files


def _plot_name(path: Path) -> str:
    """The name of a plot inside ``plots/``: only letters, digits and ``._-``, starting with a letter or digit."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem).lstrip("._-") or "plot"
    return f"plots/{stem}{path.suffix.lower()}"


def _find_plots(model_dir: Path, extra: Sequence[str]) -> list[Path]:
    plots = [Path(p) for p in extra]
    for path in plots:
        if not path.is_file() or path.suffix.lower() not in PLOT_SUFFIXES:
            raise ValueError(f"plot {str(path)!r} is not an existing {'/'.join(PLOT_SUFFIXES)} file.")
    for folder in (model_dir, model_dir / "plots", model_dir / "evaluation"):
        if folder.is_dir():
            plots += sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in PLOT_SUFFIXES)
    unique, names = [], set()
    for path in plots:
        name = _plot_name(path)
        if name not in names:
            names.add(name)
            unique.append(path)
    return unique


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _load_model_and_tokenizer(model_dir: Path):
    from . import modeling_elmo
    from .configuration_elmo import ElmoConfig
    from .tokenization_elmo import ElmoTokenizer

    config = ElmoConfig.from_pretrained(model_dir)
    architectures = list(config.architectures or ["ElmoModel"])
    if architectures[0] not in MODEL_ARCHITECTURES:
        raise ValueError(f"{model_dir}/config.json names the architecture {architectures[0]!r}; expected one of "
                         f"{', '.join(MODEL_ARCHITECTURES)}.")
    model_class = getattr(modeling_elmo, architectures[0])
    model, info = model_class.from_pretrained(model_dir, use_safetensors=True, output_loading_info=True)
    problems = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if problems:
        raise ValueError(f"the weights in {model_dir} do not match {architectures[0]}: {problems}.")
    try:
        tokenizer = ElmoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as error:
        raise ValueError(f"the tokenizer in {model_dir} cannot be loaded: {error}") from None
    if tokenizer.vocab_size != config.vocab_size and config.vocab_size != 4:
        logger.warning("the tokenizer has %d words but config.vocab_size is %d", tokenizer.vocab_size,
                       config.vocab_size)
    return model.eval(), tokenizer


def save_for_hub(model: Any, tokenizer: Any, folder: str | os.PathLike) -> None:
    """Save ``model`` and ``tokenizer`` into ``folder`` as a self-contained remote-code repository.

    The package's `save_model_folder` writes the weights (safetensors), the code files and ``config.json`` with the
    full ``auto_map`` (`modeling_elmo.AUTO_MAP`); this also makes sure that ``tokenizer_config.json`` carries
    ``modeling_elmo.TOKENIZER_AUTO_MAP`` and that all three `SHIPPED_CODE_FILES` come from this package.
    """
    from . import TOKENIZER_AUTO_MAP, save_model_folder

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    previous = getattr(model.config, "auto_map", None)
    try:
        save_model_folder(model, tokenizer, folder)
    finally:
        model.config.auto_map = previous
    tokenizer_config = folder / "tokenizer_config.json"
    data = json.loads(tokenizer_config.read_text(encoding="utf-8"))
    if data.get("auto_map") != TOKENIZER_AUTO_MAP:
        data["auto_map"] = TOKENIZER_AUTO_MAP
        _write_json_atomic(tokenizer_config, data)
    for name in SHIPPED_CODE_FILES:
        shutil.copyfile(PACKAGE_DIR / name, folder / name)


def check_auto_map(folder: str | os.PathLike) -> None:
    """Raise `ValueError` unless ``config.json``'s ``auto_map`` names every auto class of `modeling_elmo.AUTO_MAP`
    and each entry (and the tokenizer's) points to a class defined in a code file of the folder."""
    from . import AUTO_MAP

    folder = Path(folder)
    auto_map = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("auto_map") or {}
    missing = sorted(set(AUTO_MAP) - set(auto_map))
    if missing:
        raise ValueError(f"{folder}/config.json auto_map lacks {missing}.")
    tokenizer_map = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("auto_map") or {}
    references = list(auto_map.values()) + [tokenizer_map.get("AutoTokenizer", [None])[0]]
    for reference in references:
        if not isinstance(reference, str) or "." not in reference:
            raise ValueError(f"{folder}: invalid auto_map entry {reference!r}.")
        module, class_name = reference.split(".", 1)
        code = folder / f"{module}.py"
        if not code.is_file():
            raise ValueError(f"{folder}: auto_map entry {reference!r} needs {code.name}, which is missing.")
        defined = {n.name for n in ast.parse(code.read_text(encoding="utf-8")).body if isinstance(n, ast.ClassDef)}
        if class_name not in defined:
            raise ValueError(f"{folder}: auto_map entry {reference!r}: {code.name} defines no class {class_name}.")


def _prepare_output_dir(output_dir: Path, model_dir: Path) -> None:
    if _is_within(output_dir, model_dir) or _is_within(model_dir, output_dir):
        raise ValueError(f"the output folder {output_dir} must lie outside the model folder {model_dir} (and not "
                         "contain it).")
    if output_dir.exists():
        if not output_dir.is_dir():
            raise ValueError(f"output folder {output_dir} exists and is not a folder.")
        foreign = [name for name in list_folder(output_dir) if not is_allowed_file(name)]
        if foreign:
            raise ValueError(f"output folder {output_dir} already holds files that this tool did not write "
                             f"({foreign[:5]}); choose another --output-dir.")


def assemble_repo_folder(model_dir: str | os.PathLike, output_dir: str | os.PathLike, repo_id: str,
                         card: CardInputs | None = None, plots: Sequence[str] = ()) -> list[str]:
    """Write the repository folder of ``model_dir`` to ``output_dir`` and return the upload plan (file list).

    The model and tokenizer are loaded with this package's classes (safetensors only) and saved with
    `save_for_hub`; the card is rendered by `build_model_card`; plots go to ``plots/``. Evaluation and metadata
    files default to ``MODEL_DIR/eval_results.json``, the suite files matching `DEFAULT_SUITE_GLOBS` and the
    first of `DEFAULT_TRAINING_METADATA_FILES` present. The folder is built under a temporary name next to
    ``output_dir`` and moved into place when complete; an existing ``output_dir`` is replaced only if it holds
    nothing but allow-listed files (a previous run's output).
    """
    validate_repo_id(repo_id)
    model_dir = check_model_folder(model_dir)
    output_dir = Path(output_dir)
    _prepare_output_dir(output_dir, model_dir)
    card = dataclasses.replace(card) if card is not None else CardInputs()
    if card.lm_eval_file is None and (model_dir / DEFAULT_LM_EVAL_FILE).is_file():
        card.lm_eval_file = str(model_dir / DEFAULT_LM_EVAL_FILE)
    if not card.suite_files:  # found, not named: a JSON file without results (e.g. predictions) is passed over
        card.suite_files = []
        for path in sorted({str(p) for pattern in DEFAULT_SUITE_GLOBS for p in model_dir.glob(pattern)}):
            try:
                read_suite_results(path)
            except NoResultsError:
                logger.warning("%s holds no evaluation result; not used for the model card", path)
                continue
            card.suite_files.append(path)
    if card.training_metadata_file is None:
        card.training_metadata_file = next(
            (str(model_dir / n) for n in DEFAULT_TRAINING_METADATA_FILES if (model_dir / n).is_file()), None)
    plot_paths = _find_plots(model_dir, plots)

    model, tokenizer = _load_model_and_tokenizer(model_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    os.chmod(staging, 0o755)  # mkdtemp makes it private; the published folder is meant to be read
    try:
        with tempfile.TemporaryDirectory(dir=output_dir.parent, prefix=".save.") as saved:
            save_for_hub(model, tokenizer, saved)
            for name in list_folder(saved):
                if is_allowed_file(name):
                    shutil.copyfile(Path(saved) / name, staging / name)
                else:
                    logger.info("not published (not on the allow-list): %s", name)
        plot_names = []
        if plot_paths:
            (staging / "plots").mkdir()
            for path in plot_paths:
                name = _plot_name(path)
                shutil.copyfile(path, staging / name)
                plot_names.append(name)
        model_card, _ = build_model_card(model.config, repo_id, card, num_parameters=model.num_parameters(),
                                         plot_names=plot_names)
        model_card.save(staging / "README.md")
        check_auto_map(staging)
        problems = audit_shipped_code(staging / name for name in SHIPPED_CODE_FILES)
        if problems:
            raise ValueError("the custom code to publish fails the audit:\n  " + "\n  ".join(problems))
        files = plan_upload(staging)
        if output_dir.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.old.", dir=output_dir.parent))
            os.replace(output_dir, trash / "old")
            os.replace(staging, output_dir)
            shutil.rmtree(trash)
        else:
            os.replace(staging, output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return files


# ----------------------------------------------------------------------------------------------- upload
def upload_repo_folder(folder: str | os.PathLike, repo_id: str, *, token: str, files: Sequence[str],
                       private: bool = False, revision: str | None = None,
                       commit_message: str | None = None) -> str:
    """Create ``repo_id`` if needed and upload exactly ``files`` of ``folder`` in one commit; return its URL.

    Uses ``HfApi.create_repo(exist_ok=True)`` (``private`` applies to a new repository), ``create_branch`` for a
    ``revision`` other than ``main``, then ``upload_folder`` with ``allow_patterns`` set to the file list.
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    if revision and revision != "main":
        api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
    commit = api.upload_folder(
        repo_id=repo_id, folder_path=str(folder), repo_type="model", revision=revision,
        commit_message=commit_message or "Upload ELMo model", allow_patterns=list(files),
    )
    return str(getattr(commit, "commit_url", commit))


# ----------------------------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="push_to_hub",
        description="Assemble the Hub repository folder of an ELMo model (weights, custom code, tokenizer, model "
                    "card, plots) and upload it. With --dry-run only the folder is written and the upload plan "
                    "printed; nothing touches the network.",
    )
    parser.add_argument("model_dir", help="folder written by save_pretrained (config.json, model.safetensors, "
                                          "tokenizer files)")
    parser.add_argument("--repo-id", required=True, help="Hub repository, 'name' or 'namespace/name'")
    parser.add_argument("--output-dir", help="where to write the repository folder (default: MODEL_DIR-hub next "
                                             "to the model folder with --dry-run, a temporary folder otherwise)")
    parser.add_argument("--dry-run", action="store_true", help="write the folder and list the files; no upload")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", help="branch to commit to (created if missing; default main)")
    parser.add_argument("--commit-message", help="commit message (default 'Upload ELMo model')")
    parser.add_argument("--card-kind", default="auto", choices=("auto",) + CARD_KINDS,
                        help="model-card template (default: classifier for a classification head, converted when "
                             "the metadata names an original release, else pretrained)")
    parser.add_argument("--template", help="a Jinja model-card template instead of model_cards/<kind>.md")
    parser.add_argument("--license", help="license id for the card (default: from the metadata, else apache-2.0)")
    parser.add_argument("--language", action="append", help="language code (repeatable; default en)")
    parser.add_argument("--dataset", action="append", dest="datasets", help="training dataset (repeatable)")
    parser.add_argument("--base-model", help="Hub id of the biLM a classifier was trained from")
    parser.add_argument("--eval-results", help=f"language-model evaluation JSON (default MODEL_DIR/"
                                               f"{DEFAULT_LM_EVAL_FILE} when present)")
    parser.add_argument("--eval-suite", action="append", default=[], help="evaluation-suite JSON (repeatable; "
                        f"default: files matching {', '.join(DEFAULT_SUITE_GLOBS)} in MODEL_DIR)")
    parser.add_argument("--eval-dataset-name", help="name of the data the perplexity was measured on")
    parser.add_argument("--training-metadata", help="training/conversion metadata JSON (default: "
                                                    f"{' or '.join(DEFAULT_TRAINING_METADATA_FILES)} in MODEL_DIR)")
    parser.add_argument("--plot", action="append", default=[], help="image to publish under plots/ (repeatable; "
                                                                    "*.png/*.svg in MODEL_DIR and MODEL_DIR/plots are "
                                                                    "added)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        validate_repo_id(args.repo_id)
        model_dir = check_model_folder(args.model_dir)
        token = None
        if args.output_dir:
            output_dir = Path(args.output_dir)
        elif args.dry_run:
            output_dir = model_dir.resolve().parent / f"{model_dir.resolve().name}-hub"
        else:
            output_dir = None
        if not args.dry_run:
            forbidden = [model_dir] + ([output_dir] if output_dir else [])
            token = resolve_token(forbidden)
        card = CardInputs(kind=args.card_kind, license=args.license, language=args.language,
                          datasets=args.datasets, base_model=args.base_model, lm_eval_file=args.eval_results,
                          suite_files=list(args.eval_suite), training_metadata_file=args.training_metadata,
                          template=args.template, lm_dataset_name=args.eval_dataset_name)
        with contextlib.ExitStack() as stack:
            if output_dir is None:
                output_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="elmo-hub-"))) / "repo"
            files = assemble_repo_folder(model_dir, output_dir, args.repo_id, card, plots=args.plot)
            total = sum((output_dir / name).stat().st_size for name in files)
            print(f"Repository folder: {output_dir}")
            for name in files:
                print(f"  {name}  ({(output_dir / name).stat().st_size:,} bytes)")
            print(f"{len(files)} files, {total:,} bytes")
            if args.dry_run:
                print(f"Dry run: would create {args.repo_id} (private={args.private}) and upload these files to "
                      f"revision {args.revision or 'main'}; nothing was sent.")
                return 0
            url = upload_repo_folder(output_dir, args.repo_id, token=token, files=files, private=args.private,
                                     revision=args.revision, commit_message=args.commit_message)
            print(f"Uploaded to {url}")
    except ValueError as error:
        raise SystemExit(f"push_to_hub: error: {error}") from None
    return 0


__all__ = [
    "ALLOWED_FILES", "CARD_KINDS", "SHIPPED_CODE_FILES", "CardInputs", "LmEvalResults",
    "NoResultsError", "SuiteResult", "assemble_repo_folder", "audit_shipped_code", "build_model_card", "check_auto_map",
    "check_model_folder", "is_allowed_file", "main", "plan_upload", "read_lm_eval_results", "read_suite_results",
    "read_training_metadata", "refuse_pickled_weights", "render_model_card", "resolve_token", "save_for_hub",
    "upload_repo_folder", "validate_repo_id",
]
