"""`modeling_elmo.evaluation.lm_scoring`: the targets of both layouts, perplexity against an independent per-example
log-softmax, the unigram baseline against hand counts, and the accumulator's merge across processes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from support import assert_same_numbers

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoTokenizer
from modeling_elmo.evaluation.lm_scoring import (
    PerplexityAccumulator,
    UnigramBaseline,
    batch_targets,
    dataset_target_counts,
    example_targets,
    target_counts,
    unigram_log_probs,
)
from modeling_elmo.tokenization_elmo import BOS_ID, EOS_ID

WORDS = ["the", "bank", "river", "money", "a", "good", "bad", "film", "is", "was"]
SENTENCES = [
    ["the", "bank"],
    ["a", "river", "bank", "unknownword"],
    ["money"],
    ["good", "film", "is", "good", "x"],
    ["the", "film", "was", "bad"],
]


@pytest.fixture(scope="module")
def lm_and_tokenizer(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    (root / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    tokenizer = ElmoTokenizer(vocab_file=str(root / "vocab.txt"))
    config = ElmoConfig(
        vocab_size=tokenizer.vocab_size,
        projection_dim=8,
        cell_size=16,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        num_highway_layers=1,
    )
    torch.manual_seed(7)
    return ElmoForBidirectionalLM(config).eval(), tokenizer


def _encode(tokenizer, sentences):
    enc = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt", return_word_ids=True)
    labels = enc["word_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    return enc["input_ids"], enc["attention_mask"], labels


def _accumulate(lm, tokenizer, sentences, layout="sentences", baseline=None, batch_size=2):
    accumulator = PerplexityAccumulator(layout=layout, baseline=baseline)
    for start in range(0, len(sentences), batch_size):
        input_ids, mask, labels = _encode(tokenizer, sentences[start : start + batch_size])
        with torch.no_grad():
            output = lm(
                input_ids=input_ids, attention_mask=mask, labels=labels, add_sentence_boundaries=layout == "sentences"
            )
        accumulator.update(output, labels)
    return accumulator


def _log_softmax_nll(lm, tokenizer, words, boundaries):
    """Summed forward and backward NLL of one example: explicit log-softmax over the whole vocabulary."""
    input_ids, mask, _ = _encode(tokenizer, [words])
    with torch.no_grad():
        top = lm(
            input_ids=input_ids, attention_mask=mask, add_sentence_boundaries=boundaries, keep_sentence_boundaries=True
        ).last_hidden_state[0]
        P = lm.config.projection_dim
        logp_f = torch.log_softmax(lm.softmax(top[:, :P]).double(), -1)
        logp_b = torch.log_softmax(lm.softmax(top[:, P:]).double(), -1)
    ids = tokenizer.word_ids_of(words)
    if boundaries:
        ids = [BOS_ID] + ids + [EOS_ID]
    nll_f = -sum(float(logp_f[t, ids[t + 1]]) for t in range(len(ids) - 1))
    nll_b = -sum(float(logp_b[t, ids[t - 1]]) for t in range(1, len(ids)))
    return nll_f, nll_b


# ----------------------------------------------------------------------------------------------- targets
def test_targets_of_a_sentence_add_boundaries_and_of_a_window_shift_by_one():
    assert example_targets([5, 6, 3], "sentences") == ([5, 6, 3, EOS_ID], [BOS_ID, 5, 6, 3])
    assert example_targets([1, 5, 6, 2], "windows") == ([5, 6, 2], [1, 5, 6])
    assert example_targets([], "sentences") == ([], [])
    labels = torch.tensor([[5, 6, -100], [7, 8, 9], [-100, -100, -100]])
    forward, backward = batch_targets(labels, "sentences")
    assert forward.tolist() == [5, 6, EOS_ID, 7, 8, 9, EOS_ID] and backward.tolist() == [BOS_ID, 5, 6, BOS_ID, 7, 8, 9]
    with pytest.raises(ValueError, match="layout must be one of"):
        example_targets([1], "documents")


def test_target_counts_of_a_tokenised_dataset_equal_those_of_word_id_lists():
    import datasets

    examples = [[4, 5, 3], [5], []]
    ds = datasets.Dataset.from_dict({"word_ids": examples, "oov": [["zz"], [], []], "length": [3, 1, 0]})
    fwd, bwd = dataset_target_counts(ds, 7, "sentences")
    assert fwd.tolist() == [0, 0, 2, 1, 1, 2, 0] and bwd.tolist() == [0, 2, 0, 1, 1, 2, 0]
    fwd, bwd = dataset_target_counts(ds, 7, "windows")
    assert fwd.tolist() == [0, 0, 0, 1, 0, 1, 0] and bwd.tolist() == [0, 0, 0, 0, 1, 1, 0]
    for layout in ("sentences", "windows"):
        from_lists = target_counts(examples, 7, layout)
        from_dataset = dataset_target_counts(ds, 7, layout)
        streamed = dataset_target_counts(ds.to_iterable_dataset(), 7, layout)
        for a, b, c in zip(from_lists, from_dataset, streamed, strict=False):
            assert a.tolist() == b.tolist() == c.tolist(), layout
    with pytest.raises(ValueError, match="word id 9 is outside the vocabulary of 7"):
        target_counts([[9]], 7)


# ----------------------------------------------------------------------------------------------- unigram baseline
def test_unigram_log_probs_are_add_k_over_the_non_padding_ids():
    logp = unigram_log_probs(np.array([0, 0, 2, 1, 1, 2, 0]))
    np.testing.assert_allclose(np.exp(logp[1:]), (np.array([0, 2, 1, 1, 2, 0]) + 1) / 12)  # (c + 1) / (6 + 6)
    assert logp[0] == -np.inf
    logp = unigram_log_probs(np.array([0, 0, 2, 1, 1, 2, 0]), smoothing=0.5)
    np.testing.assert_allclose(np.exp(logp[1:]), (np.array([0, 2, 1, 1, 2, 0]) + 0.5) / 9)
    with pytest.raises(ValueError, match="smoothing must be >= 0"):
        unigram_log_probs(np.ones(5), smoothing=-1)


def test_unigram_baseline_perplexity_matches_hand_computation(lm_and_tokenizer):
    lm, tokenizer = lm_and_tokenizer
    the, bank = tokenizer.word_ids_of(["the", "bank"])
    sentence = [["the", "the", "bank"]]
    # fitted on the evaluation sentence, unsmoothed: forward targets the the bank </S>: p = 1/2, 1/2, 1/4, 1/4
    baseline = UnigramBaseline.fit(
        target_counts([[the, the, bank]], tokenizer.vocab_size), fitted_on="itself", smoothing=0.0
    )
    result = _accumulate(lm, tokenizer, sentence, baseline=baseline).result(dataset="d", split="test")
    assert result.unigram.forward == pytest.approx(2**1.5)
    assert result.unigram.backward == pytest.approx(2**1.5)  # <S> the the bank: the same distribution
    assert result.unigram.average == pytest.approx(2**1.5)
    assert (result.unigram.fitted_on, result.unigram.smoothing) == ("itself", 0.0)
    # add-1 over the 13 ids of the vocabulary of 14 except <pad>, fitted on "the </S>" / "<S> the"
    baseline = UnigramBaseline.fit(target_counts([[the]], tokenizer.vocab_size), fitted_on="the", smoothing=1.0)
    result = _accumulate(lm, tokenizer, [["bank"]], baseline=baseline).result(dataset="d", split="test")
    p_bank, p_boundary = 1 / 15, 2 / 15
    assert result.unigram.forward == pytest.approx(math.exp(-(math.log(p_bank) + math.log(p_boundary)) / 2))
    assert result.unigram.backward == pytest.approx(result.unigram.forward)


def test_a_target_the_baseline_never_saw_without_smoothing_is_an_error_naming_it(lm_and_tokenizer):
    lm, tokenizer = lm_and_tokenizer
    baseline = UnigramBaseline.fit(
        target_counts([tokenizer.word_ids_of(["the"])], tokenizer.vocab_size), fitted_on="the", smoothing=0.0
    )
    bank = tokenizer.word_ids_of(["bank"])[0]
    with pytest.raises(ValueError, match=f"word id {bank} has zero unigram probability"):
        _accumulate(lm, tokenizer, [["bank"]], baseline=baseline)


# ----------------------------------------------------------------------------------------------- the LM
def test_sentence_perplexity_matches_a_per_sentence_full_softmax(lm_and_tokenizer):
    lm, tokenizer = lm_and_tokenizer
    result = _accumulate(lm, tokenizer, SENTENCES, batch_size=2).result(dataset="toy", split="validation")
    nll_f = nll_b = 0.0
    for words in SENTENCES:
        f, b = _log_softmax_nll(lm, tokenizer, words, boundaries=True)
        nll_f, nll_b = nll_f + f, nll_b + b
    n = sum(len(s) + 1 for s in SENTENCES)
    assert (result.targets_per_direction, result.examples, result.dataset, result.split) == (n, 5, "toy", "validation")
    assert result.unk_rate == pytest.approx(2 * 2 / (2 * n))  # "unknownword" and "x", in both directions
    assert_same_numbers(result.forward, math.exp(nll_f / n), what="forward")
    assert_same_numbers(result.backward, math.exp(nll_b / n), what="backward")
    assert_same_numbers(result.average, math.exp(0.5 * (nll_f + nll_b) / n), what="average")
    assert result.average == pytest.approx(math.sqrt(result.forward * result.backward), rel=1e-12)
    assert result.unigram is None


def test_window_perplexity_scores_tokens_two_to_n_forward_and_one_to_n_minus_one_backward(lm_and_tokenizer):
    lm, tokenizer = lm_and_tokenizer
    windows = [["the", "bank", "is", "good"], ["a", "film", "was", "bad"], ["money", "x", "river", "bank"]]
    result = _accumulate(lm, tokenizer, windows, layout="windows", batch_size=2).result(dataset="w", split="test")
    nll_f = nll_b = 0.0
    for words in windows:
        f, b = _log_softmax_nll(lm, tokenizer, words, boundaries=False)
        nll_f, nll_b = nll_f + f, nll_b + b
    assert result.targets_per_direction == 3 * 3
    assert_same_numbers(result.forward, math.exp(nll_f / 9), what="forward")
    assert_same_numbers(result.backward, math.exp(nll_b / 9), what="backward")
    assert result.unk_rate == pytest.approx(2 / 18)  # "x" is a forward and a backward target


def test_labels_fed_in_the_other_layout_are_refused(lm_and_tokenizer):
    lm, tokenizer = lm_and_tokenizer
    input_ids, mask, labels = _encode(tokenizer, SENTENCES[:2])
    with torch.no_grad():
        output = lm(input_ids=input_ids, attention_mask=mask, labels=labels, add_sentence_boundaries=True)
    with pytest.raises(
        ValueError,
        match="the labels give 4/4 forward/backward targets in the 'windows' layout but the model scored 8/8",
    ):
        PerplexityAccumulator(layout="windows").update(output, labels)
    with pytest.raises(ValueError, match="call the model with labels"):
        PerplexityAccumulator().update(lm(input_ids=input_ids, attention_mask=mask), labels)
    with pytest.raises(ValueError, match="gave no targets"):
        PerplexityAccumulator().result(dataset="empty", split="test")


def test_accumulators_merged_or_reduced_as_a_tensor_equal_one_pass(lm_and_tokenizer):
    lm, tokenizer = lm_and_tokenizer
    baseline = UnigramBaseline.fit(
        target_counts([tokenizer.word_ids_of(s) for s in SENTENCES], tokenizer.vocab_size), fitted_on="the sentences"
    )
    one_pass = _accumulate(lm, tokenizer, SENTENCES, baseline=baseline, batch_size=1)
    # two "processes", each with its share of the batches
    first = _accumulate(lm, tokenizer, SENTENCES[0::2], baseline=baseline, batch_size=1)
    second = _accumulate(lm, tokenizer, SENTENCES[1::2], baseline=baseline, batch_size=1)
    reduced = first.from_tensor(first.to_tensor() + second.to_tensor())  # what accelerator.reduce("sum") gives
    first.merge(second)
    expected = one_pass.result(dataset="d", split="s")
    for combined in (first, reduced):
        got = combined.result(dataset="d", split="s")
        assert (got.targets_per_direction, got.examples, got.unk_rate) == (
            expected.targets_per_direction,
            expected.examples,
            expected.unk_rate,
        )
        for name in ("forward", "backward", "average"):
            assert_same_numbers(getattr(got, name), getattr(expected, name), what=name)
            assert_same_numbers(getattr(got.unigram, name), getattr(expected.unigram, name), what=f"unigram {name}")
    assert reduced.to_tensor().dtype == torch.float64 and reduced.baseline is baseline
    with pytest.raises(ValueError, match="cannot merge a 'windows' accumulator"):
        one_pass.merge(PerplexityAccumulator(layout="windows"))


def test_a_non_finite_loss_is_an_error_not_a_nan_perplexity():
    accumulator = PerplexityAccumulator(
        forward_nll=float("nan"), backward_nll=3.0, forward_targets=2, backward_targets=2, examples=1
    )
    with pytest.raises(ValueError, match="not finite"):
        accumulator.result(dataset="d", split="s")
    accumulator = PerplexityAccumulator(forward_nll=1e6, backward_nll=3.0, forward_targets=2, backward_targets=2)
    with pytest.raises(ValueError, match="not finite"):
        accumulator.result(dataset="d", split="s")


# ----------------------------------------------------------------------------------------------- bounded scoring
def test_a_long_line_is_scored_in_chunks_with_the_numbers_of_the_whole_line(lm_and_tokenizer, monkeypatch):
    """A 300-word sentence scored with at most 37 positions at a time (forward chunks left to right, backward chunks
    right to left, each carrying its LSTM state) gives the summed NLLs of an explicit log-softmax over the whole
    sentence at once; neither the biLM nor the softmax ever sees more than 37 positions."""
    from modeling_elmo.evaluation.lm_scoring import score_batch, score_batches

    lm, tokenizer = lm_and_tokenizer
    rng = np.random.default_rng(0)
    words = [WORDS[i] if i < len(WORDS) else "oov" for i in rng.integers(0, len(WORDS) + 2, size=300)]
    nll_f, nll_b = _log_softmax_nll(lm, tokenizer, words, boundaries=True)
    seen = {"elmo": [], "softmax": []}
    elmo_forward, softmax_nll = type(lm.elmo).forward, type(lm).full_softmax_nll
    monkeypatch.setattr(
        type(lm.elmo),
        "forward",
        lambda self, ids, *a, **k: seen["elmo"].append(ids.shape[0] * ids.shape[1]) or elmo_forward(self, ids, *a, **k),
    )
    monkeypatch.setattr(
        type(lm), "full_softmax_nll", lambda self, h, t: seen["softmax"].append(h.shape[0]) or softmax_nll(self, h, t)
    )
    input_ids, mask, labels = _encode(tokenizer, [words])
    scores = score_batch(lm, input_ids, mask, labels, max_positions=37)
    assert max(seen["elmo"]) <= 37 and max(seen["softmax"]) <= 37 and len(seen["elmo"]) == 2 * math.ceil(302 / 37)
    assert (scores.num_forward_targets, scores.num_backward_targets) == (301, 301)
    assert_same_numbers(scores.forward_nll_sum, nll_f, rtol=1e-5, what="forward")
    assert_same_numbers(scores.backward_nll_sum, nll_b, rtol=1e-5, what="backward")
    # through the scoring loop, in a batch with short sentences: the same perplexity as unbounded
    batches = [
        dict(zip(("input_ids", "attention_mask", "labels"), _encode(tokenizer, [words, ["the", "bank"]]), strict=False))
    ]
    bounded = score_batches(lm, batches, max_positions=37).result(dataset="d", split="s")
    whole = score_batches(lm, batches, max_positions=10_000).result(dataset="d", split="s")
    assert bounded.targets_per_direction == whole.targets_per_direction == 301 + 3
    assert_same_numbers(bounded.average, whole.average, rtol=1e-5, what="average")


def test_rows_are_scored_a_few_at_a_time_when_the_batch_is_large(lm_and_tokenizer):
    from modeling_elmo.evaluation.lm_scoring import score_batch

    lm, tokenizer = lm_and_tokenizer
    input_ids, mask, labels = _encode(tokenizer, SENTENCES)
    at_once = score_batch(lm, input_ids, mask, labels, max_positions=1000)
    by_rows = score_batch(lm, input_ids, mask, labels, max_positions=8)  # 7 positions a row: one row per call
    assert (at_once.num_forward_targets, at_once.num_backward_targets) == (
        by_rows.num_forward_targets,
        by_rows.num_backward_targets,
    )
    assert_same_numbers(by_rows.forward_nll_sum, at_once.forward_nll_sum, rtol=1e-5, what="forward")
    assert_same_numbers(by_rows.backward_nll_sum, at_once.backward_nll_sum, rtol=1e-5, what="backward")


def test_pretraining_and_elmo_evaluate_score_through_the_one_loop():
    import inspect

    from modeling_elmo.evaluation import tasks
    from modeling_elmo.pretraining import evaluation

    for module in (tasks, evaluation):
        source = inspect.getsource(module)
        assert "score_batches(" in source and "PerplexityAccumulator(" not in source, module.__name__
