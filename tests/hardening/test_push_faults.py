"""`elmo push` faults: no network (offline mode, or a Hub endpoint that refuses the connection) and weights that do
not match ``config.json`` each end with one line ``elmo push: error: ...`` (they gave an `OfflineModeIsEnabled` /
`ConnectError` / size-mismatch traceback). The real Hub client runs; only its endpoint and offline flag are set."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants
from packaging.requirements import Requirement

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


# ---------------------------------------------------------------------------------------------- hostile folders (X4)
def _hostile_copy(model_dir, tmp_path, **config_changes):
    import json
    import shutil

    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **config_changes}))
    return model


FOREIGN_PIPELINES = {
    "another repository": "attacker/helpers--evil_mod.EvilPipe",
    "a path out of the folder": "../../evil_mod.X",
    "a module the model does not ship": "evil_mod.Y",
}


@pytest.mark.parametrize("where", sorted(FOREIGN_PIPELINES))
def test_a_custom_pipeline_naming_foreign_code_is_refused_in_one_line_and_nothing_written(model_dir, tmp_path, where):
    """X4: ``custom_pipelines`` is guarded like ``auto_map``: only a class of the model's own code files."""
    impl = FOREIGN_PIPELINES[where]
    pipelines = {"text-classification": {"impl": impl, "pt": ["AutoModelForSequenceClassification"], "type": "text"}}
    model = _hostile_copy(model_dir, tmp_path, custom_pipelines=pipelines)
    with pytest.raises(SystemExit) as exit_:
        hub.main([str(model), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(tmp_path / "repo")])
    message = str(exit_.value.code)
    entry = "custom_pipelines entry 'text-classification'"
    assert message.startswith(f"elmo push: error: {model / 'config.json'}: {entry}"), message
    assert repr(impl) in message and "refusing to publish it" in message and "\n" not in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_custom_pipeline_with_a_default_model_to_download_is_refused(model_dir, tmp_path):
    pipelines = {
        "token-classification": {
            "impl": "pipeline_elmo.ElmoTokenClassificationPipeline",
            "pt": ["AutoModelForTokenClassification"],
            "default": {"model": {"pt": ["attacker/model", "main"]}},
        }
    }
    model = _hostile_copy(model_dir, tmp_path, custom_pipelines=pipelines)
    with pytest.raises(SystemExit, match="has key\\(s\\) 'default', which no model may carry"):
        hub.main([str(model), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(tmp_path / "repo")])


def test_the_packages_own_custom_pipeline_is_published(model_dir, tmp_path):
    import json

    from modeling_elmo.pipeline_elmo import CUSTOM_PIPELINES

    model = _hostile_copy(model_dir, tmp_path, custom_pipelines=CUSTOM_PIPELINES)
    hub.main([str(model), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(tmp_path / "repo")])
    assert json.loads((tmp_path / "repo" / "config.json").read_text())["custom_pipelines"] == CUSTOM_PIPELINES


