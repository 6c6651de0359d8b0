"""Tests of ELMo pretraining (modeling_elmo.pretraining and scripts/pretrain.py).

Offline and small: training text is a few hundred lines of ../shared/data/lm-corpus copied into temporary files
(skipped when the shared data is absent); the model is the elmo-tiny preset. Single-process runs call
`modeling_elmo.pretraining.main` in this process; the DDP test launches two real gloo processes with
`accelerate launch`, and the SIGTERM test a real subprocess.
"""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from support import reset_accelerate_state, run_without_package

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoTokenizer
from modeling_elmo.pretraining import (
    BucketBatchSampler,
    CheckpointManager,
    Collator,
    Vocabulary,
    expand_text_files,
    iter_text_lines,
    load_recipe,
    parse_args,
    tokenize_batch,
    train_losses_by_step,
)
from modeling_elmo.pretraining import batching as pdata_batching
from modeling_elmo.pretraining import data as pdata
from modeling_elmo.pretraining import main as pretrain_main
from modeling_elmo.pretraining.sampled_softmax import use_configured_softmax
from modeling_elmo.utils.results import read_results

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def corpus_lines(shared_data) -> list[str]:
    path = shared_data / "lm-corpus" / "masc.txt"
    if not path.is_file():
        pytest.skip(f"shared LM corpus not found at {path.parent} (set ELMO_SHARED_DATA)")
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = [line.rstrip("\n") for _, line in zip(range(4000), handle, strict=False)]
    # short sentences keep the tiny model fast
    return [line for line in lines if 3 <= len(line.split()) <= 25]


@pytest.fixture()
def corpus_files(tmp_path, corpus_lines) -> dict[str, Path]:
    files = {}
    for name, lines in (("train", corpus_lines[:600]), ("valid", corpus_lines[600:700])):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return files


def _run_args(files: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "--train-file",
        str(files["train"]),
        "--validation-file",
        str(files["valid"]),
        "--output-dir",
        str(out),
        "--cache-dir",
        str(out.parent / "hf-cache"),
        "--model-config",
        "elmo-tiny",
        "--vocab-size",
        "300",
        "--per-device-train-batch-size",
        "8",
        "--per-device-eval-batch-size",
        "32",
        "--logging-steps",
        "1",
        "--checkpointing-steps",
        "4",
        "--seed",
        "3",
        "--no-plot",
        *extra,
    ]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tiny_config(vocab_size: int = 40, **kwargs) -> ElmoConfig:
    return ElmoConfig(
        vocab_size=vocab_size,
        projection_dim=16,
        cell_size=32,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8], [3, 16]],
        num_highway_layers=1,
        **kwargs,
    )


# ----------------------------------------------------------------------------------------------- reading text
def test_invalid_utf8_is_replaced_and_counted_not_fatal(tmp_path, caplog):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\nbad \xff\xfe bytes\n\xef\xbb\xbfnot a bom here\nlast \xc3\n")
    stats = pdata.ReadStats()
    with caplog.at_level("WARNING"):
        lines = list(iter_text_lines([str(path)], stats))
    assert lines == ["good line", "bad \ufffd\ufffd bytes", "\ufeffnot a bom here", "last \ufffd"]
    assert (stats.lines, stats.invalid_utf8_lines) == (4, 2)
    assert "2 line(s) were not valid UTF-8" in caplog.text


def test_old_mac_line_ends_are_line_ends(tmp_path):
    path = tmp_path / "mac.txt"
    path.write_bytes(b"one two\rthree\r\rfour\r\nfive")
    assert list(iter_text_lines([str(path)])) == ["one two", "three", "", "four", "five"]


