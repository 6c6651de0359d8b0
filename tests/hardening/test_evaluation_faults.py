"""`elmo evaluate` under hostile model folders and text files: damaged or non-finite weights, a config whose shapes
do not match the weights, tokenizer and model of different widths (each one line ``elmo evaluate: error: ...``), and
text with invalid UTF-8 or old-Mac line ends (read as `elmo embed` and `elmo pretrain` read them)."""

from __future__ import annotations

import json
import logging
import shutil
import struct

import pytest
import torch
from support.evaluation import TINY, WORDS

from modeling_elmo.evaluation import data as ev_data
from modeling_elmo.evaluation.cli import main


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoTokenizer, save_model_folder

    root = tmp_path_factory.mktemp("lm")
    (root / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    tok = ElmoTokenizer(vocab_file=str(root / "vocab.txt"))
    torch.manual_seed(7)
    save_model_folder(ElmoForBidirectionalLM(ElmoConfig(vocab_size=tok.vocab_size, **TINY)).eval(), tok, root / "m")
    return root / "m"


def _error_line(model, tmp_path, capsys) -> str:
    (tmp_path / "t.txt").write_text("the bank\na good film\n")
    with pytest.raises(SystemExit) as err:
        main(
            [
                str(model),
                "--task",
                "perplexity",
                "--text",
                str(tmp_path / "t.txt"),
                "--output-dir",
                str(tmp_path / "results"),
                "--no-progress",
            ]
        )
    assert err.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith("Loading weights")]  # progress bar
    assert len(lines) == 1 and lines[0].startswith("elmo evaluate: error: ") and "Traceback" not in err, lines
    assert not (tmp_path / "results").exists()
    return lines[0]


def _copy(model_dir, tmp_path):
    target = tmp_path / "model"
    shutil.copytree(model_dir, target)
    return target


def test_truncated_weights_are_one_line(model_dir, tmp_path, capsys):
    model = _copy(model_dir, tmp_path)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    line = _error_line(model, tmp_path, capsys)
    assert f"weights file {str(weights)!r} is truncated: tensor" in line, line


def test_bomb_header_is_one_line(model_dir, tmp_path, capsys):
    model = _copy(model_dir, tmp_path)
    weights = model / "model.safetensors"
    weights.write_bytes(struct.pack("<Q", 10**15) + weights.read_bytes()[8:])
    assert "its header claims 1,000,000,000,000,000 bytes" in _error_line(model, tmp_path, capsys)


def test_config_whose_shapes_do_not_match_the_weights_is_one_line(model_dir, tmp_path, capsys):
    model = _copy(model_dir, tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "cell_size": config["cell_size"] * 2}))
    line = _error_line(model, tmp_path, capsys)
    assert "do not match its config.json" in line and "with another shape than config.json implies" in line, line


def test_nonfinite_weights_are_one_line(model_dir, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    model = _copy(model_dir, tmp_path)
    tensors = load_file(model / "model.safetensors")
    name = next(k for k in sorted(tensors) if k.startswith("softmax."))
    tensors[name].view(-1)[0] = float("inf")
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    line = _error_line(model, tmp_path, capsys)
    assert f"hold NaN or infinite values in 1 tensor(s) ({name})" in line, line


def test_tokenizer_of_another_width_is_one_line(model_dir, tmp_path, capsys):
    model = _copy(model_dir, tmp_path)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "max_characters_per_token": 60}))
    assert "writes 60 characters per word but the model reads 50" in _error_line(model, tmp_path, capsys)


