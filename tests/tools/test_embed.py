"""Tests of `modeling_elmo.embedding.embed` (the ``elmo embed`` command).

The I/O machinery (streaming, length sorting, chunk files, merging, resuming) is tested with a cheap deterministic
fake embedder; the model-backed tests compare the HDF5 file with `ElmoModel` called on one sentence at a time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from support import assert_same_numbers, lock_held_elsewhere, plant
from support.embedding import SENTENCES, TINY, FakeEmbedder, read_h5, run, write_lines

from modeling_elmo.embedding import embed as embed_mod
from modeling_elmo.embedding.embed import embed_file
from modeling_elmo.embedding.input_lines import count_lines
from modeling_elmo.utils import capability

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------------- pure parts


def test_count_lines_counts_a_last_line_without_newline(tmp_path):
    (tmp_path / "a").write_bytes(b"x\ny\nz")
    (tmp_path / "b").write_bytes(b"x\ny\n")
    (tmp_path / "c").write_bytes(b"")
    assert [count_lines(tmp_path / n) for n in "abc"] == [3, 2, 0]


# ---------------------------------------------------------------------------------------------------- layout


@pytest.mark.parametrize("mode", ["all", "top", "average"])
def test_each_line_is_stored_under_its_index_despite_length_sorting(tmp_path, mode):
    fake = FakeEmbedder()
    report, out = run(tmp_path, mode=mode, embedder=fake, batch_size=3, chunk_size=4)
    got = read_h5(out)
    assert sorted(k for k in got if k != "sentence_to_index") == sorted(str(i) for i in range(len(SENTENCES)))
    for i, line in enumerate(SENTENCES):
        full = fake.one(line.split())
        expected = {"all": full, "top": full[-1], "average": full.mean(axis=0)}[mode]
        assert got[str(i)].dtype == np.float32
        np.testing.assert_allclose(got[str(i)], expected, rtol=0, atol=1e-6, err_msg=f"line {i}")
    # sorting really happened: within a chunk, batches go longest first
    assert [len(s) for s in fake.batches[0]] == [6, 3, 2] and fake.batches[1] == [["a"]]
    assert report.num_lines == len(SENTENCES) and report.merged
    assert not (tmp_path / "out.h5.partial").exists()


def test_sentence_to_index_maps_each_text_to_its_last_line(tmp_path):
    lines = ["a b", "c", "a b", "d e f"]
    _, out = run(tmp_path, lines=lines, chunk_size=2)
    mapping = json.loads(read_h5(out)["sentence_to_index"])
    assert mapping == {"a b": "2", "c": "1", "d e f": "3"}
    with h5py.File(out, "r") as h5:
        assert h5["sentence_to_index"].shape == (1,)
        assert h5.attrs["layers"] == "all"


def test_forget_sentences_omits_sentence_to_index(tmp_path):
    _, out = run(tmp_path, forget_sentences=True)
    assert "sentence_to_index" not in read_h5(out)


def test_use_sentence_keys_names_datasets_by_sentence(tmp_path):
    fake = FakeEmbedder()
    _, out = run(tmp_path, lines=["b c", "a"], use_sentence_keys=True, embedder=fake, mode="top")
    got = read_h5(out)
    assert set(got) == {"b c", "a"}
    np.testing.assert_allclose(got["b c"], fake.one(["b", "c"])[-1])


@pytest.mark.parametrize(
    "lines, match",
    [(["a/b", "c"], "'/'"), (["a b", "c", "a b"], "repeats the sentence of line 0"), (["a", ""], "line 1 is blank")],
)
def test_use_sentence_keys_refuses_bad_keys_before_any_work(tmp_path, lines, match):
    fake = FakeEmbedder()
    with pytest.raises(ValueError, match=match):
        run(tmp_path, lines=lines, use_sentence_keys=True, embedder=fake)
    assert fake.batches == [] and not (tmp_path / "out.h5.partial").exists()


# ---------------------------------------------------------------------------------------------------- odd input


@pytest.mark.parametrize("mode, shape", [("all", (3, 0, 4)), ("average", (0, 4))])
def test_blank_lines_give_empty_arrays(tmp_path, mode, shape):
    report, out = run(tmp_path, lines=["a b", "", "   ", "c"], mode=mode)
    got = read_h5(out)
    assert got["1"].shape == shape and got["2"].shape == shape
    assert got["0"].shape[-2] == 2 and report.blank_lines == 2


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    (tmp_path / "in.txt").write_bytes(b"good line\nbad \xff\xfe byte\nfine\n\xc3(\n")
    fake = FakeEmbedder()
    report, out = run(tmp_path, embedder=fake)
    assert (report.invalid_utf8_lines, report.first_invalid_utf8_line) == (2, 1)
    mapping = json.loads(read_h5(out)["sentence_to_index"])
    assert mapping["bad \ufffd\ufffd byte"] == "1" and mapping["\ufffd("] == "3"
    np.testing.assert_allclose(read_h5(out)["1"], fake.one(["bad", "\ufffd\ufffd", "byte"]))


def test_empty_input_gives_a_valid_empty_output(tmp_path, caplog):
    (tmp_path / "in.txt").write_bytes(b"")
    report, out = run(tmp_path)
    assert read_h5(out) == {"sentence_to_index": "{}"}
    assert report.num_lines == 0 and "is empty" in caplog.text


def test_line_of_100000_characters_is_embedded_whole(tmp_path):
    long_line = " ".join(["ab"] * 33_333) + "cd"  # 100,000 characters, 33,333 words
    assert len(long_line) == 100_000
    fake = FakeEmbedder(output_size=2)
    _, out = run(tmp_path, lines=["x", long_line], embedder=fake, mode="top")
    got = read_h5(out)
    assert got["1"].shape == (33_333, 2)
    np.testing.assert_allclose(got["1"][-3:], fake.one(long_line.split())[-1][-3:])


def test_byte_order_mark_and_crlf_are_not_part_of_sentences(tmp_path):
    (tmp_path / "in.txt").write_bytes("\ufeffa b\r\nc\r\n".encode())
    _, out = run(tmp_path)
    assert json.loads(read_h5(out)["sentence_to_index"]) == {"a b": "0", "c": "1"}


# ---------------------------------------------------------------------------------------------------- files


def test_existing_output_is_refused_without_overwrite(tmp_path):
    _, out = run(tmp_path)
    before = out.stat().st_mtime_ns
    with pytest.raises(ValueError, match="already exists; pass --overwrite"):
        run(tmp_path)
    assert out.stat().st_mtime_ns == before
    run(tmp_path, overwrite=True, mode="top")
    assert read_h5(out)["0"].ndim == 2


@pytest.mark.parametrize("link", ["same path", "symlink", "hard link"])
def test_output_that_is_the_input_file_is_refused_even_with_overwrite(tmp_path, link):
    """Issue 12, report 10: `elmo embed x.txt x.txt --overwrite` replaced the input with the output."""
    src = write_lines(tmp_path / "in.txt", SENTENCES)
    out = {"same path": src, "symlink": tmp_path / "link.h5", "hard link": tmp_path / "hard.h5"}[link]
    if link == "symlink":
        out.symlink_to(src)
    elif link == "hard link":
        os.link(src, out)
    fake = FakeEmbedder()
    with pytest.raises(ValueError, match=r"output '.*' is the input file '.*in\.txt'"):
        embed_file(src, out, fake, mode="all", overwrite=True, show_progress=False)
    assert src.read_text() == "".join(line + "\n" for line in SENTENCES) and fake.batches == []
    assert not (tmp_path / (out.name + ".partial")).exists() and not (tmp_path / (out.name + ".lock")).exists()


@pytest.mark.parametrize("content, offset", [(b"\x7fELF\x02\x01\x01\x00\x00", 7), ("one line\n".encode("utf-16"), 3)])
def test_binary_input_is_refused_naming_the_file(tmp_path, content, offset):
    (tmp_path / "in.txt").write_bytes(content + bytes(range(256)) * 4)
    fake = FakeEmbedder()
    with pytest.raises(ValueError, match=rf"input file '.*in\.txt' is not text: it has a NUL byte at offset {offset}"):
        run(tmp_path, embedder=fake)
    assert fake.batches == [] and sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder where creating a file fails: read-only permissions, or (as root, who ignores them) sysfs."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    for candidate in (folder, Path("/sys")):
        try:
            (candidate / "probe").touch()
        except PermissionError:
            return candidate
        (candidate / "probe").unlink()
    pytest.skip("no folder refuses new files here (root, and no sysfs)")


@pytest.mark.parametrize("case", ["unwritable folder", "parent is a file", "output is a folder", "missing folder"])
def test_unusable_output_location_is_refused_before_any_work(tmp_path, case):
    write_lines(tmp_path / "in.txt", SENTENCES)
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-folder").mkdir()
    out, match = {
        "unwritable folder": (
            lambda: unwritable_folder(tmp_path) / "out.h5",
            r"cannot write next to the output "
            r"'.*out\.h5': Permission denied",
        ),
        "parent is a file": (lambda: tmp_path / "a-file" / "out.h5", r"the output's folder '.*a-file' is a file"),
        "output is a folder": (lambda: tmp_path / "a-folder", r"output path '.*a-folder' is a folder"),
        "missing folder": (lambda: tmp_path / "nope" / "out.h5", r"output folder '.*nope' does not exist"),
    }[case]
    out = out()
    fake = FakeEmbedder()
    with pytest.raises(ValueError, match=match):
        embed_file(tmp_path / "in.txt", out, fake, mode="all", show_progress=False)
    assert (
        fake.batches == [] and (tmp_path / "a-file").read_text() == "x" and not any((tmp_path / "a-folder").iterdir())
    )


class SecondRunWhileEmbedding(FakeEmbedder):
    """Starts a second run on the same output while the first one is embedding its first batch."""

    def __init__(self, second_run):
        super().__init__()
        self.second_run, self.error = second_run, None

    def embed_batch(self, sentences):
        if self.error is None:
            try:
                self.second_run()
            except (ValueError, SystemExit) as error:
                self.error = error
        return super().embed_batch(sentences)


def test_a_run_finding_its_output_locked_by_another_command_names_that_command(tmp_path):
    with lock_held_elsewhere(tmp_path / "out.h5", "elmo push"):
        with pytest.raises(ValueError, match=r"^another elmo push run is writing '.*out\.h5'"):
            run(tmp_path)


def test_second_run_on_the_same_output_fails_at_once_and_the_first_completes(tmp_path):
    _, reference = run(tmp_path, name="ref.h5", chunk_size=4)
    second = FakeEmbedder()
    first = SecondRunWhileEmbedding(lambda: run(tmp_path, embedder=second, chunk_size=4, resume=True))
    run(tmp_path, embedder=first, chunk_size=4)
    assert isinstance(first.error, ValueError)
    assert re.fullmatch(
        r"another elmo embed run is writing '.*out\.h5' \(it holds '.*out\.h5\.lock'\); wait for "
        r"it to end, or choose another output\.",
        str(first.error),
    ), first.error
    assert second.batches == []
    want, got = read_h5(reference), read_h5(tmp_path / "out.h5")
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.h5", "ref.h5"]  # lock file removed
    run(tmp_path, chunk_size=4, overwrite=True)  # and the lock was released


def test_resumed_run_matches_uninterrupted_run(tmp_path):
    lines = [" ".join(f"w{j}" for j in range(1 + (i * 7) % 11)) for i in range(23)]
    _, reference = run(tmp_path, lines=lines, name="ref.h5", chunk_size=5, batch_size=2)
    killed = FakeEmbedder(fail_after_batches=7)  # dies inside the third chunk
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, lines=lines, embedder=killed, chunk_size=5, batch_size=2)
    partial = tmp_path / "out.h5.partial"
    assert not (tmp_path / "out.h5").exists()
    assert sorted(p.name for p in partial.glob("chunk-*.h5")) == ["chunk-00000000.h5", "chunk-00000001.h5"]
    with pytest.raises(ValueError, match="pass --resume"):
        run(tmp_path, lines=lines, chunk_size=5, batch_size=2)
    with pytest.raises(ValueError, match="chunk_size: 5 -> 6"):
        run(tmp_path, lines=lines, chunk_size=6, resume=True)
    fake = FakeEmbedder()
    report = run(tmp_path, lines=lines, embedder=fake, chunk_size=5, batch_size=4, resume=True)[0]
    assert (report.resumed_lines, report.embedded_lines) == (10, 13)
    assert sum(len(b) for b in fake.batches) == 13  # finished chunks were not embedded again
    want, got = read_h5(reference), read_h5(tmp_path / "out.h5")
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert not partial.exists()


class _Rank:
    """Stands in for one process of a multi-process run (no real barrier)."""

    def __init__(self, index: int, count: int):
        self.index, self.count, self.is_main, self.device = index, count, index == 0, None

    def wait(self) -> None:
        pass


def test_run_of_two_processes_can_be_finished_by_one(tmp_path):
    lines = [" ".join(["w"] * (1 + i % 6)) for i in range(14)]
    _, reference = run(tmp_path, lines=lines, name="ref.h5", chunk_size=3)
    rank0 = FakeEmbedder()
    with pytest.raises(RuntimeError, match=r"chunks \[1, 3\] of .* are missing"):  # rank 1 never ran
        run(tmp_path, lines=lines, embedder=rank0, chunk_size=3, processes=_Rank(0, 2))
    assert [len(b) for b in rank0.batches] == [3, 3, 2]  # chunks 0, 2, 4: lines 0-2, 6-8, 12-13
    single = FakeEmbedder()
    report = run(tmp_path, lines=lines, embedder=single, chunk_size=3, resume=True)[0]
    assert (report.resumed_lines, report.embedded_lines) == (8, 6)
    want, got = read_h5(reference), read_h5(tmp_path / "out.h5")
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_run_killed_while_merging_is_finished_by_resume(tmp_path, monkeypatch):
    killed = []  # the write that never ended (held, so that nothing cleans it up: as `kill -9` leaves it)

    def killed_merge(partial, output, *args, records, **kwargs):
        writing = records.writing(output, keep=False)
        fd, temporary = writing.__enter__()
        os.write(fd, b"half a file")  # what `kill -9` leaves of the merged file
        os.close(fd)
        killed.append((writing, temporary))
        raise KeyboardInterrupt("simulated kill")

    with monkeypatch.context() as patch:
        patch.setattr(embed_mod, "merge_chunks", killed_merge)
        with pytest.raises(KeyboardInterrupt):
            run(tmp_path, chunk_size=4)
    assert not (tmp_path / "out.h5").exists() and killed[0][1].read_bytes() == b"half a file"
    fake = FakeEmbedder()
    report = run(tmp_path, chunk_size=4, embedder=fake, resume=True)[0]
    assert fake.batches == [] and report.resumed_lines == len(SENTENCES)
    assert len(read_h5(tmp_path / "out.h5")) == len(SENTENCES) + 1
    assert not (tmp_path / "out.h5.partial").exists()


@pytest.mark.parametrize("planted", ["link to a file outside", "dangling link", "hard link"])
def test_a_planted_merging_or_chunk_name_is_never_written_through(tmp_path, planted):
    """X6, X7, X11: ``OUTPUT.merging`` (the name an earlier version merged into) planted as a link or a hard link to
    another file: the file is untouched and nothing is created outside (every temporary has a fresh unique name)."""
    outside = tmp_path / "elsewhere" / "victim.txt"
    outside.parent.mkdir()
    merging = tmp_path / "out.h5.merging"
    if planted == "hard link":
        outside.write_text("another user's file")
        os.link(outside, merging)
    else:
        plant(merging, planted, outside)
    before = sorted(p.name for p in outside.parent.iterdir())
    report, out = run(tmp_path, chunk_size=4)
    assert len(read_h5(out)) == len(SENTENCES) + 1
    assert sorted(p.name for p in outside.parent.iterdir()) == before
    if before:
        assert outside.read_text() == "another user's file"
    assert os.path.lexists(tmp_path / "out.h5.merging")  # not ours to delete


def test_resume_without_interrupted_run_starts_afresh(tmp_path):
    report, out = run(tmp_path, resume=True)
    assert report.embedded_lines == len(SENTENCES) and out.exists()


def test_library_rejects_bad_arguments(tmp_path):
    write_lines(tmp_path / "in.txt", ["a"])
    with pytest.raises(ValueError, match="'middle'"):
        run(tmp_path, mode="middle")
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        run(tmp_path, batch_size=0)
    with pytest.raises(ValueError, match="does not exist"):
        embed_file(tmp_path / "missing.txt", tmp_path / "o.h5", FakeEmbedder(), mode="all")


# ---------------------------------------------------------------------------------------------------- CLI


def test_cli_requires_exactly_one_layer_mode(tmp_path, capsys):
    with pytest.raises(SystemExit):
        embed_mod.main([str(tmp_path / "in.txt"), str(tmp_path / "o.h5"), "--model", "m", "--all", "--top"])
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        embed_mod.main([str(tmp_path / "in.txt"), str(tmp_path / "o.h5"), "--model", "m"])


def test_cli_refuses_a_gpu_device_without_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    write_lines(tmp_path / "in.txt", ["a"])
    with pytest.raises(SystemExit, match="--device cuda asked for a GPU"):
        embed_mod.main([str(tmp_path / "in.txt"), str(tmp_path / "o.h5"), "--model", "m", "--all", "--device", "cuda"])


@pytest.mark.parametrize(
    ("dtype", "flags", "message"),
    [
        ("float16", {"avx512_bf16"}, "--dtype float16 on cpu: float16 needs a GPU"),
        ("bfloat16", {"avx2"}, "--dtype bfloat16 on cpu: bfloat16 needs a device that multiplies bfloat16 natively"),
    ],
)
def test_cli_refuses_a_dtype_the_cpu_lacks_in_one_line(tmp_path, monkeypatch, dtype, flags, message):
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset(flags))
    write_lines(tmp_path / "in.txt", ["a"])
    arguments = [str(tmp_path / "in.txt"), str(tmp_path / "o.h5"), "--model", "m", "--all", "--device", "cpu"]
    with pytest.raises(SystemExit, match=f"^elmo embed: error: {message}") as error:
        embed_mod.main([*arguments, "--dtype", dtype])
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------------------------------------------- real model


MODEL_LINES = [
    "The cat sat on the mat .",
    "",
    "Hi",
    "A much longer sentence , with punctuation and more words",
    "naïve café ☃",
    "Hi",
    "end of file",
]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer

    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    path = tmp_path_factory.mktemp("tiny-elmo")
    model.save_pretrained(path)
    ElmoTokenizer().save_pretrained(path)
    MODELS[path] = model
    return path


MODELS: dict[Path, torch.nn.Module] = {}  # the saved models as built, to compute expected outputs without loading


def direct_layers(model_dir: Path, words: list[str]) -> np.ndarray:
    """All layers of one sentence from ElmoModel, no batching: (L + 1, n, 2P)."""
    from modeling_elmo import ElmoTokenizer

    model, tok = MODELS[model_dir], ElmoTokenizer()
    with torch.no_grad():
        out = model(**tok([words], is_split_into_words=True, return_tensors="pt"), output_hidden_states=True)
    return torch.stack(out.hidden_states, dim=1)[0].numpy()


@pytest.mark.parametrize("flag", ["--all", "--top", "--average"])
def test_cli_output_equals_elmo_model_run_one_sentence_at_a_time(tmp_path, tiny_model_dir, flag):
    src = write_lines(tmp_path / "in.txt", MODEL_LINES)
    out = tmp_path / "out.hdf5"
    assert (
        embed_mod.main(
            [
                str(src),
                str(out),
                "--model",
                str(tiny_model_dir),
                flag,
                "--batch-size",
                "3",
                "--chunk-size",
                "4",
                "--no-progress",
            ]
        )
        == 0
    )
    got = read_h5(out)
    assert json.loads(got.pop("sentence_to_index")) == {line: str(i) for i, line in enumerate(MODEL_LINES) if i != 2}
    assert sorted(got, key=int) == [str(i) for i in range(len(MODEL_LINES))]
    for i, line in enumerate(MODEL_LINES):
        if not line:
            assert got[str(i)].shape == ((3, 0, 16) if flag == "--all" else (0, 16))
            continue
        full = direct_layers(tiny_model_dir, line.split())
        expected = {"--all": full, "--top": full[-1], "--average": full.mean(axis=0)}[flag]
        np.testing.assert_allclose(got[str(i)], expected, rtol=1e-5, atol=1e-6, err_msg=f"line {i}")


def test_raw_text_uses_the_tokenizer_pre_tokenizer(tmp_path, tiny_model_dir):
    src = write_lines(tmp_path / "in.txt", ["Don't stop!", "ok"])
    out = tmp_path / "out.hdf5"
    embed_mod.main([str(src), str(out), "--model", str(tiny_model_dir), "--top", "--raw-text", "--no-progress"])
    from modeling_elmo import ElmoTokenizer

    words = ElmoTokenizer.from_pretrained(tiny_model_dir).split_words("Don't stop!")
    assert len(words) > 2
    np.testing.assert_allclose(read_h5(out)["0"], direct_layers(tiny_model_dir, words)[-1], rtol=1e-5, atol=1e-6)


def test_a_single_100000_character_word_is_cut_by_the_tokenizer(tmp_path, tiny_model_dir):
    src = write_lines(tmp_path / "in.txt", ["x" * 100_000, "y"])
    out = tmp_path / "out.hdf5"
    embed_mod.main([str(src), str(out), "--model", str(tiny_model_dir), "--all", "--no-progress"])
    got = read_h5(out)["0"]
    assert got.shape == (3, 1, 16)
    np.testing.assert_allclose(got, direct_layers(tiny_model_dir, ["x" * 48]), rtol=1e-5, atol=1e-6)


def test_cli_reports_a_missing_model_clearly(tmp_path):
    src = write_lines(tmp_path / "in.txt", ["a"])
    with pytest.raises(SystemExit, match=r"^elmo embed: error: model '.*nope' does not exist \(no such folder\)"):
        embed_mod.main([str(src), str(tmp_path / "o.h5"), "--model", str(tmp_path / "nope"), "--all", "--no-progress"])
    assert not (tmp_path / "o.h5").exists()


@pytest.mark.slow
def test_cli_refuses_weights_that_do_not_match_the_config_in_one_line(tmp_path, tiny_model_dir):
    """Issue 12, report 4: weights that do not match config.json gave a MISSING table, then 'wrote 50 sentences'
    from a partly random model."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    src = write_lines(tmp_path / "in.txt", ["a b"] * 50)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "modeling_elmo.embedding.embed",
            str(src),
            str(tmp_path / "o.h5"),
            "--model",
            str(model),
            "--all",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr  # one line: no table, no traceback
    assert proc.stderr.startswith("elmo embed: error: the weights of model ")
    assert "8 biLM weight(s) missing (encoder.backward_layers.2.input_transform.bias" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model"]  # nothing written