def test_a_line_longer_than_the_bound_is_refused_naming_the_file_and_line_without_reading_it_whole(tmp_path):
    """Issue 35: a training file of one 1 GiB line (sparse, no line break) is refused once 4 MiB of the line are
    read, in one line naming the file and the line number; lines up to the bound are read whole."""
    from modeling_elmo.utils.io_utils import MAX_LINE_BYTES

    path = tmp_path / "huge.txt"
    with open(path, "wb") as handle:
        handle.write(b"a short line\n" + b"w" * MAX_LINE_BYTES + b"\n")  # the longest line taken, then a huge one
        handle.truncate(handle.tell() + (1 << 30))
    reads = []
    real_iter_lines = pdata.iter_lines

    class Counting:
        def __init__(self, handle):
            self.handle = handle

        def read(self, n=-1):
            data = self.handle.read(n)
            reads.append(len(data))
            return data

    def counting(handle, **kwargs):
        return real_iter_lines(Counting(handle), **kwargs)

    lines = pdata.iter_text_lines([str(path)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pdata, "iter_lines", counting)
        assert next(lines) == "a short line"
        assert len(next(lines)) == MAX_LINE_BYTES
        with pytest.raises(pdata.TextLineTooLongError) as raised:
            next(lines)
    assert str(raised.value) == (
        f"text file {str(path)!r}: line 3 has more than 4,194,304 bytes; a line holds one sentence or paragraph: "
        "break the text into lines."
    )
    assert sum(reads) < 2 * MAX_LINE_BYTES + (4 << 20), "read as far as the bound, never the whole line"


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)], ids=["in process", "2 workers"])
def test_a_line_longer_than_the_bound_is_one_line_from_the_dataset_builder(tmp_path, workers):
    """The same refusal through `text_dataset_from_files` (datasets wraps what its generator raises; from a worker
    process only the remote traceback's text comes back)."""
    from modeling_elmo.utils.io_utils import MAX_LINE_BYTES

    fine, path = tmp_path / "fine.txt", tmp_path / "long.txt"
    fine.write_bytes(b"fine\n" * 3)
    path.write_bytes(b"fine\n" * 3 + b"x " * (MAX_LINE_BYTES // 2 + 1) + b"\n")
    with pytest.raises(pdata.TextLineTooLongError) as raised:
        pdata.text_dataset_from_files([str(fine), str(path)], cache_dir=str(tmp_path / "cache"), num_proc=workers)
    assert str(raised.value) == (
        f"text file {str(path)!r}: line 4 has more than 4,194,304 bytes; a line holds one sentence or paragraph: "
        "break the text into lines."
    )


def test_a_repeated_word_of_megabytes_in_a_vocabulary_file_is_quoted_bounded(tmp_path):
    path = tmp_path / "vocab.txt"
    word = "w" * 1_000_000
    path.write_text(f"the\n{word}\ncat\n{word}\n", encoding="utf-8")
    with pytest.raises(ValueError) as raised:
        pdata.read_vocabulary_file(path)
    assert str(raised.value) == (
        f"vocabulary file {str(path)!r}: line 4 repeats the word '{'w' * 79}... of line 2 (a repeated word would "
        "shift the id of every later word)."
    )


def test_missing_empty_and_textless_inputs_raise_errors_naming_them(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        expand_text_files([str(tmp_path / "nope.txt")])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.txt.*is empty"):
        expand_text_files([str(empty)])
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "blank.txt").write_text("")
    with pytest.raises(ValueError, match="contains no text"):
        expand_text_files([str(folder)], "--train-file")
    with pytest.raises(ValueError, match="matches no file"):
        expand_text_files([str(tmp_path / "*.none")])
    (folder / "shard-00001").write_text("a b\n")  # 1B-Word shards have no extension
    assert expand_text_files([str(folder)]) == [str(folder / "shard-00001")]
    with pytest.raises(SystemExit, match="does not exist"):
        pretrain_main(["--train-file", str(tmp_path / "nope.txt"), "--output-dir", str(tmp_path / "o")])


def test_megabyte_line_is_cut_into_pieces_and_long_words_truncated():
    vocab = Vocabulary(["the", "a"])
    huge = " ".join(["the"] * 150_000 + ["x" * 1_000_000])  # ~1.6 MB line, one 1 MB word at the end
    out = tokenize_batch({"text": [huge]}, word_to_id=vocab.index, mode="sentences", max_sentence_length=100)
    assert all(n <= 100 for n in out["length"]) and sum(out["length"]) == 150_001
    assert out["oov"][-1] == ["x" * 1_000_000]
    batch = Collator(vocab.char_table())([{"word_ids": out["word_ids"][-1], "oov": out["oov"][-1]}])
    assert batch["input_ids"].shape == (1, 1, 50)  # the word is cut to 48 bytes by the character encoding


# ----------------------------------------------------------------------------------------------- vocabulary
def test_vocabulary_puts_specials_first_then_words_by_frequency(tmp_path):
    counts = Counter({"b": 5, "a": 5, "c": 9, "rare": 1, "<S>": 100, "<UNK>": 7})
    vocab = pdata.vocabulary_from_counts(counts, min_count=2)
    assert vocab.words == ["<pad>", "<S>", "</S>", "<UNK>", "c", "a", "b"]  # ties by the word itself
    assert pdata.vocabulary_from_counts(counts, max_size=5).words[4:] == ["c"]
    vocab.save(tmp_path / "vocab.txt")
    assert Vocabulary.from_file(tmp_path / "vocab.txt") == vocab
    assert ElmoTokenizer(vocab_file=str(tmp_path / "vocab.txt")).get_vocab() == vocab.index
    with pytest.raises(ValueError, match="vocab-size"):
        pdata.vocabulary_from_counts(counts, max_size=3)


def test_parallel_word_count_equals_naive_count(tmp_path, corpus_lines):
    import datasets

    ds = datasets.Dataset.from_dict({"text": corpus_lines * 40})  # over 10 batches of 1,000 lines: counted in a pool
    naive = Counter(w for line in corpus_lines * 40 for w in line.split())
    assert pdata.count_dataset_words(ds, num_proc=2, batch_size=1000) == naive
    assert pdata.count_dataset_words(ds, num_proc=1) == naive


# ----------------------------------------------------------------------------------------------- batching
def test_windows_are_fixed_slices_of_the_boundary_marked_stream():
    vocab = Vocabulary(["a", "b"])
    out = tokenize_batch({"text": ["a b", "", "b zz a"]}, word_to_id=vocab.index, mode="windows", window_size=3)
    # stream: <S> a b </S> <S> b zz a </S>  (9 tokens) -> 3 windows of 3
    assert out["word_ids"] == [[1, 4, 5], [2, 1, 5], [3, 4, 2]]
    assert out["oov"] == [[], [], ["zz"]]


@pytest.mark.parametrize("characters", [None, list("thecasmrzb")], ids=["bytes", "unicode"])
def test_collator_matches_the_tokenizer_and_encodes_oov_words_from_their_characters(tmp_path, characters):
    """Pretraining's batches and the tokenizer share one alphabet: the same ids for vocabulary words, out-of-vocabulary
    words (unknown characters included) and the literal boundary word of each vocabulary."""
    vocab = Vocabulary(["the", "cat", "sat"])
    vocab.save(tmp_path / "vocab.txt")
    tok = ElmoTokenizer(vocab_file=str(tmp_path / "vocab.txt"), split_pattern="whitespace", characters=characters)
    boundary = "<S>" if characters is None else "<bos>"
    sentences = ["the cat sat", f"a zebra sat on the mat {boundary} ok", "zebré"]
    out = tokenize_batch({"text": sentences}, word_to_id=vocab.index)
    collate = Collator(vocab.char_table(characters=characters), characters=characters)
    batch = collate([{"word_ids": i, "oov": o} for i, o in zip(out["word_ids"], out["oov"], strict=False)])
    ref = tok(
        [s.split() for s in sentences],
        is_split_into_words=True,
        padding=True,
        return_tensors="pt",
        return_word_ids=True,
    )
    torch.testing.assert_close(batch["input_ids"], ref["input_ids"])
    torch.testing.assert_close(batch["attention_mask"], ref["attention_mask"])
    assert tok.decode(batch["input_ids"][1, 6:7]) == boundary  # the boundary row, not the word's characters
    if characters is None:  # the word vocabulary reads a literal <S> as its boundary word, as the tokenizer does
        torch.testing.assert_close(batch["labels"], ref["word_ids"].masked_fill(ref["attention_mask"] == 0, -100))


def test_bucket_sampler_shards_are_disjoint_equal_and_deterministic():
    lengths = np.random.default_rng(0).integers(1, 50, size=1003)
    shards = [
        BucketBatchSampler(lengths, 10, seed=7, rank=r, num_replicas=3, bucket_size=5).rank_batches(2) for r in range(3)
    ]
    flat = [i for shard in shards for batch in shard for i in batch]
    assert len(flat) == len(set(flat)) and len({len(s) for s in shards}) == 1
    assert len(shards[0]) == BucketBatchSampler(lengths, 10, rank=0, num_replicas=3).num_batches() == 33
    again = BucketBatchSampler(lengths, 10, seed=7, rank=1, num_replicas=3, bucket_size=5).rank_batches(2)
    assert again == shards[1]
    other_epoch = BucketBatchSampler(lengths, 10, seed=7, rank=1, num_replicas=3, bucket_size=5).rank_batches(3)
    assert other_epoch != shards[1]
    # bucketing: batches are much more uniform in length than random batches
    spread = np.mean([np.ptp(lengths[b]) for b in shards[0]])
    assert spread < 10
    evaluation = [
        BucketBatchSampler(lengths, 10, shuffle=False, rank=r, num_replicas=3, drop_last=False).rank_batches(0)
        for r in range(3)
    ]
    assert sorted(i for shard in evaluation for b in shard for i in b) == list(range(1003))


def test_token_budget_batches_carry_similar_token_counts_sharded_and_deterministic():
    lengths = np.random.default_rng(0).integers(1, 60, size=3000)
    budget = 400
    shards = [
        BucketBatchSampler(lengths, max_tokens=budget, seed=7, rank=r, num_replicas=2, bucket_size=20).rank_batches(1)
        for r in range(2)
    ]
    flat = [i for shard in shards for batch in shard for i in batch]
    assert len(flat) == len(set(flat)) and len(shards[0]) == len(shards[1])  # disjoint, equal counts (DDP)
    padded = np.array([len(b) * lengths[b].max() for shard in shards for b in shard])
    assert padded.max() <= budget
    assert np.median(padded) >= 0.9 * budget  # full batches: as many sentences as the budget holds
    fixed = BucketBatchSampler(lengths, int(budget / lengths.mean()), seed=7, bucket_size=20).rank_batches(1)
    fixed_padded = np.array([len(b) * lengths[b].max() for b in fixed])
    assert (
        padded.std() / padded.mean() < 0.5 * fixed_padded.std() / fixed_padded.mean()
    )  # steadier than a sentence count
    again = BucketBatchSampler(lengths, max_tokens=budget, seed=7, rank=1, num_replicas=2, bucket_size=20).rank_batches(
        1
    )
    assert again == shards[1]  # a resumed run (or process) computes the same batches
    assert (
        BucketBatchSampler(lengths, max_tokens=budget, seed=7, rank=1, num_replicas=2, bucket_size=20).rank_batches(2)
        != again
    )
    import datasets

    stream = datasets.IterableDataset.from_generator(
        lambda: ({"word_ids": [4] * int(n), "oov": []} for n in lengths[:600])
    )
    streamed = list(
        pdata_batching.iter_stream_batches(
            stream, 8, seed=1, epoch=0, rank=0, num_replicas=1, shuffle=True, buffer_batches=20, max_tokens=budget
        )
    )
    assert sum(len(b) for b in streamed) == 600  # every example once, each batch within the budget
    assert max(len(b) * max(len(e["word_ids"]) for e in b) for b in streamed) <= budget
    lone = pdata_batching.cut_batches(np.array([1, 0]), np.array([500, 3]), None, budget)
    assert [b.tolist() for b in lone] == [[1], [0]]  # a sentence longer than the budget is a batch of its own


# ----------------------------------------------------------------------------------------------- recipes and flags
def test_recipe_with_unknown_key_is_an_error_naming_the_key(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("train_file: a.txt\nlearning_rte: 0.1\n")
    with pytest.raises(ValueError, match="learning_rte"):
        load_recipe(recipe)


def test_flags_override_recipe_values_and_every_shipped_recipe_parses(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("train-file: a.txt\nlearning_rate: 0.1\nbatching: windows\n")
    args = parse_args(["--config", str(recipe), "--learning-rate", "0.5"])
    assert (args.learning_rate, args.batching, args.train_file) == (0.5, "windows", ["a.txt"])
    for path in sorted((REPO / "configuration" / "recipes").glob("*.yaml")):
        parse_args(["--config", str(path)])
    with pytest.raises(ValueError, match="batching"):
        parse_args(["--train-file", "a.txt", "--batching", "paragraphs"])


STUDIED = (
    "vocab_size",
    "batching",
    "optimizer",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "per_device_train_batch_size",
    "early_stopping_patience",
    "load_best_model_at_end",
)


def _recipe_study():
    import importlib.util

    spec = importlib.util.spec_from_file_location("recipe_study", REPO / "scripts" / "recipe_study.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _studied(args) -> dict:
    values = {name: getattr(args, name) for name in STUDIED}
    return {**values, "dropout": 0.1 if args.dropout is None else args.dropout}  # the presets' hidden_dropout_prob


def test_every_recipe_study_variant_parses_and_the_lm_corpus_recipes_use_its_winner(tmp_path):
    study = _recipe_study()
    options = study.argparse.Namespace(data_dir=tmp_path, seed=1, extra_flags="")
    jobs = {name: study.Job(name, "after", sys.executable, tmp_path / "study" / name, 10.0) for name in study.VARIANTS}
    parsed = {name: parse_args(study.pretrain_command(job, options)[4:]) for name, job in jobs.items()}
    baseline = _studied(parsed["baseline"])  # what the lm-corpus recipes said before the study, whatever they say now
    assert baseline == {
        "vocab_size": 20000,
        "batching": "sentences",
        "optimizer": "adamw",
        "learning_rate": 0.002,
        "lr_scheduler_type": "constant_with_warmup",
        "warmup_steps": 100.0,
        "per_device_train_batch_size": 64,
        "early_stopping_patience": None,
        "load_best_model_at_end": False,
        "dropout": 0.1,
    }
    for name, args in parsed.items():  # each variant changes what its name says, the rest is the baseline's
        assert args.max_train_minutes == 10.0 and args.output_dir == str(tmp_path / "study" / name)
        changed = {k for k, v in _studied(args).items() if v != baseline[k]}
        assert changed <= {
            "dropout",
            "vocab_size",
            "batching",
            "learning_rate",
            "lr_scheduler_type",
            "early_stopping_patience",
            "load_best_model_at_end",
        }, (name, changed)
    winner = _studied(parsed[study.WINNER])
    recipe = _studied(parse_args(["--config", "cpu-lm-corpus"]))
    assert recipe == winner, {k: (recipe[k], winner[k]) for k in recipe if recipe[k] != winner[k]}
    big = _studied(parse_args(["--config", "27m-lm-corpus"]))
    for name in ("batching", "optimizer", "learning_rate", "lr_scheduler_type", "dropout"):
        assert big[name] == winner[name], name


# ----------------------------------------------------------------------------------------------- sampled softmax
def test_sampled_softmax_loss_is_close_to_full_softmax_loss_on_average():
    torch.manual_seed(0)
    V = 300
    model = use_configured_softmax(
        ElmoForBidirectionalLM(
            _tiny_config(vocab_size=V, lm_softmax="sampled", num_negative_samples=60, hidden_dropout_prob=0.0)
        )
    )
    with torch.no_grad():  # a peaked, Zipf-like output distribution, far from uniform
        model.softmax.weight.mul_(3.0)
        model.softmax.bias.copy_(-torch.log(torch.arange(V, dtype=torch.float) + 1))
    enc = ElmoTokenizer()(
        [["w%d" % (i % 7), "v%d" % (i % 5), "x"] for i in range(6)],
        is_split_into_words=True,
        padding=True,
        return_tensors="pt",
    )
    g = torch.Generator().manual_seed(1)
    labels = (
        (torch.exp(torch.rand(enc["attention_mask"].shape, generator=g) * math.log(V + 1)) - 1).long().clamp(4, V - 1)
    )
    model.eval()
    with torch.no_grad():
        full = float(model(**enc, labels=labels).loss)
    model.train()
    with torch.no_grad():
        sampled = torch.tensor([float(model(**enc, labels=labels).loss) for _ in range(300)])
    assert abs(full - math.log(V)) > 1.0  # the test would be weak near a uniform distribution
    # each draw is a noisy estimate (60 negatives for 300 words); their mean is within 1 % of the exact loss
    assert sampled.std() > 0.005
    assert abs(float(sampled.mean()) - full) < 0.01 * full, (float(sampled.mean()), full)


# ----------------------------------------------------------------------------------------------- training runs
@pytest.mark.slow
def test_resumed_run_matches_uninterrupted_run(tmp_path, corpus_files):
    # sampled softmax, dropout and accumulation make every consumer of the RNG and of the data position count
    common = (
        "--max-steps",
        "8",
        "--gradient-accumulation-steps",
        "2",
        "--lm-softmax",
        "sampled",
        "--num-negative-samples",
        "64",
        "--dropout",
        "0.1",
        "--optimizer",
        "adamw",
        "--lr-scheduler-type",
        "linear",
        "--warmup-steps",
        "2",
        "--learning-rate",
        "0.01",
    )
    full_dir, split_dir = tmp_path / "full", tmp_path / "split"
    assert pretrain_main(_run_args(corpus_files, full_dir, *common)) == 0
    reset_accelerate_state()
    assert pretrain_main(_run_args(corpus_files, split_dir, *common, "--stop-after-steps", "3")) == 0
    assert not (split_dir / "model.safetensors").exists()  # stopped, not finished
    assert CheckpointManager(split_dir / "checkpoints").latest().name == "step_00000003"
    reset_accelerate_state()
    assert pretrain_main(_run_args(corpus_files, split_dir, *common, "--resume-from-checkpoint", "latest")) == 0
    full, split = train_losses_by_step(full_dir / "metrics.jsonl"), train_losses_by_step(split_dir / "metrics.jsonl")
    assert sorted(full) == list(range(1, 9))
    assert [split[s] for s in range(1, 9)] == [full[s] for s in range(1, 9)]  # exact, not approximate
    assert (
        read_results(full_dir / "eval_results.json").perplexity
        == read_results(split_dir / "eval_results.json").perplexity
    )


@pytest.mark.slow
def test_time_budget_counts_the_training_minutes_of_the_runs_before_a_resume(tmp_path, corpus_files):
    out = tmp_path / "run"
    common = ("--max-steps", "8", "--max-train-minutes", "30")
    assert pretrain_main(_run_args(corpus_files, out, *common, "--stop-after-steps", "3")) == 0
    state_file = CheckpointManager(out / "checkpoints").latest() / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert 0 < state["state"]["train_seconds"] < 600
    state["state"]["train_seconds"] = 30 * 60.0  # as if the first stage had used all of the 30 minutes
    state_file.write_text(json.dumps(state))
    reset_accelerate_state()
    assert pretrain_main(_run_args(corpus_files, out, *common, "--resume-from-checkpoint", "latest")) == 0
    meta = json.loads((out / "training_metadata.json").read_text())
    assert meta["global_step"] == 4, "one update, then the budget of 30 minutes in total is spent"
    assert "time budget" in meta["stopped_early"] and meta["train_seconds"] > 30 * 60


@pytest.mark.parametrize("optimizer", ["adamw", "adagrad"])
def test_fused_cpu_optimizers_take_the_same_steps_as_the_reference_ones(optimizer):
    from modeling_elmo.pretraining.trainer import build_optimizer

    torch.manual_seed(0)
    fused_model = ElmoForBidirectionalLM(_tiny_config())
    reference_model = copy.deepcopy(fused_model)
    start = [p.detach().clone() for p in fused_model.parameters()]
    fused = build_optimizer(fused_model, optimizer, 0.05, weight_decay=0.1, device_type="cpu")
    # same settings, torch's default kernels
    reference = build_optimizer(reference_model, optimizer, 0.05, weight_decay=0.1, device_type="cpu", sharded=True)
    assert fused.defaults["fused"] is True and not reference.defaults["fused"]
    for _ in range(5):
        for p, r in zip(fused_model.parameters(), reference_model.parameters(), strict=False):
            p.grad = torch.randn_like(p)
            r.grad = p.grad.clone()
        fused.step()
        reference.step()
    for p, r, p0 in zip(fused_model.parameters(), reference_model.parameters(), start, strict=False):
        torch.testing.assert_close(p, r, atol=1e-6, rtol=1e-5)
        assert not torch.equal(p, p0)  # every parameter moved


@pytest.mark.slow
def test_saved_folder_loads_with_automodel_and_reports_perplexities(tmp_path, corpus_files):
    out = tmp_path / "run"
    assert pretrain_main(_run_args(corpus_files, out, "--max-steps", "6", "--plot", "--report-to", "tensorboard")) == 0
    assert list(out.glob("elmo-pretraining/**/events.out.tfevents.*"))
    results = read_results(out / "eval_results.json")
    (valid,) = results.perplexity
    assert valid.split == "validation" and valid.dataset == "valid.txt" and results.source == "elmo pretrain"
    assert math.isclose(valid.average, math.sqrt(valid.forward * valid.backward), rel_tol=1e-9)
    assert valid.unigram.average > 1 and valid.unigram.fitted_on == "training data"
    assert (out / "perplexity.png").stat().st_size > 1000
    meta = json.loads((out / "training_metadata.json").read_text())
    assert meta["global_step"] == 6 and meta["vocab_size"] == 300
    module, lm_vocab, tok_vocab, shape = run_without_package(
        """
        import sys, json, torch
        from transformers import AutoModel, AutoModelForPreTraining, AutoTokenizer
        p = sys.argv[1]
        m = AutoModel.from_pretrained(p, trust_remote_code=True)
        lm = AutoModelForPreTraining.from_pretrained(p, trust_remote_code=True)
        t = AutoTokenizer.from_pretrained(p, trust_remote_code=True)
        enc = t(["the cat sat"], return_tensors="pt", return_word_ids=True)
        out = m(**{k: enc[k] for k in ("input_ids", "attention_mask")})
        print(json.dumps([type(m).__module__, lm.config.vocab_size, t.vocab_size, list(out.last_hidden_state.shape)]))
        """,
        out,
        workdir=tmp_path / "fresh",
    )
    assert module.startswith("transformers_modules") and lm_vocab == tok_vocab == 300 and shape == [1, 3, 32]


@pytest.mark.slow
def test_nonfinite_loss_skips_the_update_and_repeated_ones_stop_the_run(tmp_path, corpus_files, monkeypatch, caplog):
    original = ElmoForBidirectionalLM.forward
    calls = {"n": 0}
    poisoned: set[int] = {3}

    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.training:
            calls["n"] += 1
            if calls["n"] in poisoned or (poisoned == {-1} and calls["n"] >= 6):
                out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(ElmoForBidirectionalLM, "forward", forward)
    out = tmp_path / "one-nan"
    with caplog.at_level("WARNING"):
        assert pretrain_main(_run_args(corpus_files, out, "--max-steps", "6")) == 0
    assert "update 3 skipped: non-finite loss" in caplog.text
    assert sorted(train_losses_by_step(out / "metrics.jsonl")) == [1, 2, 4, 5, 6]
    assert json.loads((out / "training_metadata.json").read_text())["skipped_updates"] == 1

    reset_accelerate_state()
    calls["n"], poisoned = 0, {-1}
    out = tmp_path / "many-nans"
    with pytest.raises(SystemExit, match="5 consecutive updates had a non-finite loss.*step_00000004"):
        pretrain_main(_run_args(corpus_files, out, "--max-steps", "20"))
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_00000004"
    assert not (out / "model.safetensors").exists()


@pytest.mark.slow
def test_a_nan_update_between_host_syncs_leaves_the_weights_untouched(tmp_path, corpus_files, monkeypatch):
    original = ElmoForBidirectionalLM.forward
    calls = {"n": 0}

    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.training:
            calls["n"] += 1
            if calls["n"] == 3:
                out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(ElmoForBidirectionalLM, "forward", forward)
    # logging every 10 updates: update 3's loss is never read on the host before the guard acts on it
    poisoned, clean = tmp_path / "poisoned", tmp_path / "clean"
    assert (
        pretrain_main(
            _run_args(corpus_files, poisoned, "--max-steps", "3", "--logging-steps", "10", "--optimizer", "adamw")
        )
        == 0
    )
    reset_accelerate_state()
    calls["n"] = -100  # no NaN in this run
    assert (
        pretrain_main(
            _run_args(corpus_files, clean, "--max-steps", "2", "--logging-steps", "10", "--optimizer", "adamw")
        )
        == 0
    )
    assert (poisoned / "model.safetensors").read_bytes() == (clean / "model.safetensors").read_bytes()
    assert json.loads((poisoned / "training_metadata.json").read_text())["skipped_updates"] == 1


@pytest.mark.parametrize(
    "optimizer,fused,mode",
    [
        ("adamw", True, "found_inf"),
        ("adagrad", True, "found_inf"),
        ("adagrad", False, "zero_gradients"),
        ("adamw", False, "host"),
    ],
)
def test_nonfinite_guard_leaves_weights_and_optimizer_state_untouched_in_every_mode(optimizer, fused, mode):
    from modeling_elmo.pretraining.loop import NonfiniteGuard

    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    opt = (
        torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1, fused=fused or None)
        if optimizer == "adamw"
        else torch.optim.Adagrad(model.parameters(), lr=0.1, fused=fused or None)
    )
    guard = NonfiniteGuard(opt)
    assert guard.mode == mode
    model(torch.randn(4, 5)).pow(2).sum().backward()
    guard.step(opt, torch.tensor(False))
    before = [p.detach().clone() for p in model.parameters()]
    state = {
        (i, k): v.clone() for i, p in enumerate(model.parameters()) for k, v in opt.state[p].items() if k != "step"
    }
    opt.zero_grad()
    (model(torch.randn(4, 5)).sum() * float("nan")).backward()
    guard.step(opt, torch.tensor(True))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=False))
    after = {(i, k): v for i, p in enumerate(model.parameters()) for k, v in opt.state[p].items() if k != "step"}
    assert len(state) >= 2 and state.keys() == after.keys() and all(torch.equal(state[k], after[k]) for k in state)
    opt.zero_grad()
    model(torch.randn(4, 5)).pow(2).sum().backward()
    guard.step(opt, torch.tensor(False))
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=False))