# ---------------------------------------------------------------------------------------------- secrets, templates
SECRETS = {
    "an AWS access key id": "AKIA" + "QWERTYUIOPASDFGH",
    "a GitHub token": "ghp_" + "a1B2" * 9,
    "a GitHub fine-grained token": "github_pat_" + "11ABCDEFG0" * 3,
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
@pytest.mark.parametrize("where", ["id2label", "vocab.txt"])
def test_an_aws_or_github_credential_in_a_published_file_is_refused(model_dir, tmp_path, kind, where):
    secret = SECRETS[kind]
    if where == "id2label":
        model = _hostile_copy(model_dir, tmp_path, id2label={"0": secret, "1": "O"}, label2id={secret: 0, "O": 1})
    else:
        model = _hostile_copy(model_dir, tmp_path)
        vocab = (model / "vocab.txt").read_text().splitlines()
        (model / "vocab.txt").write_text("\n".join([*vocab[:-1], secret]) + "\n")
    with pytest.raises(SystemExit) as exit_:
        hub.main([str(model), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(tmp_path / "repo")])
    message = str(exit_.value.code)
    assert f"contains what looks like {kind}" in message and secret not in message, message
    assert not (tmp_path / "repo").exists()


HIDDEN_SECRETS = {
    "a token split over two vocab.txt lines": ("vocab.txt", "hf_\n" + "Zq" * 17, "a Hugging Face access token"),
    "an AWS secret key beside its id in two labels": (
        "id2label",
        ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        "an AWS secret access key (beside its AKIA... id)",
    ),
    "a PEM private key in a label": ("id2label", ("-----BEGIN EC PRIVATE KEY-----", "O"), "a PEM private key"),
    "a base64-encoded token in vocab.txt": (
        "vocab.txt",
        "aGZfWnFacVpxWnFacVpxWnFacVpxWnFacVpxWnFacVpxWnFacVpx",
        "a Hugging Face access token (hf_...), base64-encoded",
    ),
}


@pytest.mark.parametrize("case", sorted(HIDDEN_SECRETS))
def test_a_split_encoded_or_pem_secret_is_refused_in_one_line_and_nothing_written(model_dir, tmp_path, case):
    where, secret, kind = HIDDEN_SECRETS[case]
    if where == "id2label":
        labels = dict(enumerate(secret))
        model = _hostile_copy(model_dir, tmp_path, id2label=labels, label2id={v: k for k, v in labels.items()})
        file = "config.json"
    else:
        model = _hostile_copy(model_dir, tmp_path)
        vocab = (model / "vocab.txt").read_text().splitlines()
        kept = vocab[: -len(secret.splitlines())]  # the same number of words: the size check passes
        (model / "vocab.txt").write_text("\n".join([*kept, secret]) + "\n")
        file = "vocab.txt"
    with pytest.raises(SystemExit) as exit_:
        hub.main([str(model), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(tmp_path / "repo")])
    message = str(exit_.value.code)
    pattern = rf"elmo push: error: {file} contains what looks like {re.escape(kind)}.* \(line \d+\); refusing to"
    assert re.fullmatch(pattern + r" publish it\.", message), message
    parts = secret if isinstance(secret, tuple) else secret.split()
    assert not any(part in message for part in parts if len(part) > 3)  # the label "O" is in any message
    assert not (tmp_path / "repo").exists()


@pytest.mark.slow  # a --template renders in a child interpreter
def test_a_template_reaching_for_python_internals_is_refused_before_it_runs(model_dir, tmp_path):
    """X12: the template is rendered in Jinja's immutable sandbox; the command it tries to run never runs."""
    witness = tmp_path / "ran"
    template = tmp_path / "card.md"
    template.write_text(
        "---\n{{ card_data }}\n---\n# {{ model_id }}\n{{ evaluation_section }}\n{{ training_section }}\n"
        "{{ self.__init__.__globals__.__builtins__.__import__('os').system('touch " + str(witness) + "') }}\n"
    )
    with pytest.raises(SystemExit) as exit_:
        hub.main(
            [str(model_dir), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "repo")]
            + ["--template", str(template)]
        )
    message = str(exit_.value.code)
    assert "reaches outside the card's values" in message and "\n" not in message, message
    assert not witness.exists() and not (tmp_path / "repo").exists()


def _card_template(tmp_path, line: str):
    template = tmp_path / "card.md"
    template.write_text(
        "---\n{{ card_data }}\n---\n# {{ model_id }}\n{{ evaluation_section }}\n{{ training_section }}\n" + line + "\n"
    )
    return template


@pytest.mark.slow  # a --template renders in a child interpreter
def test_a_template_reading_the_environment_through_attr_format_is_refused(model_dir, tmp_path, monkeypatch):
    """Attacker pass on X12: ``|attr('format')`` hands ``str.format`` a function's globals; jinja2 before 3.1.6 let
    it read ``os.environ`` (a credential) into the card. The range requires 3.1.6, and the installed one refuses."""
    monkeypatch.setenv("ELMO_TEST_SECRET", "the-secret-value")
    template = _card_template(
        tmp_path, "{{ ('{0.__globals__[os].environ[ELMO_TEST_SECRET]}'|attr('format'))(lipsum) }}"
    )
    args = [str(model_dir), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "repo")]
    with pytest.raises(SystemExit) as exit_:
        hub.main([*args, "--template", str(template)])
    message = str(exit_.value.code)
    assert "reaches outside the card's values" in message and "the-secret-value" not in message, message
    assert not (tmp_path / "repo").exists()
    import jinja2

    monkeypatch.setattr(jinja2, "__version__", "3.1.5")  # an environment that kept an older jinja2
    with pytest.raises(SystemExit) as exit_:
        hub.main([*args, "--template", str(template)])
    assert "jinja2 3.1.5 is installed; its sandbox lets a template read Python internals" in str(exit_.value.code)
    assert not (tmp_path / "repo").exists()


