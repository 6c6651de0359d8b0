"""Pretraining with a Unicode character vocabulary (`elmo pretrain --char-vocabulary unicode`) on non-Latin text: the
vocabulary is the text's most frequent characters, a long CJK word keeps all its characters, and the saved folder
round-trips through the Auto classes without the package."""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import assert_same_numbers, reset_accelerate_state, run_without_package  # noqa: E402

from modeling_elmo import ElmoModel, ElmoTokenizer  # noqa: E402
from modeling_elmo.pretraining import main as pretrain_main  # noqa: E402

#: Chinese, Japanese and Arabic words, and one CJK word of 20 characters (60 UTF-8 bytes: bytes would keep 16).
WORDS = [
    "我们",
    "学习",
    "语言",
    "模型",
    "今天",
    "天气",
    "很好",
    "東京",
    "日本語",
    "勉強",
    "する",
    "مرحبا",
    "كتاب",
    "لغة",
    "。",
]
LONG_WORD = "中华人民共和国国家标准化管理委员会规范文"


def _corpus(path: Path, lines: int, seed: int) -> Path:
    rng = random.Random(seed)
    text = []
    for index in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 9))]
        if index % 7 == 0:
            words.insert(1, LONG_WORD)
        text.append(" ".join(words))
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def _args(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--train-file",
        str(_corpus(tmp_path / "train.txt", 400, 1)),
        "--validation-file",
        str(_corpus(tmp_path / "valid.txt", 40, 2)),
        "--output-dir",
        str(out),
        "--cache-dir",
        str(tmp_path / "hf-cache"),
        "--model-config",
        "elmo-tiny",
        "--char-vocabulary",
        "unicode",
        "--max-characters",
        "30",
        "--per-device-train-batch-size",
        "8",
        "--logging-steps",
        "1",
        "--seed",
        "3",
        "--no-plot",
        *extra,
    ]


@pytest.mark.slow
def test_unicode_pretraining_keeps_the_most_frequent_characters_and_round_trips_without_the_package(tmp_path):
    out = tmp_path / "run"
    assert pretrain_main(_args(tmp_path, out, "--max-steps", "3")) == 0
    characters = json.loads((out / "char_vocab.json").read_text(encoding="utf-8"))
    counts = Counter(
        c
        for line in (tmp_path / "train.txt").read_text(encoding="utf-8").split("\n")
        for word in line.split()
        for c in word
    )
    expected = sorted(counts, key=lambda c: (-counts[c], c))[:30]
    assert characters == expected and len(counts) > 30  # the rarest characters are left out
    config = json.loads((out / "config.json").read_text())
    assert config["char_vocabulary"] == "unicode" and config["num_characters"] == 7 + 30

    tokenizer = ElmoTokenizer.from_pretrained(out)
    assert len(LONG_WORD) == 20 and len(LONG_WORD.encode("utf-8")) == 60
    sentence = ["我们", LONG_WORD, "مرحبا", "ß"]  # ß: a character the text does not have
    row = tokenizer([sentence], is_split_into_words=True)["input_ids"][0][1]
    assert row[21] == 3 and all(value >= 6 for value in row[1:21])  # all 20 characters, then end-of-word
    assert tokenizer([sentence], is_split_into_words=True)["input_ids"][0][3][:3] == [2, 6, 3]  # unknown character
    model = ElmoModel.from_pretrained(out).eval()
    with torch.no_grad():
        expected_features = model(
            **tokenizer([sentence], is_split_into_words=True, return_tensors="pt")
        ).last_hidden_state
    got = run_without_package(
        """
        import json, sys, torch
        from transformers import AutoModel, AutoModelForPreTraining, AutoTokenizer
        folder, sentence = sys.argv[1], json.loads(sys.argv[2])
        tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        lm = AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True)
        enc = tok([sentence], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            features = model(**enc).last_hidden_state
        print(json.dumps({"module": type(tok).__module__, "characters": len(tok.characters),
                          "ids": enc["input_ids"][0].tolist(), "features": features.tolist(),
                          "vocab": lm.config.vocab_size}))
        """,
        out,
        json.dumps(sentence, ensure_ascii=False),
        workdir=tmp_path / "fresh",
    )
    assert got["module"].startswith("transformers_modules") and got["characters"] == 30
    assert got["ids"] == tokenizer([sentence], is_split_into_words=True)["input_ids"][0]
    assert_same_numbers(got["features"], expected_features, what="features without the package")


@pytest.mark.slow
def test_unicode_run_resumes_from_its_checkpoint_with_its_character_vocabulary(tmp_path):
    out = tmp_path / "run"
    assert (
        pretrain_main(_args(tmp_path, out, "--max-steps", "4", "--checkpointing-steps", "2", "--stop-after-steps", "2"))
        == 0
    )
    saved = sorted((out / "checkpoints").glob("step_*/char_vocab.json"))
    assert saved and json.loads(saved[-1].read_text(encoding="utf-8")) == json.loads(
        (out / "char_vocab.json").read_text(encoding="utf-8")
    )
    reset_accelerate_state()
    assert (
        pretrain_main(
            _args(tmp_path, out, "--max-steps", "4", "--checkpointing-steps", "2", "--resume-from-checkpoint", "latest")
        )
        == 0
    )
    assert json.loads((out / "training_metadata.json").read_text())["global_step"] == 4
    assert ElmoTokenizer.from_pretrained(out).characters == json.loads(saved[-1].read_text(encoding="utf-8"))


@pytest.mark.slow
def test_continued_pretraining_keeps_the_starting_models_characters_and_a_byte_model_refuses_unicode(tmp_path):
    first = tmp_path / "first"
    assert pretrain_main(_args(tmp_path, first, "--max-steps", "2")) == 0
    reset_accelerate_state()
    args = [
        a for a in _args(tmp_path, tmp_path / "second", "--max-steps", "2") if a not in ("--model-config", "elmo-tiny")
    ]
    args = [a for a in args if a not in ("--char-vocabulary", "unicode", "--max-characters", "30")]
    assert pretrain_main([*args, "--init-from-model", str(first)]) == 0
    assert json.loads((tmp_path / "second" / "char_vocab.json").read_text(encoding="utf-8")) == json.loads(
        (first / "char_vocab.json").read_text(encoding="utf-8")
    )
    reset_accelerate_state()
    bytes_model = tmp_path / "bytes"
    assert (
        pretrain_main(
            [
                *args[: args.index("--output-dir")],
                "--output-dir",
                str(bytes_model),
                *args[args.index("--output-dir") + 2 :],
                "--model-config",
                "elmo-tiny",
            ]
        )
        == 0
    )
    assert not (bytes_model / "char_vocab.json").exists()
    reset_accelerate_state()
    with pytest.raises(SystemExit, match="--char-vocabulary unicode does not fit --init-from-model"):
        pretrain_main([*_args(tmp_path, tmp_path / "third", "--max-steps", "1"), "--init-from-model", str(bytes_model)])
    assert not (tmp_path / "third").exists()