def test_cli_second_run_on_the_same_output_exits_with_one_line(tmp_path, tiny_model_dir):
    src = write_lines(tmp_path / "in.txt", MODEL_LINES)
    out = tmp_path / "out.hdf5"
    argv = [str(src), str(out), "--model", str(tiny_model_dir), "--all", "--no-progress"]
    first = SecondRunWhileEmbedding(lambda: embed_mod.main(argv))
    embed_file(src, out, first, mode="all", show_progress=False)
    assert isinstance(first.error, SystemExit) and first.error.code.count("\n") == 0
    assert first.error.code.startswith(f"elmo embed: error: another elmo embed run is writing {str(out)!r}")
    assert len(read_h5(out)) == len(MODEL_LINES) + 1


@pytest.mark.parametrize(
    "case", ["input is output", "binary input", "unwritable output", "output parent is a file", "output is a folder"]
)
def test_cli_refuses_unusable_paths_with_one_line_and_writes_nothing(tmp_path, tiny_model_dir, case):
    src = write_lines(tmp_path / "in.txt", MODEL_LINES)
    if case == "binary input":
        src.write_bytes(b"PK\x03\x04\x14\x00\x00\x00" + bytes(range(256)))
    out, match = {
        "input is output": (src, "is the input file"),
        "binary input": (tmp_path / "out.hdf5", "is not text: it has a NUL byte at offset 5"),
        "unwritable output": (unwritable_folder(tmp_path) / "out.hdf5", "cannot write next to the output"),
        "output parent is a file": (src / "out.hdf5", "is a file, not a folder"),
        "output is a folder": (tmp_path, "is a folder; give a file name"),
    }[case]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(SystemExit) as exit_:
        embed_mod.main([str(src), str(out), "--model", str(tiny_model_dir), "--all", "--no-progress", "--overwrite"])
    message = exit_.value.code
    assert isinstance(message, str) and message.startswith("elmo embed: error: ") and "\n" not in message
    assert match in message and (str(src) in message or str(out) in message), message
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_bench_embed_reports_throughput_against_a_baseline_and_the_matmul_peak(tmp_path, capsys, shared_data):
    if not (shared_data / "lm-corpus" / "brown.txt").is_file():
        pytest.skip(f"{shared_data}/lm-corpus is not available (set ELMO_SHARED_DATA)")
    sys.path.insert(0, str(REPO / "scripts" / "bench"))
    try:
        import bench_embed
    finally:
        sys.path.pop(0)
    argv = ["--lines", "30", "--models", "tiny", "--chunk-size", "10", "--baseline-lines", "20"]
    assert bench_embed.main([*argv, "--word-vectors-lines", "12"]) == 0
    result = json.loads(capsys.readouterr().out)
    comparison = result["models"]["tiny"]["kept_word_vectors_off_and_on"]
    assert comparison["lines"] == 12 and all(len(comparison["seconds"][mode]) == 2 for mode in ("off", "on"))
    assert comparison["speedup"] > 0
    assert result["input"]["lines"] == 30 and result["input"]["tokens"] > 30
    tiny = result["models"]["tiny"]
    assert tiny["sentences_per_second"] > 0 and tiny["baseline"]["lines"] == 20
    assert tiny["speedup_over_baseline"] == pytest.approx(
        tiny["sentences_per_second"] / tiny["baseline"]["sentences_per_second"], rel=0.01, abs=0.006
    )  # 2 decimals
    assert result["matmul_peak_gflops"] > 0 and 0 < tiny["fraction_of_matmul_peak"] < 1


