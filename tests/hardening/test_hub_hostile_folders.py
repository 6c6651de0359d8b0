"""``elmo push`` of model folders prepared by someone hostile or careless: what would leak (a link to a file outside
the folder, a credential in the metadata, markup in a dataset name, a foreign ``auto_map``), what would be wrong (NaN,
integer or silently converted weights, a vocabulary of another size than the softmax, a plot that is not an image),
and what would be lost (the files of an ``--output-dir`` that ``elmo push`` did not write). Each test reproduces a
report and checks that the dry run publishes none of it, or stops with one line naming it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from huggingface_hub import ModelCard
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from support import lock_held_elsewhere
from support.hub import PNG, SECRET, _push, _refused, _tiny_config

from modeling_elmo import AUTO_MAP, ElmoConfig, ElmoForBidirectionalLM, ElmoTokenizer, save_model_folder
from modeling_elmo.folders.manifest import MANIFEST

HOSTILE_NAME = "<script>alert(1)</script><img src=x onerror=alert(2)>"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    (root / "words.txt").write_text("\n".join(f"w{i}" for i in range(20)) + "\n")
    tokenizer = ElmoTokenizer(vocab_file=str(root / "words.txt"))
    torch.manual_seed(0)
    save_model_folder(
        ElmoForBidirectionalLM(_tiny_config(vocab_size=tokenizer.vocab_size, architectures=["ElmoForBidirectionalLM"])),
        tokenizer,
        root / "lm",
    )
    (root / "lm" / "perplexity.png").write_bytes(PNG)
    return root / "lm"


@pytest.fixture
def model(template, tmp_path) -> Path:
    folder = tmp_path / "lm"
    shutil.copytree(template, folder)
    (tmp_path / "outside.txt").write_text(SECRET)
    return folder


def _published_text(out: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(out.rglob("*")) if p.is_file())


# --------------------------------------------------------------------------------------------- links and files
@pytest.mark.parametrize(
    "name", ["perplexity.png", "vocab.txt", "evaluation/layer_weights.png", "training_metadata.json"]
)
def test_a_link_to_a_file_outside_the_model_folder_is_refused_naming_it(model, tmp_path, name):
    target = model / name
    target.parent.mkdir(exist_ok=True)
    target.unlink(missing_ok=True)
    target.symlink_to(tmp_path / "outside.txt")
    message = _refused(model, tmp_path / "out", f"{target} links outside the model folder (to ")
    assert str(tmp_path / "outside.txt") in message


def test_a_link_inside_the_model_folder_is_followed(model, tmp_path):
    (model / "real.png").write_bytes(PNG)
    (model / "perplexity.png").unlink()
    (model / "perplexity.png").symlink_to("real.png")
    assert _push(model, tmp_path / "out") == 0
    assert (tmp_path / "out" / "plots" / "perplexity.png").read_bytes() == PNG
    assert not (tmp_path / "out" / "plots" / "perplexity.png").is_symlink()


def test_a_plot_that_is_not_a_png_is_refused(model, tmp_path):
    (model / "perplexity.png").write_text(SECRET)
    _refused(model, tmp_path / "out", "is not a PNG image")
    (model / "perplexity.png").write_bytes(PNG)
    svg = tmp_path / "figure.svg"
    svg.write_text("<svg><script>alert(1)</script></svg>")
    _refused(model, tmp_path / "out", "is not an existing .png/.jpg/.jpeg file", "--plot", str(svg))


# --------------------------------------------------------------------------------------------- the card
def test_the_card_lists_only_allow_listed_settings(model, tmp_path):
    secrets = {
        "apikey": "sk-live-0123456789",
        "passwd": "hunter2",
        "credentials": "aws:AKIAEXAMPLE",
        "db_url": "postgres://admin:pw@dbhost/db",
    }
    (model / "training_metadata.json").write_text(
        json.dumps(
            {
                "global_step": 7,
                **secrets,
                "args": {"learning_rate": 0.2, **secrets, "extra": {"apikey": "nested-secret"}},
                "published": {"apikey": "in-a-group"},
            }
        )
    )
    assert _push(model, tmp_path / "out") == 0
    text = _published_text(tmp_path / "out")
    assert "| global\\_step | 7 |" in text or "| global_step | 7 |" in text
    assert "| args.learning\\_rate | 0.2 |" in text or "| args.learning_rate | 0.2 |" in text
    for value in [*secrets.values(), "nested-secret", "in-a-group", "apikey", "passwd", "db_url", "admin:pw"]:
        assert value not in text, value


def test_unknown_keys_of_the_config_and_tokenizer_config_are_not_published(model, tmp_path):
    for name in ("config.json", "tokenizer_config.json"):
        data = json.loads((model / name).read_text())
        data.update(apikey="sk-live-0123456789", db_url="postgres://admin:pw@dbhost/db", _name_or_path="/home/me/x")
        (model / name).write_text(json.dumps(data))
    assert _push(model, tmp_path / "out") == 0
    text = _published_text(tmp_path / "out")
    for value in ("sk-live", "admin:pw", "apikey", "db_url", "/home/me"):
        assert value not in text, value
    published = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (published["projection_dim"], published["hidden_size"], published["model_type"]) == (8, 16, "elmo")
    assert json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["split_pattern"] == "words"


def test_what_transformers_writes_of_a_tokenizers_loading_is_neither_published_nor_reported(model, tmp_path, caplog):
    """transformers 5 saves ``is_local`` and ``local_files_only`` of every loaded tokenizer: the folder's own
    tokenizer_config.json holds them after a load and save, as the dry run's copy does."""
    ElmoTokenizer.from_pretrained(str(model), local_files_only=True).save_pretrained(str(model))
    saved = json.loads((model / "tokenizer_config.json").read_text())
    if int(transformers.__version__.split(".")[0]) >= 5:
        assert {"is_local", "local_files_only"} <= set(saved)
    else:  # transformers 4.57 writes neither: the folder gets them as a 5.x save writes them
        (model / "tokenizer_config.json").write_text(json.dumps({**saved, "is_local": True, "local_files_only": True}))
    with caplog.at_level("WARNING", logger="modeling_elmo.hub.saving"):
        assert _push(model, tmp_path / "out") == 0
    assert not [r.getMessage() for r in caplog.records if "not published" in r.getMessage()]
    published = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only"} & set(published) and published["split_pattern"] == "words"
    data = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**data, "apikey": "sk-live-0123456789"}))
    caplog.clear()
    with caplog.at_level("WARNING", logger="modeling_elmo.hub.saving"):
        assert _push(model, tmp_path / "again") == 0
    assert [r.getMessage() for r in caplog.records if "not published" in r.getMessage()] == [
        "not published (not a setting of this package or of transformers): apikey of tokenizer_config.json"
    ]


