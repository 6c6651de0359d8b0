"""`elmo embed` and `ElmoEmbedder` under faults and hostile inputs: a resumed run that must refuse a changed model
or input, a full disk, damaged or non-finite weights, declared sizes that cannot be right, old-Mac line ends, and
strings passed where word lists belong. Each test reproduces a reported failure."""

from __future__ import annotations

import errno
import json
import shutil
import struct
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from support import plant
from support.embedding import TINY, FakeEmbedder, read_h5, write_lines

from modeling_elmo.embedding import embed as embed_mod
from modeling_elmo.embedding import hdf5_output, input_lines
from modeling_elmo.embedding.embed import embed_file
from modeling_elmo.embedding.inference import ElmoEmbedder, load_elmo_model, weights_fingerprint


class WeightedFake(FakeEmbedder):
    """A fake embedder whose vectors and weights fingerprint depend on ``weight``."""

    def __init__(self, weight: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.weight = weight
        self.weights_fingerprint = f"fake-{weight}"

    def one(self, words):
        return super().one(words) * self.weight


def _embed(tmp_path, embedder, **kwargs):
    kwargs.setdefault("mode", "all")
    kwargs.setdefault("show_progress", False)
    kwargs.setdefault("chunk_size", 3)
    return embed_file(tmp_path / "in.txt", tmp_path / "out.h5", embedder, **kwargs)


LINES = [" ".join(f"w{j}" for j in range(1 + i % 5)) for i in range(10)]


# ---------------------------------------------------------------------------------------------------- resuming


def test_resume_refuses_a_model_whose_weights_changed_under_the_same_path(tmp_path):
    write_lines(tmp_path / "in.txt", LINES)
    with pytest.raises(KeyboardInterrupt):
        _embed(tmp_path, WeightedFake(1.0, fail_after_batches=2), batch_size=3)  # two chunks written
    assert len(list((tmp_path / "out.h5.partial").glob("chunk-*.h5"))) == 2
    with pytest.raises(
        ValueError,
        match=r"cannot resume .*: settings differ from the interrupted run \(the model's "
        r"weights changed \(sha256 fake-1.0\.\.\. -> fake-2.0\.\.\.\)\)",
    ):
        _embed(tmp_path, WeightedFake(2.0), resume=True)
    report = _embed(tmp_path, WeightedFake(1.0), resume=True)  # the same weights resume
    assert report.resumed_lines == 6


def test_resume_refuses_an_input_edited_in_place_beyond_its_first_mebibyte(tmp_path):
    filler = ["x" * 800] * 3000  # 2.4 MB before the edited line
    lines = [*filler, "the old sentence", "end"]
    src = write_lines(tmp_path / "in.txt", lines)
    with pytest.raises(KeyboardInterrupt):
        _embed(tmp_path, FakeEmbedder(fail_after_batches=1), chunk_size=1000, batch_size=1000)
    data = src.read_bytes()
    edited = data.replace(b"the old sentence", b"the new sentence")
    assert len(edited) == len(data) and edited.index(b"the new") > 1 << 21
    src.write_bytes(edited)
    with pytest.raises(ValueError, match=r"the input file changed \(input_sha256: "):
        _embed(tmp_path, FakeEmbedder(), chunk_size=1000, resume=True)


def test_embedder_fingerprint_follows_the_weights_and_their_dtype(tmp_path):
    from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer

    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    first = ElmoEmbedder(model, ElmoTokenizer()).weights_fingerprint
    assert ElmoEmbedder(model, ElmoTokenizer()).weights_fingerprint == first
    with torch.no_grad():
        model.char_encoder.projection.bias[0] += 1e-6
    assert ElmoEmbedder(model, ElmoTokenizer()).weights_fingerprint != first
    assert weights_fingerprint(model.to(torch.float64)) != weights_fingerprint(model.to(torch.float32))


# ---------------------------------------------------------------------------------------------------- line ends


def test_old_mac_line_ends_are_line_ends(tmp_path):
    (tmp_path / "in.txt").write_bytes(b"one two\rthree\r\rfour five six\r\nseven\neight")
    _embed(tmp_path, FakeEmbedder(), chunk_size=2)
    got = read_h5(tmp_path / "out.h5")
    mapping = json.loads(got.pop("sentence_to_index"))
    assert mapping == {"one two": "0", "three": "1", "": "2", "four five six": "3", "seven": "4", "eight": "5"}
    assert {key: value.shape[1] for key, value in got.items()} == {"0": 2, "1": 1, "2": 0, "3": 3, "4": 1, "5": 1}
    assert input_lines.count_lines(tmp_path / "in.txt") == 6


def test_line_reader_splits_as_a_regular_expression_does_at_every_block_boundary(tmp_path):
    import io
    import random
    import re

    from modeling_elmo.utils.io_utils import iter_lines, scan_lines

    rng = random.Random(1)
    path = tmp_path / "lines.bin"
    for _ in range(800):
        data = bytes(rng.choice(b"ab\r\n") for _ in range(rng.randint(0, 30)))
        block_size = rng.randint(1, 6)
        expected = re.split(rb"\r\n|\r|\n", data)
        if expected[-1] == b"":  # the break after the last line ends it; it starts no new line
            expected.pop()
        assert list(iter_lines(io.BytesIO(data), block_size)) == expected, (data, block_size)
        path.write_bytes(data)
        assert scan_lines(path, block_size)[0] == len(expected), (data, block_size)


# ---------------------------------------------------------------------------------------------------- a full disk


class _FullDisk:
    """A file handle whose writes fail with ENOSPC once ``budget`` bytes have been written through all handles;
    ``written`` counts the bytes written per file name."""

    budget = 0
    written: dict[str, int] = {}

    def __init__(self, handle, path):
        self._handle, self._name = handle, Path(path).name

    def write(self, data):
        size = memoryview(data).nbytes
        if size > _FullDisk.budget:
            raise OSError(errno.ENOSPC, "No space left on device")
        _FullDisk.budget -= size
        _FullDisk.written[self._name] = _FullDisk.written.get(self._name, 0) + size
        return self._handle.write(data)

    def __getattr__(self, name):
        return getattr(self._handle, name)


@pytest.fixture
def disk_of(monkeypatch):
    """``disk_of(n)``: from now on, HDF5 files that `elmo embed` writes fail once ``n`` bytes are written."""
    init = hdf5_output._GuardedFile.__init__

    def limited(self, destination, scratch):
        init(self, destination, scratch)
        self.handle = _FullDisk(self.handle, destination)

    def set_budget(nbytes: int) -> None:
        _FullDisk.budget = nbytes
        monkeypatch.setattr(hdf5_output._GuardedFile, "__init__", limited)

    return set_budget


def test_a_full_disk_while_writing_a_chunk_keeps_the_finished_chunks_and_resume_completes(tmp_path, disk_of):
    write_lines(tmp_path / "in.txt", LINES)
    reference = tmp_path / "ref"
    reference.mkdir()
    write_lines(reference / "in.txt", LINES)
    disk_of(10**12)
    _embed(reference, FakeEmbedder())
    sizes = [_FullDisk.written[f"chunk-{k:08d}.h5"] for k in range(3)]
    disk_of(sizes[0] + sizes[1] + sizes[2] // 2)  # room for two chunks and half of the third
    with pytest.raises(OSError) as raised:
        _embed(tmp_path, FakeEmbedder())
    assert raised.value.errno == errno.ENOSPC
    assert "writing the chunk" in str(raised.value) and "\n" not in str(raised.value)
    partial = tmp_path / "out.h5.partial"
    finished = sorted(p.name for p in partial.iterdir() if not p.name.startswith(".elmo-embed-records-"))
    assert "run.json" in finished and not any(name.endswith(".tmp") for name in finished)
    assert len(finished) == 1 + 2  # two chunks were finished, the failed one left nothing
    assert not (tmp_path / "out.h5").exists() and not (tmp_path / "out.h5.lock").exists()
    disk_of(1 << 40)  # space again
    fake = FakeEmbedder()
    report = _embed(tmp_path, fake, resume=True)
    assert report.resumed_lines == 6 and len(fake.batches) == 2  # the last two chunks only
    want, got = read_h5(reference / "out.h5"), read_h5(tmp_path / "out.h5")
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_a_full_disk_while_merging_keeps_every_chunk(tmp_path, disk_of, monkeypatch):
    write_lines(tmp_path / "in.txt", LINES)
    real_merge = embed_mod.merge_chunks

    def merge_on_a_full_disk(*args, **kwargs):
        disk_of(1000)
        return real_merge(*args, **kwargs)

    monkeypatch.setattr(embed_mod, "merge_chunks", merge_on_a_full_disk)
    with pytest.raises(OSError, match=r"merging the chunks into '.*out\.h5' failed: No space left"):
        _embed(tmp_path, FakeEmbedder())
    assert len(list((tmp_path / "out.h5.partial").glob("chunk-*.h5"))) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.h5.partial"]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-elmo")
    ElmoModel(ElmoConfig(**TINY)).eval().save_pretrained(path)
    ElmoTokenizer().save_pretrained(path)
    return path


def _cli_error(tmp_path, model, *extra) -> str:
    src = tmp_path / "in.txt"
    if not src.exists():
        write_lines(src, LINES)
    with pytest.raises(SystemExit) as exit_:
        embed_mod.main(
            [
                str(src),
                str(tmp_path / "out.h5"),
                "--model",
                str(model),
                "--all",
                "--no-progress",
                "--chunk-size",
                "3",
                *extra,
            ]
        )
    message = exit_.value.code
    assert isinstance(message, str) and message.startswith("elmo embed: error: ") and "\n" not in message, message
    return message


def test_cli_full_disk_is_one_line_naming_the_kept_chunks(tmp_path, tiny_model_dir, disk_of):
    disk_of(30_000)
    message = _cli_error(tmp_path, tiny_model_dir)
    assert "No space left on device" in message and "rerun with --resume" in message, message
    assert (tmp_path / "out.h5.partial" / "run.json").is_file()


# ---------------------------------------------------------------------------------------------------- weights


def _copy_model(tiny_model_dir, tmp_path) -> Path:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    return model


@pytest.mark.parametrize("damage", ["truncated", "bomb header", "garbage header", "shape vs bytes"])
def test_cli_damaged_safetensors_is_one_line_and_writes_nothing(tmp_path, tiny_model_dir, damage):
    model = _copy_model(tiny_model_dir, tmp_path)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + length])
    if damage == "truncated":
        weights.write_bytes(data[: len(data) - 100])
        expected = "is truncated: tensor"
    elif damage == "bomb header":
        weights.write_bytes(struct.pack("<Q", 1 << 62) + data[8:])
        expected = "its header claims 4,611,686,018,427,387,904 bytes"
    elif damage == "garbage header":
        weights.write_bytes(data[:8] + b"\xff" * length + data[8 + length :])
        expected = "its header is not a JSON object"
    else:
        name = next(k for k in header if k != "__metadata__")
        header[name]["shape"] = [10**9, 10**9]
        raw = json.dumps(header).encode()
        weights.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length :])  # same data, offsets unchanged
        expected = f"tensor {name!r} declares shape [1000000000, 1000000000]"
    message = _cli_error(tmp_path, model)
    assert expected in message and str(weights) in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model"]