def _bench_embed():
    sys.path.insert(0, str(REPO / "scripts" / "bench"))
    try:
        import bench_embed
    finally:
        sys.path.pop(0)
    return bench_embed


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--only-allennlp"], "--only-allennlp needs --allennlp-python"),
        (["--threads", "0"], "'0'"),
        (["--threads", "one"], "'one'"),
        (["--rounds", "0"], "--rounds be positive"),
    ],
)
def test_bench_embed_refuses_a_bad_comparison_setting_in_one_line(argv, named):
    with pytest.raises(SystemExit) as stopped:
        _bench_embed().main(["--lines", "5", "--synthetic", *argv])
    message = str(stopped.value)
    assert named in message and "\n" not in message


@pytest.mark.slow
def test_bench_embed_measures_each_processs_own_peak_memory(tmp_path):
    bench_embed = _bench_embed()
    torch.zeros(2**27)  # this process: torch and 512 MB more; the children are measured apart from it
    allocate = "import numpy; a = numpy.ones(2**26); print(a.sum())"  # 512 MB
    big = bench_embed.timed_process([sys.executable, "-c", allocate], 1, tmp_path / "big.log")
    small = bench_embed.timed_process([sys.executable, "-c", "print(1)"], 1, tmp_path / "small.log")
    assert 512 <= big["peak_rss_mb"] < 700 and small["peak_rss_mb"] < 100
    assert small["seconds"] > 0 and len(small["load_before"]) == 3
    with pytest.raises(SystemExit, match="failed \\(status 3\\)"):
        bench_embed.timed_process([sys.executable, "-c", "raise SystemExit(3)"], 1, tmp_path / "fail.log")


