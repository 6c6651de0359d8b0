"""Issue 35, M9 and the recipe CRASH row: a recipe's YAML aliases are refused before anything is composed from them
(a 500-byte "billion laughs" took 4 GB), and each value must be of its option's kind, in one line naming it."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from modeling_elmo.pretraining import main as pretrain_main
from modeling_elmo.pretraining.arguments import load_recipe, recipe_names

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


def _one_line(argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        pretrain_main(argv)
    line = str(exit_info.value.code)
    assert "\n" not in line and line.startswith("elmo pretrain: error: "), line
    return line


def test_a_billion_laughs_recipe_is_refused_in_bounded_time_and_memory(tmp_path):
    recipe = tmp_path / "laughs.yaml"
    recipe.write_text(LAUGHS + "max_steps: *i\n")
    assert len(recipe.read_bytes()) < 600  # 9**9 = 387 M strings once expanded
    tracemalloc.start()
    start = time.perf_counter()
    try:
        line = _one_line(["--config", str(recipe), "--output-dir", str(tmp_path / "out")])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 10 and peak < 20 * 2**20
    assert f"recipe {str(recipe)!r} uses the YAML alias *a: recipes take plain values" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "text,message",
    [
        ("train_file: [[a.txt, b.txt]]\n", r"train_file must be a list of file names or null, got \[\['a\.txt', "),
        ("max_steps: [1, 2]\n", r"max_steps must be an integer or null, got \[1, 2\] \(a list\)"),
        ("learning_rate: {a: 1}\n", r"learning_rate must be a number or null, got \{'a': 1\} \(a dict\)"),
        ("seed: true\n", r"seed must be an integer, got True \(a bool\)"),
        ("overwrite: 3\n", r"overwrite must be true or false, got 3 \(a int\)"),
        (
            f"output_dir: [{', '.join(['x'] * 100000)}]\n",
            r"output_dir must be a string.*, got \['x', 'x', .{10,80}\.\.\.",
        ),  # noqa: E501
    ],
)
def test_a_recipe_value_of_another_kind_is_one_line_naming_it(tmp_path, text, message):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    line = _one_line(["--config", str(recipe)])
    assert __import__("re").search(message, line), line
    assert len(line) < 400


def test_a_recipe_of_megabytes_is_refused_unread(tmp_path):
    recipe = tmp_path / "big.yaml"
    recipe.write_text("# " + "x" * (2 << 20) + "\n")
    assert "has 2,097,155 bytes; a recipe is a few option values (at most 1,048,576 bytes)" in _one_line(
        ["--config", str(recipe)]
    )


@pytest.mark.parametrize("name", recipe_names())
def test_every_packaged_recipe_still_loads(name):
    assert load_recipe(name)


def test_numbers_written_as_text_still_reach_their_options(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("learning_rate: 1e-3\nmax_steps: '5'\ndataset_config_name: 2019\n")
    assert load_recipe(str(recipe)) == {"learning_rate": "1e-3", "max_steps": "5", "dataset_config_name": "2019"}
