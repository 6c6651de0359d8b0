"""A vocabulary file gives each word the id of its line, so a line that would shift the ids of the words after it
(an empty line, a repeated word, a special word after other words) is refused naming the line: in full by the strict
reader of the tools (pretraining's ``--vocab-file``, ``read_vocabulary_file``), as an empty line or a repeated word by
the tokenizer (also when a model is loaded for scoring or publishing); a vocabulary of another size than the model's
softmax is refused too. (They used to be dropped silently: every later word id shifted by one against the softmax.)"""

from __future__ import annotations

import os
import re

import pytest
import torch

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoModel, ElmoTokenizer, save_model_folder
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


# ----------------------------------------------------------------------------------------------- issue 35, M4
# A vocab.txt of 10,000,000 lines (89 MB) took 2.1-2.5 GB in `elmo push`, `elmo evaluate` and `--init-from-model`:
# the tokenizer's mapping of every word (about 140 bytes a word) was built before its size was compared with the
# softmax. The commands now read the file as a stream first (8 bytes a word), and push copies it as a stream.
GOOD = [
    "<S>\n</S>\n<UNK>\nthe\ncat\n!!!MAXTERMID\n",
    "<pad>\n<S>\n</S>\n<UNK>\nthe\n",
    "the\r\ncat\r\ndog",
    "the\ncat\n!!!MAXTERMID\n!!!MAXTERMID\nsat\n",
    "",
]


@pytest.mark.parametrize("text", GOOD)
def test_the_streamed_count_is_the_vocab_size_of_the_tokenizer(tmp_path, text):
    from modeling_elmo.utils.vocab_file import count_vocabulary_words

    path = tmp_path / "vocab.txt"
    path.write_bytes(text.encode())
    assert count_vocabulary_words(path) == ElmoTokenizer(vocab_file=str(path)).vocab_size


@pytest.mark.parametrize("text,strict,short", BAD)
def test_the_streamed_count_refuses_the_lines_the_tokenizer_refuses_in_its_words(tmp_path, text, strict, short):
    from modeling_elmo.utils.vocab_file import count_vocabulary_words

    path = tmp_path / "vocab.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"vocabulary file '{path}': {short}")):
        count_vocabulary_words(path)


def test_words_of_one_hash_are_told_apart_by_the_words_themselves(tmp_path, monkeypatch):
    """The count compares 64-bit hashes; words whose hashes agree are compared as words (here: every hash agrees)."""
    from modeling_elmo.utils import vocab_file

    monkeypatch.setattr(vocab_file, "hash", lambda word: 7, raising=False)
    path = tmp_path / "vocab.txt"
    path.write_text("a\nb\nc\nd\n")
    assert vocab_file.count_vocabulary_words(path) == 8
    path.write_text("a\nb\nc\nb\n\nd\nc\n")  # the first problem in line order: the repeat on line 4
    with pytest.raises(ValueError, match=re.escape("line 4 repeats the word 'b'")):
        vocab_file.count_vocabulary_words(path)
    path.write_text("a\nb\n\nb\n")  # the empty line comes first
    with pytest.raises(ValueError, match=re.escape("line 3 is empty")):
        vocab_file.count_vocabulary_words(path)


def _never_read_whole(monkeypatch, path):
    """Fail if the tokenizer or the pretraining reader builds a mapping of ``path``."""
    from modeling_elmo import tokenization_elmo
    from modeling_elmo.pretraining import data

    def refuse(real):
        def read(file):
            assert os.fspath(file) != os.fspath(path), f"{file} was read into memory"
            return real(file)

        return read

    monkeypatch.setattr(tokenization_elmo, "_read_vocabulary", refuse(tokenization_elmo._read_vocabulary))
    monkeypatch.setattr(data, "read_vocabulary_file", refuse(data.read_vocabulary_file))


def _lm_folder(root, vocab_text: str, vocab_size: int = 24):
    config = ElmoConfig(
        vocab_size=vocab_size,
        projection_dim=8,
        cell_size=16,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        num_highway_layers=1,
    )
    torch.manual_seed(0)
    save_model_folder(ElmoForBidirectionalLM(config) if vocab_size > 4 else ElmoModel(config), ElmoTokenizer(), root)
    (root / "vocab.txt").write_text(vocab_text)
    return root