@pytest.mark.slow
def test_bench_embed_compares_elmo_embed_with_allennlps_loop_on_the_same_weights(capsys, shared_data):
    """Needs a Python with allennlp 2.10 (docs/benchmarks.md) in ``ELMO_ALLENNLP_PYTHON``."""
    python = os.environ.get("ELMO_ALLENNLP_PYTHON")
    if not python:
        pytest.skip("ELMO_ALLENNLP_PYTHON (a Python with allennlp 2.10, docs/benchmarks.md) is not set")
    argv = ["--lines", "70", "--models", "tiny", "--only-allennlp", "--allennlp-python", python, "--threads", "1,2"]
    assert _bench_embed().main([*argv, "--rounds", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "models" not in result or not result["models"]  # --only-allennlp: nothing measured in process
    tiny = result["against_allennlp"]["tiny"]
    assert tiny["tokens"] > 70 and set(tiny["threads"]) == {"1", "2"}
    for entry in tiny["threads"].values():
        runs = entry["runs"]
        assert all(len(runs[impl]) == 2 and all(r["peak_rss_mb"] > 50 for r in runs[impl]) for impl in runs)
        best = {impl: min(r["seconds"] for r in runs[impl]) for impl in runs}
        assert entry["speedup"] == pytest.approx(best["allennlp"] / best["package"], rel=0.01, abs=0.006)
        assert entry["tokens_per_second"]["package"] == pytest.approx(tiny["tokens"] / best["package"], rel=1e-3)
    # the same weights and the same layers: AllenNLP's first batch (fresh LSTM state) equals the package's output
    assert tiny["largest_difference_first_batch"] < 1e-4


def test_bench_embed_runs_elmo_embed_in_the_chosen_dtype_against_allennlps_float32_loop(tmp_path, monkeypatch):
    bench_embed = _bench_embed()
    commands = []

    def record(command, threads, log):
        commands.append((Path(command[1]).name if command[1].endswith(".py") else command[2], command))
        return {"seconds": 1.0, "cpu_seconds": 1.0, "peak_rss_mb": 100.0, "load_before": [0.0, 0.0, 0.0]}

    monkeypatch.setattr(bench_embed, "timed_process", record)
    monkeypatch.setattr(bench_embed, "first_batch_difference", lambda outputs, batch_size: 0.0)
    src = write_lines(tmp_path / "in.txt", ["a b c", "d e"])
    config = bench_embed.load_shape("tiny")
    bench_embed.allennlp_comparison(config, src, tmp_path, "python-with-allennlp", [1], 1, 64, "bfloat16")
    by_name = dict(commands)
    package = by_name["modeling_elmo.embedding.embed"]
    assert package[package.index("--dtype") + 1] == "bfloat16"
    assert "--dtype" not in by_name["allennlp_embed.py"]  # AllenNLP's loop stays in float32


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_process_accelerate_run_merges_to_the_single_process_output(tmp_path, tiny_model_dir):
    lines = [" ".join(f"w{j}" for j in range(1 + (i * 5) % 9)) for i in range(17)] + [""]
    src = write_lines(tmp_path / "in.txt", lines)
    args = [
        str(src),
        "--model",
        str(tiny_model_dir),
        "--all",
        "--chunk-size",
        "3",
        "--batch-size",
        "2",
        "--no-progress",
    ]
    embed_mod.main([args[0], str(tmp_path / "single.h5"), *args[1:]])
    env = {
        **os.environ,
        "ACCELERATE_USE_CPU": "1",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(_free_port()),
        "-m",
        "modeling_elmo.embedding.embed",
        args[0],
        str(tmp_path / "multi.h5"),
        *args[1:],
    ]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wrote 18 sentences" in proc.stderr and "process 1" not in proc.stderr
    single, multi = read_h5(tmp_path / "single.h5"), read_h5(tmp_path / "multi.h5")
    assert single.keys() == multi.keys() and len(single) == 19
    for key in single:
        if key == "sentence_to_index":
            assert json.loads(multi[key]) == json.loads(single[key])
        else:
            assert_same_numbers(multi[key], single[key], what=key)  # computed in other processes
    assert not (tmp_path / "multi.h5.partial").exists()


def test_a_model_whose_config_says_return_dict_false_still_embeds(tmp_path, tiny_model_dir):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "return_dict": False}))
    MODELS[folder] = MODELS[tiny_model_dir]
    src = write_lines(tmp_path / "in.txt", ["The cat sat", "Hi"])
    assert embed_mod.main([str(src), str(tmp_path / "out.hdf5"), "--model", str(folder), "--all", "--no-progress"]) == 0
    np.testing.assert_allclose(read_h5(tmp_path / "out.hdf5")["1"], direct_layers(folder, ["Hi"]), rtol=1e-5, atol=1e-6)


def test_cli_embeds_in_bf16_on_a_cpu_that_has_it_close_to_fp32(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"avx512_bf16"}))
    src = write_lines(tmp_path / "in.txt", [line for line in MODEL_LINES if line])
    out = tmp_path / "out.hdf5"
    arguments = [str(src), str(out), "--model", str(tiny_model_dir), "--all", "--device", "cpu", "--no-progress"]
    assert embed_mod.main([*arguments, "--dtype", "bfloat16"]) == 0
    got = read_h5(out)
    for i, line in enumerate(line for line in MODEL_LINES if line):
        expected = direct_layers(tiny_model_dir, line.split())
        assert got[str(i)].dtype == np.float32
        assert 0 < np.abs(got[str(i)] - expected).max() < 0.05 * expected.std(), f"line {i}"