def test_cli_nonfinite_weights_are_one_line_and_leave_no_partial_run(tmp_path, tiny_model_dir):
    from safetensors.torch import load_file, save_file

    model = _copy_model(tiny_model_dir, tmp_path)
    tensors = load_file(model / "model.safetensors")
    tensors["char_encoder.projection.bias"][1] = float("nan")
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    message = _cli_error(tmp_path, model)
    assert "hold NaN or infinite values in 1 tensor(s) (char_encoder.projection.bias)" in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model"]
    with pytest.raises(ValueError, match="NaN or infinite"):
        load_elmo_model(model)


def test_cli_tokenizer_and_model_of_different_widths_fail_before_anything_is_written(tmp_path, tiny_model_dir):
    model = _copy_model(tiny_model_dir, tmp_path)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "max_characters_per_token": 60}))
    message = _cli_error(tmp_path, model)
    assert "the tokenizer writes 60 characters per word" in message and "the model reads 50" in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model"]  # no .partial blocks the next run


@pytest.mark.parametrize(
    "file, field, value, expected",
    [
        ("tokenizer_config.json", "max_characters_per_token", 10**6, "must be an integer in [3, 1024], got 1000000"),
        (
            "config.json",
            "max_characters_per_token",
            10**6,
            "must be an integer in [3, 1,024] (characters per word), got 1000000",
        ),
        ("config.json", "char_cnn_filters", [[1, 10**9]], "describes a model of 2e+18 parameters"),
    ],
)
def test_cli_declared_sizes_beyond_sane_bounds_are_one_line_before_any_allocation(
    tmp_path, tiny_model_dir, file, field, value, expected
):
    model = _copy_model(tiny_model_dir, tmp_path)
    config = json.loads((model / file).read_text())
    (model / file).write_text(json.dumps({**config, field: value}))
    message = _cli_error(tmp_path, model)
    assert expected in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model"]


