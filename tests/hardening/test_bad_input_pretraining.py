"""The table of docs/bad-input.md, section `elmo pretrain`, row by row: each bad input ends the command with one line
``elmo pretrain: error: ...`` (no traceback), and nothing is written: a new output folder is not created, an existing
one is left exactly as it was.

Each row runs `modeling_elmo.pretraining.main` in this process (a `SystemExit` carrying one line is what Python prints
without a traceback; any other exception fails the row); `test_bad_input_is_one_line_on_stderr_in_a_real_process`
checks that for a real command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import reset_accelerate_state

from modeling_elmo.pretraining import main as pretrain_main

REPO = Path(__file__).resolve().parents[2]


def _text(path: Path, lines: int = 200) -> str:
    path.write_text("".join(f"the cat number {i} sat on the mat .\n" for i in range(lines)), encoding="utf-8")
    return str(path)


def _file(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def _finished_run(tmp: Path) -> Path:
    out = tmp / "run"
    assert (
        pretrain_main(
            [
                "--train-file",
                _text(tmp / "a.txt"),
                "--output-dir",
                str(out),
                "--max-steps",
                "1",
                "--per-device-train-batch-size",
                "8",
                "--no-plot",
                "--cache-dir",
                str(tmp / "cache"),
            ]
        )
        == 0
    )
    reset_accelerate_state()
    return out


def _finished_run_with(tmp: Path, name: str) -> Path:
    folder = _finished_run(tmp)
    _file(folder / name, b"mine")
    return folder


def _pickled_model(tmp: Path) -> Path:
    folder = _finished_run(tmp)
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
    return folder


def _widened_model(tmp: Path) -> Path:
    """A finished run whose config.json declares 65536-wide LSTM cells beside its small model.safetensors."""
    import json

    folder = _finished_run(tmp)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "cell_size": 65536}))
    return folder


def _pickled_checkpoint(tmp: Path) -> Path:
    out = tmp / "ckpt"
    assert (
        pretrain_main(
            [
                "--train-file",
                _text(tmp / "c.txt"),
                "--output-dir",
                str(out),
                "--max-steps",
                "4",
                "--stop-after-steps",
                "2",
                "--checkpointing-steps",
                "2",
                "--per-device-train-batch-size",
                "8",
                "--no-plot",
                "--cache-dir",
                str(tmp / "cache"),
            ]
        )
        == 0
    )
    (out / "checkpoints" / "step_00000002" / "custom_checkpoint_0.pkl").write_bytes(b"\x80\x04K\x01.")
    reset_accelerate_state()
    return out


# Each row: (id, setup(tmp) -> (argv, output folder), the expected line as a regular expression). The setup makes the
# files the row needs; "OUT" in argv is replaced by tmp/out unless the setup returns its own folder.
ROWS = [
    (
        "missing training file",
        lambda t: ["--train-file", str(t / "missing.txt")],
        r"--train-file: file '.*missing\.txt' does not exist\.",
    ),
    (
        "empty training file",
        lambda t: ["--train-file", _file(t / "e.txt", b"")],
        r"--train-file: file '.*e\.txt' is empty\.",
    ),
    (
        "binary training file",
        lambda t: ["--train-file", _file(t / "b.bin", b"PK\x03\x04\x00\x00 zipped")],
        r"--train-file: '.*b\.bin' is not text \(a NUL byte at offset 4\); pass UTF-8 text",
    ),
    (
        "one-line training file",
        lambda t: ["--train-file", _text(t / "one.txt", 1)],
        r"the training data has 1 line\(s\): too few to hold out 1% for validation; pass --validation-file, or "
        r"--validation-split-percentage 0",
    ),
    (
        "fewer lines than one batch",
        lambda t: ["--train-file", _text(t / "few.txt", 3), "--validation-split-percentage", "0"],
        r"the training split has 3 examples: fewer than one batch of 64 per process on 1 process\(es\)\.",
    ),
    (
        "output path is a file",
        lambda t: ["--train-file", _text(t / "a.txt"), "--output-dir", _file(t / "file", b"x")],
        r"--output-dir '.*file' is a file, not a folder\.",
    ),
    (
        "output path inside a file",
        lambda t: ["--train-file", _text(t / "a.txt"), "--output-dir", str(Path(_file(t / "file", b"x")) / "run")],
        r"--output-dir '.*file/run' cannot be created: '.*file' is a file\.",
    ),
    (
        "unwritable output folder",
        lambda t: ["--train-file", _text(t / "a.txt"), "--output-dir", "/sys/elmo-run"],
        r"--output-dir '/sys/elmo-run' cannot be written \(Operation not permitted\)\.",
    ),
    (
        "output folder holds another run",
        lambda t: [
            "--train-file",
            _text(t / "a.txt"),
            "--output-dir",
            str(_finished_run(t)),
            "--learning-rate",
            "0.05",
            "--per-device-train-batch-size",
            "8",
        ],
        r"--output-dir '[^']*' already holds another run \(--learning-rate 0\.05 \(the run's: None\)\): resume it with "
        r"--resume-from-checkpoint latest, start it afresh with --overwrite, or choose another --output-dir\.",
    ),
    (
        "output folder holds other files",
        lambda t: [
            "--train-file",
            _text(t / "a.txt"),
            "--output-dir",
            str(Path(_file(t / "mine" / "notes.md", b"x")).parent),
        ],
        r"--output-dir '[^']*' holds files that pretraining does not write \(notes\.md\); nothing was deleted: choose "
        r"a new or empty folder, or move those files away\.",
    ),
    (
        "output folder holds the user's files below the run's",
        lambda t: [
            "--train-file",
            _text(t / "a.txt"),
            "--output-dir",
            str(_finished_run_with(t, "checkpoints/README-mine.txt")),
            "--overwrite",
        ],
        r"--output-dir '[^']*' holds files that pretraining does not write \(checkpoints/README-mine\.txt\); nothing "
        r"was deleted: choose a new or empty folder, or move those files away\.",
    ),
    (
        "output folder holds a run on other data files",
        lambda t: [
            "--train-file",
            _text(t / "b.txt"),
            "--output-dir",
            str(_finished_run(t)),
            "--per-device-train-batch-size",
            "8",
        ],
        r"--output-dir '[^']*' already holds another run \(--train-file \['[^']*b\.txt'\] \(the run's: "
        r"\['[^']*a\.txt'\]\)\)",
    ),
    (
        "vocabulary file with a repeated word",
        lambda t: ["--train-file", _text(t / "a.txt"), "--vocab-file", _file(t / "vocab.txt", b"the\ncat\nthe\n")],
        r"vocabulary file '[^']*vocab\.txt': line 3 repeats the word 'the' of line 1 \(a repeated word would shift the "
        r"id of every later word\)\.",
    ),
    (
        "vocabulary file with an empty line",
        lambda t: ["--train-file", _text(t / "a.txt"), "--vocab-file", _file(t / "vocab.txt", b"the\n\ncat\n")],
        r"vocabulary file '[^']*vocab\.txt': line 2 is empty; every line must hold one word \(an empty line would "
        r"shift the id of every later word\)\.",
    ),
    (
        "sampled softmax larger than the vocabulary",
        lambda t: ["--train-file", _text(t / "a.txt"), "--lm-softmax", "sampled", "--vocab-size", "300"],
        r"--lm-softmax sampled draws 8192 negative samples per batch, but the vocabulary has 300 words: pass "
        r"--num-negative-samples below 300, or --lm-softmax full\.",
    ),
    (
        "sampled softmax larger than the built vocabulary",
        lambda t: ["--train-file", _text(t / "a.txt"), "--lm-softmax", "sampled", "--validation-split-percentage", "0"],
        r"--lm-softmax sampled draws 8192 negative samples per batch, but the vocabulary has 211 words",
    ),  # 4 + 7 + 200 numbers
    (
        "dropout 1.0",
        lambda t: ["--train-file", "a.txt", "--dropout", "1.0"],
        r"--dropout must be a number in \[0, 1\), got 1\.0\.",
    ),
    (
        "no negative samples",
        lambda t: ["--train-file", "a.txt", "--num-negative-samples", "0"],
        r"--num-negative-samples must be an integer >= 1, got 0\.",
    ),
    (
        "negative number of negative samples",
        lambda t: ["--train-file", "a.txt", "--num-negative-samples", "-5"],
        r"--num-negative-samples must be an integer >= 1, got -5\.",
    ),
    (
        "negative checkpointing interval",
        lambda t: ["--train-file", "a.txt", "--checkpointing-steps", "-1"],
        r"--checkpointing-steps must be an integer >= 0, got -1\.",
    ),
    (
        "learning rate not a number",
        lambda t: ["--train-file", "a.txt", "--learning-rate", "nan"],
        r"--learning-rate must be a number in \[0, inf\), got nan\.",
    ),
    (
        "fractional warm-up above 1",
        lambda t: ["--train-file", "a.txt", "--warmup-steps", "2.5"],
        r"--warmup-steps must be a whole number of updates or a fraction in \(0, 1\), got 2\.5\.",
    ),
    (
        "token budget below one sentence",
        lambda t: ["--train-file", "a.txt", "--max-tokens-per-batch", "10"],
        r"--max-tokens-per-batch \(10\) must hold at least one example of --max-sentence-length \(100\) tokens\.",
    ),
    (
        "best model without evaluations",
        lambda t: ["--train-file", "a.txt", "--load-best-model-at-end"],
        r"--load-best-model-at-end needs --eval-steps N",
    ),
    (
        "schedule that has no time-budget form",
        lambda t: ["--train-file", "a.txt", "--max-train-minutes", "5", "--lr-scheduler-type", "polynomial"],
        r"--lr-scheduler-type polynomial cannot run over a --max-train-minutes budget",
    ),
    (
        "overwrite and resume together",
        lambda t: ["--train-file", "a.txt", "--overwrite", "--resume-from-checkpoint", "latest"],
        r"--overwrite \(start the run afresh\) and --resume-from-checkpoint \(continue it\) exclude each other\.",
    ),
    (
        "resume without a checkpoint",
        lambda t: ["--train-file", _text(t / "a.txt"), "--resume-from-checkpoint", "latest"],
        r"--resume-from-checkpoint latest: no checkpoint in '.*checkpoints'\.",
    ),
    (
        "checkpoint holding a pickle",
        lambda t: [
            "--train-file",
            _text(t / "c.txt"),
            "--output-dir",
            str(_pickled_checkpoint(t)),
            "--per-device-train-batch-size",
            "8",
            "--checkpointing-steps",
            "2",
            "--resume-from-checkpoint",
            "latest",
        ],
        r"checkpoint '.*step_00000002' holds files that are not part of a checkpoint of this package: "
        r"custom_checkpoint_0\.pkl\.",
    ),
    (
        "starting model with pickled weights",
        lambda t: ["--train-file", _text(t / "a.txt"), "--init-from-model", str(_pickled_model(t))],
        r"holds pickled weights \['pytorch_model\.bin'\]: loading a pickle can run arbitrary code",
    ),
    (
        "starting model whose config.json declares layers its weights do not have",
        lambda t: ["--train-file", _text(t / "a.txt"), "--init-from-model", str(_widened_model(t))],
        r"the weights of model '.*' do not match its config\.json: \d+ tensor\(s\) with another shape than "
        r"config\.json implies",
    ),
    (
        "training file with a line of more than 4 MiB",
        lambda t: ["--train-file", _file(t / "big.txt", b"the cat\n" * 10 + b"x " * (2 * 1024 * 1024 + 5) + b"\n")],
        r"text file '.*big\.txt': line 11 has more than 4,194,304 bytes; a line holds one sentence or paragraph: "
        r"break the text into lines\.",
    ),
    (
        "unknown recipe",
        lambda t: ["--config", "nope"],
        r"--config: recipe 'nope' is neither a file nor a packaged recipe \(.*quickstart",
    ),
    (
        "unknown preset",
        lambda t: ["--train-file", "a.txt", "--model-config", "elmo-huge"],
        r"--model-config 'elmo-huge' is neither a file nor a preset \(.*elmo-tiny",
    ),
    (
        "Hub dataset offline and not cached",
        lambda t: [
            "--dataset-name",
            "wikitext",
            "--dataset-config-name",
            "wikitext-2-raw-v1",
            "--cache-dir",
            str(t / "empty-cache"),
        ],
        r"--dataset-name wikitext: not in the local datasets cache and the Hub cannot be reached .*; train offline on "
        r"the packaged corpus \(--train-file builtin:austen-emma",
    ),
]


def _snapshot(folder: Path) -> dict[str, bytes] | None:
    if not folder.exists():
        return None
    if folder.is_file():
        return {"": folder.read_bytes()}
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("name,setup,message", ROWS, ids=[row[0] for row in ROWS])
def test_bad_input_is_one_clear_line_and_writes_nothing(name, setup, message, tmp_path, monkeypatch):
    if name == "unwritable output folder" and not Path("/sys").is_dir():
        pytest.skip("needs Linux's /sys")
    monkeypatch.chdir(tmp_path)
    argv = setup(tmp_path)
    if "--output-dir" not in argv:
        argv += ["--output-dir", str(tmp_path / "out")]
    out = Path(argv[argv.index("--output-dir") + 1])
    before = _snapshot(out)
    with pytest.raises(SystemExit) as exit_info:
        pretrain_main(
            [*argv, "--no-plot"] + ([] if "--cache-dir" in argv else ["--cache-dir", str(tmp_path / "cache")])
        )
    line = str(exit_info.value.code)
    assert "\n" not in line and line.startswith("elmo pretrain: error: "), line
    assert __import__("re").search(message, line), line
    assert _snapshot(out) == before, "a refused run must not write into its output folder"


@pytest.mark.slow
def test_bad_input_is_one_line_on_stderr_in_a_real_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    (tmp_path / "b.bin").write_bytes(b"\x00\x01\x02")
    for argv in (["--train-file", str(tmp_path / "b.bin")], ["--train-file", "a.txt", "--num-negative-samples", "-5"]):
        done = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "pretrain.py"), *argv, "--output-dir", str(tmp_path / "o")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert done.returncode == 1
        assert [line for line in done.stderr.splitlines() if line.strip()] == [done.stderr.strip()], done.stderr
        assert done.stderr.startswith("elmo pretrain: error: ") and "Traceback" not in done.stderr
        assert not (tmp_path / "o").exists()
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "pretrain.py"), "--max-steps", "abc"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stderr.strip() == (
        "elmo pretrain: error: argument --max-steps: invalid int "
        "value: 'abc' (`elmo pretrain --help` lists the options)."
    )


def test_unreachable_hub_outside_offline_mode_is_refused_in_seconds_before_anything_is_written(tmp_path, monkeypatch):
    import huggingface_hub

    from modeling_elmo.pretraining import data

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    probes = []
    monkeypatch.setattr(data, "hub_reachable", lambda: probes.append(1) or False)  # as on a machine without a network
    with pytest.raises(SystemExit) as exit_info:
        pretrain_main(
            [
                "--dataset-name",
                "wikitext",
                "--dataset-config-name",
                "wikitext-2-raw-v1",
                "--output-dir",
                str(tmp_path / "out"),
            ]
        )
    assert probes == [1]
    assert __import__("re").match(
        r"elmo pretrain: error: --dataset-name wikitext: the Hugging Face Hub \(\S+\) cannot be reached; train offline "
        r"on the packaged corpus \(--train-file builtin:austen-emma, the quick-start default\)",
        str(exit_info.value.code),
    )
    assert not (tmp_path / "out").exists()


def test_the_documented_table_holds_every_row():
    """Every row above is in the `elmo pretrain` table of docs/bad-input.md (its pattern matches a documented line)."""
    text = (REPO / "docs" / "bad-input.md").read_text(encoding="utf-8")
    section = text[text.index("## elmo pretrain") :]
    documented = [
        cells[1]
        for line in section.splitlines()
        if line.startswith("| ")
        for cells in [line.strip().strip("|").split(" | ")]
        if len(cells) == 2
    ]
    for name, _, pattern in ROWS:
        assert any(__import__("re").search(pattern, line) for line in documented), f"row {name!r} is not documented"


@pytest.mark.parametrize(
    "precision,flags,message",
    [
        (
            "bf16",
            frozenset({"avx2", "fma"}),
            r"--mixed-precision bf16: bfloat16 needs a device that multiplies bfloat16 natively \(.*\); cpu here does "
            r"not: use float32\.",
        ),
        (
            "fp16",
            frozenset({"avx2", "avx512_bf16"}),
            r"--mixed-precision fp16: on a CPU accelerate has no fp16 autocast or loss scaler .*use --mixed-precision "
            r"bf16 on a CPU with native bfloat16, or no\.",
        ),
    ],
    ids=["bf16 without native bf16", "fp16 on a CPU"],
)
def test_a_precision_the_cpu_cannot_train_in_is_one_line_from_the_cli_and_writes_nothing(
    precision, flags, message, tmp_path, monkeypatch
):
    from modeling_elmo.cli import main as cli_main
    from modeling_elmo.utils import capability

    monkeypatch.setattr(capability, "_cpu_flags", lambda: flags)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")  # the CPU also where a GPU is present
    out = tmp_path / "out"
    argv = ["pretrain", "--train-file", _text(tmp_path / "a.txt"), "--output-dir", str(out), "--no-plot"]
    with pytest.raises(SystemExit) as exit_info:
        cli_main([*argv, "--cache-dir", str(tmp_path / "cache"), "--mixed-precision", precision])
    line = str(exit_info.value.code)
    assert "\n" not in line and line.startswith("elmo pretrain: error: "), line
    assert __import__("re").fullmatch("elmo pretrain: error: " + message, line), line
    assert not out.exists()


def test_mixed_precision_check_allows_bf16_where_the_cpu_has_it_and_what_accelerate_runs_natively(monkeypatch):
    from modeling_elmo.pretraining.trainer import check_mixed_precision
    from modeling_elmo.utils import capability

    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    for precision, device in (("bf16", "cpu"), ("no", "cpu"), ("fp16", "cuda"), (None, "cpu")):
        check_mixed_precision(precision, torch.device(device))  # no error
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.raises(ValueError, match="^--mixed-precision bf16: bfloat16 needs"):
        check_mixed_precision("bf16", torch.device("cpu"))
