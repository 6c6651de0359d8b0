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

This module writes the card's text; `card_index` makes its ``model-index`` and checks the ids of its metadata,
`card_values` makes the user's values safe for either, and `card_render` renders the template (a ``--template`` in
the child interpreter of `card_sandbox`).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..utils.results import EvaluationResults, PerplexityResult, ScoreResult, data_file_label
from .card_index import (
    HUB_ID,
    LANGUAGE,
    LICENSE,
    MAX_INDEXED_RESULTS,
    MIN_INDEXED_EXAMPLES,
    eval_results_for_hub,
    indexed_count,
    valid_ids,
)
from .card_render import CARD_KINDS, REQUIRED_TEMPLATE_FIELDS, TEMPLATE_DIR, default_template_path, render_model_card
from .card_settings import CARD_SETTINGS, card_settings
from .card_values import MAX_SHOWN_CHARACTERS, _cut, _scrub, escape_markdown

__all__ = [
    "CARD_KINDS",
    "CARD_SETTINGS",
    "MAX_CARD_ROWS",
    "MAX_INDEXED_RESULTS",
    "MAX_SHOWN_CHARACTERS",
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

#: The most rows each results table of the card shows (and `card_index.MAX_INDEXED_RESULTS` the most entries of its
#: ``model-index``): the rest are counted in the card ("N more in eval_results.json"), so that a results file of any
#: length gives a card of bounded size (an evaluation writes tens of records).
MAX_CARD_ROWS = 100
#: Model licences that let anyone use the model for anything (the data-licence warning applies to them).
PERMISSIVE_LICENSES = frozenset({"apache-2.0", "mit", "bsd-2-clause", "bsd-3-clause", "cc-by-4.0", "cc0-1.0"})
#: Data licences that do not allow every use, and words that say the licence is not known.
_RESTRICTED_DATA_LICENSE = re.compile(
    r"research[- _]only|research purposes only|only for research|non-?commercial|"
    r"(^|[^a-z])nc([^a-z]|$)|proprietary|all rights reserved|unknown|not recorded",
    re.IGNORECASE,
)

#: ``conversion_metadata.json``'s ``source_format`` of an ELMoForManyLangs conversion: its card has its own template.
EFML_SOURCE_FORMAT = "elmoformanylangs"
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


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(_scrub(v)) for v in value if isinstance(v, (str, int, float))]
    return []


# ----------------------------------------------------------------------------------------------- sections
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
    indexed = indexed_count(results)
    if indexed > MAX_INDEXED_RESULTS:
        parts.append(f"The `model-index` holds the first {MAX_INDEXED_RESULTS} of these {indexed:,} numbers.")
    return "\n".join(parts).rstrip() + "\n"


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
    # an allow-list: only the settings this package writes (never a credential, even masked)
    for key_path, value in card_settings(metadata):
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, bool)) for v in value):
            pass
        elif not isinstance(value, (str, int, float, bool)) or value is None:
            continue
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
    language = valid_ids(inputs.language or _as_list(metadata.get("language")), LANGUAGE, "language code") or ["en"]
    license_ = (
        valid_ids([inputs.license or metadata.get("license") or "apache-2.0"], LICENSE, "license id") or ["other"]
    )[0]
    hub_datasets = valid_ids(datasets, HUB_ID, "Hub dataset id")
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
        base_model=(valid_ids([base_model], HUB_ID, "Hub model id") or [None])[0] if base_model else None,
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