# ---------------------------------------------------------------------------------------------------- the library


@pytest.mark.parametrize(
    "sentences, expected",
    [
        (["hello world", "x"], r"sentence 0 is a str \('hello world'\), not a list of words"),
        ([["fine"], "x"], r"sentence 1 is a str \('x'\)"),
        ({"a": 1}, r"sentences must be a list of word lists, got a dict"),
        ("hello", r"sentences must be a list of word lists, got a str"),
        ([{"hello": 1}], r"sentence 0 must be a list of words, got a dict"),
        ([["a", 3]], r"word 1 of sentence 0 must be a string, got int 3"),
    ],
)
def test_embedder_refuses_strings_and_dicts_where_word_lists_belong(tiny_model_dir, sentences, expected):
    embedder = ElmoEmbedder.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match=expected):
        embedder.embed_sentences(sentences, show_progress=False)
    if expected.startswith(("sentence ", "word ")):  # embed_batch checks its sentences the same way
        with pytest.raises(ValueError, match=expected):
            embedder.embed_batch(sentences)
    assert [a.shape for a in embedder.embed_sentences([("hello", "world")], show_progress=False)] == [(3, 2, 16)]


def test_chunk_files_hold_what_they_should_after_a_guarded_write(tmp_path):
    """The guarded writer gives HDF5 files that h5py reads back as written."""
    write_lines(tmp_path / "in.txt", LINES)
    _embed(tmp_path, FakeEmbedder())
    with h5py.File(tmp_path / "out.h5", "r") as h5:
        assert h5.attrs["num_lines"] == len(LINES)
        np.testing.assert_array_equal(h5["4"][()], FakeEmbedder().one(LINES[4].split()))