@pytest.mark.slow  # a --template renders in a child interpreter
@pytest.mark.parametrize(
    "expression, message",
    [
        ("{{ 1 / 0 }}", "fails while rendering: ZeroDivisionError: division by zero."),
        ("{{ '{0}{1}'.format('a') }}", "fails while rendering: IndexError: "),
        (
            "{{ 'x' * 10**10 }}",
            "fails while rendering: ValueError: a repetition of 1 items 10,000,000,000 times is too",
        ),
        ("{{ [0] * 10**9 }}", "a repetition of 1 items 1,000,000,000 times is too large"),
        ("{{ 2 ** (10**11) }}", "fails while rendering: ValueError: a power of 2-bit number to 100,000,000,000 is"),
    ],
)
def test_a_template_that_fails_or_builds_a_huge_value_is_one_line(model_dir, tmp_path, expression, message):
    """Attacker pass on X12: what the sandbox allows can still raise (a traceback) or allocate gigabytes from a
    template of 20 bytes; ``*`` and ``**`` are bounded, and any failure while rendering is one line."""
    template = _card_template(tmp_path, expression)
    with pytest.raises(SystemExit) as exit_:
        hub.main(
            [str(model_dir), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "repo")]
            + ["--template", str(template)]
        )
    text = str(exit_.value.code)
    assert text.startswith(f"elmo push: error: model-card template {template} ") and "\n" not in text, text
    assert message in text and not (tmp_path / "repo").exists()


def test_a_template_refused_before_rendering_starts_no_child(model_dir, tmp_path):
    """Syntax, required and unknown fields and the jinja2 floor are checked in this process, before the child starts
    (this test is in the fast loop, which refuses a process)."""
    args = [str(model_dir), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "repo")]
    for line, message in (("{% for %}", "has a syntax error on line 7"), ("{{ colour }}", "uses the field(s) colour")):
        with pytest.raises(SystemExit) as exit_:
            hub.main([*args, "--template", str(_card_template(tmp_path, line))])
        assert message in str(exit_.value.code), exit_.value.code


@pytest.mark.slow  # a --template renders in a child interpreter
@pytest.mark.parametrize(
    "expression, message",
    [
        ("{{ 'x'|center(10**10) }}", "rendering used more than 1.00 GiB of memory."),
        ("{{ 'x'|indent(10**10, first=True) }}", "rendering used more than 1.00 GiB of memory."),
        ("{{ '{:>9999999999}'.format(1) }}", "rendering used more than 1.00 GiB of memory."),
        ("{{ ('x' * 10**6).replace('x', 'y' * 10**6) }}", "rendering used more than 1.00 GiB of memory."),
        ("{{ (['x' * 10**7] * 10**6)|join }}", "rendering used more than 1.00 GiB of memory."),
        ("{{ 'x'|center(4 * 10**8) }}", " renders 400,000,4"),
        (
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
            "rendering did not finish within 3 s.",
        ),
    ],
)
def test_a_template_exhausting_memory_or_time_ends_in_one_line_naming_it(
    model_dir, tmp_path, monkeypatch, expression, message
):
    """Issue 35: filters with huge widths, growing joins and replaces, and nested loops are stopped by the child's
    memory limit (1 GiB plus the input's size), its text limit (what comes back into ``elmo push``) and the time
    limit (here 3 s), in one line naming the template."""
    import time

    from modeling_elmo.hub import card_render

    monkeypatch.setattr(card_render, "TEMPLATE_TIME_LIMIT", 3.0)
    template = _card_template(tmp_path, expression)
    start = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        hub.main(
            [str(model_dir), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "repo")]
            + ["--template", str(template)]
        )
    elapsed = time.monotonic() - start
    text = str(exit_.value.code)
    assert text.startswith(f"elmo push: error: model-card template {template}") and "\n" not in text, text
    assert message in text
    assert elapsed < 30, elapsed  # the 3 s limit plus start-up under load, not the hours of the unbounded render
    assert not (tmp_path / "repo").exists()


def test_the_jinja2_range_excludes_the_releases_whose_sandbox_lets_a_template_out():
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()  # (tomllib: Python 3.11)
    (jinja,) = [Requirement(r) for r in re.findall(r'^\s*"(jinja2[^"]*)",', pyproject, re.MULTILINE)]
    assert not any(jinja.specifier.contains(v) for v in ("3.1.0", "3.1.4", "3.1.5")) and jinja.specifier.contains(
        "3.1.6"
    )


