"""What the ELMo biLM scores and how its perplexity is measured: the one implementation that pretraining
(`modeling_elmo.pretraining`) and the evaluation suite (`modeling_elmo.evaluation`) share.

Targets. An example is a list of word ids (``<UNK>`` for out-of-vocabulary words), in one of two `LAYOUTS`:

* ``"sentences"``: one sentence ``w1 .. wn``; the model adds ``<S>``/``</S>`` around it. The forward LM predicts
  ``w1 .. wn </S>``, the backward LM ``<S> w1 .. wn``: n + 1 targets per direction.
* ``"windows"``: a fixed slice of the stream ``<S> w1 .. wn </S> <S> ...`` fed without added boundaries
  (``add_sentence_boundaries=False``). The forward LM predicts tokens 2..N, the backward LM tokens 1..N-1: N - 1
  targets per direction (the first forward and the last backward token have no context in a stateless window).

Perplexity. Per direction, ``exp(summed NLL / targets)``; the average is ``exp`` of the mean of the two directions'
mean NLLs, i.e. the geometric mean of the two perplexities, as bilm-tf's ``run_test`` reports it. ``</S>``, ``<S>``
and ``<UNK>`` targets are all included (see `UNK_HANDLING`).

Unigram baseline. Add-k smoothed word frequencies (`unigram_log_probs`) of the targets of each direction, fitted on
some examples (`target_counts`, `dataset_target_counts`) and scored on exactly the LM's targets: the perplexity of
word frequencies alone, to put the LM's numbers on a scale.

Scoring. `score_batches` is the one loop that scores an LM on batches (``input_ids``, ``attention_mask``,
``labels``), for pretraining's evaluation and for ``elmo evaluate`` alike; `score_batch` scores one batch with memory
bounded by ``max_positions`` whatever the lengths: rows are scored a few at a time, and a sentence longer than
``max_positions`` is scored in chunks of positions, each direction carrying its LSTM state from chunk to chunk
(forward chunks left to right, backward chunks right to left), which gives the numbers of the whole sentence at once.
`PerplexityAccumulator` sums everything over batches (and processes) and turns it into a
`modeling_elmo.utils.results.PerplexityResult`::

    accumulator = score_batches(model, batches, layout="sentences", baseline=baseline)
    total = accumulator.from_tensor(accelerator.reduce(accumulator.to_tensor(accelerator.device), "sum"))
    result = total.result(dataset="1B Word heldout", split="test")
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from ..tokenization_elmo import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from ..utils.results import PerplexityResult, UnigramBaselineResult

__all__ = [
    "LAYOUTS",
    "MAX_SCORED_POSITIONS",
    "BatchScores",
    "UNK_HANDLING",
    "PerplexityAccumulator",
    "UnigramBaseline",
    "batch_targets",
    "dataset_target_counts",
    "example_targets",
    "score_batch",
    "score_batches",
    "target_counts",
    "unigram_log_probs",
]

#: How examples are laid out (see the module docstring); pretraining's ``--batching`` takes the same names.
LAYOUTS = ("sentences", "windows")
#: Label value of positions that predict nothing (padding), as in transformers.
IGNORE_INDEX = -100

UNK_HANDLING = (
    "Out-of-vocabulary words are targets of the single class <UNK> (id 3) for the LM and for the unigram baseline "
    "alike; <UNK> targets are included in every perplexity (unk_rate says how many there were). The unigram baseline "
    "is add-k smoothed over the non-padding classes and fitted on the targets of each direction (words plus </S> "
    "forward, <S> plus words backward)."
)


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}.")


# ----------------------------------------------------------------------------------------------- targets
def example_targets(word_ids: Sequence[int], layout: str = "sentences") -> tuple[list[int], list[int]]:
    """The forward and backward targets of one example (word ids, ``<UNK>`` for unknown words); empty for an empty
    example."""
    _check_layout(layout)
    ids = [int(i) for i in word_ids]
    if not ids:
        return [], []
    if layout == "sentences":
        return ids + [EOS_ID], [BOS_ID] + ids
    return ids[1:], ids[:-1]


def batch_targets(labels: torch.Tensor, layout: str = "sentences") -> tuple[torch.Tensor, torch.Tensor]:
    """The forward and backward targets (flat ``LongTensor``s, on the CPU) of a right-padded batch of ``labels``
    (batch, tokens): word ids, ``-100`` at padding. The same targets, in any order, as the model scores."""
    _check_layout(layout)
    forward: list[int] = []
    backward: list[int] = []
    for row in labels.detach().cpu().tolist():
        fwd, bwd = example_targets([i for i in row if i != IGNORE_INDEX], layout)
        forward += fwd
        backward += bwd
    return torch.tensor(forward, dtype=torch.long), torch.tensor(backward, dtype=torch.long)


def target_counts(
    examples: Iterable[Sequence[int]], vocab_size: int, layout: str = "sentences"
) -> tuple[np.ndarray, np.ndarray]:
    """How often each word id is a forward and a backward target in ``examples`` (lists of word ids); two int64
    arrays of shape ``(vocab_size,)``. Raises `ValueError` on an id outside the vocabulary."""
    _check_layout(layout)
    forward = np.zeros(vocab_size, dtype=np.int64)
    backward = np.zeros(vocab_size, dtype=np.int64)
    for example in examples:
        fwd, bwd = example_targets(example, layout)
        if fwd and (min(fwd + bwd) < 0 or max(fwd + bwd) >= vocab_size):
            bad = next(i for i in fwd + bwd if not 0 <= i < vocab_size)
            raise ValueError(f"word id {bad} is outside the vocabulary of {vocab_size} words.")
        forward += np.bincount(np.asarray(fwd, dtype=np.int64), minlength=vocab_size)
        backward += np.bincount(np.asarray(bwd, dtype=np.int64), minlength=vocab_size)
    return forward, backward


def dataset_target_counts(
    dataset: Any, vocab_size: int, layout: str = "sentences", max_examples: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`target_counts` of a tokenised ``datasets`` dataset (its ``word_ids`` column), read chunk by chunk with
    pyarrow (bounded memory on a billion words); an ``IterableDataset`` is read example by example, at most
    ``max_examples`` of them."""
    import datasets
    import pyarrow.compute as pc

    _check_layout(layout)
    all_counts = np.zeros(vocab_size, dtype=np.int64)
    first_counts = np.zeros(vocab_size, dtype=np.int64)
    last_counts = np.zeros(vocab_size, dtype=np.int64)
    n_examples = 0

    def add(flat: np.ndarray, firsts: np.ndarray, lasts: np.ndarray) -> None:
        all_counts[:] += np.bincount(flat, minlength=vocab_size)[:vocab_size]
        first_counts[:] += np.bincount(firsts, minlength=vocab_size)[:vocab_size]
        last_counts[:] += np.bincount(lasts, minlength=vocab_size)[:vocab_size]

    if isinstance(dataset, datasets.IterableDataset):
        rows = []
        for i, example in enumerate(dataset):
            if max_examples is not None and i >= max_examples:
                break
            if example["word_ids"]:
                rows.append(np.asarray(example["word_ids"], dtype=np.int64))
        if rows:
            add(np.concatenate(rows), np.array([r[0] for r in rows]), np.array([r[-1] for r in rows]))
        n_examples = len(rows)
    else:
        column = dataset.with_format("arrow")["word_ids"]
        for chunk in getattr(column, "chunks", [column]):
            flat = np.asarray(pc.list_flatten(chunk), dtype=np.int64)
            lengths = np.asarray(pc.list_value_length(chunk).fill_null(0), dtype=np.int64)
            ends = np.cumsum(lengths)
            starts = ends - lengths
            nonempty = lengths > 0
            add(flat, flat[starts[nonempty]], flat[ends[nonempty] - 1])
            n_examples += int(nonempty.sum())
    if layout == "sentences":
        forward, backward = all_counts.copy(), all_counts.copy()
        forward[EOS_ID] += n_examples
        backward[BOS_ID] += n_examples
        return forward, backward
    return all_counts - first_counts, all_counts - last_counts


