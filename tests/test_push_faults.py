"""`elmo push` faults: no network (offline mode, or a Hub endpoint that refuses the connection) and weights that do
not match ``config.json`` each end with one line ``elmo push: error: ...`` (they gave an `OfflineModeIsEnabled` /
`ConnectError` / size-mismatch traceback). The real Hub client runs; only its endpoint and offline flag are set."""

from __future__ import annotations

import socket

import pytest
import torch
from huggingface_hub import constants

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoTokenizer, hub, save_model_folder

TOKEN = "hf_" + "Z" * 34


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("push")
    (root / "vocab.txt").write_text("the\ncat\nsat\n", encoding="utf-8")
    tokenizer = ElmoTokenizer(vocab_file=str(root / "vocab.txt"))
    torch.manual_seed(0)
    config = ElmoConfig(
        vocab_size=tokenizer.vocab_size,
        projection_dim=8,
        cell_size=16,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        num_highway_layers=1,
        num_hidden_layers=1,
    )
    save_model_folder(ElmoForBidirectionalLM(config).eval(), tokenizer, root / "model")
    return root / "model"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.mark.parametrize("network", ["offline mode", "connection refused"])
def test_push_without_network_is_one_line(model_dir, tmp_path, monkeypatch, capsys, network):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-login" / "token"))
    if network == "offline mode":
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        expected = "OfflineModeIsEnabled"
    else:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
        expected = "Connect"
    with pytest.raises(SystemExit) as exit_:
        hub.main([str(model_dir), "--repo-id", "me/elmo-tiny", "--output-dir", str(tmp_path / "repo")])
    message = str(exit_.value.code)
    assert (
        message.startswith(
            f"elmo push: error: cannot upload to me/elmo-tiny on the Hugging Face Hub ({constants.ENDPOINT}): "
        )
        and "\n" not in message
    ), message
    assert expected in message, message
    assert "Traceback" not in capsys.readouterr().err


def test_push_of_weights_that_do_not_match_the_config_is_one_line(model_dir, tmp_path):
    import json
    import shutil

    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "cell_size": 32}))
    with pytest.raises(SystemExit) as exit_:
        hub.main([str(model), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(tmp_path / "repo")])
    message = str(exit_.value.code)
    assert message.startswith(f"elmo push: error: the weights of model {str(model)!r} do not match its config.json: ")
    assert "with another shape than config.json implies" in message and "\n" not in message, message
    assert not (tmp_path / "repo").exists()


def test_return_dict_false_in_config_json_is_published_as_true_with_a_warning(model_dir, tmp_path, caplog):
    import json
    import logging
    import shutil

    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "return_dict": False}))
    with caplog.at_level(logging.WARNING):
        assert (
            hub.main([str(model), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(tmp_path / "repo")])
            == 0
        )
    assert json.loads((tmp_path / "repo" / "config.json").read_text()).get("return_dict", True) is True
    assert any("sets return_dict False: published as true" in r.getMessage() for r in caplog.records)
