"""The model card of a model folder: a Jinja template from ``model_cards/`` filled with the model's numbers.

The one writer of every card: `build_model_card` renders one of three templates (`CARD_KINDS`; a conversion of an
ELMoForManyLangs model has its own ``converted`` template) and the YAML metadata (``ModelCardData`` with an
``EvalResult`` per number in the ``model-index``). ``elmo push`` renders the card of the Hub repository with it;
``elmo convert`` writes the card of the folder it converts into with `write_model_card`, from the conversion
metadata it writes beside it, so that ``elmo push`` renders the same card again from the same source. It reads:

* the results files of the model folder, read strictly (`modeling_elmo.utils.results`, docs/results.md): perplexity
  records and probe scores;
* the training metadata of a run or the conversion metadata of a converted release (`modeling_elmo.folders.run_folder`).
  The card lists only the settings of `CARD_SETTINGS` (an allow-list: any other key, a credential above all, is
  left out), and reads these keys: ``datasets`` (or the run's ``args.dataset_name``, else its ``args.train_file``),
  ``data_licenses`` (or the run's ``args.data_license``), ``base_model``, ``license`` and ``language``; for a
  conversion, ``converted_from``, ``options_file``, ``weights_file``, ``language_name``, ``nlpl_repository_id``
  and the ``name``, ``origin``, ``bytes`` and ``sha256`` of each entry of ``files`` (the source files
  table; an earlier conversion's ``sha256`` mapping where it has no ``files``);
* the Python files shipped with the model, read from the folder being published: the card names each of them and
  the modules outside the standard library they import.

The ``model-index`` holds only numbers decided on at least `MIN_INDEXED_EXAMPLES` examples; the card's tables show
every number with its count. A model published under a permissive licence whose training data has an unknown or a
research-only licence gets a warning line in the card (and in the log).

Every string that comes from the user (metadata, results files, labels, command-line values) is escaped for
Markdown and HTML before it goes into the text (`escape_markdown`); the YAML metadata holds only dataset and model
ids that are valid Hub ids, language codes and license ids of the Hub's form, and names without markup.

A model without results gets a card that says so and no ``model-index``.
"""

from __future__ import annotations

import ast
import dataclasses
import html
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..utils.package_data import data_folder
from ..utils.results import EvaluationResults, PerplexityResult, ScoreResult, data_file_label
from . import card_sandbox
from .safety import HF_TOKEN_PATTERN

__all__ = [
    "CARD_KINDS",
    "CARD_SETTINGS",
    "MIN_INDEXED_EXAMPLES",
    "REQUIRED_TEMPLATE_FIELDS",
    "TEMPLATE_DIR",
    "CardInputs",
    "build_model_card",
    "data_license_warning",
    "default_template_path",
    "detect_card_kind",
    "escape_markdown",
    "eval_results_for_hub",
    "render_model_card",
    "write_model_card",
]

logger = logging.getLogger(__name__)

#: Model-card templates: ``model_cards/<kind>.md``, installed as ``modeling_elmo/model_cards/`` or in a checkout's
#: top level (`utils.package_data.data_folder`).
TEMPLATE_DIR = data_folder("model_cards")
CARD_KINDS = ("pretrained", "converted", "classifier")
#: Placeholders every template must use (a card without them would lose its metadata or its numbers).
REQUIRED_TEMPLATE_FIELDS = ("card_data", "model_id", "evaluation_section", "training_section")
#: The Hub task type of each evaluation task (the ``model-index`` groups results by it).
TASK_TYPES = {
    "probe-sentiment": "text-classification",
    "probe-pos": "token-classification",
    "wsd-probe": "token-classification",
}
TASK_NAMES = {
    "probe-sentiment": "Sentiment probe (frozen features)",
    "probe-pos": "Part-of-speech probe (frozen features)",
    "wsd-probe": "Word-sense nearest-neighbour probe",
}
METRIC_NAMES = {"accuracy": "Accuracy", "accuracy_ties_half": "Accuracy, ties as half"}
#: A score decided on fewer examples (WSD occurrences that are not ties, dev sentences, tokens) stays out of the
#: ``model-index``: at 3 examples an accuracy of 0.0 or 1.0 says nothing about the model.
MIN_INDEXED_EXAMPLES = 50
#: The most rows each results table of the card shows, and the most entries of its ``model-index``: the rest are
#: counted in the card ("N more in eval_results.json"), so that a results file of any length gives a card of bounded
#: size (an evaluation writes tens of records).
MAX_CARD_ROWS = 100
MAX_INDEXED_RESULTS = 100
#: Model licences that let anyone use the model for anything (the data-licence warning applies to them).
PERMISSIVE_LICENSES = frozenset({"apache-2.0", "mit", "bsd-2-clause", "bsd-3-clause", "cc-by-4.0", "cc0-1.0"})
#: Data licences that do not allow every use, and words that say the licence is not known.
_RESTRICTED_DATA_LICENSE = re.compile(
    r"research[- _]only|research purposes only|only for research|non-?commercial|"
    r"(^|[^a-z])nc([^a-z]|$)|proprietary|all rights reserved|unknown|not recorded",
    re.IGNORECASE,
)

