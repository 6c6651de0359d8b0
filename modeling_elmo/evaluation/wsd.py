"""Word-sense nearest-neighbour probe and the builder of the small shipped sense-labelled set.

The probe asks, for every occurrence of an ambiguous word: is the nearest *other* occurrence of the
same word (cosine similarity of the contextual vectors of one layer) an occurrence of the same sense?

Ties are never resolved by list order. For an occurrence, the nearest neighbours are all other
occurrences whose similarity is within ``tie_tolerance`` of the best one. If they all have the query's
sense the occurrence is *correct*; if none has it, *wrong*; if they disagree (some same, some other
sense) it is a *tie*. Layer 0 (the context-free character-CNN vector) gives every occurrence of one
surface form the same vector, so there almost every occurrence is a tie. Reported per layer:

- ``accuracy``: correct / (correct + wrong), over the non-tied occurrences (None when all are tied);
- ``ties``: number of tied occurrences;
- ``accuracy_ties_half``: (correct + 0.5 * ties) / scored, counting each tie as half right;
- ``scored``: occurrences that have at least one other occurrence of the same word (the rest are
  ``skipped``).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Sequence

import numpy as np

from ..utils.io_utils import atomic_write_text, sha256_of_file

__all__ = ["score_nearest_neighbour", "build_wsd_subset", "DEFAULT_WSD_SET", "SENSEVAL_TSV"]

#: The small set shipped with the package (built by ``scripts/build_wsd_set.py``).
DEFAULT_WSD_SET = Path(__file__).resolve().parent / "wsd_small.jsonl"
#: Path of the source corpus inside the shared data folder.
SENSEVAL_TSV = Path("wsd-senseval2-lexsample") / "senseval2_lexsample.tsv"


def score_nearest_neighbour(
    embeddings: np.ndarray,
    words: Sequence[str],
    senses: Sequence[str],
    tie_tolerance: float = 1e-6,
) -> dict:
    """Score the nearest-neighbour sense probe on given vectors (pure numpy).

    Args:
        embeddings: (N, D) vectors, one per occurrence.
        words: N grouping keys; only occurrences with the same key are compared.
        senses: N sense labels.
        tie_tolerance: similarities within this of the maximum count as equally near.

    Returns:
        dict with ``scored``, ``skipped``, ``correct``, ``wrong``, ``ties``, ``accuracy`` (None if no
        occurrence is untied), ``accuracy_ties_half`` (None if nothing was scored), ``chance`` (the
        expected accuracy of a random neighbour: mean over scored occurrences of the fraction of the other
        occurrences that share the sense) and ``per_word`` (the same counts per word).
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (N, D), got shape {x.shape}")
    n = x.shape[0]
    if len(words) != n or len(senses) != n:
        raise ValueError(f"got {n} embeddings, {len(words)} words and {len(senses)} senses; they must match")
    if not np.all(np.isfinite(x)):
        raise ValueError("embeddings contain NaN or inf")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    # A zero vector has no direction: its cosine with everything is 0 (so it ties with everything).
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)

    groups: dict[str, list[int]] = defaultdict(list)
    for i, w in enumerate(words):
        groups[w].append(i)

    totals = {"scored": 0, "skipped": 0, "correct": 0, "wrong": 0, "ties": 0}
    chance_sum = 0.0
    per_word: dict[str, dict] = {}
    for word in sorted(groups):
        idx = np.asarray(groups[word])
        counts = {"scored": 0, "skipped": 0, "correct": 0, "wrong": 0, "ties": 0}
        if len(idx) < 2:
            counts["skipped"] = len(idx)
        else:
            sims = unit[idx] @ unit[idx].T
            lab = np.asarray([senses[i] for i in idx])
            same = lab[:, None] == lab[None, :]
            np.fill_diagonal(sims, -np.inf)
            best = sims.max(axis=1, keepdims=True)
            near = sims >= best - tie_tolerance
            np.fill_diagonal(near, False)
            n_near_same = (near & same).sum(axis=1)
            n_near = near.sum(axis=1)
            counts["scored"] = len(idx)
            counts["correct"] = int(np.sum(n_near_same == n_near))
            counts["wrong"] = int(np.sum(n_near_same == 0))
            counts["ties"] = int(np.sum((n_near_same > 0) & (n_near_same < n_near)))
            others_same = same.sum(axis=1) - 1
            chance_sum += float(np.sum(others_same / (len(idx) - 1)))
        counts.update(_rates(counts))
        per_word[word] = counts
        for k in totals:
            totals[k] += counts[k]
    result = dict(totals)
    result.update(_rates(totals))
    result["chance"] = chance_sum / totals["scored"] if totals["scored"] else None
    result["per_word"] = per_word
    return result