@pytest.mark.slow
def test_full_disk_during_checkpoint_keeps_the_previous_checkpoint(tmp_path, corpus_files, monkeypatch, caplog):
    from modeling_elmo.pretraining import checkpoint

    real_save = checkpoint._save_tensors
    state = {"saves": 0}

    def save(tensors, path):
        if "step_00000008" in str(path):
            state["saves"] += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_save(tensors, path)

    monkeypatch.setattr(checkpoint, "_save_tensors", save)
    out = tmp_path / "disk-full"
    with caplog.at_level("ERROR"):
        assert pretrain_main(_run_args(corpus_files, out, "--max-steps", "10")) == 0
    assert state["saves"] >= 1
    assert "could not write checkpoint" in caplog.text and "No space left on device" in caplog.text
    assert "the latest checkpoint is still" in caplog.text and "step_00000004" in caplog.text
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["latest", "step_00000004", "step_00000010"]  # no partial step_8, no temp folder
    # the surviving checkpoint is complete and resumable
    manager = CheckpointManager(out / "checkpoints")
    assert manager.read_state(out / "checkpoints" / "step_00000004")["state"]["global_step"] == 4


def test_vocabulary_that_does_not_match_the_checkpoint_is_rejected(tmp_path, corpus_files):
    out = tmp_path / "run"
    assert pretrain_main(_run_args(corpus_files, out, "--max-steps", "4", "--stop-after-steps", "2")) == 0
    reset_accelerate_state()
    other = tmp_path / "other-vocab.txt"
    Vocabulary(["completely", "different"]).save(other)
    with pytest.raises(SystemExit, match="does not match the vocabulary of checkpoint"):
        pretrain_main(
            _run_args(
                corpus_files, out, "--max-steps", "4", "--resume-from-checkpoint", "latest", "--vocab-file", str(other)
            )
        )