#: The settings a card lists (dotted key paths of the training or conversion metadata): an allow-list, so that a
#: key this package does not write (``apikey``, ``credentials``, ``db_url``, ...) never reaches a public card.
#: ``published.<figure>`` of a conversion is listed too (`_is_card_setting`); its checksums are in the source files
#: table.
_RUN_ARGUMENTS = (
    "train_file",
    "validation_file",
    "test_file",
    "dataset_name",
    "dataset_config_name",
    "validation_split_percentage",
    "max_train_examples",
    "max_eval_examples",
    "vocab_file",
    "vocab_size",
    "min_count",
    "batching",
    "window_size",
    "max_sentence_length",
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "max_tokens_per_batch",
    "bucket_size",
    "model_config",
    "init_from_model",
    "lm_softmax",
    "num_negative_samples",
    "dropout",
    "seed",
    "optimizer",
    "learning_rate",
    "adagrad_initial_accumulator",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "lr_scheduler_type",
    "warmup_steps",
    "num_train_epochs",
    "max_steps",
    "gradient_accumulation_steps",
    "max_grad_norm",
    "loss_multiplier",
    "mixed_precision",
    "checkpointing_steps",
    "max_train_minutes",
    "eval_steps",
    "early_stopping_patience",
    "load_best_model_at_end",
    "data_license",
)
CARD_SETTINGS = frozenset(
    {
        # elmo pretrain (training_metadata.json)
        "global_step",
        "model_step",
        "tokens_seen",
        "skipped_updates",
        "train_seconds",
        "wall_seconds",
        "num_processes",
        "mixed_precision",
        "vocab_size",
        "vocab_fingerprint",
        "data_fingerprint",
        "parameters",
        "stopped_early",
        "best_validation_perplexity",
        "best_step",
        "versions.torch",
        "versions.transformers",
        "versions.datasets",
        *(f"args.{name}" for name in _RUN_ARGUMENTS),
        # a classifier's training metadata (written by the user's own training script)
        "datasets",
        "data_licenses",
        "base_model",
        "epochs",
        "num_train_epochs",
        "learning_rate",
        "batch_size",
        "per_device_train_batch_size",
        "seed",
        "weight_decay",
        "warmup_steps",
        "max_steps",
        "optimizer",
        "lr_scheduler_type",
        "freeze_elmo",
        # elmo convert (conversion_metadata.json)
        "converted_from",
        "options_file",
        "weights_file",
        "validation_max_abs_difference",
        "validation_max_abs_difference_per_layer",
        "validation_atol",
        "num_parameters",
        "release",
        # elmo convert --efml / --release efml-LANG
        "language_name",
        "nlpl_repository_id",
        "architecture",
    }
)
#: ``conversion_metadata.json``'s ``source_format`` of an ELMoForManyLangs conversion: its card has its own template.
EFML_SOURCE_FORMAT = "elmoformanylangs"
#: The figures a release's authors published (`modeling_elmo.conversion.releases.Release.published_figures`).
_PUBLISHED_FIGURES = (
    "parameters",
    "parameters_in_weight_file",
    "srl_f1",
    "constituency_parsing_f1",
    "lm_perplexity",
    "lm_perplexity_note",
    "training_data",
)
#: What the YAML metadata accepts: Hub ids (``name`` or ``owner/name``), language codes, license ids.
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
_LANGUAGE = re.compile(r"[a-zA-Z]{2,3}([-_][A-Za-z0-9]{2,8})*")
_LICENSE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")

PAPER_CITATION = """@inproceedings{peters-etal-2018-deep,
    title = "Deep Contextualized Word Representations",
    author = "Peters, Matthew E.  and
      Neumann, Mark  and
      Iyyer, Mohit  and
      Gardner, Matt  and
      Clark, Christopher  and
      Lee, Kenton  and
      Zettlemoyer, Luke",
    booktitle = "Proceedings of the 2018 Conference of the North {A}merican Chapter of the Association for
                 Computational Linguistics: Human Language Technologies, Volume 1 (Long Papers)",
    month = jun,
    year = "2018",
    address = "New Orleans, Louisiana",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/N18-1202",
    doi = "10.18653/v1/N18-1202",
    pages = "2227--2237",
}"""


@dataclasses.dataclass
class CardInputs:
    """What a model card is built from, beyond the model itself (all optional)."""

    kind: str = "auto"
    license: str | None = None
    language: list[str] | None = None
    datasets: list[str] | None = None
    data_licenses: list[str] | None = None  # "LICENSE" (all the training data) or "DATA=LICENSE", one per entry
    base_model: str | None = None
    results: list[EvaluationResults] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] | None = None  # training or conversion metadata
    converted: bool = False  # the metadata is a conversion's
    template: str | None = None


