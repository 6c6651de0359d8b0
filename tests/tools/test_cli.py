"""The ``elmo`` command line as a new user meets it: a help that prints without importing torch or transformers,
``--version``, suggestions for mistyped commands and flags, ``elmo pretrain --help`` in groups with dash spellings and
real defaults, and no abbreviated flags."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from modeling_elmo import __version__
from modeling_elmo.pretraining import arguments, parse_args

HEAVY = ("torch", "transformers", "accelerate", "datasets")


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_elmo_help_and_version_import_neither_torch_nor_transformers():
    done = _python(
        "import sys\n"
        "from modeling_elmo.cli import main\n"
        "assert main(['--help']) == 0 and main(['--version']) == 0\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "[]", f"elmo --help imported {lines[-1]}"
    assert "usage: elmo COMMAND [options]" in done.stdout and "pretrain" in done.stdout
    assert f"elmo (modeling_elmo) {__version__}" in lines


@pytest.mark.slow
def test_importing_the_package_is_lazy_and_the_first_name_registers_the_auto_classes():
    done = _python(
        "import sys, modeling_elmo\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n"
        "from modeling_elmo import ElmoConfig\n"
        "from transformers import AutoConfig\n"
        "print(type(AutoConfig.for_model('elmo')).__name__)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "ElmoConfig"]


def test_an_unknown_command_is_one_error_with_a_suggestion(capsys):
    from modeling_elmo.cli import main

    assert main(["pretrian"]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first == "elmo: error: unknown command 'pretrian'; did you mean 'pretrain'?"


def test_pretrain_help_is_grouped_with_dash_spellings_and_real_defaults(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: elmo pretrain ")
    headings = [line[:-1] for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == [
        "options",
        "data",
        "model",
        "optimisation",
        "schedule and budget",
        "checkpoints and output",
        "logging",
    ]
    assert (
        "--train-file" in text
        and "--train_file" not in text
        and "_" not in "".join(word for word in text.split() if word.startswith("--"))
    )
    assert "(default: None)" not in text and "default: None" not in text
    assert "--max-steps N" in text and "(default: 64)" in text and "(default: adamw)" in text


def test_every_option_is_in_exactly_one_help_group():
    grouped = [name for names in arguments.OPTION_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(arguments.ARGUMENT_NAMES)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--train-file", "a.txt", "--max-step", "50"], "unknown option --max-step; did you mean --max-steps?"),
        (
            ["--train-file", "a.txt", "--learnin-rate=0.1"],
            "unknown option --learnin-rate=0.1; did you mean --learning-rate?",
        ),
        (["--train-file", "a.txt", "--al"], "unknown option --al"),
        (["--train-file", "a.txt", "--log-example"], "unknown option --log-example; did you mean --log-example-ids?"),
        (["--train-file", "a.txt", "--max-steps", "5", "5"], "unexpected argument '5'"),
    ],
)
def test_flags_are_never_abbreviated_and_a_typo_gets_a_suggestion(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"elmo pretrain: error: {message} (`elmo pretrain --help` lists the options)."
    )


def test_underscore_spellings_booleans_and_null_still_parse(tmp_path):
    corpus = tmp_path / "a.txt"
    corpus.write_text("a b c\n", encoding="utf-8")
    args = parse_args(
        [
            "--train_file",
            str(corpus),
            "--max_steps=7",
            "--plot",
            "false",
            "--streaming",
            "--max-grad-norm",
            "null",
            "--output-dir",
            str(tmp_path / "o_dir"),
        ]
    )
    assert (args.train_file, args.max_steps, args.plot, args.streaming, args.max_grad_norm, args.output_dir) == (
        [str(corpus)],
        7,
        False,
        True,
        None,
        str(tmp_path / "o_dir"),
    )
    assert parse_args(["--train-file", str(corpus), "--no-plot"]).plot is False


def test_the_default_optimiser_is_adamw_like_the_recipes(tmp_path):
    corpus = tmp_path / "a.txt"
    corpus.write_text("a b c\n", encoding="utf-8")
    args = parse_args(["--train-file", str(corpus)])
    assert args.optimizer == "adamw" and args.learning_rate is None
    import torch

    from modeling_elmo.pretraining import build_optimizer

    optimizer = build_optimizer(torch.nn.Linear(2, 2), args.optimizer, args.learning_rate)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.param_groups[0]["lr"] == arguments.DEFAULT_LEARNING_RATES["adamw"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["embed", "in.txt", "out.h5", "--mod", "m", "--top"], "the following arguments are required: --model"),
        (["evaluate", "m", "--tas", "perplexity"], "unrecognized arguments: --tas"),
        (["convert", "--releas", "small", "--output", "o"], "unrecognized arguments: --releas"),
        (["push", "m", "--repo", "me/x", "--dry-run"], "the following arguments are required: --repo-id"),
    ],
)
def test_no_command_takes_an_abbreviated_flag(argv, message, capsys):
    from modeling_elmo.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