@pytest.mark.slow
def test_init_from_model_continues_from_its_weights_vocabulary_and_architecture(tmp_path, corpus_files, corpus_lines):
    from safetensors.torch import load_file

    first = tmp_path / "first"
    assert (
        pretrain_main(
            _run_args(corpus_files, first, "--max-steps", "40", "--optimizer", "adamw", "--learning-rate", "0.01")
        )
        == 0
    )
    reset_accelerate_state()
    # other text (whose own vocabulary would differ), no --model-config / --vocab-size: both come from the model;
    # a learning rate of 0 leaves the loaded weights exactly as they were
    other = {"train": tmp_path / "other.txt", "valid": corpus_files["valid"]}
    other["train"].write_text("\n".join(reversed(corpus_lines[700:1300])) + "\n", encoding="utf-8")
    args = [
        a
        for a in _run_args(other, tmp_path / "second")
        if a not in ("--model-config", "elmo-tiny", "--vocab-size", "300")
    ]
    second = tmp_path / "second"
    assert (
        pretrain_main(
            [*args, "--init-from-model", str(first), "--max-steps", "2", "--optimizer", "adamw", "--learning-rate", "0"]
        )
        == 0
    )
    assert (second / "vocab.txt").read_text() == (first / "vocab.txt").read_text()
    before, after = load_file(str(first / "model.safetensors")), load_file(str(second / "model.safetensors"))
    assert sorted(before) == sorted(after) and all(torch.equal(before[k], after[k]) for k in before)
    # a fresh model on the same text starts far worse than the continued one
    first_loss = train_losses_by_step(second / "metrics.jsonl")[1]
    reset_accelerate_state()
    assert (
        pretrain_main(
            [*_run_args(other, tmp_path / "fresh"), "--max-steps", "1", "--vocab-file", str(first / "vocab.txt")]
        )
        == 0
    )
    assert train_losses_by_step(tmp_path / "fresh" / "metrics.jsonl")[1] > first_loss + 0.1