# ----------------------------------------------------------------------------------------------- small helpers
def _words(key: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key)).lower()) if w]


#: The most characters of one value (a dataset's name, a setting) that the card shows: a value of megabytes in a
#: results file is cut, never published whole (in the text or the metadata).
MAX_SHOWN_CHARACTERS = 200


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN_CHARACTERS else f"{text[:MAX_SHOWN_CHARACTERS]}…"


def _slug(text: str) -> str:
    return "-".join(_words(str(text)[: 2 * MAX_SHOWN_CHARACTERS]))[:MAX_SHOWN_CHARACTERS].strip("-") or "unknown"


def _scrub(value: Any) -> Any:
    """A value safe to print in a public card: absolute paths become their last part (with its folder for a glob,
    `data_file_label`), tokens and the user and password of a URL are masked."""
    if isinstance(value, str):
        value = HF_TOKEN_PATTERN.sub("hf_***", value)
        value = re.sub(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@", r"\1***@", value)
        if os.path.isabs(value) or re.match(r"^[A-Za-z]:[\\/]", value) or value.startswith("~"):
            value = data_file_label(value) or value
    return value


#: Markdown punctuation that could start markup mid-line; ``_`` only where it could open or close emphasis (not
#: between two letters or digits, as in ``tiny_corpus``).
_MARKDOWN_SPECIAL = re.compile(r"([\\`*{}\[\]()!|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def escape_markdown(text: Any) -> str:
    """``text`` as literal characters in Markdown and HTML: no tag, link, image, emphasis, code span or table
    cell boundary can come out of it (Markdown punctuation is backslash-escaped, ``& < >`` become entities, line
    breaks become spaces; quotes stay, as no tag can be opened to put them in)."""
    text = " ".join(str(text).split())
    return html.escape(_MARKDOWN_SPECIAL.sub(r"\\\1", text), quote=False)


def _plain(text: Any) -> str:
    """A name for the YAML metadata: one line, no markup characters."""
    return " ".join(re.sub(r"[<>&\"'`\\{}\[\]]", "", str(_scrub(str(text)[: 2 * MAX_SHOWN_CHARACTERS]))).split())[
        :MAX_SHOWN_CHARACTERS
    ]


def _valid(values: Sequence[str], pattern: re.Pattern, what: str) -> list[str]:
    """The values that match ``pattern``; the others are left out of the YAML metadata (with a warning)."""
    kept = [v for v in values if isinstance(v, str) and pattern.fullmatch(v)]
    for value in values:
        if value not in kept:
            logger.warning("not a valid %s, left out of the card's metadata: %r", what, value)
    return kept


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, (list, tuple)):
        text = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(_scrub(v)) for v in value)
    else:
        text = str(_scrub(value))
    return escape_markdown(_cut(text))


def _flatten(obj: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(obj, Mapping):
        return [item for key, value in obj.items() for item in _flatten(value, prefix + (str(key),))]
    return [(prefix, obj)]


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(_scrub(v)) for v in value if isinstance(v, (str, int, float))]
    return []


def _split_for_hub(split: str) -> str | None:
    """The model-index split: None for text that is not a named split of a dataset."""
    return None if split in ("held-out", "all") else split


# ----------------------------------------------------------------------------------------------- sections
def eval_results_for_hub(results: Sequence[EvaluationResults], limit: int = MAX_INDEXED_RESULTS) -> list:
    """`huggingface_hub.EvalResult` entries of the model's own numbers, the first ``limit`` of them: the LM's
    perplexities (not the unigram baseline's, not the untrained model's) and the probe scores that are defined and
    decided on at least `MIN_INDEXED_EXAMPLES` examples (`_indexed_count` counts them all)."""
    from huggingface_hub import EvalResult

    entries: list = []
    for result in results:
        for p in result.perplexity:
            for column in ("forward", "backward", "average"):
                entries.append(
                    EvalResult(
                        task_type="text-generation",
                        task_name="Bidirectional language modeling",
                        dataset_type=_slug(p.dataset),
                        dataset_name=_plain(p.dataset),
                        dataset_split=_split_for_hub(_plain(p.split)),
                        metric_type="perplexity",
                        metric_name=f"Perplexity ({column})",
                        metric_value=round(getattr(p, column), 4),
                    )
                )
                if len(entries) >= limit:
                    return entries
        for s in filter(_indexed, result.scores):
            entries.append(
                EvalResult(
                    task_type=TASK_TYPES.get(s.task, "other"),
                    task_name=TASK_NAMES.get(s.task, _plain(s.task)),
                    dataset_type=_slug(s.dataset),
                    dataset_name=_plain(s.dataset),
                    dataset_split=_split_for_hub(_plain(s.split)),
                    metric_type="accuracy" if s.metric.startswith("accuracy") else _slug(s.metric),
                    metric_name=f"{METRIC_NAMES.get(s.metric, _plain(s.metric))} ({_plain(s.representation)})",
                    metric_value=round(s.value, 6),
                )
            )
            if len(entries) >= limit:
                return entries
    return entries