# ---------------------------------------------------------------------------------------------- assembled, then sent
def test_a_second_push_into_the_folder_being_uploaded_is_refused_and_the_upload_sends_what_was_checked(
    model_dir, tmp_path, monkeypatch
):
    """Attacker pass on the push's lock: it was held while the folder was assembled and released before the upload,
    so a second push (another model) could replace the folder while the first one sent it: a mix of two models, files
    the first push never scanned."""
    import threading

    from modeling_elmo.folders.manifest import read_manifest
    from modeling_elmo.hub import cli as hub_cli

    out, sent, second = tmp_path / "repo", {}, []
    monkeypatch.setenv("HF_TOKEN", TOKEN)

    def second_push():
        try:
            hub.main([str(model_dir), "--repo-id", "me/other", "--dry-run", "--output-dir", str(out)])
        except SystemExit as exit_:
            second.append(str(exit_.code))

    def upload(folder, repo_id, *, files, **kwargs):
        thread = threading.Thread(target=second_push)
        thread.start()
        thread.join()
        sent.update({name: (Path(folder) / name).read_bytes() for name in files})
        return "https://hub.example/me/elmo-tiny"

    monkeypatch.setattr(hub_cli, "upload_repo_folder", upload)
    assert hub.main([str(model_dir), "--repo-id", "me/elmo-tiny", "--output-dir", str(out)]) == 0
    assert len(second) == 1 and "another elmo push run is writing" in second[0], second
    recorded = read_manifest(out)["files"]
    assert sorted(sent) == sorted(recorded) and b"me/elmo-tiny" in sent["README.md"]


def test_a_folder_changed_between_assembling_and_uploading_is_not_uploaded(model_dir, tmp_path, monkeypatch):
    from modeling_elmo.hub import cli as hub_cli

    out, uploads = tmp_path / "repo", []
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    real = hub_cli.assemble_repo_folder

    def assemble_then_edit(*args, **kwargs):
        files = real(*args, **kwargs)
        with open(out / "README.md", "a") as handle:  # after the secret scan
            handle.write("token: " + TOKEN + "\n")
        return files

    monkeypatch.setattr(hub_cli, "assemble_repo_folder", assemble_then_edit)
    monkeypatch.setattr(hub_cli, "upload_repo_folder", lambda *args, **kwargs: uploads.append(args))
    with pytest.raises(SystemExit) as exit_:
        hub.main([str(model_dir), "--repo-id", "me/elmo-tiny", "--output-dir", str(out)])
    message = str(exit_.value.code)
    assert "changed after it was assembled and checked ('README.md' is not as written); nothing was uploaded" in message
    assert not uploads and TOKEN not in message


# ---------------------------------------------------------------------------------------------- a killed swap (L6)
@pytest.mark.slow
def test_a_push_killed_in_its_swap_is_undone_by_the_next_push_even_one_that_fails_late(model_dir, tmp_path, caplog):
    """L6: `kill -9` right after the earlier output folder was moved aside; a later push that fails late (its card
    template) puts the earlier folder back with a line and deletes nothing."""
    import logging
    import subprocess
    import sys

    from support import KILLED_AFTER_MOVING_ASIDE

    out = tmp_path / "repo"
    args = [str(model_dir), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(out)]
    assert hub.main(args) == 0
    earlier = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_MOVING_ASIDE, "modeling_elmo.hub", *args], capture_output=True, text=True
    )
    assert killed.returncode == -9, killed.stderr
    assert not out.exists()
    template = tmp_path / "card.md"
    template.write_text("---\n{{ card_data }}\n---\n# {{ model_id }}\n")  # lacks required fields: fails late
    with caplog.at_level(logging.WARNING), pytest.raises(SystemExit, match="missing the field"):
        hub.main([*args, "--template", str(template)])
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == earlier
    assert f"elmo push was interrupted while replacing '{out}'" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.md", "repo"]


@pytest.mark.parametrize("output", [".", "/"])
def test_an_output_dir_of_the_current_folder_or_the_root_is_refused_in_words(model_dir, tmp_path, monkeypatch, output):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        hub.main([str(model_dir), "--repo-id", "me/x", "--dry-run", "--output-dir", output])
    message = str(exit_.value.code)
    assert message.startswith(f"elmo push: error: output folder {output!r} names the current folder"), message
    assert list(tmp_path.iterdir()) == []