def test_invalid_utf8_is_replaced_and_counted_as_embed_and_pretrain_do(tmp_path, caplog):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"the caf\xe9 bank\nriver\n\xff\xfe money\n")
    with caplog.at_level(logging.WARNING, logger="modeling_elmo.evaluation.data"):
        sentences = ev_data.read_text_sentences(path)
    assert sentences == [["the", "caf\ufffd", "bank"], ["river"], ["\ufffd\ufffd", "money"]]
    assert f"text file {path}: 2 line(s) held invalid UTF-8 (replaced by U+FFFD); the first is line 1." in caplog.text
    tsv = tmp_path / "train.tsv"
    tsv.write_bytes(b"label\tsentence\n1\t\xe9t\xe9 good\n")  # Latin-1, not UTF-8
    assert [s.tokens for s in ev_data.read_sst2(tsv)] == [["\ufffdt\ufffd", "good"]]


def test_old_mac_line_ends_are_line_ends(tmp_path):
    path = tmp_path / "mac.txt"
    path.write_bytes(b"the bank\ra river\r\rgood film\r\nmoney")
    assert ev_data.read_text_sentences(path) == [["the", "bank"], ["a", "river"], ["good", "film"], ["money"]]


def test_evaluate_reads_invalid_utf8_text_end_to_end(model_dir, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_bytes(b"the bank\rthe caf\xe9 film\r")
    assert (
        main(
            [
                str(model_dir),
                "--task",
                "perplexity",
                "--text",
                str(text),
                "--output-dir",
                str(tmp_path / "out"),
                "--no-progress",
            ]
        )
        == 0
    )
    results = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert "perplexity" in json.dumps(results)


# ----------------------------------------------------------------------------------------------- issue 35: sizes
def _peak_while(call) -> tuple[BaseException | None, int]:
    import tracemalloc

    tracemalloc.start()
    try:
        call()
        raised = None
    except ValueError as error:
        raised = error
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return raised, peak


def test_a_perplexity_text_line_of_megabytes_is_one_line_read_in_bounded_memory(model_dir, tmp_path, capsys):
    """The 200 MB line of 100 M words (scaled to 20 MB): refused after its first 4 MiB, the memory bounded by that,
    not by the line; through the command, one line naming the file and the line."""
    text = tmp_path / "long.txt"
    text.write_bytes(b"a short line\n" + b"w " * 10_000_000 + b"\n")
    error, peak = _peak_while(lambda: ev_data.read_text_sentences(text))
    assert str(error) == (
        f"text file {str(text)!r}: line 2 has more than 4,194,304 bytes; a line holds one sentence or record (at "
        "most 4,194,304 bytes)"
    )
    assert peak < 16 * 2**20, peak
    with pytest.raises(SystemExit):
        main([str(model_dir), "--task", "perplexity", "--text", str(text), "--output-dir", str(tmp_path / "r")])
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("Loading")]
    assert len(lines) == 1 and lines[0].startswith("elmo evaluate: error: text file") and "line 2 has" in lines[0]
    assert not (tmp_path / "r").exists()


def test_a_wsd_record_of_millions_of_tokens_is_refused_without_quoting_it(tmp_path):
    """The 5 M-token WSD record (scaled): one line, not a MemoryError; neither it nor a shorter over-long record is
    quoted whole in the message."""
    long_line = tmp_path / "wsd.jsonl"
    long_line.write_text(json.dumps({"tokens": ["w"] * 2_000_000, "word": "bank", "sense": "bank%1"}) + "\n")
    error, peak = _peak_while(lambda: ev_data.read_wsd_jsonl(long_line))
    assert "line 1 has more than 4,194,304 bytes" in str(error) and peak < 16 * 2**20, (error, peak)
    many = tmp_path / "many.jsonl"
    many.write_text(json.dumps({"tokens": ["w"] * 120_000 + ["bank"], "word": "bank", "sense": "bank%1"}) + "\n")
    with pytest.raises(ValueError) as caught:
        ev_data.read_wsd_jsonl(many)
    assert str(caught.value) == (
        f"{many}:1: a sentence of 120,001 tokens; sentences are embedded whole, so at most 100,000 tokens each"
    )
    absent = tmp_path / "absent.jsonl"
    absent.write_text(json.dumps({"tokens": ["w" * 100_000] * 5, "word": "x" * 100_000, "sense": "s%1"}) + "\n")
    with pytest.raises(ValueError) as caught:
        ev_data.read_wsd_jsonl(absent)
    assert "does not occur in its sentence" in str(caught.value) and len(str(caught.value)) < 400