def _rates(c: dict) -> dict:
    decided = c["correct"] + c["wrong"]
    return {
        "accuracy": c["correct"] / decided if decided else None,
        "accuracy_ties_half": (c["correct"] + 0.5 * c["ties"]) / c["scored"] if c["scored"] else None,
    }


def build_wsd_subset(
    tsv_path: str | Path,
    out_path: str | Path,
    senses_per_word: int = 3,
    per_sense: int = 30,
    max_tokens: int = 40,
    seed: int = 0,
) -> dict:
    """Build a balanced sense-labelled JSONL from the Senseval "line/hard/serve/interest" TSV.

    For each lexical item (``hard-a``, ``interest-n``, ``line-n``, ``serve-v``) the ``senses_per_word``
    most frequent senses are kept, and ``per_sense`` contexts of at most ``max_tokens`` tokens are drawn
    per sense with ``random.Random(seed)`` from the rows in file order. Records carry the surface
    ``word`` (``tokens[index]``), the ``lemma`` (grouping key: the lexical item without its POS suffix),
    the corpus's ``sense`` label and the source ``instance_id``. Writes atomically; returns a summary
    (counts and the source file's SHA-256) that the builder script prints.
    """
    tsv_path = Path(tsv_path)
    rows_by_item: dict[str, list[dict]] = defaultdict(list)
    with open(tsv_path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            rows_by_item[row["lexelt"]].append(row)
    if not rows_by_item:
        raise ValueError(f"{tsv_path} holds no rows")
    rng = random.Random(seed)
    records = []
    summary: dict = {"source": str(SENSEVAL_TSV), "sha256": sha256_of_file(tsv_path), "items": {}}
    for item in sorted(rows_by_item):
        rows = rows_by_item[item]
        by_sense: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            by_sense[r["senses"]].append(r)
        top = sorted(by_sense, key=lambda s: (-len(by_sense[s]), s))[:senses_per_word]
        summary["items"][item] = {}
        for sense in sorted(top):
            pool = [r for r in by_sense[sense] if len(r["text"].split(" ")) <= max_tokens]
            if len(pool) < per_sense:
                raise ValueError(f"{item} sense {sense!r}: only {len(pool)} contexts of <= {max_tokens} tokens")
            for r in rng.sample(pool, per_sense):
                tokens = r["text"].split(" ")
                index = int(r["target_index"])
                records.append(
                    {
                        "tokens": tokens,
                        "index": index,
                        "word": tokens[index],
                        "lemma": item.rsplit("-", 1)[0],
                        "sense": sense,
                        "id": r["instance_id"],
                    }
                )
            summary["items"][item][sense] = per_sense
    atomic_write_text(out_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    summary["occurrences"] = len(records)
    return summary


def build_wsd_main(argv: list[str] | None = None) -> int:
    """Entry point of ``scripts/build_wsd_set.py``."""
    p = argparse.ArgumentParser(
        prog="build_wsd_set.py",
        description="Build the small balanced sense-labelled JSONL from the Senseval line/hard/serve/interest corpus.",
    )
    p.add_argument(
        "--data-dir", type=Path, required=True, help=f"data folder holding {SENSEVAL_TSV} (e.g. the shared data folder)"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_WSD_SET)
    p.add_argument("--senses-per-word", type=int, default=3)
    p.add_argument("--per-sense", type=int, default=30)
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    tsv = args.data_dir / SENSEVAL_TSV
    if not tsv.exists():
        p.exit(2, f"{p.prog}: error: source corpus {tsv} not found (check --data-dir)\n")
    try:
        summary = build_wsd_subset(tsv, args.out, args.senses_per_word, args.per_sense, args.max_tokens, args.seed)
    except ValueError as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    print(json.dumps(summary, indent=2))
    return 0