def test_a_vocabulary_that_does_not_fit_the_softmax_is_refused_before_it_is_read_into_memory(
    tmp_path, monkeypatch, capsys
):
    from modeling_elmo.hub.cli import main as push_main

    lm = _lm_folder(tmp_path / "lm", "".join(f"w{i}\n" for i in range(500)))  # 504 words for 24 rows
    _never_read_whole(monkeypatch, lm / "vocab.txt")
    (tmp_path / "text.txt").write_text("w1 w2\n")
    with pytest.raises(SystemExit):
        evaluate_main([str(lm), "--task", "perplexity", "--text", str(tmp_path / "text.txt"), "--no-progress"])
    assert "has 504 words but its softmax has 24 rows" in capsys.readouterr().err
    with pytest.raises(SystemExit) as error:
        push_main([str(lm), "--repo-id", "me/elmo", "--dry-run", "--output-dir", str(tmp_path / "out")])
    assert "has 504 words but the model's softmax has 24 rows" in str(error.value.code) + capsys.readouterr().err
    (tmp_path / "train.txt").write_text("w1 w2 w3\n" * 20)
    with pytest.raises(SystemExit) as error:
        pretrain_main(
            ["--train-file", str(tmp_path / "train.txt"), "--init-from-model", str(lm), "--output-dir"]
            + [str(tmp_path / "run"), "--max-steps", "1"]
        )
    assert "its vocab.txt has 504 words but its softmax has 24 rows" in str(error.value.code)
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists()


def test_push_publishes_the_vocabulary_the_tokenizer_would_save_without_building_its_mapping(tmp_path, monkeypatch):
    from modeling_elmo.hub.publish import assemble_repo_folder

    text = "<S>\n</S>\n<UNK>\n" + "".join(f"w{i}\n" for i in range(20)) + "!!!MAXTERMID\n"
    lm = _lm_folder(tmp_path / "lm", text)
    ElmoTokenizer(vocab_file=str(lm / "vocab.txt")).save_pretrained(tmp_path / "saved")
    _never_read_whole(monkeypatch, lm / "vocab.txt")
    assemble_repo_folder(lm, tmp_path / "out", "me/elmo")
    assert (tmp_path / "out" / "vocab.txt").read_bytes() == (tmp_path / "saved" / "vocab.txt").read_bytes()
    monkeypatch.undo()
    published = ElmoTokenizer.from_pretrained(tmp_path / "out")
    assert published.vocab == ElmoTokenizer(vocab_file=str(lm / "vocab.txt")).vocab


def test_the_probes_of_elmo_evaluate_never_build_the_word_mapping(tmp_path, monkeypatch):
    from modeling_elmo.evaluation.cli import load_model_and_tokenizer

    model = _lm_folder(tmp_path / "char", "".join(f"w{i}\n" for i in range(1000)), vocab_size=4)
    _never_read_whole(monkeypatch, model / "vocab.txt")
    lm, base, tokenizer, config = load_model_and_tokenizer(str(model), torch.device("cpu"), need_lm=False)
    assert lm is None and tokenizer.vocab_size == 4


@pytest.mark.slow
def test_push_and_evaluate_of_a_large_vocabulary_take_memory_in_proportion_to_its_file(tmp_path):
    """A 2,000,000-line vocab.txt (17 MB): `elmo push` of a character model publishes it, `elmo evaluate` and
    `elmo push` of a model whose softmax has 24 rows refuse it; each takes at most twice the file's size over the
    same command with a one-word vocabulary (the mapping took 17 times the file; the hashes take 8 bytes a word)."""
    from support import elmo_peak_memory

    lines = "".join(f"w{i:07d}\n" for i in range(2_000_000))
    size = len(lines)
    (tmp_path / "text.txt").write_text("w1 w2\n")
    peaks = {}
    for name, text in (("small", "w1\n"), ("large", lines)):
        char = _lm_folder(tmp_path / name / "char", text, vocab_size=4)
        lm = _lm_folder(tmp_path / name / "lm", text)
        commands = {
            "push": ("push", char, "--repo-id", "me/elmo", "--dry-run", "--output-dir", tmp_path / name / "out"),
            "push-refused": ("push", lm, "--repo-id", "me/elmo", "--dry-run", "--output-dir", tmp_path / name / "o"),
            "evaluate-refused": ("evaluate", lm, "--task", "perplexity", "--text", tmp_path / "text.txt"),
        }
        for command, args in commands.items():
            code, err, peaks[name, command] = elmo_peak_memory(*args)
            assert (code == 0) == (command == "push"), err[-2000:]
            if command != "push":
                assert f"has {5 if name == 'small' else 2_000_004} words but" in err.splitlines()[-1]
    assert (tmp_path / "large" / "out" / "vocab.txt").stat().st_size == size + len("<pad>\n<S>\n</S>\n<UNK>\n")
    for command in ("push", "push-refused", "evaluate-refused"):
        grown = peaks["large", command] - peaks["small", command]
        assert grown < 2 * size, f"{command}: {grown / 1e6:.0f} MB more for a vocabulary of {size / 1e6:.0f} MB"
