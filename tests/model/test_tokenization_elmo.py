"""ElmoTokenizer: the original character-id scheme exactly, padding, saving, collators and bad input."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, DataCollatorWithPadding

from modeling_elmo import BOS_CHAR_IDS, EOS_CHAR_IDS, ElmoTokenizer, decode_char_ids, encode_words
from modeling_elmo.tokenization_elmo import CharacterAlphabet

PAD = 261


def literal_row(prefix: list[int]) -> list[int]:
    return prefix + [PAD] * (50 - len(prefix))


def per_character_reference(word: str) -> list[int]:
    """A straightforward encoder written from the reference (section 1.2), one character at a time."""
    if word == "<S>":
        return literal_row([259, 257, 260])
    if word == "</S>":
        return literal_row([259, 258, 260])
    data = word.encode("utf-8")[:48]
    row = [258] + list(data) + [259]
    row += [260] * (50 - len(row))
    return [v + 1 for v in row]


def test_character_ids_match_the_reference_literal_lists():
    ids = encode_words(["Second", ".", chr(256) + "t", "<S>", "</S>"])
    assert ids[0].tolist() == literal_row([259, 84, 102, 100, 112, 111, 101, 260])
    assert ids[1].tolist() == literal_row([259, 47, 260])
    assert ids[2].tolist() == literal_row([259, 197, 129, 117, 260])
    assert ids[3].tolist() == literal_row([259, 257, 260]) == BOS_CHAR_IDS.tolist()
    assert ids[4].tolist() == literal_row([259, 258, 260]) == EOS_CHAR_IDS.tolist()


def test_vectorised_encoder_equals_per_character_encoder_on_random_words():
    rng = random.Random(0)
    alphabet = "abcXYZ019.,'-éøß漢字🙂\t\x07"
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 70))) for _ in range(500)]
    expected = np.array([per_character_reference(w) for w in words])
    np.testing.assert_array_equal(encode_words(words), expected)


def test_unicode_alphabet_equals_a_per_character_encoder_on_random_words():
    """ELMoForManyLangs' layout, one character at a time: 2 begin, the listed characters from id 7 (6 if unknown,
    a lone surrogate included), 3 end, 1 padding; a word keeps its first ``width - 2`` characters."""
    characters = list("abé漢🙂<>S")
    rng = random.Random(1)
    pool = characters + ["?", "\ud800", "Z"]
    words = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 15))) for _ in range(300)]

    def reference(word: str) -> list[int]:
        ids = [7 + characters.index(c) if c in characters else 6 for c in word[:10]]
        return [2, *ids, 3] + [1] * (12 - len(ids) - 2)

    rows = CharacterAlphabet(characters, max_characters_per_token=12).encode(words)
    np.testing.assert_array_equal(rows, np.array([reference(w) for w in words]))


def test_long_words_keep_their_first_48_bytes_even_inside_a_character():
    word = "a" * 47 + "é" + "tail"  # é is 2 bytes: the cut falls inside it
    row = encode_words([word])[0]
    assert row[0] == 259 and row[49] == 260  # BOW, 48 bytes, EOW in the last slot, no padding
    assert row[48] == "é".encode()[0] + 1
    assert encode_words(["x" * 10_000])[0].tolist() == [259] + [ord("x") + 1] * 48 + [260]


def test_padding_gives_all_zero_rows_and_a_matching_mask():
    tok = ElmoTokenizer()
    enc = tok([["a", "b", "c"], ["d"]], is_split_into_words=True, padding=True, return_tensors="pt")
    assert tuple(enc["input_ids"].shape) == (2, 3, 50)
    assert enc["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert (enc["input_ids"][1, 1:] == 0).all()
    assert (enc["input_ids"][0] > 0).all()


def test_left_padding_max_length_truncation_and_multiple_of():
    tok = ElmoTokenizer()
    words = [["a", "b", "c", "d", "e"], ["f"]]
    left = tok(words, is_split_into_words=True, padding=True, padding_side="left", return_tensors="pt")
    assert left["attention_mask"][1].tolist() == [0, 0, 0, 0, 1]
    cut = tok(words, is_split_into_words=True, padding="max_length", truncation=True, max_length=3, return_tensors="pt")
    assert tuple(cut["input_ids"].shape) == (2, 3, 50)
    assert tok.decode(cut["input_ids"][0]) == "a b c"
    multiple = tok(words, is_split_into_words=True, padding=True, pad_to_multiple_of=8, return_tensors="np")
    assert multiple["input_ids"].shape == (2, 8, 50) and isinstance(multiple["input_ids"], np.ndarray)


def test_unpadded_batches_are_lists_and_tensors_need_padding():
    tok = ElmoTokenizer()
    enc = tok([["a", "b"], ["c"]], is_split_into_words=True)
    assert [len(x) for x in enc["input_ids"]] == [2, 1] and len(enc["input_ids"][0][0]) == 50
    with pytest.raises(ValueError, match="padding=True"):
        tok([["a", "b"], ["c"]], is_split_into_words=True, return_tensors="pt")
    single = tok(["a", "b"], is_split_into_words=True)
    assert len(single["input_ids"]) == 2 and single["attention_mask"] == [1, 1]


def test_raw_text_is_split_with_the_pre_tokenizer():
    tok = ElmoTokenizer()
    assert tok.split_words("Hello, world! don't <S>") == ["Hello", ",", "world", "!", "don", "'", "t", "<S>"]
    assert ElmoTokenizer(split_pattern="whitespace").split_words("don't  stop\tnow") == ["don't", "stop", "now"]
    enc = tok(["The bank.", "A river bank"], padding=True, return_tensors="pt")
    assert tok.decode(enc["input_ids"]) == ["The bank .", "A river bank"]


def test_decode_recovers_words_including_non_ascii_and_boundaries():
    tok = ElmoTokenizer()
    words = ["héllo", "wörld", "漢字", "<S>"]
    assert tok.decode(encode_words(words)) == "héllo wörld 漢字 <S>"
    assert tok.decode(encode_words(words), skip_special_tokens=True) == "héllo wörld 漢字"
    assert decode_char_ids(np.zeros(50, dtype=int)) is None


def test_word_vocabulary_gives_label_ids_with_unknown_words(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<S>\n</S>\n<UNK>\nthe\nbank\n", encoding="utf-8")
    tok = ElmoTokenizer(vocab_file=str(vocab))
    assert tok.get_vocab() == {"<pad>": 0, "<S>": 1, "</S>": 2, "<UNK>": 3, "the": 4, "bank": 5}
    enc = tok(
        [["the", "bank", "zebra"], ["bank"]],
        is_split_into_words=True,
        padding=True,
        return_word_ids=True,
        return_tensors="pt",
    )
    assert enc["word_ids"].tolist() == [[4, 5, 3], [5, 0, 0]]
    assert tok.decode([4, 5, 3]) == "the bank <UNK>"


def test_lower_casing_gives_pre_split_words_and_raw_text_the_same_rows_and_word_ids(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("the\nbank\n", encoding="utf-8")
    tok = ElmoTokenizer(vocab_file=str(vocab), do_lower_case=True)
    split = tok(["The", "BANK", "<S>"], is_split_into_words=True, return_word_ids=True)
    raw = tok("The BANK <S>", return_word_ids=True)
    assert split["word_ids"] == raw["word_ids"] == [4, 5, 1] and split["input_ids"] == raw["input_ids"]
    assert tok.decode(split["input_ids"]) == "the bank <S>"


def test_save_and_auto_tokenizer_round_trip_is_exact(tmp_path):
    vocab = tmp_path / "words.txt"
    vocab.write_text("the\nbank\n", encoding="utf-8")
    tok = ElmoTokenizer(vocab_file=str(vocab), split_pattern="whitespace")
    tok.save_pretrained(tmp_path / "saved")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert type(loaded) is ElmoTokenizer and loaded.get_vocab() == tok.get_vocab()
    assert loaded.split_pattern == "whitespace"
    text = ["the bank closed", "a river bank"]
    a, b = tok(text, padding=True, return_tensors="pt"), loaded(text, padding=True, return_tensors="pt")
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["attention_mask"], b["attention_mask"])


def test_data_collator_pads_like_a_direct_call():
    tok = ElmoTokenizer()
    sentences = [["a", "b", "c"], ["d"], ["e", "f"]]
    features = [dict(tok(s, is_split_into_words=True), labels=i) for i, s in enumerate(sentences)]
    batch = DataCollatorWithPadding(tok)(features)
    direct = tok(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], direct["input_ids"])
    assert torch.equal(batch["attention_mask"], direct["attention_mask"])
    assert batch["labels"].tolist() == [0, 1, 2]
    padded8 = DataCollatorWithPadding(tok, pad_to_multiple_of=8)(features)
    assert tuple(padded8["input_ids"].shape) == (3, 8, 50)


def test_dataset_map_then_collate():
    from datasets import Dataset

    tok = ElmoTokenizer()
    ds = Dataset.from_dict({"text": ["The bank closed .", "Rivers flow", "x"], "label": [0, 1, 0]})
    ds = ds.map(lambda b: tok(b["text"]), batched=True, remove_columns=["text"])
    batch = DataCollatorWithPadding(tok)([ds[i] for i in range(3)])
    assert tuple(batch["input_ids"].shape) == (3, 4, 50) and batch["attention_mask"].sum().item() == 7


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ([], {}, "empty batch"),
        ([["a", ""]], {"is_split_into_words": True}, "empty word"),
        ([["a", 3]], {"is_split_into_words": True}, "sentence 0"),
        ([3, "a"], {}, "item 0"),
        ("a b", {"is_split_into_words": True}, "list of words"),
        (["a"], {"text_pair": ["b"]}, "pairs"),
    ],
)
def test_bad_input_gives_a_clear_error(text, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ElmoTokenizer()(text, **kwargs)


def test_empty_sentence_gives_an_all_padding_row():
    enc = ElmoTokenizer()(["", "a b"], padding=True, return_tensors="pt")
    assert enc["attention_mask"].tolist() == [[0, 0], [1, 1]] and (enc["input_ids"][0] == 0).all()


def test_lone_surrogates_are_dropped_like_the_original_and_control_characters_are_kept():
    row = encode_words(["a\ud800b"])[0]
    assert row[:5].tolist() == [259, ord("a") + 1, ord("b") + 1, 260, 261]
    assert encode_words(["\udfff"])[0][:3].tolist() == [259, 260, 261]  # nothing left: BOW, EOW
    assert encode_words(["\x00\x07"])[0][1:3].tolist() == [1, 8]


def test_lone_surrogates_in_raw_text_are_dropped_too():
    tokenizer = ElmoTokenizer()
    assert tokenizer.decode(tokenizer("ab\ud800cd")["input_ids"]) == "abcd"
    assert tokenizer.decode(tokenizer(["x \udfff y"])["input_ids"][0]) == "x y"


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(truncation=True, max_length=-1),
        dict(truncation=True, max_length=0),
        dict(padding="max_length", max_length=-2),
        dict(padding=True, pad_to_multiple_of=0),
    ],
)
def test_lengths_that_are_not_positive_are_refused_not_applied(kwargs):
    name = "pad_to_multiple_of" if "pad_to_multiple_of" in kwargs else "max_length"
    with pytest.raises(ValueError, match=f"`{name}` must be a positive integer"):
        ElmoTokenizer()(["a b c"], **kwargs)


def test_bad_constructor_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="split_pattern"):
        ElmoTokenizer(split_pattern="bpe")
    with pytest.raises(ValueError, match="does not exist"):
        ElmoTokenizer(vocab_file=str(tmp_path / "missing.txt"))


def test_left_truncation_keeps_the_last_words_and_right_truncation_the_first():
    words = ["one", "two", "three", "four", "five"]
    right = ElmoTokenizer()(words, is_split_into_words=True, truncation=True, max_length=2)
    left = ElmoTokenizer(truncation_side="left")(words, is_split_into_words=True, truncation=True, max_length=2)
    call_time = ElmoTokenizer()("one two three four five", truncation=True, max_length=3, truncation_side="left")
    assert ElmoTokenizer().decode(right["input_ids"]) == "one two"
    assert ElmoTokenizer().decode(left["input_ids"]) == "four five"
    assert ElmoTokenizer().decode(call_time["input_ids"]) == "three four five"


def test_added_tokens_are_in_the_vocabulary_its_length_and_stay_whole_when_encoding(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<pad>\n<S>\n</S>\n<UNK>\nriver\n")
    tok = ElmoTokenizer(vocab_file=str(vocab))
    assert (len(tok), tok.vocab_size) == (5, 5)
    assert tok.add_tokens(["<city>", "river"]) == 1  # "river" is already a word
    assert (len(tok), tok.vocab_size, tok.get_vocab()["<city>"], tok.get_vocab()["river"]) == (6, 5, 5, 4)
    text = "the <city> river"
    assert tok.tokenize(text) == ["the", "<city>", "river"]
    enc = tok(text, return_word_ids=True)
    assert tok.decode(enc["input_ids"]) == "the <city> river"  # one row of characters for the added token
    assert enc["word_ids"] == [3, 5, 4]
    assert np.array_equal(enc["input_ids"][1], encode_words(["<city>"])[0])
    tok.save_pretrained(tmp_path / "saved")
    again = ElmoTokenizer.from_pretrained(tmp_path / "saved")
    assert again.get_vocab() == tok.get_vocab() and again(text)["input_ids"] == enc["input_ids"]


def test_special_tokens_mask_marks_the_special_words_of_the_text_and_the_padding():
    enc = ElmoTokenizer()(["a </S> b", "c"], padding=True, return_special_tokens_mask=True)
    assert enc["special_tokens_mask"] == [[0, 1, 0], [0, 1, 1]]


def test_literal_boundary_words_follow_each_original():
    """Bytes vocabulary (AllenNLP's ``ELMoCharacterMapper``): a literal ``<S>``/``</S>`` is the boundary row and
    ``<bos>`` an ordinary word. Unicode vocabulary (ELMoForManyLangs): ``<bos>``/``<eos>`` are the boundary rows (of the
    characters and of the word input) and ``<S>`` an ordinary word. Raw text keeps each boundary word whole."""
    ids = ElmoTokenizer()(["x", "<S>", "<bos>", "</S>"], is_split_into_words=True)["input_ids"]
    assert ids[1] == BOS_CHAR_IDS.tolist() and ids[3] == EOS_CHAR_IDS.tolist()
    assert ids[2] == per_character_reference("<bos>")
    assert ElmoTokenizer().split_words("x<S>y</S>") == ["x", "<S>", "y", "</S>"]
    characters = list("<>bosSx")
    tok = ElmoTokenizer(characters=characters, input_words=["x"])
    enc = tok("x <bos> <S> <eos>")
    padding = [1] * 47  # unicode ids: 1 padding, 2/3 begin/end of word, 4/5 the sentence markers, 7 on the characters
    assert enc["input_ids"][1] == [2, 4, 3] + padding and enc["input_ids"][3] == [2, 5, 3] + padding
    assert enc["input_ids"][2][:5] == [2] + [7 + characters.index(c) for c in "<S>"] + [3]
    assert enc["word_input_ids"] == [4, 1, 3, 2]  # x, <bos> -> <S>'s row, <S> -> <UNK>, <eos> -> </S>'s row
    assert tok.decode(enc["input_ids"]) == "x <bos> <S> <eos>"
    assert tok.decode(enc["input_ids"], skip_special_tokens=True) == "x <S>"


def test_word_labels_align_with_the_rows_and_the_token_classification_collator_pads_them():
    """One row per word, no token added: tags line up with the rows as they are (no `word_ids()` needed), and
    transformers' `DataCollatorForTokenClassification` pads both."""
    from transformers import DataCollatorForTokenClassification

    tok = ElmoTokenizer()
    examples = [(["The", "bank", "don't"], [0, 1, 2]), (["A"], [2])]
    features = [dict(tok(words, is_split_into_words=True), labels=tags) for words, tags in examples]
    assert [len(f["input_ids"]) for f in features] == [3, 1]
    batch = DataCollatorForTokenClassification(tok)(features)
    assert batch["labels"].tolist() == [[0, 1, 2], [2, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert tok.decode(batch["input_ids"]) == ["The bank don't", "A"]