# ----------------------------------------------------------------------------------------------- unigram baseline
def unigram_log_probs(counts: np.ndarray, smoothing: float = 1.0) -> np.ndarray:
    """Add-``smoothing`` unigram log-probabilities over the ``V - 1`` non-padding ids (``<pad>`` gets -inf).

    With ``smoothing`` 0 an id never counted also gets -inf; scoring it raises (see `PerplexityAccumulator`)."""
    if not smoothing >= 0:
        raise ValueError(f"unigram smoothing must be >= 0, got {smoothing}.")
    smoothed = np.asarray(counts, dtype=np.float64) + float(smoothing)
    smoothed[PAD_ID] = 0.0
    total = smoothed.sum()
    if total <= 0:
        raise ValueError("the unigram baseline has nothing to fit: no target was counted and smoothing is 0.")
    with np.errstate(divide="ignore"):
        return np.log(smoothed) - math.log(total)


@dataclasses.dataclass(frozen=True)
class UnigramBaseline:
    """Word-frequency baseline: log-probabilities of every word id as a forward and as a backward target.

    ``fitted_on`` says where the counts came from (it is written into the results); build one with `fit`."""

    forward_log_probs: np.ndarray
    backward_log_probs: np.ndarray
    fitted_on: str
    smoothing: float = 1.0

    @classmethod
    def fit(cls, counts: tuple[np.ndarray, np.ndarray], *, fitted_on: str, smoothing: float = 1.0) -> UnigramBaseline:
        """The baseline of ``counts`` (forward, backward), as `target_counts`/`dataset_target_counts` return them."""
        forward, backward = counts
        return cls(
            unigram_log_probs(forward, smoothing), unigram_log_probs(backward, smoothing), fitted_on, float(smoothing)
        )


