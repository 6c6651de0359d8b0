"""`elmo upgrade`: a folder of an earlier version rewritten in today's format (sharded checkpoints too), an
interrupted upgrade finished by the next run, links and other folders refused in one line with nothing changed."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from safetensors.torch import load_file, save_file
from support import assert_same_numbers
from support.model import SENTENCES, clipping_model, write_legacy_folder
from transformers import AutoModel

from modeling_elmo.cli import main
from modeling_elmo.conversion import upgrade
from modeling_elmo.conversion.upgrade import upgrade_folder


def files(folder):
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def older_folder(tmp_path, *, projection_dim_too=True):
    """A folder as earlier versions wrote it: the older LSTM names and, unless not asked, no projection_dim."""
    tester, model = clipping_model()
    write_legacy_folder(model, tmp_path / "old")
    if projection_dim_too:
        config = json.loads((tmp_path / "old" / "config.json").read_text())
        config["hidden_size"] = config.pop("projection_dim")
        (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    return tester, model, tmp_path / "old"


def older_name(key):
    return re.sub(r"_layers\.(\d+)\.projection\.weight$", r"_layers.\1.weight_hr", key)


def test_a_sharded_checkpoint_is_renamed_in_each_shard_and_in_its_index(tmp_path):
    tester, model = clipping_model()
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1
    for shard in shards:  # today's names -> the older ones, as earlier versions saved them
        weights = load_file(str(tmp_path / "sharded" / shard))
        older = {older_name(key): tensor for key, tensor in weights.items()}
        save_file(older, str(tmp_path / "sharded" / shard), metadata={"format": "pt"})
    index["weight_map"] = {older_name(key): shard for key, shard in index["weight_map"].items()}
    (tmp_path / "sharded" / "model.safetensors.index.json").write_text(json.dumps(index))
    changed = upgrade_folder(tmp_path / "sharded")
    assert changed[-1] == "model.safetensors.index.json: the older LSTM parameter names renamed"
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    assert sorted(index["weight_map"]) == sorted(model.state_dict())
    loaded, info = AutoModel.from_pretrained(tmp_path / "sharded", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        assert_same_numbers(loaded(**enc).last_hidden_state, model(**enc).last_hidden_state, what="sharded")


def test_an_upgrade_killed_between_its_files_is_finished_by_the_next_run(tmp_path, monkeypatch):
    _, _, clean = older_folder(tmp_path / "a")
    upgrade_folder(clean)
    _, _, folder = older_folder(tmp_path / "b")
    calls = []
    real = upgrade.atomic_write_bytes

    def write_then_die(path, data):  # the weights are replaced, then the process dies before config.json
        if calls:
            raise KeyboardInterrupt
        calls.append(path)
        real(path, data)

    monkeypatch.setattr(upgrade, "atomic_write_bytes", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        upgrade_folder(folder)
    assert [path.name for path in calls] == ["model.safetensors"]
    assert sorted(files(folder)) == sorted(files(clean))  # whole files only: no temporary left
    monkeypatch.setattr(upgrade, "atomic_write_bytes", real)
    assert upgrade_folder(folder) == [
        "config.json: hidden_size held the projection: now projection_dim 8, hidden_size 16"
    ]
    assert files(folder) == files(clean)


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_linked_weights_file_is_refused_in_one_line_and_nothing_changes(tmp_path, link):
    _, _, folder = older_folder(tmp_path, projection_dim_too=False)
    outside = tmp_path / "elsewhere.safetensors"
    os.replace(folder / "model.safetensors", outside)
    (os.link if link == "hard" else os.symlink)(outside, folder / "model.safetensors")
    before, outside_bytes = files(folder), outside.read_bytes()
    with pytest.raises(SystemExit) as raised:
        main(["upgrade", str(folder)])
    error = str(raised.value.code)
    assert error.startswith("elmo upgrade: error: weights file ") and "\n" not in error, error
    assert ("hard link" in error) if link == "hard" else ("link" in error), error
    assert files(folder) == before and outside.read_bytes() == outside_bytes


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda folder: None, r"is not a model folder \(no config\.json in it\)"),
        (
            lambda folder: (folder / "config.json").write_text('{"model_type": "bert"}'),
            r"does not hold an ELMo model \(model_type 'bert', not 'elmo'\)",
        ),
        (lambda folder: (folder / "config.json").write_text("{"), r"config file .* is not valid JSON"),
        (
            lambda folder: (
                (folder / "config.json").write_text('{"model_type": "elmo"}'),
                (folder / "model.safetensors").write_bytes(b"\xff" * 8 + b"{}"),
            ),
            r"weights file .* is damaged or truncated: its header claims",
        ),
        (
            lambda folder: (
                (folder / "config.json").write_text('{"model_type": "elmo"}'),
                (folder / "model.safetensors.index.json").write_text("[" * 100_000),
            ),
            r"weights index .* is not valid JSON",
        ),
    ],
)
def test_what_is_not_an_elmo_folder_is_refused_in_one_line(tmp_path, make, message):
    folder = tmp_path / "m"
    folder.mkdir()
    make(folder)
    before = files(folder)
    with pytest.raises(SystemExit) as raised:
        main(["upgrade", str(folder)])
    error = str(raised.value.code)
    assert error.startswith("elmo upgrade: error: ") and "\n" not in error, error
    assert re.search(message, error), error
    assert files(folder) == before


def test_a_dry_run_says_what_would_change_and_writes_nothing(tmp_path, capsys):
    _, _, folder = older_folder(tmp_path)
    before = files(folder)
    assert main(["upgrade", str(folder), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "elmo upgrade: would change model.safetensors: the older LSTM parameter names renamed",
        "elmo upgrade: would change config.json: hidden_size held the projection: now projection_dim 8, hidden_size 16",
    ]
    assert files(folder) == before
