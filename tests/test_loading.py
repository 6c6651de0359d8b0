"""Model locations: a path that looks local never goes to the Hub (a local error at once), a Hub id fails within
seconds when the Hub cannot be reached, and one `HubUnreachableError` for the whole package."""

from __future__ import annotations

import time

import pytest

from modeling_elmo import io_utils, loading


@pytest.fixture
def no_network(monkeypatch):
    """Online mode, as on a machine without a network; any probe of the Hub is recorded."""
    import huggingface_hub

    probes = []
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(io_utils, "hub_reachable", lambda timeout=3.0: probes.append(1) or False)
    return probes


@pytest.mark.parametrize("location, local", [
    ("./model", True), ("/abs/model", True), ("~/model", True), ("a/b/c", True), ("model/", True),
    ("C:\\models\\elmo", True), ("not a hub id!", True), ("runs/nope", True),  # runs/ exists in the working folder
    ("someone/elmo", False), ("elmo-small", False),
])
def test_what_looks_like_a_local_path(location, local, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert loading.looks_like_local_path(location) is local


@pytest.mark.parametrize("location", ["./nope", "runs/nope", "a/b/nope", "~/surely-absent-elmo-model"])
def test_a_missing_local_looking_path_is_a_local_error_without_asking_the_hub(location, tmp_path, monkeypatch,
                                                                             no_network):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(ValueError) as error:
        loading.check_model_location(location)
    assert str(error.value) == f"model {location!r} does not exist (no such folder)"
    assert not isinstance(error.value, loading.HubUnreachableError) and no_network == []


def test_a_hub_id_fails_within_seconds_when_the_hub_cannot_be_reached(tmp_path, monkeypatch, no_network):
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    with pytest.raises(loading.HubUnreachableError, match=r"^model 'someone/elmo' is not a local folder, and the "
                                                          r"Hugging Face Hub \(\S+\) cannot be reached"):
        loading.check_model_location("someone/elmo")
    assert no_network == [1] and time.monotonic() - started < 2


def test_offline_a_hub_id_not_in_the_cache_does_not_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    with pytest.raises(ValueError, match=r"^model 'someone/elmo' does not exist: no such folder, and no Hub model"):
        loading.check_model_location("someone/elmo")
    assert loading.check_model_location(str(tmp_path)) is True


def test_embed_and_evaluate_refuse_a_mistyped_model_path_at_once(tmp_path, monkeypatch, no_network, capsys):
    import transformers  # noqa: F401  (imported before the clock starts: the commands import it on first use)

    from modeling_elmo import embed
    from modeling_elmo.evaluation.cli import main as evaluate_main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(SystemExit) as embed_exit:
        embed.main(["in.txt", "out.h5", "--model", "runs/nope", "--all", "--no-progress"])
    assert str(embed_exit.value.code) == "elmo embed: error: model 'runs/nope' does not exist (no such folder)"
    with pytest.raises(SystemExit):
        evaluate_main(["runs/nope", "--task", "wsd-probe", "--no-progress"])
    assert capsys.readouterr().err.strip() == "elmo evaluate: error: model 'runs/nope' does not exist (no such folder)"
    assert no_network == [] and time.monotonic() - started < 10  # not the Hub client's retries (about 30 s)
    assert not (tmp_path / "out.h5").exists()


def test_there_is_one_hub_unreachable_error():
    from modeling_elmo.evaluation import data as evaluation_data
    from modeling_elmo.pretraining import data as pretraining_data

    assert evaluation_data.HubUnreachableError is pretraining_data.HubUnreachableError is loading.HubUnreachableError
    assert issubclass(loading.HubUnreachableError, ValueError)


def test_the_pickle_guard_lives_with_loading_not_under_hub():
    from modeling_elmo.hub import safety

    assert loading.refuse_pickled_weights.__module__ == "modeling_elmo.loading"
    assert safety.refuse_pickled_weights is loading.refuse_pickled_weights  # the publisher applies the same guard