# ----------------------------------------------------------------------------------------------- accumulator
@dataclasses.dataclass
class PerplexityAccumulator:
    """Sums over batches of what perplexity needs, for the LM and (with a ``baseline``) the unigram baseline.

    ``layout`` is how the batches were fed (``"sentences"``: boundaries added by the model). The totals are the
    numeric fields; `to_tensor` / `from_tensor` carry them through ``accelerator.reduce(..., "sum")``, `merge` adds
    another accumulator's, `result` turns them into a `PerplexityResult`.
    """

    layout: str = "sentences"
    baseline: UnigramBaseline | None = None
    forward_nll: float = 0.0
    backward_nll: float = 0.0
    unigram_forward_nll: float = 0.0
    unigram_backward_nll: float = 0.0
    forward_targets: int = 0
    backward_targets: int = 0
    unk_targets: int = 0  # <UNK> targets of both directions together
    examples: int = 0  # examples with at least one word

    #: The totals, in the order of `to_tensor`.
    TOTALS = (
        "forward_nll",
        "backward_nll",
        "unigram_forward_nll",
        "unigram_backward_nll",
        "forward_targets",
        "backward_targets",
        "unk_targets",
        "examples",
    )

    def __post_init__(self):
        _check_layout(self.layout)

    def update(self, output: Any, labels: torch.Tensor) -> None:
        """Add one batch: ``output`` of `ElmoForBidirectionalLM` called with ``labels`` (batch, tokens; -100 at
        padding) in this accumulator's layout.

        Raises `ValueError` when the output has no summed NLL (the model was called without labels), when the labels
        give other targets than the model scored (wrong layout, labels of another batch), or when the baseline gives
        a target zero probability."""
        if getattr(output, "forward_nll_sum", None) is None:
            raise ValueError("the model output has no forward_nll_sum: call the model with labels.")
        forward, backward = batch_targets(labels, self.layout)
        scored = (int(output.num_forward_targets), int(output.num_backward_targets))
        if scored != (forward.numel(), backward.numel()):
            raise ValueError(
                f"the labels give {forward.numel()}/{backward.numel()} forward/backward targets in the {self.layout!r} "
                f"layout but the model scored {scored[0]}/{scored[1]}: the layout or the labels do not match the call."
            )
        self.forward_nll += float(output.forward_nll_sum)
        self.backward_nll += float(output.backward_nll_sum)
        self.forward_targets += scored[0]
        self.backward_targets += scored[1]
        self.unk_targets += int((forward == UNK_ID).sum()) + int((backward == UNK_ID).sum())
        self.examples += int(((labels != IGNORE_INDEX).sum(dim=1) > 0).sum())
        if self.baseline is not None:
            for targets, log_probs, name in (
                (forward, self.baseline.forward_log_probs, "unigram_forward_nll"),
                (backward, self.baseline.backward_log_probs, "unigram_backward_nll"),
            ):
                if targets.numel() and int(targets.max()) >= len(log_probs):
                    raise ValueError(
                        f"word id {int(targets.max())} is outside the unigram baseline's vocabulary of "
                        f"{len(log_probs)} words."
                    )
                chosen = log_probs[targets.numpy()]
                if not np.all(np.isfinite(chosen)):
                    bad = int(targets.numpy()[~np.isfinite(chosen)][0])
                    raise ValueError(
                        f"word id {bad} has zero unigram probability: use smoothing > 0 or fit the "
                        "baseline on text that covers it."
                    )
                setattr(self, name, getattr(self, name) - float(chosen.sum()))

    def merge(self, other: PerplexityAccumulator) -> None:
        """Add the totals of ``other`` (same layout)."""
        if other.layout != self.layout:
            raise ValueError(f"cannot merge a {other.layout!r} accumulator into a {self.layout!r} one.")
        for name in self.TOTALS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The totals as one float64 tensor (in the order of `TOTALS`), e.g. for ``accelerator.reduce``."""
        return torch.tensor([float(getattr(self, name)) for name in self.TOTALS], dtype=torch.float64, device=device)

    def from_tensor(self, tensor: torch.Tensor) -> PerplexityAccumulator:
        """A copy of this accumulator (same layout and baseline) holding the totals of ``tensor`` (`to_tensor`'s
        layout, e.g. reduced over processes)."""
        values = tensor.detach().cpu().double().tolist()
        if len(values) != len(self.TOTALS):
            raise ValueError(f"expected a tensor of {len(self.TOTALS)} totals, got {len(values)}.")
        totals = {
            name: (round(v) if name.endswith(("targets", "examples")) else v)
            for name, v in zip(self.TOTALS, values, strict=False)
        }
        return dataclasses.replace(self, **totals)

    def result(self, *, dataset: str, split: str) -> PerplexityResult:
        """Perplexities of the LM (and the baseline) over everything added.

        Raises `ValueError` when nothing was scored, the two directions scored different numbers of targets, or a
        summed NLL is not finite (perplexities are never written as NaN or infinity)."""
        if self.forward_targets == 0 or self.backward_targets == 0:
            raise ValueError(f"the {split} data of {dataset} gave no targets to score.")
        if self.forward_targets != self.backward_targets:
            raise ValueError(
                f"the forward LM scored {self.forward_targets} targets but the backward LM {self.backward_targets}."
            )
        n = self.forward_targets
        forward, backward, average = _perplexities(self.forward_nll, self.backward_nll, n, "LM")
        unigram = None
        if self.baseline is not None:
            uf, ub, ua = _perplexities(self.unigram_forward_nll, self.unigram_backward_nll, n, "unigram baseline")
            unigram = UnigramBaselineResult(
                forward=uf,
                backward=ub,
                average=ua,
                fitted_on=self.baseline.fitted_on,
                smoothing=self.baseline.smoothing,
            )
        return PerplexityResult(
            dataset=dataset,
            split=split,
            forward=forward,
            backward=backward,
            average=average,
            targets_per_direction=n,
            examples=self.examples,
            unk_rate=self.unk_targets / (2 * n),
            unigram=unigram,
        )


def _perplexities(forward_nll: float, backward_nll: float, n: int, what: str) -> tuple[float, float, float]:
    mean_f, mean_b = forward_nll / n, backward_nll / n
    try:
        values = (math.exp(mean_f), math.exp(mean_b), math.exp(0.5 * (mean_f + mean_b)))
    except OverflowError:
        values = (math.inf,)
    if not all(math.isfinite(v) for v in values):
        raise ValueError(
            f"the {what}'s mean negative log-likelihood is not finite (forward {mean_f}, backward "
            f"{mean_b}): no perplexity can be reported."
        )
    return values


# ----------------------------------------------------------------------------------------------- scoring
#: The most biLM positions `score_batch` runs (and puts through the softmax) at once: scoring memory is bounded by
#: this, not by the length of a line.
MAX_SCORED_POSITIONS = 4096


@dataclasses.dataclass
class BatchScores:
    """Summed NLLs and target counts of one batch, as `PerplexityAccumulator.update` reads them."""

    forward_nll_sum: float = 0.0
    backward_nll_sum: float = 0.0
    num_forward_targets: int = 0
    num_backward_targets: int = 0

    def add(self, forward_nll: Any, backward_nll: Any, forward_targets: Any, backward_targets: Any) -> None:
        self.forward_nll_sum += float(forward_nll)
        self.backward_nll_sum += float(backward_nll)
        self.num_forward_targets += int(forward_targets)
        self.num_backward_targets += int(backward_targets)


def _score_long_sentence(lm: Any, char_ids: torch.Tensor, word_ids: torch.Tensor, max_positions: int) -> BatchScores:
    """One sentence (``char_ids`` (n, C), ``word_ids`` (n,)) scored in chunks of ``max_positions`` positions: the
    forward LM over chunks left to right, the backward LM right to left, each carrying its LSTM state."""
    from ..modeling_elmo import with_sentence_boundaries

    n = char_ids.shape[0]
    device = char_ids.device
    ids, _ = with_sentence_boundaries(
        char_ids[None], torch.ones(1, n, dtype=torch.bool, device=device), torch.tensor([n], device=device)
    )
    config = lm.config
    targets = torch.cat(
        [word_ids.new_tensor([config.bos_token_id]), word_ids, word_ids.new_tensor([config.eos_token_id])]
    )
    steps, half = n + 2, config.projection_dim
    starts = list(range(0, steps, max_positions))
    scores = BatchScores()
    for direction, order, shift in (("forward", starts, 1), ("backward", starts[::-1], -1)):
        state, nll, count = None, 0.0, 0
        for start in order:
            end = min(start + max_positions, steps)
            out = lm.elmo(
                ids[:, start:end],
                attention_mask=torch.ones(1, end - start, dtype=torch.long, device=device),
                add_sentence_boundaries=False,
                lstm_state=state,
                return_lstm_state=True,
                return_dict=True,
            )
            state = out.lstm_state
            top = out.last_hidden_state[0]
            hidden = top[:, :half] if direction == "forward" else top[:, half:]
            predicted = torch.arange(start, end, device=device) + shift  # the position each position predicts
            keep = (predicted >= 0) & (predicted < steps)
            chosen = targets[predicted.clamp(0, steps - 1)]
            keep &= chosen != IGNORE_INDEX
            if bool(keep.any()):
                nll += float(lm.full_softmax_nll(hidden[keep], chosen[keep]).sum())
                count += int(keep.sum())
        if direction == "forward":
            scores.add(nll, 0.0, count, 0)
        else:
            scores.add(0.0, nll, 0, count)
    return scores


@torch.no_grad()
def score_batch(
    lm: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    *,
    layout: str = "sentences",
    max_positions: int = MAX_SCORED_POSITIONS,
) -> BatchScores:
    """Summed forward/backward NLLs of an `ElmoForBidirectionalLM` (exact full softmax) on one right-padded batch
    in ``layout``, with at most ``max_positions`` biLM positions at a time: rows a few at a time, and each
    ``"sentences"`` row longer than that in chunks (`_score_long_sentence`; the same numbers as at once)."""
    _check_layout(layout)
    if max_positions < 2:
        raise ValueError(f"max_positions must be at least 2, got {max_positions}.")
    sentences = layout == "sentences"
    steps = input_ids.shape[1] + (2 if sentences else 0)
    rows = max(1, max_positions // max(steps, 1))
    scores = BatchScores()
    for first in range(0, input_ids.shape[0], rows):
        part = slice(first, first + rows)
        if sentences and steps > max_positions:  # one row per part here
            mask = attention_mask[part][0].bool()
            scores.add(
                *dataclasses.astuple(
                    _score_long_sentence(lm, input_ids[part][0][mask], labels[part][0][mask], max_positions)
                )
            )
            continue
        out = lm(
            input_ids=input_ids[part],
            attention_mask=attention_mask[part],
            labels=labels[part],
            add_sentence_boundaries=sentences,
            return_dict=True,
        )
        scores.add(out.forward_nll_sum, out.backward_nll_sum, out.num_forward_targets, out.num_backward_targets)
    return scores


@torch.no_grad()
def score_batches(
    lm: Any,
    batches: Iterable[dict[str, torch.Tensor]],
    *,
    layout: str = "sentences",
    baseline: UnigramBaseline | None = None,
    device: torch.device | str | None = None,
    autocast: Callable[[], Any] | None = None,
    max_positions: int = MAX_SCORED_POSITIONS,
    on_batch: Callable[[dict[str, torch.Tensor]], None] | None = None,
) -> PerplexityAccumulator:
    """Score ``lm`` (in eval mode: exact full softmax, no dropout) on every batch (``input_ids``,
    ``attention_mask``, ``labels`` with -100 at padding) with `score_batch`, and return the accumulated totals.
    ``autocast`` (e.g. ``accelerator.autocast``) wraps each batch; ``on_batch`` is called after each (a progress
    bar)."""
    was_training = lm.training
    lm.eval()
    accumulator = PerplexityAccumulator(layout=layout, baseline=baseline)
    try:
        for batch in batches:
            inputs = {
                k: batch[k].to(device) if device is not None else batch[k]
                for k in ("input_ids", "attention_mask", "labels")
            }
            with autocast() if autocast is not None else contextlib.nullcontext():
                scores = score_batch(
                    lm,
                    inputs["input_ids"],
                    inputs["attention_mask"],
                    inputs["labels"],
                    layout=layout,
                    max_positions=max_positions,
                )
            accumulator.update(scores, batch["labels"].cpu())
            if on_batch is not None:
                on_batch(batch)
    finally:
        lm.train(was_training)
    return accumulator
