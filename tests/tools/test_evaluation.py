"""Tests of the evaluation suite (`modeling_elmo.evaluation`): data readers, the WSD set builder, the
nearest-neighbour sense scorer, metrics, probes on cached features, perplexity, the results files, progress bars
and the CLI's handling of bad input (one line, no traceback)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from support import assert_same_numbers
from support.evaluation import TINY

from modeling_elmo.evaluation import data as ev_data
from modeling_elmo.evaluation.metrics import (
    accuracy,
    correctness,
    masked_token_accuracy,
    mcnemar_exact,
    most_frequent_tag_accuracy,
)
from modeling_elmo.evaluation.wsd import DEFAULT_WSD_SET, SENSEVAL_TSV, build_wsd_subset, score_nearest_neighbour
from modeling_elmo.folders.run_folder import RunFolder
from modeling_elmo.utils.results import read_results


# ---------------------------------------------------------------------------------------------- WSD scorer
def _hand_example():
    # bank: o0, o1, o2 identical direction; o3 and o4 close to each other.
    vecs = np.array(
        [
            [1.0, 0.0],
            [1.0, 0.0],
            [1.0, 0.0],
            [0.0, 1.0],
            [0.6, 0.8],  # bank
            [5.0, 1.0],  # cell: only one occurrence -> skipped
            [1.0, 2.0],
            [2.0, 1.0],
        ]  # plant: two occurrences of different senses -> both wrong
    )
    words = ["bank"] * 5 + ["cell"] + ["plant"] * 2
    senses = ["money", "money", "river", "river", "river", "bio", "factory", "flora"]
    return vecs, words, senses


def test_nearest_neighbour_scorer_matches_hand_worked_example():
    # Worked by hand (cosines): o0's nearest are o1 (money) and o2 (river) at 1.0 -> tie; o1 likewise -> tie;
    # o2's nearest are o0 and o1, both money -> wrong; o3's nearest is o4 (0.8, river) -> correct;
    # o4's nearest is o3 (0.8 > 0.6) -> correct. plant: 2 wrong. cell: skipped.
    vecs, words, senses = _hand_example()
    r = score_nearest_neighbour(vecs, words, senses)
    assert (r["scored"], r["skipped"], r["correct"], r["wrong"], r["ties"]) == (7, 1, 2, 3, 2)
    assert r["accuracy"] == pytest.approx(2 / 5)
    assert r["accuracy_ties_half"] == pytest.approx((2 + 0.5 * 2) / 7)
    bank = r["per_word"]["bank"]
    assert (bank["correct"], bank["wrong"], bank["ties"]) == (2, 1, 2)
    assert bank["accuracy"] == pytest.approx(2 / 3) and bank["accuracy_ties_half"] == pytest.approx(3 / 5)
    # chance: bank 1/4 + 1/4 + 2/4 + 2/4 + 2/4, plant 0 + 0, over 7 scored
    assert r["chance"] == pytest.approx(2.0 / 7)
    assert r["per_word"]["cell"]["skipped"] == 1 and r["per_word"]["cell"]["accuracy"] is None


def test_ties_are_not_resolved_by_list_order():
    vecs, words, senses = _hand_example()
    base = score_nearest_neighbour(vecs, words, senses)
    rng = np.random.default_rng(0)
    for _ in range(5):
        perm = rng.permutation(len(words))
        r = score_nearest_neighbour(vecs[perm], [words[i] for i in perm], [senses[i] for i in perm])
        for key in ("scored", "correct", "wrong", "ties", "accuracy", "accuracy_ties_half", "chance"):
            assert r[key] == pytest.approx(base[key]), key


def test_identical_context_free_vectors_are_all_ties_not_fifty_percent():
    # The seed's layer-0 artefact: every occurrence of a word has the same vector. Picking the first
    # neighbour gives a number that depends on list order; the scorer must report only ties.
    vecs = np.tile(np.array([[0.3, -1.2, 2.0]]), (8, 1))
    vecs[1, 0] += 1e-4  # float noise: cosine changes by ~1e-9, below the tolerance, so still a tie
    words = ["bank"] * 8
    senses = ["money", "river"] * 4
    r = score_nearest_neighbour(vecs, words, senses)
    assert r["ties"] == 8 and r["correct"] == 0 and r["wrong"] == 0
    assert r["accuracy"] is None
    assert r["accuracy_ties_half"] == pytest.approx(0.5)


def test_tie_tolerance_decides_what_counts_as_equally_near():
    # q's two neighbours differ in cosine by about 5e-8: a tie at the default tolerance 1e-6, not at 0.
    vecs = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 3.2e-4]])
    words, senses = ["w"] * 3, ["a", "a", "b"]
    assert score_nearest_neighbour(vecs, words, senses)["per_word"]["w"]["ties"] >= 1
    strict = score_nearest_neighbour(vecs, words, senses, tie_tolerance=0.0)
    assert strict["ties"] == 0 and strict["correct"] == 2 and strict["wrong"] == 1


def test_ties_within_one_sense_are_decided():
    # Two equally near neighbours of the same sense are not a tie: the answer is the same either way.
    vecs = np.array([[1.0, 0.0], [1.0, 0.1], [1.0, -0.1], [-1.0, 0.0]])
    r = score_nearest_neighbour(vecs, ["w"] * 4, ["a", "a", "a", "b"])
    assert r["ties"] == 0
    assert r["correct"] == 3 and r["wrong"] == 1


def test_scorer_rejects_mismatched_lengths_and_nan():
    with pytest.raises(ValueError, match="3 embeddings, 2 words"):
        score_nearest_neighbour(np.zeros((3, 2)), ["a", "a"], ["x", "y", "z"])
    with pytest.raises(ValueError, match="NaN"):
        score_nearest_neighbour(np.array([[np.nan, 1.0], [1.0, 1.0]]), ["a", "a"], ["x", "y"])


# ---------------------------------------------------------------------------------------------- WSD data
def _write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_wsd_reader_finds_word_without_index_and_groups_by_lemma(tmp_path):
    f = _write_jsonl(
        tmp_path / "w.jsonl",
        [
            {"tokens": ["she", "served", "tea"], "word": "served", "lemma": "serve", "sense": "SERVE10"},
            {"tokens": ["they", "serve", "it"], "index": 1, "word": "serve", "lemma": "serve", "sense": "SERVE2"},
            "",
            {"tokens": ["the", "bank", "of", "the", "bank"], "index": 4, "word": "bank", "sense": "bank%1:17:01::"},
        ],
    )
    occ = ev_data.read_wsd_jsonl(f)
    assert [(o.index, o.word, o.sense, o.line) for o in occ] == [
        (1, "serve", "SERVE10", 1),
        (1, "serve", "SERVE2", 2),
        (4, "bank", "bank%1:17:01::", 4),
    ]


@pytest.mark.parametrize(
    "record, message",
    [
        ({"tokens": ["a", "b"], "word": "bank", "sense": "x"}, "word 'bank' does not occur in its sentence"),
        ({"tokens": ["a", "b"], "index": 1, "word": "bank", "sense": "x"}, "missing from its sentence at index 1"),
        ({"tokens": ["a", "b"], "index": 5, "word": "b", "sense": "x"}, "'index' 5 is not a position"),
        ({"tokens": ["bank", "bank"], "word": "bank", "sense": "x"}, "occurs 2 times"),
        ({"tokens": ["a", "bank"], "word": "bank", "sense": "money sense"}, "unknown sense label format 'money sense'"),
        ({"tokens": ["a", "bank"], "word": "bank", "sense": 3}, "unknown sense label format 3"),
        ({"tokens": ["a", "bank"], "word": "bank"}, "unknown sense label format None"),
        ({"tokens": [], "word": "bank", "sense": "x"}, "'tokens' must be a non-empty list"),
        ("{not json", "not valid JSON"),
    ],
)
def test_wsd_reader_rejects_bad_records_naming_the_line(tmp_path, record, message):
    good = {"tokens": ["a", "bank"], "word": "bank", "sense": "money"}
    f = _write_jsonl(tmp_path / "bad.jsonl", [good, record])
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: ") as err:
        ev_data.read_wsd_jsonl(f)
    assert message in str(err.value)


def test_binary_or_missing_files_are_refused_naming_the_file(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"\x80\x04\x95weights\n\x00\xff")
    with pytest.raises(ValueError, match=r"text file '.*model\.bin' is not text: line 2 holds a NUL byte"):
        ev_data.read_text_sentences(tmp_path / "model.bin")
    (tmp_path / "zeros.txt").write_bytes(b"ok\n\x00\x00\x00\n")
    with pytest.raises(ValueError, match=r"zeros\.txt' is not text: line 2 holds a NUL byte"):
        ev_data.read_text_sentences(tmp_path / "zeros.txt")
    with pytest.raises(ValueError, match="CoNLL-U file '.*missing.conllu' does not exist"):
        ev_data.read_conllu(tmp_path / "missing.conllu")
    (tmp_path / "bom.txt").write_bytes("\ufeffthe cat\n".encode())
    assert ev_data.read_text_sentences(tmp_path / "bom.txt") == [["the", "cat"]]


def test_empty_inputs_are_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ValueError, match="empty"):
        ev_data.read_wsd_jsonl(tmp_path / "empty.jsonl")
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        ev_data.read_text_sentences(tmp_path / "empty.txt")
    (tmp_path / "dev.tsv").write_text("label\tcontent\n")
    with pytest.raises(ValueError, match="empty"):
        ev_data.read_sst2(tmp_path / "dev.tsv")


def test_wsd_builder_is_balanced_and_reproducible(tmp_path):
    header = "lexelt\tinstance_id\tsenses\ttarget_index\ttext\tpos_tags\n"
    rows = []
    for item, word in (("hard-a", "hard"), ("line-n", "line")):
        for s, count in (("A", 6), ("B", 5), ("C", 2)):
            for k in range(count):
                text = f"the {word} thing number {k} {s.lower()}"
                rows.append(f"{item}\t{item}.{s}{k}\t{s}\t1\t{text}\tDT NN NN NN CD NN\n")
    rows.append("hard-a\tlong\tA\t0\thard " + " ".join(["x"] * 50) + "\t_\n")
    tsv = tmp_path / "senseval.tsv"
    tsv.write_text(header + "".join(rows))
    s1 = build_wsd_subset(tsv, tmp_path / "a.jsonl", senses_per_word=2, per_sense=4, max_tokens=10, seed=3)
    s2 = build_wsd_subset(tsv, tmp_path / "b.jsonl", senses_per_word=2, per_sense=4, max_tokens=10, seed=3)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert s1 == s2 and s1["occurrences"] == 16
    occ = ev_data.read_wsd_jsonl(tmp_path / "a.jsonl")
    counts = {}
    for o in occ:
        counts[(o.word, o.sense)] = counts.get((o.word, o.sense), 0) + 1
        assert len(o.tokens) <= 10
    assert counts == {("hard", "A"): 4, ("hard", "B"): 4, ("line", "A"): 4, ("line", "B"): 4}
    with pytest.raises(ValueError, match="only 5 contexts"):
        build_wsd_subset(tsv, tmp_path / "c.jsonl", senses_per_word=2, per_sense=6, max_tokens=10)


def test_shipped_wsd_set_is_what_the_builder_makes_from_shared_data(tmp_path, shared_data):
    summary = build_wsd_subset(shared_data / SENSEVAL_TSV, tmp_path / "rebuilt.jsonl")
    assert (tmp_path / "rebuilt.jsonl").read_bytes() == DEFAULT_WSD_SET.read_bytes()
    assert summary["occurrences"] == 360
    assert DEFAULT_WSD_SET.stat().st_size < 200_000
    occ = ev_data.read_wsd_jsonl(DEFAULT_WSD_SET)
    assert sorted({o.word for o in occ}) == ["hard", "interest", "line", "serve"]


# ---------------------------------------------------------------------------------------------- other readers
def test_sst2_reader_accepts_both_column_orders(tmp_path):
    (tmp_path / "a.tsv").write_text("label\tsentence\n1\ta fine film\n0\tdull\n")
    (tmp_path / "b.tsv").write_text("sentence\tlabel\na fine film\t1\ndull\t0\n")
    for name in ("a.tsv", "b.tsv"):
        got = ev_data.read_sst2(tmp_path / name)
        assert [(s.tokens, s.label) for s in got] == [(["a", "fine", "film"], 1), (["dull"], 0)]
    (tmp_path / "c.tsv").write_text("label\tsentence\n1\tok\n2\tbad label\n")
    with pytest.raises(ValueError, match=r"c\.tsv:3: label must be 0 or 1, got '2'"):
        ev_data.read_sst2(tmp_path / "c.tsv")


def test_conllu_reader_skips_multiword_ranges_and_empty_nodes(tmp_path):
    text = (
        "# sent_id = s1\n"
        "1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_\n"
        "2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_\n"
        "2.1\tgo\tgo\tVERB\tVB\t_\t_\t_\t_\t_\n"
        "3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_\n"
        "\n"
        "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n"
    )
    (tmp_path / "x.conllu").write_text(text)
    got = ev_data.read_conllu(tmp_path / "x.conllu")
    assert [(s.tokens, s.tags) for s in got] == [(["do", "n't", "go"], ["AUX", "PART", "VERB"]), (["Hi"], ["INTJ"])]
    assert [s.tags for s in ev_data.read_conllu(tmp_path / "x.conllu", column="xpos")] == [["VBP", "RB", "VB"], ["UH"]]


def test_ptb_sample_split_keeps_documents_on_one_side(tmp_path):
    lines = []
    for f in range(5):
        lines.append(f"# wsj_000{f}.mrg")
        for s in range(2):
            lines += [f"w{f}{s}\tNN", "#\t#", ".\t.", ""]
    (tmp_path / "t.tsv").write_text("\n".join(lines) + "\n")
    sents = ev_data.read_ptb_tagged(tmp_path / "t.tsv")
    assert len(sents) == 10 and sents[0].tokens == ["w00", "#", "."] and sents[0].tags == ["NN", "#", "."]
    train, dev = ev_data.split_ptb_by_file(sents, dev_fraction=0.2)
    assert {s.source for s in dev} == {"wsj_0004.mrg"} and len(train) == 8


def test_shared_pos_and_sentiment_files_parse(shared_data):
    ud = ev_data.read_conllu(shared_data / "pos-ud-ewt" / "en_ewt-ud-dev.conllu", max_sentences=50)
    assert len(ud) == 50 and all(len(s.tokens) == len(s.tags) for s in ud)
    assert set(t for s in ud for t in s.tags) <= {
        "ADJ",
        "ADP",
        "ADV",
        "AUX",
        "CCONJ",
        "DET",
        "INTJ",
        "NOUN",
        "NUM",
        "PART",
        "PRON",
        "PROPN",
        "PUNCT",
        "SCONJ",
        "SYM",
        "VERB",
        "X",
    }
    sst = ev_data.read_sst2(shared_data / "sentiment-sst2" / "dev.tsv")
    assert len(sst) == 872 and sum(s.label for s in sst) == 444


# ---------------------------------------------------------------------------------------------- metrics
def test_numpy_metrics_match_hand_counts():
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    logits = np.zeros((2, 3, 4))
    logits[0, 0, 2] = logits[0, 1, 1] = logits[1, 0, 3] = 1.0
    labels = np.array([[2, 0, -100], [3, -100, -100]])
    assert masked_token_accuracy(logits, labels) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="empty"):
        accuracy([], [])


def test_mcnemar_exact_matches_hand_computed_binomial_tails():
    # 8 examples only a gets right, 2 only b: p = 2 * P(X <= 2), X ~ Bin(10, 1/2) = 2 * (1 + 10 + 45) / 1024
    a = np.array([1] * 8 + [0] * 2 + [1] * 5 + [0] * 3, dtype=bool)
    b = np.array([0] * 8 + [1] * 2 + [1] * 5 + [0] * 3, dtype=bool)
    r = mcnemar_exact(a, b)
    assert (r["examples"], r["a_only"], r["b_only"]) == (18, 8, 2)
    assert r["p_value"] == pytest.approx(2 * 56 / 1024, rel=1e-12)
    assert r["difference"] == pytest.approx((8 - 2) / 18)
    assert mcnemar_exact(b, a)["p_value"] == pytest.approx(r["p_value"], rel=1e-12)  # symmetric
    assert mcnemar_exact([1, 0, 1], [1, 0, 1])["p_value"] == 1.0  # no discordant example
    assert mcnemar_exact([1, 0], [0, 1])["p_value"] == 1.0  # balanced: 2 * P(X <= 1 | n=2) = 1.5, capped
    # a large, lopsided split (log-space sum): 30 vs 0 of 30 discordant -> 2 / 2**30
    big = mcnemar_exact(np.ones(20_030, bool), np.r_[np.zeros(30, bool), np.ones(20_000, bool)])
    assert big["p_value"] == pytest.approx(2 / 2**30, rel=1e-9)
    with pytest.raises(ValueError, match="shape"):
        mcnemar_exact([1, 0], [1])
    assert correctness(np.array([[0.1, 0.9], [0.8, 0.2]]), np.array([1, 1])).tolist() == [True, False]
    assert correctness(np.array([[2, 0, 1]]), np.array([[2, -100, 0]])).tolist() == [True, False]


# ================================================================================ with a tiny model
torch = pytest.importorskip("torch")


def test_suite_perplexity_does_not_depend_on_batch_size_or_sentence_order(tiny):
    # The numbers themselves are checked against a per-sentence log-softmax in test_lm_scoring.py.
    from modeling_elmo.evaluation.tasks import fit_unigram_baseline, lm_perplexity

    lm, tok, _, _ = tiny
    sents = [["the", "bank"], ["a", "river", "bank", "unknownword"], ["money"], ["good", "film", "is", "good", "x"]]
    baseline = fit_unigram_baseline(tok, sents, fitted_on="itself", progress=False)
    one = lm_perplexity(lm, tok, sents, dataset="d", baseline=baseline, batch_size=1, progress=False)
    many = lm_perplexity(lm, tok, sents[::-1], dataset="d", baseline=baseline, batch_size=3, progress=False)
    assert (one.targets_per_direction, one.examples, one.unk_rate) == (2 + 4 + 1 + 5 + 4, 4, 2 * 2 / (2 * 16))
    assert (many.targets_per_direction, many.unk_rate) == (one.targets_per_direction, one.unk_rate)
    for name in ("forward", "backward", "average"):
        assert_same_numbers(getattr(many, name), getattr(one, name), what=name)
        assert_same_numbers(getattr(many.unigram, name), getattr(one.unigram, name), what=f"unigram {name}")
    assert one.unigram.fitted_on == "itself"


def test_model_without_word_vocabulary_refuses_perplexity(tmp_path, capsys):
    from modeling_elmo import ElmoConfig, ElmoModel
    from modeling_elmo.evaluation.cli import main

    ElmoModel(ElmoConfig(**TINY)).save_pretrained(tmp_path / "fe")
    (tmp_path / "t.txt").write_text("the bank\n")
    with pytest.raises(SystemExit) as err:
        main([str(tmp_path / "fe"), "--task", "perplexity", "--text", str(tmp_path / "t.txt")])
    assert err.value.code == 2
    assert "no language-model head (vocab_size=4, no word vocabulary)" in capsys.readouterr().err


def test_wsd_probe_on_model_reports_context_free_layer_as_ties(tiny):
    from modeling_elmo.evaluation.data import WsdOccurrence
    from modeling_elmo.evaluation.tasks import wsd_probe

    lm, tok, _, _ = tiny
    occ = [
        WsdOccurrence(["the", "bank", "of", "the", "river"], 1, "bank", "river"),
        WsdOccurrence(["a", "bank", "loan"], 1, "bank", "money"),
        WsdOccurrence(["money", "in", "the", "bank"], 3, "bank", "money"),
        WsdOccurrence(["river", "bank", "mud", "is", "wet"], 1, "bank", "river"),
    ]
    r = wsd_probe(lm.elmo, tok, occ)
    assert set(r["layers"]) == {"0", "1", "2"}
    assert r["layers"]["0"]["ties"] == 4 and r["layers"]["0"]["accuracy"] is None
    for layer in ("1", "2"):  # contextual layers differ per sentence: no exact ties
        assert r["layers"][layer]["ties"] == 0 and r["layers"][layer]["scored"] == 4


def test_cached_features_give_the_same_logits_as_running_the_biLM(tiny):
    from modeling_elmo import ElmoForSequenceClassification, ElmoForTokenClassification
    from modeling_elmo.evaluation.tasks import collate_cached, compute_layer_features

    lm, tok, config, _ = tiny
    sents = [["the", "good", "film"], ["bad"], ["a", "bank", "is", "money", "river"]]
    feats = compute_layer_features(lm.elmo, tok, sents, batch_size=2, dtype=torch.float32)
    cfg = config.__class__.from_dict(config.to_dict())
    cfg.num_labels, cfg.scalar_mix_layer_norm = 3, True
    for head_class, labels in (
        (ElmoForSequenceClassification, [0, 1, 2]),
        (ElmoForTokenClassification, [[0] * len(s) for s in sents]),
    ):
        torch.manual_seed(1)
        head = head_class(cfg).eval()
        head.elmo.load_state_dict(lm.elmo.state_dict())
        with torch.no_grad():
            head.scalar_mix.scalar_parameters.normal_()
            batch = collate_cached(
                [{"elmo_hidden_states": f, "labels": y} for f, y in zip(feats, labels, strict=False)]
            )
            cached = head(elmo_hidden_states=batch["elmo_hidden_states"], attention_mask=batch["attention_mask"]).logits
            direct = head(**tok(sents, is_split_into_words=True, padding=True, return_tensors="pt")).logits
        torch.testing.assert_close(cached, direct, rtol=1e-5, atol=1e-5)


def test_standardized_cached_features_use_training_statistics():
    from modeling_elmo.evaluation.tasks import CachedFeatureDataset, feature_statistics

    g = torch.Generator().manual_seed(0)
    # large constant offsets, tiny spread: what an undertrained biLM can give
    train = [(5.0 + 0.01 * torch.randn(3, t, 4, generator=g)).half() for t in (2, 5, 3)]
    dev = [(5.0 + 0.01 * torch.randn(3, 4, 4, generator=g)).half()]
    mean, std = feature_statistics(train)
    tokens = torch.cat([f.double() for f in train], dim=1)  # (3, 10, 4)
    torch.testing.assert_close(mean, tokens.mean(1, keepdim=True).float())
    torch.testing.assert_close(std, tokens.std(1, unbiased=False, keepdim=True).float(), rtol=1e-3, atol=1e-6)
    ds = CachedFeatureDataset(train, [0, 1, 0], mean, std)
    z = torch.cat([ds[i]["elmo_hidden_states"] for i in range(3)], dim=1)
    torch.testing.assert_close(z.mean(1), torch.zeros(3, 4), atol=1e-4, rtol=0)
    torch.testing.assert_close(z.std(1, unbiased=False), torch.ones(3, 4), atol=1e-3, rtol=0)
    dev_item = CachedFeatureDataset(dev, [1], mean, std)[0]["elmo_hidden_states"]
    torch.testing.assert_close(dev_item, (dev[0].float() - mean) / std)


def _synthetic(n, seed, token_level):
    """Random (3, T, 16) features; the label is the sign of feature 5 of layer 2 (per sentence: of its mean)."""
    g = torch.Generator().manual_seed(seed)
    feats, labels = [], []
    for _ in range(n):
        t = int(torch.randint(2, 6, (1,), generator=g))
        f = torch.randn(3, t, 16, generator=g)
        if token_level:
            labels.append([int(v > 0) for v in f[2, :, 5]])
        else:
            labels.append(int(f[2, :, 5].mean() > 0))
        feats.append(f)
    return feats, labels


@pytest.mark.parametrize("token_level", [False, True])
@pytest.mark.slow
def test_probes_learn_an_easy_signal_only_from_the_layer_that_has_it(tiny, token_level):
    from modeling_elmo import ElmoForSequenceClassification, ElmoForTokenClassification
    from modeling_elmo.evaluation.tasks import probe_task

    _, _, config, _ = tiny
    xtr, ytr = _synthetic(200, 0, token_level)
    xdev, ydev = _synthetic(150, 1, token_level)
    head = ElmoForTokenClassification if token_level else ElmoForSequenceClassification
    r = probe_task(
        xtr,
        ytr,
        xdev,
        ydev,
        config,
        head,
        2,
        token_level,
        layers=[0, 2, "mix"],
        epochs=30,
        learning_rate=5e-2,
        batch_size=32,
    )
    acc = {k: v["accuracy"] for k, v in r["layers"].items()}
    assert acc["2"] > 0.85 and acc["mix"] > 0.8, acc
    assert abs(acc["0"] - 0.5) < 0.15, acc  # layer 0 carries no signal: chance
    weights = r["layers"]["mix"]["mixture"]["weights"]
    assert len(weights) == 3 and sum(weights) == pytest.approx(1.0, abs=1e-5)
    assert weights[2] == max(weights)


# ---------------------------------------------------------------------------------------------- CLI end to end
def _fixture_data(root: Path) -> Path:
    (root / "sentiment-sst2").mkdir(parents=True)
    good = ["good film", "a good film", "the film is good", "good"]
    bad = ["bad film", "a bad film", "the film was bad", "bad"]
    rows = [f"1\t{s}" for s in good] + [f"0\t{s}" for s in bad]
    (root / "sentiment-sst2" / "train.tsv").write_text("label\tsentence\n" + "\n".join(rows * 3) + "\n")
    (root / "sentiment-sst2" / "dev.tsv").write_text("label\tcontent\n" + "\n".join(rows) + "\n")
    (root / "pos-ud-ewt").mkdir()
    conllu = (
        "1\tthe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tfilm\tfilm\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
        "3\tis\tbe\tAUX\tVBZ\t_\t0\troot\t_\t_\n4\tgood\tgood\tADJ\tJJ\t_\t3\txcomp\t_\t_\n\n"
    )
    (root / "pos-ud-ewt" / "en_ewt-ud-train.conllu").write_text(conllu * 6)
    (root / "pos-ud-ewt" / "en_ewt-ud-dev.conllu").write_text(conllu * 2)
    return root


def _write_metrics(path: Path) -> None:
    """The pretraining metrics.jsonl layout: training records and split-tagged evaluation records."""
    records = [{"step": s, "train_loss": 5.0 / s, "train_ppl": math.exp(5.0 / s), "lr": 0.1} for s in (1, 2, 4)]
    records += [
        {"step": 2, "split": "validation", "perplexity": 90.0, "unigram_perplexity": 300.0},
        {"step": 4, "split": "validation", "perplexity": 60.0, "unigram_perplexity": 300.0},
        {"step": 4, "split": "validation", "perplexity": 50.0, "unigram_perplexity": 300.0},
    ]  # re-logged
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_training_curves_separate_train_and_validation_and_keep_the_last_of_a_step(tmp_path):
    from modeling_elmo.evaluation.report import read_training_curves

    _write_metrics(tmp_path / "metrics.jsonl")
    series = read_training_curves(RunFolder(tmp_path))
    assert series == {
        "train perplexity": [(1, math.exp(5.0)), (2, math.exp(2.5)), (4, math.exp(1.25))],
        "validation perplexity": [(2, 90.0), (4, 50.0)],
    }
    assert read_training_curves(RunFolder(tmp_path / "nothing")) == {}


def test_most_frequent_tag_baseline_tags_each_word_as_in_training_and_unseen_words_with_the_commonest_tag():
    train_words = [["the", "bank", "runs"], ["the", "runs"], ["a", "bank"]]
    train_tags = [["DET", "NOUN", "VERB"], ["DET", "NOUN"], ["DET", "NOUN"]]
    # runs: VERB and NOUN once each -> VERB (seen first); river: unseen -> the commonest tag overall, DET (3 of 7)
    dev_words, dev_tags = [["the", "runs", "river"], ["bank"]], [["DET", "VERB", "NOUN"], ["NOUN"]]
    assert most_frequent_tag_accuracy(train_words, train_tags, dev_words, dev_tags) == 3 / 4
    with pytest.raises(ValueError):
        most_frequent_tag_accuracy([["the"]], [["DET", "NOUN"]], dev_words, dev_tags)  # a tag per word


def test_the_report_says_which_features_do_not_beat_the_simple_baseline():
    from modeling_elmo.evaluation.report import markdown_report
    from modeling_elmo.utils.results import EvaluationResults, ScoreResult

    scores = [
        ScoreResult(
            task="probe-pos",
            dataset="ud",
            split="validation",
            representation=name,
            metric="accuracy",
            value=value,
            examples=1000,
            baseline=0.826,
            baseline_name="most frequent tag of the word",
        )
        for name, value in (("layer 0", 0.70), ("layer 1", 0.732), ("mix", 0.90))
    ]
    table = markdown_report(EvaluationResults.now(model="m", source="elmo evaluate", scores=scores))
    assert "| Simple baseline (no model) | 82.6% (most frequent tag of the word) |" in table
    assert (
        "Part-of-speech accuracy: Layer 0 only, Layer 1 only do not beat the simple baseline (most frequent tag "
        "of the word)."
    ) in table


@pytest.mark.slow
def test_cli_writes_the_results_schema_markdown_and_plots(tiny, tmp_path):
    from modeling_elmo.evaluation.cli import main

    _, _, _, model_dir = tiny
    data = _fixture_data(tmp_path / "data")
    (tmp_path / "heldout.txt").write_text("the good film\na bank is money\n\nthe river bank\n")
    metrics = tmp_path / "metrics_model"
    import shutil

    shutil.copytree(model_dir, metrics)
    _write_metrics(metrics / "metrics.jsonl")
    out = tmp_path / "out"
    rc = main(
        [
            str(metrics),
            "--task",
            "all",
            "--text",
            str(tmp_path / "heldout.txt"),
            "--data-dir",
            str(data),
            "--unigram-fit",
            str(data / "sentiment-sst2" / "dev.tsv"),
            str(tmp_path / "heldout.txt"),
            "--output-dir",
            str(out),
            "--compare-untrained",
            "--max-train-examples",
            "12",
            "--probe-epochs",
            "1",
            "--probe-min-steps",
            "3",
            "--no-progress",
        ]
    )
    assert rc == 0
    results = read_results(out / "eval_results.json")
    assert (results.model, results.source, results.untrained_seed) == ("metrics_model", "elmo evaluate", 0)
    (ppl,) = results.perplexity
    assert (ppl.split, ppl.dataset, ppl.targets_per_direction, ppl.examples) == (
        "held-out",
        f"{tmp_path.name}/heldout.txt",
        3 + 4 + 3 + 3,
        3,
    )
    assert ppl.unigram.fitted_on == f"sentiment-sst2/dev.tsv, {tmp_path.name}/heldout.txt"
    assert ppl.untrained_average is not None and ppl.untrained_average > 1
    probes = {(s.task, s.representation): s for s in results.scores if s.task.startswith("probe-")}
    assert set(probes) == {
        (t, r) for t in ("probe-sentiment", "probe-pos") for r in ("layer 0", "layer 1", "layer 2", "mix")
    }
    assert {(s.split, s.metric) for s in probes.values()} == {("validation", "accuracy")}
    assert probes["probe-pos", "mix"].examples == 2 * 4 and probes["probe-sentiment", "mix"].examples == 8
    wsd = [s for s in results.scores if s.task == "wsd-probe"]
    assert {(s.representation, s.metric) for s in wsd} == {
        (f"layer {j}", m) for j in range(3) for m in ("accuracy", "accuracy_ties_half")
    }
    tasks = results.details["tasks"]
    assert tasks["probe-sentiment"]["train_examples"] == 12
    # 12 examples are one batch per epoch: the 1 epoch asked for is raised to reach 3 updates
    assert {(r["epochs"], r["steps"]) for r in tasks["probe-sentiment"]["layers"].values()} == {(3.0, 3)}
    assert tasks["probe-pos"]["labels"] == ["ADJ", "AUX", "DET", "NOUN"]
    weights = tasks["probe-pos"]["layers"]["mix"]["mixture"]["weights"]
    assert sum(weights) == pytest.approx(1.0, abs=1e-5)
    table = (out / "eval_results.md").read_text()
    assert "| Layer 0 only |" in table and "Learned mixture from an untrained model" in table
    assert "Word-frequency (unigram) baseline" in table
    layer0 = next(line for line in table.splitlines() if line.startswith("| Layer 0 |"))
    assert "ties" in layer0  # the shipped set's layer 0: occurrences of one surface form all tie
    for name in ("probe_accuracy.png", "layer_weights.png", "training_perplexity.png"):
        assert (out / name).stat().st_size > 1000, name
    assert str(tmp_path) not in (out / "eval_results.json").read_text()
    # the paired comparison agrees with the two accuracies it compares, on the same dev examples / tokens
    for s in probes.values():
        u = s.untrained
        untrained_accuracy = results.details["untrained_tasks"][s.task]["layers"][
            s.representation.removeprefix("layer ")
        ]["accuracy"]
        assert u.value == untrained_accuracy
        assert (u.trained_only_correct - u.untrained_only_correct) / s.examples == pytest.approx(
            s.value - u.value, abs=1e-12
        )
        assert 0.0 < u.mcnemar_p_value <= 1.0
    assert "_correct" not in json.dumps(results.details)
    assert "McNemar" in table
    # the simple baselines: the most frequent tag of each word (counted here by brute force), the majority class
    train = ev_data.read_conllu(data / "pos-ud-ewt" / "en_ewt-ud-train.conllu", max_sentences=12)
    dev = ev_data.read_conllu(data / "pos-ud-ewt" / "en_ewt-ud-dev.conllu")
    pairs = [pair for sentence in train for pair in zip(sentence.tokens, sentence.tags, strict=False)]

    def guess(word):
        seen = [t for w, t in pairs if w == word] or [t for _, t in pairs]
        return max(seen, key=lambda t: (seen.count(t), -seen.index(t)))

    tagged = [pair for sentence in dev for pair in zip(sentence.tokens, sentence.tags, strict=False)]
    expected = sum(guess(word) == tag for word, tag in tagged) / len(tagged)
    pos, sentiment = probes["probe-pos", "mix"], probes["probe-sentiment", "mix"]
    assert (pos.baseline, pos.baseline_name) == (pytest.approx(expected), "most frequent tag of the word")
    labels = [s.label for s in ev_data.read_sst2(data / "sentiment-sst2" / "dev.tsv")]
    majority = max(
        set(labels), key=[s.label for s in ev_data.read_sst2(data / "sentiment-sst2" / "train.tsv", 12)].count
    )
    assert (sentiment.baseline, sentiment.baseline_name) == (
        pytest.approx(labels.count(majority) / len(labels)),
        "majority class",
    )
    assert (
        f"| Simple baseline (no model) | {100 * sentiment.baseline:.1f}% (majority class) | "
        f"{100 * pos.baseline:.1f}% (most frequent tag of the word) |"
    ) in table


def test_cli_writes_into_the_model_folders_evaluation_folder_without_a_training_curve(tiny, tmp_path):
    from modeling_elmo.evaluation.cli import main

    _, _, _, model_dir = tiny
    model = tmp_path / "model"
    import shutil

    shutil.copytree(model_dir, model)
    assert main([str(model), "--task", "wsd-probe", "--no-progress"]) == 0
    (results,) = RunFolder(model).read_results()
    assert results.details["plots"]["training_perplexity"].startswith("skipped")
    assert results.details["tasks"]["wsd-probe"]["occurrences"] == 360
    assert RunFolder(model).evaluation.report_file.is_file()
    layer2 = next(s for s in results.scores if s.representation == "layer 2" and s.metric == "accuracy_ties_half")
    assert layer2.examples == 360 and 0 < layer2.baseline < 1


@pytest.mark.slow
def test_every_long_step_shows_a_progress_bar(tiny, tmp_path, capsys):
    from modeling_elmo.evaluation.cli import main

    _, _, _, model_dir = tiny
    data = _fixture_data(tmp_path / "data")
    (tmp_path / "heldout.txt").write_text("the good film\na bank is money\n")
    assert (
        main(
            [
                str(model_dir),
                "--task",
                "perplexity",
                "wsd-probe",
                "probe-sentiment",
                "--text",
                str(tmp_path / "heldout.txt"),
                "--data-dir",
                str(data),
                "--output-dir",
                str(tmp_path / "o"),
                "--max-train-examples",
                "8",
                "--probe-epochs",
                "1",
                "--probe-min-steps",
                "1",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    for bar in (
        "unigram fit: 100%",
        "perplexity: 100%",
        "features wsd-probe: 100%",
        "features probe-sentiment train: 100%",
        "features probe-sentiment dev: 100%",
        "training probe-sentiment: 100%",
    ):
        assert bar in err, bar


@pytest.mark.parametrize(
    "files, extra, message",
    [
        ({"sentiment-sst2/dev.tsv": "label\tcontent\n"}, ["--task", "probe-sentiment"], "is empty"),
        (
            {"w.jsonl": '{"tokens": ["a", "b"], "word": "bank", "sense": "x"}\n'},
            ["--task", "wsd-probe", "--wsd-file", "{root}/w.jsonl"],
            "w.jsonl:1: word 'bank' does not occur in its sentence",
        ),
        (
            {"w.jsonl": '{"tokens": ["a", "bank"], "word": "bank", "sense": "a b"}\n'},
            ["--task", "wsd-probe", "--wsd-file", "{root}/w.jsonl"],
            "unknown sense label format 'a b'",
        ),
        ({}, ["--task", "perplexity"], "needs --text"),
        ({"empty.txt": "\n"}, ["--task", "perplexity", "--text", "{root}/empty.txt"], "is empty"),
    ],
)
def test_cli_rejects_bad_input_with_a_message(tiny, tmp_path, capsys, files, extra, message):
    from modeling_elmo.evaluation.cli import main

    _, _, _, model_dir = tiny
    data = _fixture_data(tmp_path / "data")
    for rel, text in files.items():
        target = (data / rel) if rel.startswith("sentiment") else (tmp_path / rel)
        target.write_text(text)
    argv = [str(model_dir), "--data-dir", str(data), "--output-dir", str(tmp_path / "o")]
    argv += [a.replace("{root}", str(tmp_path)) for a in extra]
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2
    assert message in capsys.readouterr().err


def _bad_model(kind: str, root: Path) -> Path:
    if kind == "empty":
        (root / "empty").mkdir()
        return root / "empty"
    if kind == "bert":
        (root / "bert").mkdir()
        (root / "bert" / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
        return root / "bert"
    if kind == "pickled":
        (root / "pickled").mkdir()
        (root / "pickled" / "config.json").write_text(json.dumps({"model_type": "elmo"}))
        (root / "pickled" / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
        return root / "pickled"
    return root / "no" / "such" / "model"


@pytest.mark.parametrize(
    "kind, message",
    [
        ("empty", "{path} is not a model folder: it is empty."),
        ("bert", "{path} holds a model of type 'bert' (config.json), not an ELMo model."),
        (
            "pickled",
            "{path} holds pickled weights ['pytorch_model.bin']: loading a pickle can run arbitrary code, so this "
            "package refuses it and loads safetensors only. If you trust the file, convert it once in a trusted "
            "environment (load it, then `model.save_pretrained(folder)` writes model.safetensors) and remove the "
            "pickle.",
        ),
        ("missing", "model '{path}' does not exist (no such folder)"),
    ],
)
def test_a_folder_that_is_not_an_elmo_model_is_one_line_naming_it(kind, message, tmp_path, capsys):
    from modeling_elmo.evaluation.cli import main

    path = _bad_model(kind, tmp_path)
    with pytest.raises(SystemExit) as err:
        main([str(path), "--task", "wsd-probe", "--no-progress"])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"elmo evaluate: error: {message.format(path=path)}"]


def test_a_binary_text_file_is_one_line_naming_it(tiny, tmp_path, capsys):
    from modeling_elmo.evaluation.cli import main

    _, _, _, model_dir = tiny
    binary = tmp_path / "model.safetensors"
    binary.write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"__metadata__"}\xff\xfe')
    with pytest.raises(SystemExit):
        main([str(model_dir), "--task", "perplexity", "--text", str(binary), "--output-dir", str(tmp_path / "o")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"elmo evaluate: error: text file '{binary}' is not"), lines


def test_unreachable_hub_without_data_dir_is_one_line_naming_data_dir(tiny, tmp_path, capsys, monkeypatch):
    import time

    from huggingface_hub import constants

    from modeling_elmo.evaluation.cli import main

    _, _, _, model_dir = tiny
    argv = [str(model_dir), "--task", "probe-sentiment", "--output-dir", str(tmp_path / "o"), "--no-progress"]
    # offline mode (the tests' HF_HUB_OFFLINE=1) and an empty datasets cache
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(SystemExit):
        main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (
        len(lines) == 1 and "nyu-mll/glue is not in the local datasets cache" in lines[0] and "--data-dir" in lines[0]
    )
    # online mode, no connection: a closed local port stands for the unreachable Hub; no retries
    monkeypatch.setattr("modeling_elmo.utils.compat.is_offline_mode", lambda: False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    started = time.perf_counter()
    with pytest.raises(SystemExit):
        main(argv)
    assert time.perf_counter() - started < 10
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "elmo evaluate: error: the Hugging Face Hub (http://127.0.0.1:9) cannot be reached to download "
        "nyu-mll/glue: pass --data-dir FOLDER with a local copy of the probe data (see "
        "docs/evaluation.md), or set HF_HUB_OFFLINE=1 to use a copy in the local datasets cache"
    ]


def test_hub_loaders_convert_hub_rows(monkeypatch):
    # The Hub is not reachable here: `load_dataset` is replaced by in-memory datasets of the Hub's layout.
    import datasets

    calls = []

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split, kwargs))
        if path == "nyu-mll/glue":
            return datasets.Dataset.from_dict({"sentence": ["a fine film ", "dull"], "label": [1, 0], "idx": [0, 1]})
        features = datasets.Features(
            {
                "idx": datasets.Value("string"),
                "tokens": datasets.Sequence(datasets.Value("string")),
                "upos": datasets.Sequence(datasets.ClassLabel(names=["NOUN", "PUNCT", "DET"])),
            }
        )
        return datasets.Dataset.from_dict(
            {"idx": ["s1"], "tokens": [["the", "film", "."]], "upos": [[2, 0, 1]]}, features=features
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    sst = ev_data.load_sst2_from_hub("validation")
    assert [(s.tokens, s.label) for s in sst] == [(["a", "fine", "film"], 1), (["dull"], 0)]
    ud = ev_data.load_ud_pos_from_hub("train")
    assert [(s.tokens, s.tags) for s in ud] == [(["the", "film", "."], ["DET", "NOUN", "PUNCT"])]
    assert calls[0][:3] == ("nyu-mll/glue", "sst2", "validation")
    assert calls[1][3] == {"data_dir": "en_ewt", "revision": "refs/convert/parquet"}
    with pytest.raises(ValueError, match="'test'"):
        ev_data.load_sst2_from_hub("test")


def test_checkpoint_with_vocabulary_but_no_softmax_refuses_perplexity(tiny, tmp_path, capsys):
    from modeling_elmo import ElmoModel
    from modeling_elmo.evaluation.cli import main

    lm, _, config, _ = tiny
    base = ElmoModel(config)
    base.load_state_dict(lm.elmo.state_dict())
    base.save_pretrained(tmp_path / "base")  # vocab_size 14 in its config, but only the biLM's weights
    (tmp_path / "t.txt").write_text("the bank\n")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "base"), "--task", "perplexity", "--text", str(tmp_path / "t.txt")])
    assert "no softmax weights in the checkpoint" in capsys.readouterr().err
    # the feature tasks still work on it
    assert main([str(tmp_path / "base"), "--task", "wsd-probe", "--output-dir", str(tmp_path / "o")]) == 0


def test_elmo_command_dispatches_evaluate_to_the_suite(capsys):
    from modeling_elmo import cli

    with pytest.raises(SystemExit) as err:
        cli.main(["evaluate", "--help"])
    assert err.value.code == 0
    out = capsys.readouterr().out
    assert "usage: elmo evaluate" in out and "--compare-untrained" in out


def test_untrained_comparison_model_depends_only_on_the_seed(tiny):
    from modeling_elmo.evaluation.cli import untrained_models

    _, _, config, _ = tiny
    a = untrained_models(config, 0, torch.device("cpu"), need_lm=True)[0].state_dict()
    b = untrained_models(config, 0, torch.device("cpu"), need_lm=True)[0].state_dict()
    c = untrained_models(config, 1, torch.device("cpu"), need_lm=True)[0].state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(
        a["elmo.encoder.forward_layers.0.input_transform.weight"],
        c["elmo.encoder.forward_layers.0.input_transform.weight"],
    )


@pytest.mark.slow
def test_the_recipes_follow_up_evaluate_commands_run_offline(tiny, tmp_path, shared_data):
    """The ``then: elmo evaluate ...`` command of each recipe, as printed, on a tiny model with the shared data (its
    paths are relative to the repository root: ``../shared/data`` is the shared folder), offline: every task runs,
    the probes reading the shared copy. Only the sizes are bounded (flags appended: the last value wins)."""
    import re
    import shlex

    from modeling_elmo.evaluation.cli import main

    recipes = sorted((Path(__file__).resolve().parents[2] / "configuration" / "recipes").glob("*.yaml"))
    commands = {}
    for recipe in recipes:
        match = re.search(r"^# then: (elmo evaluate .*?)$(?!\n#   -)", recipe.read_text(), flags=re.M | re.S)
        if match:
            commands[recipe.name] = " ".join(re.sub(r"\\\n#\s*", " ", match.group(1)).split())
    assert "cpu-lm-corpus.yaml" in commands and len(commands) >= 3, commands
    for name, command in commands.items():
        argv = [word.replace("../shared/data", str(shared_data)) for word in shlex.split(command)][2:]
        assert "--data-dir" in argv and "--task" in argv and argv[argv.index("--task") + 1] == "all", (name, argv)
        argv[0] = str(tiny[3])
        rc = main(
            [
                *argv,
                "--output-dir",
                str(tmp_path / name),
                "--max-sentences",
                "20",
                "--max-train-examples",
                "12",
                "--max-dev-examples",
                "8",
                "--probe-epochs",
                "1",
                "--probe-min-steps",
                "2",
                "--no-progress",
            ]
        )
        assert rc == 0, name
        results = read_results(tmp_path / name / "eval_results.json")
        assert {s.task for s in results.scores} == {"wsd-probe", "probe-sentiment", "probe-pos"} and results.perplexity