def test_an_html_dataset_name_is_escaped_in_the_text_and_left_out_of_the_yaml(model, tmp_path):
    (model / "training_metadata.json").write_text(json.dumps({"args": {"dataset_name": HOSTILE_NAME}}))
    assert _push(model, tmp_path / "out", "--license", "mit") == 0
    readme = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    for markup in ("<script", "<img", "onerror=alert(2)>"):
        assert markup not in readme
    card = ModelCard(readme)
    assert card.data.datasets is None  # not a Hub dataset id
    assert "&lt;script&gt;alert\\(1\\)&lt;/script&gt;&lt;img src=x onerror=alert\\(2\\)&gt;" in card.text
    assert card.data.license == "mit"


def test_markup_in_command_line_values_and_results_is_escaped(model, tmp_path):
    from modeling_elmo.utils.results import EvaluationResults, PerplexityResult, write_results

    write_results(
        model / "eval_results.json",
        EvaluationResults.now(
            model="lm",
            source="elmo pretrain",
            perplexity=[
                PerplexityResult(
                    dataset=HOSTILE_NAME,
                    split="validation",
                    forward=50.0,
                    backward=51.0,
                    average=50.5,
                    targets_per_direction=10,
                    examples=2,
                    unk_rate=0.0,
                )
            ],
        ),
    )
    assert (
        _push(model, tmp_path / "out", "--dataset", HOSTILE_NAME, "--language", "<b>en</b>", "--license", "<i>mit") == 0
    )
    readme = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "<script" not in readme and "<img" not in readme and "<b>" not in readme and "<i>" not in readme
    card = ModelCard(readme)
    assert card.data.language == ["en"] and card.data.license == "other" and card.data.datasets is None
    assert [r.dataset_name for r in card.data.eval_results][:1] == ["scriptalert(1)/scriptimg src=x onerror=alert(2)"]


# --------------------------------------------------------------------------------------------- the weights
def _rewrite_weights(model: Path, change) -> None:
    tensors = load_file(model / "model.safetensors")
    save_file(
        {name: change(name, t) for name, t in tensors.items()}, model / "model.safetensors", metadata={"format": "pt"}
    )


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused(model, tmp_path, value):
    first = sorted(load_file(model / "model.safetensors"))[0]
    _rewrite_weights(model, lambda name, t: t.clone().fill_(value) if name == first else t)
    _refused(model, tmp_path / "out", f"tensor {first!r} holds")


def test_integer_weights_are_refused(model, tmp_path):
    _rewrite_weights(model, lambda name, t: (t * 100).to(torch.int32))
    _refused(model, tmp_path / "out", "not a floating-point dtype")


def test_float64_weights_are_published_as_float64(model, tmp_path):
    original = load_file(model / "model.safetensors")
    _rewrite_weights(model, lambda name, t: t.double() + 1e-12)
    assert _push(model, tmp_path / "out") == 0
    with safe_open(str(tmp_path / "out" / "model.safetensors"), framework="pt") as handle:
        assert {handle.get_slice(n).get_dtype() for n in handle.keys()} == {"F64"}
        for name in original:
            assert torch.equal(handle.get_tensor(name), original[name].double() + 1e-12)
    assert "| weights dtype | float64 |" in (tmp_path / "out" / "README.md").read_text()


