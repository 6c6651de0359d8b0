"""A vocabulary file gives each word the id of its line, so a line that would shift the ids of the words after it
(an empty line, a repeated word, a special word after other words) is refused naming the line: in full by the strict
reader of the tools (pretraining's ``--vocab-file``, ``read_vocabulary_file``), as an empty line or a repeated word by
the tokenizer (also when a model is loaded for scoring or publishing); a vocabulary of another size than the model's
softmax is refused too. (They used to be dropped silently: every later word id shifted by one against the softmax.)"""

from __future__ import annotations

import re

import pytest
import torch

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoTokenizer, save_model_folder
from modeling_elmo.evaluation.cli import main as evaluate_main
from modeling_elmo.pretraining import main as pretrain_main
from modeling_elmo.pretraining.data import Vocabulary, read_vocabulary_file

EMPTY, REPEATED = "(an empty line would shift", "(a repeated word would shift"
BAD = [  # the file, what the strict reader says, what the tokenizer says
    ("a\nb\n\nc\n", "line 3 is empty", f"line 3 is empty {EMPTY}"),
    ("a\nb\nc\n\n", "line 4 is empty", f"line 4 is empty {EMPTY}"),
    ("a\n   \nb\n", "line 2 is empty", f"line 2 is empty {EMPTY}"),
    ("a\nb\nc\nb\n", "line 4 repeats the word 'b' of line 2", f"line 4 repeats the word 'b' {REPEATED}"),
    (
        "<S>\n</S>\n<UNK>\nthe\n<S>\n",
        "line 5 repeats the word '<S>' of line 1",
        f"line 5 repeats the word '<S>' {REPEATED}",
    ),
    (
        "the\ncat\n<UNK>\n",
        "line 3 lists the special word '<UNK>' after other words",
        f"line 3 repeats the word '<UNK>' {REPEATED}",
    ),
]


@pytest.mark.parametrize("text,strict,short", BAD)
def test_a_line_that_would_shift_the_word_ids_is_refused_naming_it(tmp_path, text, strict, short):
    path = tmp_path / "vocab.txt"
    path.write_text(text)
    for read in (read_vocabulary_file, Vocabulary.from_file):
        with pytest.raises(ValueError, match=re.escape(f"vocabulary file '{path}': {strict}")):
            read(path)
    with pytest.raises(ValueError, match=re.escape(f"vocabulary file '{path}': {short}")):
        ElmoTokenizer(vocab_file=str(path))


def test_the_files_this_package_and_bilm_tf_write_are_read_in_line_order(tmp_path):
    (tmp_path / "bilm.txt").write_text("<S>\n</S>\n<UNK>\nthe\ncat\n!!!MAXTERMID\n")
    tokenizer = ElmoTokenizer(vocab_file=str(tmp_path / "bilm.txt"))
    assert [tokenizer.vocab[w] for w in ("<pad>", "<S>", "</S>", "<UNK>", "the", "cat")] == [0, 1, 2, 3, 4, 5]
    tokenizer.save_pretrained(tmp_path / "saved")
    assert read_vocabulary_file(tmp_path / "saved" / "vocab.txt") == ["<pad>", "<S>", "</S>", "<UNK>", "the", "cat"]
    assert Vocabulary.from_file(tmp_path / "saved" / "vocab.txt").words == [
        "<pad>",
        "<S>",
        "</S>",
        "<UNK>",
        "the",
        "cat",
    ]
    (tmp_path / "crlf.txt").write_bytes(b"the\r\ncat\r\n")
    assert read_vocabulary_file(tmp_path / "crlf.txt") == ["the", "cat"]


def test_pretrain_refuses_a_vocabulary_file_with_a_repeated_word_in_one_line(tmp_path):
    (tmp_path / "train.txt").write_text("the cat sat\n" * 50)
    (tmp_path / "vocab.txt").write_text("the\ncat\nthe\nsat\n")
    with pytest.raises(SystemExit) as error:
        pretrain_main(
            [
                "--train-file",
                str(tmp_path / "train.txt"),
                "--vocab-file",
                str(tmp_path / "vocab.txt"),
                "--output-dir",
                str(tmp_path / "run"),
                "--max-steps",
                "1",
            ]
        )
    assert str(error.value.code) == (
        f"elmo pretrain: error: vocabulary file '{tmp_path / 'vocab.txt'}': line 3 repeats "
        "the word 'the' of line 1 (a repeated word would shift the id of every later word)."
    )
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_of_another_size_than_the_softmax_is_refused_when_scoring(tmp_path, capsys):
    (tmp_path / "words.txt").write_text("\n".join(f"w{i}" for i in range(20)) + "\n")
    tokenizer = ElmoTokenizer(vocab_file=str(tmp_path / "words.txt"))
    config = ElmoConfig(
        vocab_size=tokenizer.vocab_size,
        projection_dim=8,
        cell_size=16,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        num_highway_layers=1,
    )
    torch.manual_seed(0)
    save_model_folder(ElmoForBidirectionalLM(config), tokenizer, tmp_path / "lm")
    (tmp_path / "lm" / "vocab.txt").write_text("\n".join(f"w{i}" for i in range(5)) + "\n")  # 9 of 24 words
    (tmp_path / "text.txt").write_text("w1 w2\n")
    with pytest.raises(SystemExit):
        evaluate_main(
            [str(tmp_path / "lm"), "--task", "perplexity", "--text", str(tmp_path / "text.txt"), "--no-progress"]
        )
    assert "its softmax has 24 rows" in capsys.readouterr().err
    assert not (tmp_path / "lm" / "evaluation").exists()


def test_ids_map_back_to_words_through_one_list_and_out_of_range_ids_to_unk(tmp_path):
    """Issue 35, M4 (in part): the vocabulary is read as a stream and ids map back through a list (not a second
    mapping of every word); an id outside it is <UNK>, as before."""
    from modeling_elmo import ElmoTokenizer

    (tmp_path / "vocab.txt").write_text("<pad>\n<S>\n</S>\n<UNK>\nthe\ncat\n")
    tokenizer = ElmoTokenizer(vocab_file=str(tmp_path / "vocab.txt"))
    assert isinstance(tokenizer.ids_to_words, list) and len(tokenizer.ids_to_words) == tokenizer.vocab_size == 6
    assert tokenizer.convert_ids_to_tokens([4, 5, 6, -1, 10**9]) == ["the", "cat", "<UNK>", "<UNK>", "<UNK>"]
    assert [tokenizer.convert_tokens_to_ids(w) for w in ("the", "cat", "dog")] == [4, 5, 3]
