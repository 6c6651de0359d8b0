"""The ``model-index`` of a model card and the ids of its YAML metadata.

`eval_results_for_hub` turns the model's own numbers into ``huggingface_hub.EvalResult`` entries: the LM's
perplexities and the probe scores decided on at least `MIN_INDEXED_EXAMPLES` examples, at most
`MAX_INDEXED_RESULTS` of them. `valid_ids` keeps the dataset and model ids, language codes and licence ids of the
Hub's form (`HUB_ID`, `LANGUAGE`, `LICENSE`) and warns of the others, which stay out of the metadata.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from ..utils.results import EvaluationResults, ScoreResult
from .card_values import _plain, _slug

__all__ = [
    "HUB_ID",
    "LANGUAGE",
    "LICENSE",
    "MAX_INDEXED_RESULTS",
    "MIN_INDEXED_EXAMPLES",
    "eval_results_for_hub",
    "indexed_count",
    "valid_ids",
]

logger = logging.getLogger(__name__)

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
#: The most entries of the ``model-index``: the rest are counted in the card's text.
MAX_INDEXED_RESULTS = 100
#: What the YAML metadata accepts: Hub ids (``name`` or ``owner/name``), language codes, license ids.
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
LANGUAGE = re.compile(r"[a-zA-Z]{2,3}([-_][A-Za-z0-9]{2,8})*")
LICENSE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")


def valid_ids(values: Sequence[str], pattern: re.Pattern, what: str) -> list[str]:
    """The values that match ``pattern``; the others are left out of the YAML metadata (with a warning)."""
    kept = [v for v in values if isinstance(v, str) and pattern.fullmatch(v)]
    for value in values:
        if value not in kept:
            logger.warning("not a valid %s, left out of the card's metadata: %r", what, value)
    return kept


def _split_for_hub(split: str) -> str | None:
    """The model-index split: None for text that is not a named split of a dataset."""
    return None if split in ("held-out", "all") else split


def eval_results_for_hub(results: Sequence[EvaluationResults], limit: int = MAX_INDEXED_RESULTS) -> list:
    """`huggingface_hub.EvalResult` entries of the model's own numbers, the first ``limit`` of them: the LM's
    perplexities (not the unigram baseline's, not the untrained model's) and the probe scores that are defined and
    decided on at least `MIN_INDEXED_EXAMPLES` examples (`indexed_count` counts them all)."""
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


def indexed_count(results: Sequence[EvaluationResults]) -> int:
    """How many entries `eval_results_for_hub` would give without a limit."""
    return sum(3 * len(r.perplexity) + sum(map(_indexed, r.scores)) for r in results)
