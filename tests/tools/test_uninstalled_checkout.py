"""A checkout that is on ``PYTHONPATH`` but not installed: the presets, recipes, accelerate configs and model cards
are found at the repository's top level (one lookup, `modeling_elmo.utils.package_data`), the whole test suite
collects, and ``elmo pretrain --config NAME`` reads its recipe."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modeling_elmo.hub import card
from modeling_elmo.pretraining import arguments
from modeling_elmo.utils import package_data

REPO = Path(__file__).resolve().parents[2]

#: Prepended to the fresh interpreter's code: drops the import hooks of an editable install (pip's
#: ``__editable__...finder``), so that only ``PYTHONPATH`` can provide `modeling_elmo`, as in a checkout that was
#: never installed; then checks that the package imported is the copy's.
_NOT_INSTALLED = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not str(getattr(f, "__module__", "")).startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not str(getattr(h, "__module__", "")).startswith("__editable__")]
sys.path_importer_cache.clear()
import importlib.util, modeling_elmo
assert modeling_elmo.__file__.startswith(sys.argv[1]), modeling_elmo.__file__
assert importlib.util.find_spec("modeling_elmo.configuration") is None
assert importlib.util.find_spec("modeling_elmo.model_cards") is None
sys.argv = sys.argv[2:]
"""


def test_data_folders_are_found_at_the_checkout_top_level_when_the_package_data_is_not_installed(monkeypatch):
    # the package as this checkout holds it (the tests may run against a regular install elsewhere)
    monkeypatch.setattr(package_data, "PACKAGE_DIR", REPO / "modeling_elmo")
    monkeypatch.setattr(package_data, "_installed", lambda name: [])
    assert package_data.data_folder("configuration") == REPO / "configuration"
    assert package_data.data_folder("model_cards") == REPO / "model_cards"
    assert package_data.data_folder("corpora") == REPO / "modeling_elmo" / "corpora"
    assert arguments.preset_names() == sorted(p.stem for p in (REPO / "configuration").glob("elmo-*.json"))
    assert arguments.recipe_path("quickstart") == REPO / "configuration" / "recipes" / "quickstart.yaml"


def test_the_installed_package_data_is_preferred_and_a_missing_folder_is_one_line_naming_it(monkeypatch, tmp_path):
    (tmp_path / "configuration").mkdir()
    (tmp_path / "configuration" / "elmo-tiny.json").write_text("{}")
    monkeypatch.setattr(package_data, "_installed", lambda name: [tmp_path / name])
    assert package_data.data_folder("configuration") == tmp_path / "configuration"
    monkeypatch.setattr(package_data, "PACKAGE_DIR", tmp_path / "modeling_elmo")
    monkeypatch.setattr(package_data, "_installed", lambda name: [])
    with pytest.raises(ValueError, match=r"^the package data model_cards/ was found neither") as caught:
        package_data.data_folder("model_cards")
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="no package data folder 'recipes'"):
        package_data.data_folder("recipes")


def test_every_reader_uses_the_one_lookup():
    assert card.TEMPLATE_DIR == package_data.data_folder("model_cards")
    assert arguments.configuration_files() == package_data.data_folder("configuration")
    sources = {p: p.read_text(encoding="utf-8") for p in (REPO / "modeling_elmo").rglob("*.py")}
    own_lookups = ("importlib.resources", '/ "model_cards"', '/ "configuration"', '/ "corpora"')
    readers = [p.name for p, text in sources.items() if any(lookup in text for lookup in own_lookups)]
    assert readers == [], readers


def _copy_of_the_checkout(tmp_path: Path) -> Path:
    ignored = shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__", ".pytest_cache", "runs", "outputs")
    ignored_top = {".transformers-tests", "build", "dist"}
    copy = tmp_path / "checkout"
    copy.mkdir()
    for entry in REPO.iterdir():
        if entry.name in ignored_top or ignored(str(REPO), [entry.name]):
            continue
        if entry.is_dir():
            shutil.copytree(entry, copy / entry.name, ignore=ignored)
        else:
            shutil.copy2(entry, copy / entry.name)
    return copy


def _run_uninstalled(copy: Path, code: str, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_TOKEN")}
    env.update(PYTHONPATH=str(copy), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(
        [sys.executable, "-c", _NOT_INSTALLED + code, str(copy / "modeling_elmo"), *argv],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_an_uninstalled_checkout_collects_every_test_and_pretrain_reads_a_packaged_recipe(tmp_path):
    copy = _copy_of_the_checkout(tmp_path)
    collected = _run_uninstalled(
        copy, "import pytest; sys.exit(pytest.main(sys.argv))", "--collect-only", "-q", "-p", "no:cacheprovider"
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert "error" not in collected.stdout.splitlines()[-1], collected.stdout[-3000:]
    assert f"{REPO.name}/tests/" not in collected.stdout  # the copy's tests, not this checkout's
    count = int(collected.stdout.splitlines()[-1].split()[0])
    assert count > 1000

    # the recipe is read (its values reach the checks): the error is the flag's, not a missing package data folder
    pretrain = _run_uninstalled(
        copy,
        "import runpy; runpy.run_module('modeling_elmo.cli', run_name='__main__')",
        "elmo",
        "pretrain",
        "--config",
        "quickstart",
        "--learning-rate",
        "-1",
    )
    assert pretrain.returncode != 0
    assert pretrain.stderr.strip().splitlines()[-1] == (
        "elmo pretrain: error: --learning-rate must be a number in [0, inf), got -1.0."
    ), pretrain.stderr
    listed = _run_uninstalled(
        copy,
        "from modeling_elmo.pretraining import arguments; from modeling_elmo.hub import card; "
        "print(arguments.recipe_path('quickstart'), card.default_template_path('pretrained'))",
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [
        str(copy / "configuration" / "recipes" / "quickstart.yaml"),
        str(copy / "model_cards" / "pretrained.md"),
    ]