def test_init_from_model_rejects_incomplete_folders_and_other_architectures(tmp_path, corpus_files):
    first = tmp_path / "first"
    assert pretrain_main(_run_args(corpus_files, first, "--max-steps", "1")) == 0
    reset_accelerate_state()
    with pytest.raises(SystemExit, match="differs from --init-from-model .* in: .*projection_dim"):
        pretrain_main(
            [*_run_args(corpus_files, tmp_path / "b"), "--init-from-model", str(first), "--model-config", "elmo-27m"]
        )
    reset_accelerate_state()
    (first / "model.safetensors").unlink()
    with pytest.raises(SystemExit, match="model.safetensors missing"):
        pretrain_main([*_run_args(corpus_files, tmp_path / "c"), "--init-from-model", str(first)])


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_cleanly(tmp_path, corpus_files):
    out = tmp_path / "term"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "scripts" / "pretrain.py"),
            *_run_args(corpus_files, out, "--max-steps", "100000", "--checkpointing-steps", "0"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.is_file() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output[-2000:]
    assert "signal SIGTERM" in output
    latest = CheckpointManager(out / "checkpoints").latest()
    assert latest is not None and CheckpointManager.read_state(latest)["state"]["global_step"] >= 2


def _launch_two_processes(files: dict[str, Path], out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [
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
        str(REPO / "scripts" / "pretrain.py"),
        *_run_args(
            files,
            out,
            "--max-steps",
            "30",
            "--checkpointing-steps",
            "30",
            "--learning-rate",
            "0.3",
            "--dropout",
            "0.1",
            *extra,
        ),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_two_process_ddp_run_trains_on_disjoint_data_and_loss_falls_and_resumes_exactly(tmp_path, corpus_lines):
    files = {}
    for name, lines in (("train", corpus_lines[:1200]), ("valid", corpus_lines[1200:1300])):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "ddp"
    done = _launch_two_processes(files, out, "--log-example-ids")
    assert "processes = 2" in done.stderr
    seen = [
        [i for line in (out / f"examples_rank{r}.jsonl").read_text().splitlines() for i in json.loads(line)["ids"]]
        for r in range(2)
    ]
    assert len(seen[0]) == len(seen[1]) == 30 * 8
    assert not set(seen[0]) & set(seen[1])  # one epoch is 75 batches per rank: no example seen by both ranks
    losses = train_losses_by_step(out / "metrics.jsonl")
    assert sorted(losses) == list(range(1, 31))
    assert np.mean([losses[s] for s in range(26, 31)]) < np.mean([losses[s] for s in range(1, 6)]) - 0.5, losses
    meta = json.loads((out / "training_metadata.json").read_text())
    assert meta["num_processes"] == 2 and meta["tokens_seen"] > 0
    # stopped after 12 updates and resumed: the same 30 losses, exactly (per-process RNG and data positions restored)
    split = tmp_path / "ddp-split"
    _launch_two_processes(files, split, "--stop-after-steps", "12")
    _launch_two_processes(files, split, "--resume-from-checkpoint", "latest")
    resumed = train_losses_by_step(split / "metrics.jsonl")
    assert [resumed[s] for s in range(1, 31)] == [losses[s] for s in range(1, 31)]


def test_dataset_name_path_loads_splits_through_datasets(tmp_path, corpus_lines):
    # A local dataset folder goes through the same `load_dataset(name, config)` route as a Hub dataset.
    folder = tmp_path / "my_dataset"
    folder.mkdir()
    (folder / "train.txt").write_text("\n".join(corpus_lines[:300]) + "\n", encoding="utf-8")
    (folder / "validation.txt").write_text("\n".join(corpus_lines[300:350]) + "\n", encoding="utf-8")
    splits = pdata.load_raw_splits(dataset_name=str(folder), cache_dir=str(tmp_path / "cache"))
    assert sorted(splits) == ["train", "validation"]
    assert splits["validation"]["text"][:3] == corpus_lines[300:303]
    with pytest.raises(ValueError, match="--text-column 'body'"):
        pdata.load_raw_splits(dataset_name=str(folder), text_column="body", cache_dir=str(tmp_path / "cache"))


@pytest.mark.slow
def test_streaming_windows_run_trains_and_saves(tmp_path, corpus_files):
    out = tmp_path / "stream"
    assert (
        pretrain_main(
            _run_args(
                corpus_files, out, "--streaming", "--batching", "windows", "--window-size", "10", "--max-steps", "5"
            )
        )
        == 0
    )
    (results,) = read_results(out / "eval_results.json").perplexity
    # windows of 10 tokens: every window gives 9 forward and 9 backward targets
    assert results.targets_per_direction == 9 * results.examples
    assert results.average < 300 * 2 and results.unigram.average < 300


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "auto"])
def test_bf16_autocast_trains_on_a_cpu_with_native_bf16_with_fp32_weights(
    tmp_path, corpus_files, monkeypatch, precision
):
    from modeling_elmo.utils import capability

    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")  # the CPU path also where a GPU is present
    original = ElmoForBidirectionalLM.forward
    autocast = []

    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.training:
            autocast.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), out.loss.dtype))
        return out

    monkeypatch.setattr(ElmoForBidirectionalLM, "forward", forward)
    out = tmp_path / "bf16"
    assert pretrain_main(_run_args(corpus_files, out, "--max-steps", "3", "--mixed-precision", precision)) == 0
    assert autocast == [(True, torch.bfloat16, torch.float32)] * 3  # the products in bf16, the loss reduced in fp32
    losses = train_losses_by_step(out / "metrics.jsonl")
    assert sorted(losses) == [1, 2, 3] and all(math.isfinite(v) for v in losses.values())
    assert json.loads((out / "training_metadata.json").read_text())["mixed_precision"] == "bf16"
    model = ElmoForBidirectionalLM.from_pretrained(out)
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_the_cpu_recipe_trains_in_bf16_only_where_the_cpu_has_it_and_an_explicit_flag_overrides_it():
    assert parse_args(["--config", "cpu-lm-corpus"]).mixed_precision == "auto"
    assert parse_args(["--config", "cpu-lm-corpus", "--mixed-precision", "no"]).mixed_precision == "no"
    assert parse_args(["--config", "cpu-lm-corpus", "--mixed-precision", "bf16"]).mixed_precision == "bf16"