def _indexed(score: ScoreResult) -> bool:
    return score.value is not None and score.examples >= MIN_INDEXED_EXAMPLES


def _indexed_count(results: Sequence[EvaluationResults]) -> int:
    """How many entries `eval_results_for_hub` would give without a limit."""
    return sum(3 * len(r.perplexity) + sum(map(_indexed, r.scores)) for r in results)


def _more_rows(total: int) -> list[str]:
    """The line under a table cut at `MAX_CARD_ROWS` rows."""
    if total <= MAX_CARD_ROWS:
        return []
    return ["", f"Not shown here: {total - MAX_CARD_ROWS:,} more of these rows, in eval_results.json."]


def _perplexity_rows(records: Sequence[PerplexityResult]) -> list[str]:
    rows = [
        "| data | split | forward | backward | average | unigram baseline | untrained model | targets per "
        "direction | `<UNK>` targets |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in records:
        unigram = f"{_cell(p.unigram.average)} (fitted on {_cell(p.unigram.fitted_on)})" if p.unigram else "—"
        rows.append(
            "| "
            + " | ".join(
                [
                    _cell(p.dataset),
                    _cell(p.split),
                    _cell(p.forward),
                    _cell(p.backward),
                    _cell(p.average),
                    unigram,
                    _cell(p.untrained_average),
                    str(p.targets_per_direction),
                    f"{100 * p.unk_rate:.1f}%",
                ]
            )
            + " |"
        )
    return rows


def _score_rows(records: Sequence[ScoreResult]) -> list[str]:
    rows = [
        "| task | dataset | split | representation | metric | value | examples | simple baseline | untrained "
        "model | McNemar p |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in records:
        u = s.untrained
        examples = str(s.examples) if s.examples >= MIN_INDEXED_EXAMPLES else f"{s.examples} (too few: not indexed)"
        baseline = f"{_cell(s.baseline)} ({escape_markdown(s.baseline_name)})" if s.baseline_name else _cell(s.baseline)
        rows.append(
            "| "
            + " | ".join(
                [
                    _cell(s.task),
                    _cell(s.dataset),
                    _cell(s.split),
                    _cell(s.representation),
                    _cell(s.metric),
                    _cell(s.value) if s.value is not None else "undefined (all tied)",
                    examples,
                    baseline,
                    _cell(u.value) if u else "—",
                    f"{u.mcnemar_p_value:.2g}" if u and u.mcnemar_p_value is not None else "—",
                ]
            )
            + " |"
        )
    return rows


def _evaluation_section(results: Sequence[EvaluationResults]) -> str:
    perplexity = [p for r in results for p in r.perplexity]
    scores = [s for r in results for s in r.scores]
    if not perplexity and not scores:
        return (
            "No evaluation results were supplied when this card was written, so it reports no numbers "
            "(and no `model-index`). Evaluate the model before relying on it."
        )
    parts = []
    if perplexity:
        parts += [
            "Language-model perplexity (exact full softmax; lower is better). Each direction's perplexity is "
            "exp of its mean negative log-likelihood per target (`</S>`, `<S>` and `<UNK>` included); the average "
            "is their geometric mean. The unigram baseline is the perplexity of word frequencies alone, for "
            "scale; it is not in the `model-index`.",
            "",
            *_perplexity_rows(perplexity[:MAX_CARD_ROWS]),
            *_more_rows(len(perplexity)),
            "",
        ]
    if scores:
        parts += [
            "Probes of the frozen representations. The simple baselines need no model: the most frequent tag of "
            "each word (part of speech), the majority class (sentiment), a random neighbour (sense probe); "
            "features that do not beat them carry no useful information for the task. McNemar's exact test "
            "compares the trained and an untrained model of the same shape on the same examples. A score "
            f"decided on fewer than {MIN_INDEXED_EXAMPLES} examples is shown here but left out of the "
            "`model-index`.",
            "",
            *_score_rows(scores[:MAX_CARD_ROWS]),
            *_more_rows(len(scores)),
            "",
        ]
    indexed = _indexed_count(results)
    if indexed > MAX_INDEXED_RESULTS:
        parts.append(f"The `model-index` holds the first {MAX_INDEXED_RESULTS} of these {indexed:,} numbers.")
    return "\n".join(parts).rstrip() + "\n"


def _is_card_setting(key_path: tuple[str, ...]) -> bool:
    """Whether the metadata entry at ``key_path`` is one a card lists: `CARD_SETTINGS` or a released figure
    (``published.<figure>``). A conversion's checksums are in the source files table (`_source_files_section`)."""
    if ".".join(key_path) in CARD_SETTINGS:
        return True
    return len(key_path) == 2 and key_path[0] == "published" and key_path[1] in _PUBLISHED_FIGURES


def _source_text(metadata: Mapping[str, Any]) -> str:
    """Where a converted model came from: the release it names, with its model number in the NLPL repository."""
    named = next((metadata[k] for k in ("converted_from", "weights_file", "options_file") if metadata.get(k)), None)
    text = _cell(named) if named else "the original AllenNLP/bilm-tf release"
    repository = metadata.get("nlpl_repository_id")
    if isinstance(repository, int) and not isinstance(repository, bool):
        text += f" (NLPL vector repository, model {repository})"
    return text


def _source_files_section(metadata: Mapping[str, Any]) -> str:
    """The table of the files a conversion read: name, where it came from, size and sha256 (what each entry of the
    metadata's ``files`` holds of these four, nothing else; an earlier conversion's ``sha256`` mapping else)."""
    files = metadata.get("files")
    if not isinstance(files, list):
        digests = metadata.get("sha256")
        files = [{"name": k, "sha256": v} for k, v in digests.items()] if isinstance(digests, Mapping) else []
    rows = []
    for entry in files:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        size, digest = entry.get("bytes"), entry.get("sha256")
        size = f"{size:,}" if isinstance(size, int) and not isinstance(size, bool) else None
        digest = digest if isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) else None
        origin = entry.get("origin") if isinstance(entry.get("origin"), str) else None
        rows.append(f"| {_cell(entry['name'])} | {_cell(origin)} | {_cell(size)} | {_cell(digest)} |")
    if not rows:
        return "No source files were recorded."
    return "| source file | from | bytes | sha256 |\n|---|---|---|---|\n" + "\n".join(rows[:80]) + "\n"


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
        if not _is_card_setting(key_path):
            continue  # an allow-list: only the settings this package writes (never a credential, even masked)
        rows.append(f"| {_cell('.'.join(key_path))} | {_cell(value)} |")
    if not rows:
        return "The metadata holds no scalar entries."
    return "| setting | value |\n|---|---|\n" + "\n".join(rows[:80]) + "\n"


def _architecture_table(config: Any, num_parameters: int, dtype: str) -> str:
    word_input = (  # an ELMoForManyLangs model: Unicode characters, and a word vector beside the character CNN's
        [
            ("characters listed (Unicode)", f"{config.num_characters - 7:,}"),
            ("word vectors before the projection", f"{config.word_input_dim} ({config.word_input_vocab_size:,} words)"),
        ]
        if getattr(config, "word_input_dim", 0)
        else []
    )
    rows = [
        ("LSTM layers per direction (L)", config.num_hidden_layers),
        ("LSTM cell size (H)", config.cell_size),
        ("projection size (P)", config.projection_dim),
        ("output size per layer (hidden_size, 2P)", config.hidden_size),
        ("representation layers (L+1)", config.num_representation_layers),
        ("character CNN filters [width, count]", json.dumps(config.char_cnn_filters)),
        ("character CNN output (F)", config.num_char_cnn_filters),
        ("highway layers", config.num_highway_layers),
        *word_input,
        ("cell clip / projection clip", f"{config.cell_clip} / {config.proj_clip}"),
        ("skip connections", config.use_skip_connections),
        ("word vocabulary of the LM softmax", config.vocab_size),
        ("parameters", f"{num_parameters:,}"),
        ("weights dtype", dtype),
    ]
    return "| | |\n|---|---|\n" + "\n".join(f"| {a} | {_cell(b)} |" for a, b in rows) + "\n"


def _code_section(code_files: Sequence[Path]) -> str:
    """What ``trust_remote_code=True`` runs: the Python files shipped (read from the folder being published), what
    they import from outside the standard library, and how to review them."""
    if not code_files:
        return (
            "This repository ships no Python file: `trust_remote_code=True` needs the model code, so load it with "
            "the `modeling_elmo` package installed instead.\n"
        )
    names = [Path(path).name for path in code_files]
    modules = set()
    for path in code_files:
        for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                modules.add(node.module.split(".")[0])
    outside = sorted(modules - set(sys.stdlib_module_names) - {Path(name).stem for name in names})
    count = f"{len(names)} Python file{'s' if len(names) != 1 else ''}"
    listed = ", ".join(f"`{escape_markdown(name)}`" for name in names)
    return (
        f"This repository ships {count}: {listed}. With `trust_remote_code=True`, transformers downloads them "
        "and imports them in your process, with your permissions. They define the config, the model classes and "
        "the character tokenizer, and import, besides each other and the standard library, only "
        f"{', '.join(f'`{m}`' for m in outside) or 'nothing'}; importing them opens no file and no network "
        "connection (the source repository tests both). The weights are `model.safetensors`, which holds tensors "
        f"only (no pickle, nothing executed on load). Read the {count} before running them, and pin "
        '`revision="<commit>"` so that later changes to the repository cannot change the code you run.\n'
    )


def _data_licenses(entries: Sequence[str]) -> list[tuple[str, str]]:
    """``(data, licence)`` pairs of ``LICENSE`` / ``DATA=LICENSE`` entries (``all training data`` for the first)."""
    pairs = []
    for entry in entries:
        data, _, license_ = entry.rpartition("=")
        pairs.append((data.strip() or "all training data", license_.strip() or "unknown"))
    return pairs


def data_license_warning(model_license: str, data_licenses: Sequence[str]) -> str | None:
    """The warning for a model published under a permissive licence (`PERMISSIVE_LICENSES`) over training data whose
    licence is unknown (none recorded) or restricts its use (research only, non-commercial); else None."""
    if model_license not in PERMISSIVE_LICENSES:
        return None
    if not data_licenses:
        return (
            f"the model is published under {model_license}, but the licence of its training data is not recorded: "
            "check that the data allows it (record it with --data-license)."
        )
    restricted = [
        f"{data}: {license_}"
        for data, license_ in _data_licenses(data_licenses)
        if _RESTRICTED_DATA_LICENSE.search(license_)
    ]
    if restricted:
        return (
            f"the model is published under {model_license}, but the licence of part of its training data is "
            f"unknown or restricts its use ({'; '.join(restricted)}): check that it allows publishing the model "
            "under this licence."
        )
    return None


def _plots_section(plot_names: Sequence[str]) -> str:
    if not plot_names:
        return "No plots were supplied."
    return "\n".join(f"![{Path(name).stem}]({name})" for name in plot_names) + "\n"


# ----------------------------------------------------------------------------------------------- rendering
def default_template_path(kind: str) -> Path:
    if kind not in CARD_KINDS:
        raise ValueError(f"card kind must be one of {', '.join(CARD_KINDS)}; got {kind!r}.")
    return TEMPLATE_DIR / f"{kind}.md"


#: The first jinja2 release whose sandbox keeps a template in: 3.1.5 and earlier let ``|attr('format')`` reach
#: ``str.format`` unguarded (CVE-2025-27516), so
#: ``{{ ('{0.__globals__[os].environ[HF_TOKEN]}'|attr('format'))(lipsum) }}`` rendered the token into the card.
JINJA_SANDBOX_FLOOR = (3, 1, 6)


#: A ``--template`` is text from the user: it is rendered in a child interpreter (`card_sandbox`, run with ``-I`` and
#: an empty environment) whose address space is limited to this many bytes plus eight times the size of the template
#: and its values, and which is stopped after `TEMPLATE_TIME_LIMIT` seconds. The templates of `TEMPLATE_DIR` are the
#: package's own and are rendered in this process.
TEMPLATE_MEMORY_LIMIT = 1 << 30
TEMPLATE_TIME_LIMIT = 60.0
#: The longest text (characters) a ``--template`` may render, plus four times the size of the template and its values:
#: what comes back from the child is read into this process.
TEMPLATE_TEXT_LIMIT = 16 * 2**20


def _is_builtin_template(path: Path) -> bool:
    return path.resolve().parent == TEMPLATE_DIR.resolve()


def _render_in_child(source: str, values: dict[str, Any], name: str, time_limit: float) -> str:
    """`card_sandbox.render_template` in a separate, isolated interpreter with bounded memory and time."""
    request = json.dumps({"name": name, "source": source, "values": values}).encode("utf-8")
    memory_limit = TEMPLATE_MEMORY_LIMIT + 8 * len(request)
    text_limit = TEMPLATE_TEXT_LIMIT + 4 * len(request)
    try:
        done = subprocess.run(
            [sys.executable, "-I", card_sandbox.__file__, str(memory_limit), str(text_limit)],
            input=request,
            capture_output=True,
            env={},  # nothing of this process's environment (a token above all) reaches the template
            timeout=time_limit,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ValueError(f"model-card template {name}: rendering did not finish within {time_limit:g} s.") from None
    if done.returncode == 0:
        return done.stdout.decode("utf-8")
    stderr = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode == card_sandbox.EXIT_REFUSED and stderr and "\n" not in stderr:
        raise ValueError(stderr)
    if done.returncode == card_sandbox.EXIT_MEMORY or "MemoryError" in stderr:
        raise ValueError(
            f"model-card template {name}: rendering used more than {memory_limit / 2**30:.2f} GiB of memory."
        )
    how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
    last = stderr.splitlines()[-1][:200] if stderr else "no message"
    raise ValueError(f"model-card template {name}: rendering ended with {how} ({last}).")


def render_model_card(
    template: str | os.PathLike,
    card_data: Any,
    context: Mapping[str, Any],
    *,
    time_limit: float | None = None,
):
    """Render a Jinja template into a `huggingface_hub.ModelCard` (the same rendering as
    ``ModelCard.from_template``, but strict).

    Raises `ValueError` naming the field when the template lacks one of `REQUIRED_TEMPLATE_FIELDS` or uses a
    field that neither ``context`` nor ``card_data`` provides. A template is text from the user (``--template``), so
    it is rendered in Jinja's immutable sandbox: one that reaches for Python internals (``self.__init__``, a
    method that changes a value) is refused with one line before anything of it runs. The syntax and the fields are
    checked here; a template outside `TEMPLATE_DIR` is then rendered in a child interpreter (`_render_in_child`) with
    bounded memory and at most ``time_limit`` seconds (default `TEMPLATE_TIME_LIMIT`), each refused in one line
    naming the template.
    """
    import jinja2
    from huggingface_hub import ModelCard
    from jinja2 import meta

    if tuple(int(part) for part in re.findall(r"\d+", jinja2.__version__)[:3]) < JINJA_SANDBOX_FLOOR:
        raise ValueError(
            f"jinja2 {jinja2.__version__} is installed; its sandbox lets a template read Python internals (the "
            f"environment's variables, credentials among them) through |attr('format'). Install jinja2>="
            f"{'.'.join(map(str, JINJA_SANDBOX_FLOOR))} to render a --template."
        )
    template_path = Path(template)
    if not template_path.is_file():
        raise ValueError(f"model-card template {str(template)!r} does not exist.")
    source = template_path.read_text(encoding="utf-8")
    try:
        parsed = card_sandbox.sandboxed_environment().parse(source)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(
            f"model-card template {template_path} has a syntax error on line {error.lineno}: {error.message}."
        ) from None
    used = meta.find_undeclared_variables(parsed)
    missing_required = [name for name in REQUIRED_TEMPLATE_FIELDS if name not in used]
    if missing_required:
        raise ValueError(
            f"model-card template {template_path} is missing the field(s) "
            f"{', '.join('{{ ' + n + ' }}' for n in missing_required)}."
        )
    values = dict(card_data.to_dict())
    values.update(context)
    values["card_data"] = card_data.to_yaml()
    unknown = sorted(used - set(values))
    if unknown:
        raise ValueError(
            f"model-card template {template_path} uses the field(s) {', '.join(unknown)}, which no "
            f"value fills (known fields: {', '.join(sorted(values))})."
        )
    if _is_builtin_template(template_path):
        content = card_sandbox.render_template(source, values, str(template_path))
    else:
        content = _render_in_child(
            source, values, str(template_path), TEMPLATE_TIME_LIMIT if time_limit is None else time_limit
        )
    if not content.lstrip().startswith("---"):
        raise ValueError(
            f"model-card template {template_path} must start with the YAML block '---\\n{{{{ card_data }}}}\\n---'."
        )
    return ModelCard(content)


def detect_card_kind(config: Any, converted: bool = False) -> str:
    """``classifier`` for a classification head; ``converted`` for a converted release (its conversion metadata,
    or a bare ``ElmoModel`` without a word vocabulary, which is what ``elmo convert`` writes); else
    ``pretrained``."""
    architectures = list(getattr(config, "architectures", None) or [])
    if any(a.endswith("Classification") for a in architectures):
        return "classifier"
    if converted or (architectures == ["ElmoModel"] and getattr(config, "vocab_size", None) == 4):
        return "converted"
    return "pretrained"


def build_model_card(
    config: Any,
    repo_id: str,
    inputs: CardInputs,
    *,
    num_parameters: int,
    plot_names: Sequence[str] = (),
    dtype: str = "float32",
    code_files: Sequence[Path] = (),
    local: bool = False,
):
    """The `ModelCard` (metadata + text) of a model with ``config`` and weights of ``dtype`` published as
    ``repo_id`` with the Python files ``code_files``, and its kind. ``local``: the card of a folder on disk
    (`write_model_card`), which says how to publish it."""
    from huggingface_hub import ModelCardData

    metadata = inputs.metadata or {}
    kind = detect_card_kind(config, inputs.converted) if inputs.kind == "auto" else inputs.kind
    if kind not in CARD_KINDS:
        raise ValueError(f"card kind must be 'auto' or one of {', '.join(CARD_KINDS)}; got {inputs.kind!r}.")
    args = metadata.get("args") if isinstance(metadata.get("args"), Mapping) else {}
    datasets = inputs.datasets or _as_list(metadata.get("datasets")) or _as_list(args.get("dataset_name"))
    # the files a run was trained on, when it names no dataset: described in the text, not Hub ids for the metadata
    training_files = [data_file_label(f) for f in _as_list(args.get("train_file"))] if not datasets else []
    data_licenses = (
        inputs.data_licenses or _as_list(metadata.get("data_licenses")) or _as_list(args.get("data_license"))
    )
    eval_results = eval_results_for_hub(inputs.results)

    architectures = list(getattr(config, "architectures", None) or [])
    token_head = any(a.endswith("TokenClassification") for a in architectures)
    pipeline_tag = (
        ("token-classification" if token_head else "text-classification")
        if kind == "classifier"
        else "feature-extraction"
    )
    # a biLM is its own base unless the user says otherwise
    base_model = inputs.base_model or (metadata.get("base_model") if kind == "classifier" else None)
    base_model = base_model if isinstance(base_model, str) else None
    language = _valid(inputs.language or _as_list(metadata.get("language")), _LANGUAGE, "language code") or ["en"]
    license_ = (
        _valid([inputs.license or metadata.get("license") or "apache-2.0"], _LICENSE, "license id") or ["other"]
    )[0]
    hub_datasets = _valid(datasets, _HUB_ID, "Hub dataset id")
    license_warning = data_license_warning(str(license_), data_licenses) if kind != "converted" else None
    if license_warning:
        logger.warning("%s: %s", repo_id, license_warning)
    tags = ["elmo", "bilm", "custom_code", "character-cnn", "lstm", "contextual-embeddings"]
    tags.append({"pretrained": "language-model", "converted": "converted", "classifier": pipeline_tag}[kind])
    model_name = repo_id.split("/")[-1]
    card_data = ModelCardData(
        language=language,
        license=str(license_),
        library_name="transformers",
        tags=tags,
        datasets=hub_datasets or None,
        pipeline_tag=pipeline_tag,
        base_model=(_valid([base_model], _HUB_ID, "Hub model id") or [None])[0] if base_model else None,
        metrics=sorted({e.metric_type for e in eval_results}) or None,
        model_name=model_name if eval_results else None,
        eval_results=eval_results or None,
    )
    id2label = getattr(config, "id2label", None) or {}
    labels = ", ".join(f"{k}: {escape_markdown(v)}" for k, v in sorted(id2label.items(), key=lambda kv: int(kv[0])))
    language_name = metadata.get("language_name") if kind == "converted" else None
    context = {
        "model_id": repo_id,
        "model_name": model_name,
        "kind": kind,
        "architecture_table": _architecture_table(config, num_parameters, dtype),
        "num_parameters": f"{num_parameters:,}",
        "output_size": config.hidden_size,
        "num_layers": config.num_representation_layers,
        "evaluation_section": _evaluation_section(inputs.results),
        "training_section": _training_section(metadata, kind),
        "training_data": ", ".join(escape_markdown(_cut(_scrub(d))) for d in datasets or training_files)
        or "not recorded",
        "data_licenses": "; ".join(
            f"{escape_markdown(_scrub(data))}: {escape_markdown(license_)}"
            for data, license_ in _data_licenses(data_licenses)
        )
        or "not recorded",
        "data_license_warning": f"**Warning:** {escape_markdown(license_warning)}" if license_warning else "",
        "code_section": _code_section(code_files),
        "plots_section": _plots_section(plot_names),
        "base_model_text": escape_markdown(base_model) if base_model else "not recorded",
        "labels": labels or "not recorded",
        "num_labels": len(id2label),
        "head_class": escape_markdown(
            next((a for a in architectures if a.endswith("Classification")), "ElmoForSequenceClassification")
        ),
        "source": _source_text(metadata),
        "source_files": _source_files_section(metadata),
        "language_name": escape_markdown(_scrub(language_name)) if isinstance(language_name, str) else "",
        "local_folder": local,
        "citation": PAPER_CITATION,
    }
    template = inputs.template or default_template_path(kind)
    if inputs.template is None and kind == "converted" and metadata.get("source_format") == EFML_SOURCE_FORMAT:
        template = TEMPLATE_DIR / "converted_efml.md"
    return render_model_card(template, card_data, context), kind


def write_model_card(
    folder: str | os.PathLike,
    config: Any,
    inputs: CardInputs,
    *,
    name: str,
    num_parameters: int,
    dtype: str = "float32",
) -> str:
    """Write ``README.md`` into the model folder being filled at ``folder`` (its code files already there): the card
    `build_model_card` renders, with ``name`` (the folder's final name, made a valid model id) in the examples and a
    line on publishing the folder with ``elmo push``, which renders it again from the same source for the Hub.
    Returns the card's kind."""
    folder = Path(folder)
    model_id = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:96] or "elmo"
    card, kind = build_model_card(
        config,
        model_id,
        inputs,
        num_parameters=num_parameters,
        dtype=dtype,
        code_files=sorted(folder.glob("*.py")),
        local=True,
    )
    card.save(folder / "README.md")
    return kind
