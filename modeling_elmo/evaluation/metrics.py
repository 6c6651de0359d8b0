"""Small numpy metrics.

`evaluate.load("accuracy")` fetches its metric script from the Hugging Face Hub and fails offline (the
`evaluate` wheel ships no metric scripts), so the evaluation suite computes its few metrics here.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["accuracy", "masked_token_accuracy", "perplexity_from_nll"]


def accuracy(predictions, labels) -> float:
    """Fraction of ``predictions == labels``; raises `ValueError` on empty or mismatched input."""
    p = np.asarray(predictions)
    y = np.asarray(labels)
    if p.shape != y.shape:
        raise ValueError(f"predictions {p.shape} and labels {y.shape} differ in shape")
    if y.size == 0:
        raise ValueError("accuracy of an empty set is undefined")
    return float(np.mean(p == y))


def masked_token_accuracy(logits_or_predictions, labels, ignore_index: int = -100) -> float:
    """Token accuracy over positions whose label is not ``ignore_index``.

    ``logits_or_predictions`` is either (B, T, C) logits (argmax is taken) or (B, T) predictions.
    """
    p = np.asarray(logits_or_predictions)
    y = np.asarray(labels)
    if p.ndim == y.ndim + 1:
        p = p.argmax(-1)
    if p.shape != y.shape:
        raise ValueError(f"predictions {p.shape} and labels {y.shape} differ in shape")
    keep = y != ignore_index
    if not keep.any():
        raise ValueError("no labelled token: accuracy is undefined")
    return float(np.mean(p[keep] == y[keep]))


def perplexity_from_nll(total_nll: float, num_tokens: int) -> float:
    """exp(total_nll / num_tokens)."""
    if num_tokens <= 0:
        raise ValueError(f"num_tokens must be positive, got {num_tokens}")
    return math.exp(total_nll / num_tokens)