@pytest.mark.parametrize(
    "flags, cpu, cuda_bf16, expected",
    [
        ({"avx2", "avx512_bf16"}, True, False, "bf16"),
        ({"avx2", "amx_bf16"}, True, True, "bf16"),
        ({"avx2"}, True, True, "no"),  # accelerate told to use the CPU: the CPU decides, not the GPU beside it
        ({"avx2"}, False, False, "no"),  # no GPU: the CPU
        ({"avx2"}, False, True, "bf16"),  # a GPU with bf16 trains the run
    ],
)
def test_auto_mixed_precision_is_bf16_exactly_where_the_training_device_has_it_natively(
    monkeypatch, flags, cpu, cuda_bf16, expected
):
    from modeling_elmo.pretraining.trainer import resolve_mixed_precision
    from modeling_elmo.utils import capability

    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_bf16)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: cuda_bf16)
    assert resolve_mixed_precision("auto", cpu) == expected
    for given in (None, "no", "bf16", "fp16"):
        assert resolve_mixed_precision(given, cpu) == given  # only auto is resolved


@pytest.mark.slow
def test_auto_mixed_precision_trains_in_fp32_on_a_cpu_without_native_bf16(tmp_path, corpus_files, monkeypatch):
    from modeling_elmo.utils import capability

    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"avx2"}))
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    out = tmp_path / "auto"
    assert pretrain_main(_run_args(corpus_files, out, "--max-steps", "2", "--mixed-precision", "auto")) == 0
    assert json.loads((out / "training_metadata.json").read_text())["mixed_precision"] == "no"