def test_resume_of_a_run_recorded_without_the_fingerprints_says_so(tmp_path):
    write_lines(tmp_path / "in.txt", LINES)
    with pytest.raises(KeyboardInterrupt):
        _embed(tmp_path, WeightedFake(1.0, fail_after_batches=2), batch_size=3)
    run_file = tmp_path / "out.h5.partial" / "run.json"
    recorded = json.loads(run_file.read_text())
    del recorded["input_sha256"], recorded["model_weights_sha256"]  # as an earlier version wrote it
    run_file.write_text(json.dumps(recorded))
    with pytest.raises(
        ValueError,
        match=r"input_sha256 was not recorded \(a run of an earlier version\), "
        r"model_weights_sha256 was not recorded",
    ):
        _embed(tmp_path, WeightedFake(1.0), resume=True)


# ---------------------------------------------------------------------------------------------------- the lock
@pytest.mark.parametrize("planted", ["link to a file outside", "dangling link", "FIFO"])
def test_cli_a_lock_planted_as_a_link_or_fifo_is_one_line_and_nothing_is_created_outside(
    tmp_path, tiny_model_dir, planted
):
    lock = tmp_path / "out.h5.lock"
    outside = tmp_path / "elsewhere" / "victim"
    plant(lock, planted, outside)
    started = time.monotonic()
    message = _cli_error(tmp_path, tiny_model_dir)
    kind = "a FIFO" if planted == "FIFO" else "a symbolic link"
    assert message == (
        f"elmo embed: error: cannot write next to the output '{tmp_path / 'out.h5'}': lock file "
        f"'{lock}' is {kind}, not a regular file; refusing to use it (remove it if it is not yours to "
        "keep)."
    )
    assert time.monotonic() - started < 30
    kept = ["another user's file"] if planted.startswith("link to") else []
    assert [p.read_text() for p in outside.parent.iterdir()] == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "in.txt", "out.h5.lock"]