# --------------------------------------------------------------------------------------------- auto_map, vocabulary
def test_a_foreign_auto_map_is_never_carried(model, tmp_path):
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {
        **config["auto_map"],
        "AutoModel": "attacker/elmo-helpers--modeling_evil.ElmoModel",
        "AutoModelForCausalLM": "modeling_evil.Backdoor",
    }
    (model / "config.json").write_text(json.dumps(config))
    assert ElmoConfig.from_pretrained(model).auto_map == AUTO_MAP
    assert _push(model, tmp_path / "out") == 0
    published = json.loads((tmp_path / "out" / "config.json").read_text())
    assert published["auto_map"] == AUTO_MAP
    assert "attacker" not in _published_text(tmp_path / "out") and "modeling_evil" not in _published_text(
        tmp_path / "out"
    )


def test_a_vocabulary_of_another_size_than_the_softmax_is_refused(model, tmp_path):
    lines = (model / "vocab.txt").read_text().splitlines()
    (model / "vocab.txt").write_text("\n".join(lines[:-3]) + "\n")
    _refused(model, tmp_path / "out", f"has {len(lines) - 3} words but the model's softmax has {len(lines)} rows")


# --------------------------------------------------------------------------------------------- the output folder
def test_an_output_folder_with_the_users_files_is_refused_and_kept(model, tmp_path):
    out = tmp_path / "proj"
    (out / "plots").mkdir(parents=True)
    mine = {"README.md": "my project", "config.json": '{"mine": true}', "plots/figure1.png": "figure"}
    for name, text in mine.items():
        (out / name).write_text(text)
    with pytest.raises(SystemExit, match="elmo push did not write 'README.md'"):
        _push(model, out)
    assert {n: (out / n).read_text() for n in mine} == mine


def test_an_output_folder_holding_another_saved_model_is_refused_and_kept(model, tmp_path):
    other = tmp_path / "other"
    save_model_folder(ElmoForBidirectionalLM(_tiny_config(vocab_size=30)), None, other)
    before = (other / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit, match="elmo push did not write 'config.json'"):
        _push(model, other)
    assert (other / "model.safetensors").read_bytes() == before


def test_a_second_push_replaces_its_own_output_and_only_a_killed_runs_marked_temporaries_are_removed(model, tmp_path):
    out = tmp_path / "out"
    assert _push(model, out) == 0
    recorded = json.loads((out / MANIFEST).read_text())
    assert recorded["command"] == "elmo push" and "model.safetensors" in recorded["files"]
    from support import left_by_a_killed_run

    stale = left_by_a_killed_run(out, "staging", "elmo push").parent
    users = tmp_path / f".out.staging-{os.getppid()}-abc"  # named like one, without our marker: the user's
    users.mkdir()
    assert _push(model, out) == 0
    assert not stale.exists() and users.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")) == [users.name]
    (out / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="elmo push did not write 'notes.txt'"):
        _push(model, out)
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("before", ["absent", "an earlier push"])
def test_a_file_the_user_puts_into_the_output_while_it_is_assembled_is_kept_and_the_push_refused(
    model, tmp_path, monkeypatch, before
):
    from modeling_elmo.hub import publish

    out = tmp_path / "out"
    if before == "an earlier push":
        assert _push(model, out) == 0
    original = publish.build_model_card

    def the_user_writes_meanwhile(*args, **kwargs):
        out.mkdir(exist_ok=True)
        (out / "notes.txt").write_text("mine")
        return original(*args, **kwargs)

    monkeypatch.setattr(publish, "build_model_card", the_user_writes_meanwhile)
    expected = (
        "appeared while elmo push worked and is not empty (it holds 'notes.txt'); nothing was replaced"
        if before == "absent"
        else "elmo push did not write 'notes.txt'"
    )
    with pytest.raises(SystemExit) as error:
        _push(model, out)
    message = str(error.value.code)
    assert message.startswith(f"elmo push: error: output folder '{out}' ") and expected in message, message
    assert (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith((".", "out."))] == [], "a temporary or lock left"


def test_a_second_push_into_an_output_being_assembled_is_refused_in_one_line(model, tmp_path):
    out = tmp_path / "out"
    with lock_held_elsewhere(out, "elmo push"):
        _refused(model, out, f"another elmo push run is writing '{out}' (it holds '{out}.lock'); wait for it to end")
    assert not out.exists()


def test_published_files_follow_the_umask(model, tmp_path):
    previous = os.umask(0o022)
    try:
        assert _push(model, tmp_path / "out") == 0
    finally:
        os.umask(previous)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir() if p.is_file()}
    assert modes["model.safetensors"] == 0o644 and set(modes.values()) == {0o644}, modes
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755
