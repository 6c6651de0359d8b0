"""``config.use_packed_kernels`` is the one switch of the package's fast recurrence: a folder saved with ``false``
runs the shipped public form in every loader (``elmo embed``, ``elmo evaluate``, `AutoModel` with and without the
folder's own code), one saved with ``true`` (the default) the package's kernels. Which form ran is read from the
calls of the kernels' entry, `packed_kernels.packed_lstm`."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoTokenizer, save_model_folder
from modeling_elmo.acceleration import packed_kernels
from modeling_elmo.cli import main

TINY = dict(
    projection_dim=8, cell_size=16, char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1
)
WORDS = ["the", "bank", "river", "money", "a", "good", "bad", "film", "is", "was"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[bool, object]:
    """The same tiny biLM saved twice with its tokenizer: ``use_packed_kernels`` true and false."""
    root = tmp_path_factory.mktemp("switch")
    (root / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    tokenizer = ElmoTokenizer(vocab_file=str(root / "vocab.txt"))
    made = {}
    for switch in (True, False):
        torch.manual_seed(0)
        config = ElmoConfig(vocab_size=tokenizer.vocab_size, use_packed_kernels=switch, **TINY)
        save_model_folder(ElmoForBidirectionalLM(config).eval(), tokenizer, root / f"packed-{switch}")
        assert json.loads((root / f"packed-{switch}" / "config.json").read_text())["use_packed_kernels"] is switch
        made[switch] = root / f"packed-{switch}"
    return made


@pytest.fixture
def kernel_calls(monkeypatch) -> list[tuple]:
    """The calls of the package's kernel entry, whatever copy of the model file makes them."""
    calls, run = [], packed_kernels.packed_lstm

    def spy(inputs, *args, **kwargs):
        calls.append(tuple(inputs.shape))
        return run(inputs, *args, **kwargs)

    monkeypatch.setattr(packed_kernels, "packed_lstm", spy)
    return calls


@pytest.mark.parametrize("switch", [True, False])
def test_elmo_embed_runs_the_form_the_saved_config_names(folders, kernel_calls, tmp_path, switch):
    (tmp_path / "in.txt").write_text("the bank\na good film is\n")
    argv = ["embed", "--model", str(folders[switch]), "--all", "--no-progress"]
    assert main([*argv, str(tmp_path / "in.txt"), str(tmp_path / "out.h5")]) == 0
    assert (tmp_path / "out.h5").is_file()
    assert bool(kernel_calls) is switch, kernel_calls


@pytest.mark.parametrize("switch", [True, False])
def test_elmo_evaluate_runs_the_form_the_saved_config_names(folders, kernel_calls, tmp_path, switch):
    (tmp_path / "t.txt").write_text("the bank\na good film\n")
    argv = [str(folders[switch]), "--task", "perplexity", "--text", str(tmp_path / "t.txt")]
    assert main(["evaluate", *argv, "--output-dir", str(tmp_path / "out"), "--no-progress"]) == 0
    assert bool(kernel_calls) is switch, kernel_calls


@pytest.mark.parametrize("folder_code", [False, True], ids=["AutoModel", "trust_remote_code"])
@pytest.mark.parametrize("switch", [True, False])
def test_automodel_runs_the_form_the_saved_config_names(folders, kernel_calls, folder_code, switch):
    folder = str(folders[switch])
    # the folder's own code, as AutoModel(trust_remote_code=True) gives it where the package's classes are not
    # registered; else the package's registered class
    loader = get_class_from_dynamic_module("modeling_elmo.ElmoModel", folder) if folder_code else AutoModel
    model = loader.from_pretrained(folder).eval()
    assert type(model).__module__.startswith("transformers_modules.") is folder_code
    encoded = ElmoTokenizer()(["the bank", "a good film is"], padding=True, return_tensors="pt")
    with torch.no_grad():
        model(**encoded)
    model.train()(**encoded).last_hidden_state.sum().backward()  # training as well
    assert bool(kernel_calls) is switch, kernel_calls