def test_an_sst2_row_is_never_quoted_whole_in_an_error(tmp_path):
    path = tmp_path / "sst2.tsv"
    path.write_text("label\tsentence\n0\ta\tb" + "c" * 900_000 + "\n")
    with pytest.raises(ValueError) as caught:
        ev_data.read_sst2(path)
    message = str(caught.value)
    assert (
        message.startswith(f"{path}:2: expected 2 tab-separated columns, got 3: ['0', 'a', 'bccc")
        and len(message) < 300
    ), message[:400]


def test_a_conllu_file_of_a_million_tags_or_a_huge_sentence_is_one_line(tmp_path):
    """M8 (every token its own tag) and the 2 M-token CoNLL-U sentence (both scaled): refused while reading."""
    tags = tmp_path / "tags.conllu"
    tags.write_text(
        "".join(
            f"{i % 50 + 1}\tw\tw\tTAG{i}\t_\t_\t0\troot\t_\t_\n" + ("\n" if i % 50 == 49 else "") for i in range(6000)
        )
    )
    with pytest.raises(ValueError) as caught:
        ev_data.read_conllu(tags)
    assert str(caught.value).startswith(
        f"{tags}:5101: tag 'TAG5000' is distinct tag number 5,001 of the file; a tagging"
    )
    long = tmp_path / "long.conllu"
    long.write_text("".join(f"{i + 1}\tw\tw\tNOUN\t_\t_\t0\troot\t_\t_\n" for i in range(100_001)))
    with pytest.raises(ValueError) as caught:
        ev_data.read_conllu(long)
    assert str(caught.value).startswith(f"{long}:100001: a sentence of 100,001 tokens")


class _Killed(BaseException):
    """Stands for SIGKILL: raised at a rename, with nothing cleaned up after it (see the test below)."""


@pytest.mark.parametrize("renames", [1, 3], ids=["at the results", "at the report"])
def test_evaluate_killed_between_replacing_its_files_is_finished_by_the_next_run(
    model_dir, tmp_path, monkeypatch, renames
):
    """A run killed after its results took their name but before its report did (or just before the results did):
    the manifest recorded each new file and its temporary before the rename, so the next run accepts the files
    there, removes the temporary the killed run left, and ends with the clean result."""
    from modeling_elmo.folders import files

    (tmp_path / "t.txt").write_text("the bank\na good film\n")
    (tmp_path / "u.txt").write_text("a good bank\n")
    out = tmp_path / "results"
    args = [str(model_dir), "--task", "perplexity", "--output-dir", str(out), "--no-progress", "--text"]
    assert main([*args, str(tmp_path / "t.txt")]) == 0
    real_replace, count = files.replace, {"n": 0}

    def replace(source, target, **where):
        count["n"] += 1
        if count["n"] > renames:
            raise _Killed
        real_replace(source, target, **where)

    with monkeypatch.context() as killed:
        killed.setattr(files, "replace", replace)
        killed.setattr(files, "remove_file", lambda *a, **k: None)  # a killed process removes nothing
        with pytest.raises(_Killed):
            main([*args, str(tmp_path / "u.txt")])
    left = sorted(p.name for p in out.iterdir())
    assert any(files.TEMPORARY_FILE.fullmatch(name) for name in left), left
    assert main([*args, str(tmp_path / "u.txt")]) == 0
    assert sorted(p.name for p in out.iterdir()) == [".elmo-manifest.json", "eval_results.json", "eval_results.md"]
    manifest = json.loads((out / ".elmo-manifest.json").read_text())
    assert set(manifest) == {"command", "files"}
    assert json.loads((out / "eval_results.json").read_text())["details"]["datasets"]["perplexity"].endswith("u.txt")