# ---------------------------------------------------------------------------------------------------- issue 35: sizes
def test_a_line_of_megabytes_is_one_line_read_in_memory_bounded_by_a_block(tmp_path, tiny_model_dir):
    """The 200 MB line of 100 M words (``--max-batch-tokens 1000``) and the 1 GB one-word line (M5), scaled to
    20 MB: refused once its first 4 MiB is read, the memory bounded by that, not by the line (the sentence-to-index
    map never sees it)."""
    import tracemalloc

    write_lines(tmp_path / "in.txt", ["a short line", "w " * 10_000_000, "another"])
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as error:
            for _ in input_lines.iter_chunks(tmp_path / "in.txt", 3, lambda k: True):
                pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak
    assert str(error.value).startswith(f"input file {str(tmp_path / 'in.txt')!r}: line 1 has more than 4,194,304 ")
    message = _cli_error(tmp_path, tiny_model_dir, "--max-batch-tokens", "1000")
    assert "line 1 has more than 4,194,304 bytes; a line is one sentence, embedded whole" in message, message
    assert not (tmp_path / "out.h5").exists()


@pytest.mark.slow
def test_a_line_holding_one_huge_word_is_refused_with_memory_bounded_by_the_line_limit(tmp_path, tiny_model_dir):
    """Issue 35, M5: one 1 GB line holding one word, scaled to 64 MiB. The word alone could be embedded (it is cut to
    the model's characters per token), but the line is the sentence: the output's sentence-to-index map (and
    ``--use-sentence-keys``) keeps its whole text, so it is refused once MAX_LINE_BYTES of it are read, with memory
    bounded by that limit, not by the line."""
    from support import elmo_peak_memory

    from modeling_elmo.utils.io_utils import MAX_LINE_BYTES

    line = 64 * 2**20
    (tmp_path / "small.txt").write_text("a short line\n")
    (tmp_path / "huge.txt").write_bytes(b"a short line\n" + b"w" * line + b"\nanother\n")
    peaks = {}
    for name in ("small", "huge"):
        args = ("embed", tmp_path / f"{name}.txt", tmp_path / f"{name}.h5", "--model", tiny_model_dir, "--top")
        code, err, peaks[name] = elmo_peak_memory(*args, "--no-progress")
        assert code == (1 if name == "huge" else 0), err[-2000:]
    assert err.splitlines()[-1] == (
        f"elmo embed: error: input file {str(tmp_path / 'huge.txt')!r}: line 1 has more than {MAX_LINE_BYTES:,} "
        f"bytes; a line is one sentence, embedded whole (at most {MAX_LINE_BYTES:,} bytes and 100,000 tokens)."
    )
    assert not (tmp_path / "huge.h5").exists()
    assert peaks["huge"] - peaks["small"] < 4 * MAX_LINE_BYTES < line // 2, peaks


def test_a_sentence_of_more_tokens_than_one_is_embedded_with_is_one_line(tmp_path, tiny_model_dir):
    write_lines(tmp_path / "in.txt", ["a short line", "w " * 120_000])
    message = _cli_error(tmp_path, tiny_model_dir)
    assert "input line 1 holds 120,000 tokens; a line is one sentence, embedded whole (at most 100,000" in message
    assert not (tmp_path / "out.h5").exists()


def test_elmo_embed_never_reads_the_word_vocabulary(tmp_path, tiny_model_dir, monkeypatch):
    """Issue 35, M4: a vocab.txt of 10 M lines took gigabytes in `elmo embed`, which needs no word ids; it is not
    read now, and the vectors are those of the tokenizer with the vocabulary."""
    from modeling_elmo import tokenization_elmo

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(1000)))
    read = []
    real = tokenization_elmo._read_vocabulary
    monkeypatch.setattr(tokenization_elmo, "_read_vocabulary", lambda path: read.append(path) or real(path))
    write_lines(tmp_path / "in.txt", LINES)
    out = tmp_path / "out.h5"
    assert embed_mod.main([str(tmp_path / "in.txt"), str(out), "--model", str(model), "--all", "--no-progress"]) in (
        0,
        None,
    )
    assert not [p for p in read if str(model) in p], read
    with_words = ElmoEmbedder.from_pretrained(model)
    expected = with_words.embed_sentences([line.split() for line in LINES])
    got = read_h5(out)
    for index, vectors in enumerate(expected):
        np.testing.assert_allclose(got[str(index)], vectors, rtol=1e-5, atol=1e-6)
