"""Small numpy metrics.

`evaluate.load("accuracy")` fetches its metric script from the Hugging Face Hub and fails offline (the
`evaluate` wheel ships no metric scripts), so the evaluation suite computes its few metrics here.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

__all__ = ["accuracy", "correctness", "masked_token_accuracy", "mcnemar_exact", "most_frequent_tag_accuracy"]


def accuracy(predictions, labels) -> float:
    """Fraction of ``predictions == labels``; raises `ValueError` on empty or mismatched input."""
    p = np.asarray(predictions)
    y = np.asarray(labels)
    if p.shape != y.shape:
        raise ValueError(f"predictions {p.shape} and labels {y.shape} differ in shape")
    if y.size == 0:
        raise ValueError("accuracy of an empty set is undefined")
    return float(np.mean(p == y))


def most_frequent_tag_accuracy(train_words, train_tags, dev_words, dev_tags) -> float:
    """Token accuracy on the dev sentences of the most-frequent-tag baseline: every word gets the tag it had most
    often in the training sentences (the first seen among equals), a word never seen the most frequent tag overall.
    The ``*_words`` and ``*_tags`` are lists of sentences, each a list of words or tags."""
    counts: dict[str, Counter] = {}
    overall: Counter = Counter()
    for words, tags in zip(train_words, train_tags, strict=True):
        for word, tag in zip(words, tags, strict=True):
            counts.setdefault(word, Counter())[tag] += 1
            overall[tag] += 1
    if not overall:
        raise ValueError("the most-frequent-tag baseline needs tagged training sentences")
    best = {word: tags.most_common(1)[0][0] for word, tags in counts.items()}
    fallback = overall.most_common(1)[0][0]
    predicted = [best.get(word, fallback) for words in dev_words for word in words]
    return accuracy(predicted, [tag for tags in dev_tags for tag in tags])


def masked_token_accuracy(logits_or_predictions, labels, ignore_index: int = -100) -> float:
    """Token accuracy over positions whose label is not ``ignore_index``.

    ``logits_or_predictions`` is either (B, T, C) logits (argmax is taken) or (B, T) predictions.
    """
    right = correctness(logits_or_predictions, labels, ignore_index)
    if right.size == 0:
        raise ValueError("no labelled token: accuracy is undefined")
    return float(right.mean())


def correctness(logits_or_predictions, labels, ignore_index: int = -100) -> np.ndarray:
    """Flat boolean array, one entry per labelled example or token (labels ``ignore_index`` dropped): prediction
    right or wrong. ``logits_or_predictions`` as in `masked_token_accuracy` (for sentences: (N, C) or (N,))."""
    p = np.asarray(logits_or_predictions)
    y = np.asarray(labels)
    if p.ndim == y.ndim + 1:
        p = p.argmax(-1)
    if p.shape != y.shape:
        raise ValueError(f"predictions {p.shape} and labels {y.shape} differ in shape")
    keep = y != ignore_index
    return (p[keep] == y[keep]).ravel()


def mcnemar_exact(correct_a, correct_b) -> dict:
    """Exact (binomial) two-sided McNemar test of two classifiers scored on the same examples.

    Only the discordant examples count: ``a_only`` (a right, b wrong) and ``b_only``. Under the null hypothesis
    that both are equally accurate, ``a_only`` ~ Binomial(a_only + b_only, 1/2); the p-value is twice the smaller
    tail, capped at 1 (and 1 when there is no discordant example)."""
    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"the two correctness arrays differ in shape: {a.shape} vs {b.shape}")
    if a.size == 0:
        raise ValueError("McNemar's test of an empty set is undefined")
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    n, k = a_only + b_only, min(a_only, b_only)
    if n == 0:
        p_value = 1.0
    else:  # P(X <= k), X ~ Binomial(n, 1/2), in log space (n can be tens of thousands of tokens)
        log_terms = [
            math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2) for i in range(k + 1)
        ]
        top = max(log_terms)
        p_value = min(1.0, 2.0 * math.exp(top) * sum(math.exp(t - top) for t in log_terms))
    return {
        "examples": int(a.size),
        "a_only": a_only,
        "b_only": b_only,
        "difference": (a_only - b_only) / a.size,
        "p_value": p_value,
    }
