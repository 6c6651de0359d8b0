"""Conversion of original ELMo releases, proven against the independent numpy forward in numpy_reference.py.

Random tiny releases are written in the original HDF5 layout, converted with ``modeling_elmo.conversion.convert`` and
compared layer by layer with a float64 numpy implementation of the TensorFlow computation (tolerance 1e-5).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # numpy_reference, however pytest imports this file
import numpy_reference as ref  # noqa: E402
from support import lock_held_elsewhere, run_without_package  # noqa: E402

from modeling_elmo.conversion.convert import (  # noqa: E402
    convert,
    convert_config,
    convert_state_dict,
    main,
    read_options,
)
from modeling_elmo.conversion.parity import validate_converted_model  # noqa: E402
from modeling_elmo.tokenization_elmo import ElmoTokenizer  # noqa: E402

ATOL = 1e-5
SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    ["Hello", "world"],
    ["Naïve", "café", "—", "東京", "ünïcödé", chr(256) + "t", "!"],
    ["a"],
    ["Second", "sentence", ",", "slightly", "longer", ",", "with", "many", "short", "words", "in", "it", "."],
    ["x" * 47 + "é", "Supercalifragilisticexpialidocious-and-even-longer-than-that", "<S>", "</S>"],
]
LONG_CUT = "x" * 47 + "é"  # 49 bytes: the 48-byte cut splits the two-byte é


def _expected(options, weights, sentences):
    """Per-sentence numpy reference (L+1, T, 2P) without boundaries."""
    out = []
    for sentence in sentences:
        ids = ref.batch_to_char_ids([sentence])
        layers, _ = ref.numpy_elmo_forward(options, weights, ids)
        out.append(ref.strip_boundaries(layers, ids)[0][:, 0])
    return out


def _run_model(model, tokenizer, sentences, pad=None, **model_kwargs):
    batch = tokenizer(sentences, is_split_into_words=True, return_tensors="pt", **(pad or {"padding": True}))
    with torch.no_grad():
        output = model(
            batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True, **model_kwargs
        )
    return torch.stack(output.hidden_states).double().numpy(), batch["attention_mask"].numpy(), output


def _layer_diffs(got, expected_rows, sentences):
    """Max abs difference per layer between the model's (L+1, B, T, 2P) and the references; padding must be 0."""
    diffs = np.zeros(got.shape[0])
    for b, (sentence, expected) in enumerate(zip(sentences, expected_rows, strict=False)):
        n = len(sentence)
        diffs = np.maximum(diffs, np.abs(got[:, b, :n] - expected).max(axis=(1, 2)))
        if got.shape[2] > n:
            diffs = np.maximum(diffs, np.abs(got[:, b, n:]).max(axis=(1, 2)))
    return diffs


def _assert_matches(got, expected_rows, sentences, what=""):
    diffs = _layer_diffs(got, expected_rows, sentences)
    assert diffs.max() <= ATOL, f"{what}: max abs difference per layer {diffs.tolist()} exceeds {ATOL}"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    folder = tmp_path_factory.mktemp("release")
    options = ref.tiny_options()
    options_path, weights_path = ref.write_original_files(folder, options, seed=0)
    return options, options_path, weights_path


@pytest.fixture(scope="module")
def converted(release, tmp_path_factory):
    _, options_path, weights_path = release
    out = tmp_path_factory.mktemp("converted") / "elmo-tiny"
    assert main(["--options", options_path, "--weights", weights_path, "--output", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def model(converted):
    from modeling_elmo.modeling_elmo import ElmoModel

    return ElmoModel.from_pretrained(converted).eval()


@pytest.fixture(scope="module")
def expected(release):
    options, _, weights_path = release
    return _expected(options, weights_path, SENTENCES)


# ------------------------------------------------------------------------------------------ character ids
def test_reference_char_ids_equal_the_published_literal_lists():
    assert ref.encode_word("Second") == [259, 84, 102, 100, 112, 111, 101, 260] + [261] * 42
    assert ref.encode_word(".") == [259, 47, 260] + [261] * 47
    assert ref.encode_word(chr(256) + "t") == [259, 197, 129, 117, 260] + [261] * 45
    assert ref.encode_word("<S>") == [259, 257, 260] + [261] * 47
    assert ref.encode_word("</S>") == [259, 258, 260] + [261] * 47
    assert ref.encode_word(LONG_CUT) == [259] + [121] * 47 + [0xC3 + 1, 260]
    ids = ref.batch_to_char_ids([["a"], ["b", "c"]])
    assert ids.shape == (2, 4, 50) and (ids[0, 3] == 0).all() and ids[0, 2, 1] == 258


def test_tokenizer_char_ids_equal_the_numpy_reference():
    tokenizer = ElmoTokenizer()
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="np")
    expected = ref.batch_to_char_ids(SENTENCES, add_boundaries=False)
    np.testing.assert_array_equal(batch["input_ids"], expected)
    np.testing.assert_array_equal(batch["attention_mask"], (expected > 0).any(-1).astype(int))


def test_random_release_weights_make_both_clips_trigger(release):
    options, _, weights_path = release
    stats = {}
    ref.numpy_elmo_forward(options, weights_path, ref.batch_to_char_ids(SENTENCES), stats=stats)
    assert stats["cell_clipped"] > 0 and stats["proj_clipped"] > 0, stats


# ------------------------------------------------------------------------------------------ state dict
def test_lstm_weights_are_split_transposed_reordered_and_get_the_forget_bias(release):
    options, _, weights_path = release
    config = convert_config(options)
    H, P = config.cell_size, config.projection_dim
    sd = convert_state_dict(weights_path, config)
    with h5py.File(weights_path, "r") as h5:
        cell = h5["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell"]
        W, B, WP = cell["W_0"][()], cell["B"][()], cell["W_P_0"][()]
        table = h5["char_embed"][()]
        carry = h5["CNN_high_0/W_carry"][()]
        kernel = h5["CNN/W_cnn_2"][()]
    layer = {k: v.numpy() for k, v in sd.items() if k.startswith("encoder.backward_layers.1.")}
    tf_block = {name: slice(k * H, (k + 1) * H) for k, name in enumerate("ijfo")}
    for k, name in enumerate("ifjo"):  # PyTorch order i, f, g=j, o
        rows = slice(k * H, (k + 1) * H)
        np.testing.assert_array_equal(
            layer["encoder.backward_layers.1.input_transform.weight"][rows], W[:P, tf_block[name]].T
        )
        np.testing.assert_array_equal(
            layer["encoder.backward_layers.1.recurrent_transform.weight"][rows], W[P:, tf_block[name]].T
        )
        shift = 1.0 if name == "f" else 0.0
        np.testing.assert_allclose(
            layer["encoder.backward_layers.1.input_transform.bias"][rows], B[tf_block[name]] + shift, rtol=0, atol=1e-7
        )
    np.testing.assert_array_equal(layer["encoder.backward_layers.1.projection.weight"], WP.T)
    np.testing.assert_array_equal(sd["char_encoder.char_embeddings.weight"][0].numpy(), 0)
    np.testing.assert_array_equal(sd["char_encoder.char_embeddings.weight"][1:].numpy(), table)
    np.testing.assert_array_equal(sd["char_encoder.highways.0.gate.weight"].numpy(), carry.T)
    np.testing.assert_array_equal(sd["char_encoder.convolutions.2.weight"].numpy(), kernel[0].transpose(2, 1, 0))


# ------------------------------------------------------------------------------------------ parity
BATCHINGS = {
    "one_batch": [list(range(len(SENTENCES)))],
    "one_sentence_per_batch": [[i] for i in range(len(SENTENCES))],
    "reversed_order_in_pairs": [[5, 4], [3, 2], [1, 0]],
    "shuffled_triples": [[2, 0, 4], [5, 1, 3]],
}


@pytest.mark.parametrize("batching", list(BATCHINGS))
def test_converted_model_matches_numpy_reference_on_every_layer(model, expected, batching):
    tokenizer = ElmoTokenizer()
    for rows in BATCHINGS[batching]:
        sentences = [SENTENCES[i] for i in rows]
        got, mask, _ = _run_model(model, tokenizer, sentences)
        np.testing.assert_array_equal(mask.sum(1), [len(s) for s in sentences])
        _assert_matches(got, [expected[i] for i in rows], sentences, f"{batching} rows {rows}")


def test_extra_padding_does_not_change_the_outputs(model, expected):
    tokenizer = ElmoTokenizer()
    longest = max(len(s) for s in SENTENCES)
    got, _, _ = _run_model(model, tokenizer, SENTENCES, pad=dict(padding="max_length", max_length=longest + 5))
    assert got.shape[2] == longest + 5
    _assert_matches(got, expected, SENTENCES, "padded to max_length + 5")


def test_left_padding_gives_the_reference_outputs_at_the_token_positions(model, expected):
    got, mask, _ = _run_model(model, ElmoTokenizer(), SENTENCES, pad=dict(padding=True, padding_side="left"))
    width = got.shape[2]
    for b, sentence in enumerate(SENTENCES):
        assert mask[b, : width - len(sentence)].sum() == 0, "padding must be on the left"
    # move each row's tokens to the front, then compare exactly as for right padding
    aligned = np.zeros_like(got)
    for b, sentence in enumerate(SENTENCES):
        aligned[:, b, : len(sentence)] = got[:, b, width - len(sentence) :]
        assert np.abs(got[:, b, : width - len(sentence)]).max(initial=0.0) == 0.0
    _assert_matches(aligned, expected, SENTENCES, "left padding")


def test_input_with_boundaries_matches_reference_at_every_position(model, release):
    options, _, weights_path = release
    ids = ref.batch_to_char_ids(SENTENCES)  # <S> ... </S> already in place, as in fixed-window LM training
    reference, _ = ref.numpy_elmo_forward(options, weights_path, ids)
    with torch.no_grad():
        output = model(torch.from_numpy(ids), add_sentence_boundaries=False, output_hidden_states=True)
    got = torch.stack(output.hidden_states).double().numpy()
    assert got.shape == (len(reference),) + ids.shape[:2] + (2 * options["lstm"]["projection_dim"],)
    diffs = np.abs(got - np.stack(reference)).max(axis=(1, 2, 3))
    assert diffs.max() <= ATOL, f"max abs difference per layer {diffs.tolist()} (boundary positions included)"


@pytest.mark.slow
def test_converted_folder_loads_with_automodel_in_a_fresh_process(converted, expected, tmp_path):
    info = run_without_package(
        """
        import json, sys, torch
        from transformers import AutoModel, AutoTokenizer
        from transformers import AutoModelForSequenceClassification as Seq, AutoModelForTokenClassification as Tok
        folder, sentences = sys.argv[1], json.loads(sys.argv[2])
        model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            out = model(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
        heads = [type(Seq.from_pretrained(folder, trust_remote_code=True, num_labels=3)).__name__,
                 type(Tok.from_pretrained(folder, trust_remote_code=True, num_labels=5)).__name__]
        print(json.dumps({"model_module": type(model).__module__, "tokenizer": type(tokenizer).__name__, "heads": heads,
                          "layers": torch.stack(out.hidden_states).double().tolist()}))
        """,
        converted,
        json.dumps(SENTENCES),
        workdir=tmp_path / "fresh",
    )
    assert info["model_module"].startswith("transformers_modules."), info["model_module"]  # the folder's own code
    assert info["tokenizer"] == "ElmoTokenizer"
    assert info["heads"] == ["ElmoForSequenceClassification", "ElmoForTokenClassification"]
    _assert_matches(np.array(info["layers"]), expected, SENTENCES, "AutoModel in a fresh process")


STATEFUL_BATCHES = [[0, 1, 2], [3, 4, 5], [1, 0, 2], [2, 2, 5]]


@pytest.fixture
def replay(release):
    """The reference that replays AllenNLP's stateful inference batch after batch."""
    options, _, weights_path = release
    return ref.StatefulNumpyElmo(options, weights_path)


def _stateful_batch_matches(model, replay, sentences, state, what):
    """Run one batch through the model from ``state`` and through the replay; returns the layers and the new state."""
    ids = ref.batch_to_char_ids(sentences)
    reference, _ = ref.strip_boundaries(replay(ids), ids)
    got, _, output = _run_model(model, ElmoTokenizer(), sentences, lstm_state=state, return_lstm_state=True)
    _assert_matches(got, [reference[:, b][:, : len(s)] for b, s in enumerate(sentences)], sentences, what)
    return got, output.lstm_state


def test_carried_lstm_state_matches_the_reference_replaying_the_batch_sequence(model, replay, expected):
    state = None
    for step, rows in enumerate(STATEFUL_BATCHES):
        sentences = [SENTENCES[i] for i in rows]
        got, state = _stateful_batch_matches(model, replay, sentences, state, f"stateful batch {step}")
        stateless = _layer_diffs(got, [expected[i] for i in rows], sentences)
        if step == 0:
            assert stateless.max() <= ATOL, f"first stateful batch should equal stateless: {stateless.tolist()}"
        else:
            assert stateless[1:].min() > 1e-3, f"batch {step}: carried state changed nothing {stateless.tolist()}"
    got, _, _ = _run_model(model, ElmoTokenizer(), [SENTENCES[i] for i in STATEFUL_BATCHES[1]])  # no state passed
    _assert_matches(
        got, [expected[i] for i in STATEFUL_BATCHES[1]], [SENTENCES[i] for i in STATEFUL_BATCHES[1]], "without a state"
    )


def test_carried_lstm_state_keeps_unused_rows_and_grows_like_allennlp(model, replay):
    state = None
    for step, rows in enumerate([[0, 1, 2], [4], [5, 3, 1, 0], [2, 4]]):  # shrink, grow, shrink
        _, state = _stateful_batch_matches(
            model, replay, [SENTENCES[i] for i in rows], state, f"batch {step} rows {rows}"
        )


VARIANTS = {
    "no_skip_connections": dict(use_skip_connections=False),
    "zero_highway_layers": dict(n_highway=0),
    "no_clip_tanh_three_layers": dict(clip=None, activation="tanh", n_layers=3),
    "one_layer_one_filter": dict(n_layers=1, filters=[[2, 6]], n_highway=1),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_release_converts_and_matches_reference(variant, tmp_path):
    from modeling_elmo.modeling_elmo import ElmoModel

    options = ref.tiny_options(**VARIANTS[variant])
    options_path, weights_path = ref.write_original_files(tmp_path / "release", options, seed=3)
    out = convert(options_path, weights_path, tmp_path / "out")
    model = ElmoModel.from_pretrained(out).eval()
    sentences = SENTENCES[:4]
    got, _, _ = _run_model(model, ElmoTokenizer(), sentences)
    assert got.shape[0] == options["lstm"]["n_layers"] + 1
    _assert_matches(got, _expected(options, weights_path, sentences), sentences, variant)


def test_release_without_projection_group_uses_the_identity_when_cnn_width_equals_p(tmp_path):
    from modeling_elmo.modeling_elmo import ElmoModel

    options = ref.tiny_options(projection_dim=12, filters=[[1, 4], [3, 8]])  # F = 12 = P
    options_path, weights_path = ref.write_original_files(tmp_path / "release", options, seed=4)
    with h5py.File(weights_path, "a") as h5:
        del h5["CNN_proj"]
    out = convert(options_path, weights_path, tmp_path / "out")
    model = ElmoModel.from_pretrained(out).eval()
    got, _, _ = _run_model(model, ElmoTokenizer(), SENTENCES[:3])
    _assert_matches(got, _expected(options, weights_path, SENTENCES[:3]), SENTENCES[:3], "no CNN_proj")


# ------------------------------------------------------------------------------------------ output folder
def test_output_folder_is_complete_and_names_the_sources(converted, release):
    names = {p.name for p in converted.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "README.md",
        "configuration_elmo.py",
        "modeling_elmo.py",
        "tokenization_elmo.py",
    } <= names, names
    config = json.loads((converted / "config.json").read_text())
    assert {"AutoConfig", "AutoModel", "AutoModelForSequenceClassification", "AutoModelForTokenClassification"} <= set(
        config["auto_map"]
    )
    readme = (converted / "README.md").read_text()
    assert "options.json" in readme and "weights.hdf5" in readme
    assert not [p for p in converted.parent.iterdir() if p.name.startswith(".")], "staging folder left behind"
    metadata = json.loads((converted / "conversion_metadata.json").read_text())
    assert metadata["options_file"] == Path(release[1]).name and metadata["weights_file"] == Path(release[2]).name
    assert metadata["validation_max_abs_difference"] < 1e-4
    weights_path = Path(release[2])
    assert metadata["sha256"][weights_path.name] == hashlib.sha256(weights_path.read_bytes()).hexdigest()


def _section(card: str, heading: str) -> str:
    """The text of ``card`` from ``heading`` to the next heading of the same level."""
    start = card.index(heading + "\n")
    end = card.find("\n## ", start + len(heading))
    return card[start : end if end >= 0 else len(card)]


def test_push_renders_the_card_the_converter_wrote_from_the_same_template_and_metadata(converted, release, tmp_path):
    from modeling_elmo.hub import main as push

    written = (converted / "README.md").read_text(encoding="utf-8")
    assert push([str(converted), "--repo-id", "me/elmo-tiny", "--dry-run", "--output-dir", str(tmp_path / "hub")]) == 0
    pushed = (tmp_path / "hub" / "README.md").read_text(encoding="utf-8")
    for heading in ("## Training data and procedure", "## Evaluation", "## Limitations"):
        assert _section(written, heading) == _section(pushed, heading), heading
    # the source files table: name, where it came from, size and sha256 of each file the conversion read
    for path in (Path(release[1]), Path(release[2])):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        row = f"| {path.name} | local file | {path.stat().st_size:,} | {digest} |"
        assert row in written and row in pushed, row
    # the folder's card names the folder and how to publish it; the Hub card names the repository instead
    assert written.startswith("---\n") and "\n# elmo-tiny\n" in written and "\n# elmo-tiny\n" in pushed
    assert 'from_pretrained("elmo-tiny"' in written and 'from_pretrained("me/elmo-tiny"' in pushed
    assert "elmo push FOLDER --repo-id NAME" in written and "elmo push FOLDER" not in pushed


def test_existing_output_folder_is_refused_without_overwrite(release, tmp_path):
    _, options_path, weights_path = release
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    args = ["--options", options_path, "--weights", weights_path, "--output", str(out)]
    with pytest.raises(SystemExit, match="not empty.*--overwrite"):
        main(args)
    assert (out / "keep.txt").read_text() == "user data"
    with pytest.raises(SystemExit, match="elmo convert did not write 'keep.txt'"):
        main(args + ["--overwrite"])
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    (out / "keep.txt").unlink()
    assert main(args) == 0
    assert main(args + ["--overwrite"]) == 0  # an earlier conversion's files (its manifest) may be replaced
    assert (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_file_the_user_puts_into_the_new_output_while_it_converts_is_kept_and_the_run_refused(
    release, tmp_path, monkeypatch
):
    import modeling_elmo.conversion.convert as convert_module

    _, options_path, weights_path = release
    out = tmp_path / "out" / "new"

    def the_user_writes_meanwhile(*args, **kwargs):
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        return validate_converted_model(*args, **kwargs)

    monkeypatch.setattr(convert_module, "validate_converted_model", the_user_writes_meanwhile)
    with pytest.raises(SystemExit) as exit_:
        main(["--options", options_path, "--weights", weights_path, "--output", str(out)])
    assert str(exit_.value.code) == (
        f"elmo convert: error: output folder '{out}' appeared while elmo convert worked "
        "and is not empty (it holds 'notes.txt'); nothing was replaced. Move those files "
        "away, or choose another folder."
    )
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.parent.iterdir()) == ["new"], "no temporary folder or lock left"


def test_overwrite_refuses_a_card_the_user_edited_and_a_file_listed_in_the_manifest_that_is_not_its(release, tmp_path):
    _, options_path, weights_path = release
    out = tmp_path / "out"
    args = ["--options", options_path, "--weights", weights_path, "--output", str(out), "--overwrite"]
    assert main(args) == 0
    written = (out / "README.md").read_text()
    (out / "README.md").write_text(written + "\nMy notes on this model.\n")
    with pytest.raises(SystemExit, match="'README.md' differs from what elmo convert wrote: changed since"):
        main(args)
    assert (out / "README.md").read_text() == written + "\nMy notes on this model.\n"
    (out / "README.md").write_text(written)  # the card as the command wrote it, again
    (out / "notes.txt").write_text("mine")
    manifest = json.loads((out / ".elmo-manifest.json").read_text())
    manifest["files"]["notes.txt"] = manifest["files"]["README.md"]  # listed, but not what the command wrote
    (out / ".elmo-manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SystemExit, match="'notes.txt' differs from what elmo convert wrote"):
        main(args)
    assert (out / "notes.txt").read_text() == "mine"


def test_a_second_conversion_into_a_folder_being_converted_is_refused_in_one_line(release, tmp_path):
    _, options_path, weights_path = release
    out = tmp_path / "out"
    with lock_held_elsewhere(out, "elmo convert"), pytest.raises(SystemExit) as exit_:
        main(["--options", options_path, "--weights", weights_path, "--output", str(out)])
    assert str(exit_.value.code) == (
        f"elmo convert: error: another elmo convert run is writing '{out}' (it holds "
        f"'{out}.lock'); wait for it to end, or choose another output folder."
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_overwrite_never_deletes_the_inputs_nor_the_users_files(release, tmp_path):
    _, options_path, weights_path = release
    folder = tmp_path / "d"
    folder.mkdir()
    shutil.copyfile(options_path, folder / "options.json")
    shutil.copyfile(weights_path, folder / "weights.hdf5")
    (folder / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(SystemExit, match=f"output folder '{folder}' holds the input file '{folder}/options.json'"):
        main(
            [
                "--options",
                str(folder / "options.json"),
                "--weights",
                str(folder / "weights.hdf5"),
                "--output",
                str(folder),
                "--overwrite",
            ]
        )
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    out = tmp_path / "out"
    args = ["--options", options_path, "--weights", weights_path, "--output", str(out)]
    assert main(args) == 0
    (out / "evaluation").mkdir()
    (out / "evaluation" / "my_analysis.md").write_text("mine")
    with pytest.raises(SystemExit, match="elmo convert did not write 'evaluation/my_analysis.md'"):
        main(args + ["--overwrite"])
    assert (out / "evaluation" / "my_analysis.md").read_text() == "mine"


@pytest.mark.slow
def test_kill_9_during_a_conversion_leaves_a_temporary_folder_that_the_next_run_names(release, tmp_path, caplog):
    """The report: `kill -9` during `elmo convert` left a hidden `.OUT.converting-XXXX/` without a word. Killed
    before its files were recorded, nothing proves that all in it is the run's: the next run names it in one line
    (and leaves it); one killed once they were recorded is removed
    (`test_a_killed_conversions_temporary_folder_is_removed_by_the_next_run`)."""
    import logging
    import signal
    import subprocess

    _, options_path, weights_path = release
    out = tmp_path / "out"
    stalls_after_saving = (  # the real command, held still once the model is in its temporary folder
        "import sys, time, modeling_elmo\n"
        "real = modeling_elmo.save_model_folder\n"
        "def save_then_stall(*args, **kwargs):\n"
        "    real(*args, **kwargs)\n"
        "    print('saved', flush=True)\n"
        "    time.sleep(600)\n"
        "modeling_elmo.save_model_folder = save_then_stall\n"
        "from modeling_elmo.conversion.convert import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            stalls_after_saving,
            "--options",
            options_path,
            "--weights",
            weights_path,
            "--output",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "saved"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith(".out.converting-")]
    assert (left / "content" / "model.safetensors").is_file() and not out.exists()
    with caplog.at_level(logging.WARNING):
        assert main(["--options", options_path, "--weights", weights_path, "--output", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([left.name, "out"])
    (said,) = [r.getMessage() for r in caplog.records if str(left) in r.getMessage()]
    assert said.startswith(f"{str(left)!r}, the unfinished output of an interrupted elmo convert run, holds 'config")
    assert said.endswith(
        "more), which no record of it lists; it was left alone: remove it yourself if it is not yours."
    )
    assert (left / "content" / "model.safetensors").is_file()


def test_a_killed_conversions_temporary_folder_is_removed_by_the_next_run(release, tmp_path, monkeypatch):
    from support import left_by_a_killed_run

    from modeling_elmo.folders.manifest import write_manifest

    _, options_path, weights_path = release
    killed = left_by_a_killed_run(tmp_path / "out", "converting", "elmo convert")
    (killed / "model.safetensors").write_bytes(b"\0" * 1000)
    write_manifest(killed, "elmo convert", ["model.safetensors"])  # killed once its files were recorded
    users = tmp_path / ".out.converting-999999999-x1y2"  # named like one, without our marker: the user's (L7, L8)
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    assert main(["--options", options_path, "--weights", weights_path, "--output", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [users.name, "out"]
    assert (users / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_a_conversion_killed_after_moving_the_earlier_output_aside_is_undone_by_the_next_run(release, tmp_path, caplog):
    """L4, L5: `kill -9` right after the earlier output was moved aside; the next run (one that fails, then one
    without --overwrite) puts it back with a line and never deletes it; the user's look-alike folders survive."""
    import logging
    import subprocess

    from support import KILLED_AFTER_MOVING_ASIDE

    _, options_path, weights_path = release
    out = tmp_path / "out" / "kc"
    args = ["--options", options_path, "--weights", weights_path, "--output", str(out)]
    assert main(args) == 0
    earlier = {p.name: p.read_bytes() for p in out.iterdir()}
    users = tmp_path / "out" / ".kc.old-2023-12-31"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_MOVING_ASIDE, "modeling_elmo.conversion.convert", *args, "--overwrite"],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stderr
    assert not out.exists()  # the earlier output is in a temporary folder now
    broken = tmp_path / "broken_options.json"
    broken.write_text("{")
    with caplog.at_level(logging.WARNING), pytest.raises(SystemExit, match="elmo convert: error: "):
        main(["--options", str(broken), "--weights", weights_path, "--output", str(out), "--overwrite"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == earlier
    assert f"elmo convert was interrupted while replacing '{out}'" in caplog.text and "back in place" in caplog.text
    with pytest.raises(SystemExit, match="exists and is not empty"):
        main(args)  # without --overwrite: the earlier conversion is there, and stays
    assert {p.name: p.read_bytes() for p in out.iterdir()} == earlier
    assert sorted(p.name for p in out.parent.iterdir()) == [".kc.old-2023-12-31", "kc"]
    assert (users / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("output", [".", "/"])
def test_an_output_of_the_current_folder_or_the_root_is_refused_in_words(release, tmp_path, monkeypatch, output):
    _, options_path, weights_path = release
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["--options", options_path, "--weights", weights_path, "--output", output])
    message = str(exit_.value.code)
    assert message.startswith(f"elmo convert: error: output folder {output!r} names the current folder"), message
    assert "empty name" not in message


def test_script_converts_from_the_command_line(release, tmp_path, monkeypatch):
    import runpy

    _, options_path, weights_path = release
    script = Path(__file__).resolve().parents[2] / "scripts" / "convert_elmo_original_to_hf.py"
    out = tmp_path / "cli-out"
    monkeypatch.setattr(
        sys, "argv", [str(script), "--options", options_path, "--weights", weights_path, "--output", str(out)]
    )
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_info.value.code == 0
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()


# ------------------------------------------------------------------------------------------ bad input
def _copy_release(release, tmp_path):
    options, options_path, weights_path = release
    target = tmp_path / "weights.hdf5"
    target.write_bytes(Path(weights_path).read_bytes())
    return options, target


def test_missing_dataset_is_named(release, tmp_path):
    options, weights = _copy_release(release, tmp_path)
    with h5py.File(weights, "a") as h5:
        del h5["CNN_high_1/b_carry"]
        del h5["RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/B"]
    with pytest.raises(
        ValueError, match=r"missing datasets: \['CNN_high_1/b_carry', 'RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/B'\]"
    ):
        convert_state_dict(weights, convert_config(options))


def test_unexpected_dataset_is_named(release, tmp_path):
    options, weights = _copy_release(release, tmp_path)
    with h5py.File(weights, "a") as h5:
        h5.create_dataset("softmax/W", data=np.zeros((5, 8), np.float32))
    with pytest.raises(ValueError, match=r"unexpected datasets: \['softmax/W'\]"):
        convert_state_dict(weights, convert_config(options))


def test_misshaped_dataset_is_named_with_both_shapes(release, tmp_path):
    options, weights = _copy_release(release, tmp_path)
    name = "RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"
    with h5py.File(weights, "a") as h5:
        del h5[name]
        h5.create_dataset(name, data=np.zeros((24, 9), np.float32))
    with pytest.raises(ValueError, match=rf"'{name}' has shape \(24, 9\), the options imply \(24, 8\)"):
        convert_state_dict(weights, convert_config(options))


def test_weights_of_another_size_than_the_options_are_rejected(release, tmp_path):
    options, _, weights_path = release
    bigger = json.loads(json.dumps(options))
    bigger["lstm"]["dim"] = 32
    with pytest.raises(ValueError, match=r"W_0' has shape \(16, 96\), the options imply \(16, 128\)"):
        convert_state_dict(weights_path, convert_config(bigger))


@pytest.mark.parametrize("damage", ["truncated", "not_hdf5"])
def test_unreadable_weights_file_gives_a_clear_error(release, tmp_path, damage):
    _, options_path, weights_path = release
    data = Path(weights_path).read_bytes()
    broken = tmp_path / "weights.hdf5"
    broken.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not an hdf5 file at all" * 100)
    with pytest.raises(ValueError, match="cannot be read as HDF5"):
        convert(options_path, broken, tmp_path / "out")
    with pytest.raises(SystemExit, match="weights.hdf5"):
        main(["--options", options_path, "--weights", str(broken), "--output", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda o: o["lstm"].__setitem__("dimm", 3), r"unknown keys in lstm: \['dimm'\]"),
        (lambda o: o.__setitem__("extra_block", {}), r"unknown keys in top level: \['extra_block'\]"),
        (lambda o: o["lstm"].pop("projection_dim"), "lstm.projection_dim"),
        (lambda o: o["char_cnn"].pop("filters"), "char_cnn.filters"),
    ],
    ids=["unknown_lstm_key", "unknown_top_key", "missing_projection_dim", "missing_filters"],
)
def test_bad_options_are_rejected_naming_the_key(release, tmp_path, edit, message):
    options = json.loads(json.dumps(release[0]))
    edit(options)
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))
    with pytest.raises(ValueError, match=message):
        convert_config(read_options(path))


def test_options_file_that_is_not_json_is_rejected(tmp_path):
    path = tmp_path / "options.json"
    path.write_text("{'lstm': ")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_options(path)


def test_validation_catches_a_model_without_the_forget_bias(model, release):
    import copy

    options, _, weights_path = release
    broken = copy.deepcopy(model)
    H = broken.config.cell_size
    with torch.no_grad():
        broken.encoder.forward_layers[0].input_transform.bias[H : 2 * H] -= 1.0  # PyTorch order: f is block 1
    assert validate_converted_model(model, options, weights_path) <= ATOL
    with pytest.raises(ValueError, match=r"max abs difference .* \(layer [12]\) exceeds"):
        validate_converted_model(broken, options, weights_path)


def test_weights_file_with_an_overwritten_tail_is_a_value_error_naming_the_file(release, tmp_path):
    """Issue 12 (6): overwriting the file's last 8 KiB (its object index, with h5py's layout) used to surface as
    ``RuntimeError: Object visitation failed (bad symbol table node signature)``."""
    options, options_path, weights_path = release
    data = bytearray(Path(weights_path).read_bytes())
    data[-8192:] = b"\xff" * 8192
    damaged = tmp_path / "damaged_weights.hdf5"
    damaged.write_bytes(bytes(data))
    with pytest.raises(
        ValueError,
        match=rf"weights file '{re.escape(str(damaged))}' is damaged or truncated \(its "
        r"table of datasets cannot be read: .*\); download it again",
    ):
        convert_state_dict(damaged, convert_config(options))
    with pytest.raises(SystemExit) as excinfo:
        main(["--options", options_path, "--weights", str(damaged), "--output", str(tmp_path / "out")])
    message = str(excinfo.value.code)
    assert message.startswith("elmo convert: error: weights file") and "\n" not in message
    assert "damaged_weights.hdf5" in message and "--force-download" in message
    assert not (tmp_path / "out").exists()


def _cannot_create_in(folder: Path) -> bool:
    try:
        os.rmdir(tempfile.mkdtemp(dir=folder))
    except OSError:
        return True
    return False


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder nothing can be created in: permission bits 555, or (for root, who ignores them) sysfs."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if _cannot_create_in(folder):
            yield folder
        elif Path("/sys").is_dir() and _cannot_create_in(Path("/sys")):
            yield Path("/sys")  # sysfs refuses new entries even to root
        else:
            pytest.skip("running as a user who can write into a read-only folder, and no read-only file system")
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("where", ["under_a_file", "in_a_read_only_folder"])
def test_unwritable_output_is_one_error_line_and_nothing_is_written(release, tmp_path, where, request):
    """Issue 12 (8): an output path under a file, or in a folder nothing can be created in, is refused before any
    work, with one line naming it."""
    _, options_path, weights_path = release
    if where == "under_a_file":
        (tmp_path / "a-file").write_text("data")
        output, expected = tmp_path / "a-file" / "sub" / "out", "is a file, not a folder"
    else:
        output, expected = request.getfixturevalue("read_only_folder") / "new" / "out", "cannot be written"
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SystemExit) as excinfo:
        main(["--options", options_path, "--weights", weights_path, "--output", str(output)])
    message = str(excinfo.value.code)
    assert message.startswith(f"elmo convert: error: output folder '{output}'") and expected in message, message
    assert "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not output.parent.exists()


# ------------------------------------------------------------------------------------------ non-finite values
def test_a_non_finite_dataset_is_refused_naming_the_file_and_the_dataset(release, tmp_path):
    _, options_path, weights_path = release
    weights = tmp_path / "nan_weights.hdf5"
    shutil.copyfile(weights_path, weights)
    with h5py.File(weights, "r+") as h5:
        h5["CNN_proj/W_proj"][0, 1] = np.nan
    with pytest.raises(SystemExit) as excinfo:
        main(["--options", options_path, "--weights", str(weights), "--output", str(tmp_path / "out")])
    message = str(excinfo.value.code)
    assert (
        message.startswith(
            f"elmo convert: error: weights file {str(weights)!r} is damaged or truncated (dataset "
            "'CNN_proj/W_proj' contains NaN or infinite values)"
        )
        and "\n" not in message
    ), message
    assert not (tmp_path / "out").exists()


def test_parity_check_fails_on_nan_instead_of_reporting_no_difference(model, release):
    import copy

    options, _, weights_path = release
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.encoder.backward_layers[1].projection.weight[0, 0] = float("nan")  # only the last layer computes NaN
    with pytest.raises(ValueError, match=r"max abs difference nan \(layer 2\) exceeds"):
        validate_converted_model(broken, options, weights_path)


# ------------------------------------------------------------------------------------------ a full disk
def _full_disk_line(release, output: Path) -> str:
    _, options_path, weights_path = release
    with pytest.raises(SystemExit) as excinfo:
        main(["--options", options_path, "--weights", weights_path, "--output", str(output)])
    message = str(excinfo.value.code)
    assert "\n" not in message and len(message) < 500, message
    return message


def test_a_full_disk_while_writing_the_weights_is_one_line_and_leaves_nothing(release, tmp_path, monkeypatch):
    from safetensors import SafetensorError
    from transformers import modeling_utils

    def full_disk(*args, **kwargs):
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )

    _, options_path, weights_path = release
    earlier = tmp_path / "earlier"
    assert main(["--options", options_path, "--weights", weights_path, "--output", str(earlier)]) == 0
    before = {p.name: p.read_bytes() for p in earlier.iterdir()}
    monkeypatch.setattr(modeling_utils, "safe_save_file", full_disk)
    output = tmp_path / "out"
    message = _full_disk_line(release, output)
    assert (
        message.startswith(
            f"elmo convert: error: cannot write the model into {str(output)!r}: Error while serializing: IoError("
        )
        and "No space left on device" in message
    ), message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier"]
    with pytest.raises(SystemExit):
        main(["--options", options_path, "--weights", weights_path, "--output", str(earlier), "--overwrite"])
    assert {p.name: p.read_bytes() for p in earlier.iterdir()} == before  # the earlier conversion is kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier"]


@pytest.mark.slow
def test_a_tmpfs_that_fills_up_as_the_weights_are_written_is_one_line_and_leaves_nothing(
    release, tmp_path, monkeypatch
):
    """A real full disk: a small tmpfs, filled by another file just before safetensors writes the weights."""
    import subprocess

    from transformers import modeling_utils

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs is not permitted here (the monkeypatched test covers the error line)")
    real_save = modeling_utils.safe_save_file

    def fill_then_save(*args, **kwargs):
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, bytes(1 << 14)):
                pass
        except OSError:
            pass  # the disk is full
        finally:
            os.close(fd)
        return real_save(*args, **kwargs)

    monkeypatch.setattr(modeling_utils, "safe_save_file", fill_then_save)
    try:
        message = _full_disk_line(release, disk / "out")
        assert (
            message.startswith(f"elmo convert: error: cannot write the model into {str(disk / 'out')!r}: ")
            and "No space left on device" in message
        ), message
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_an_error_quoting_a_huge_value_is_cut_to_one_short_line(release, tmp_path, monkeypatch):
    import modeling_elmo.conversion.convert as convert_module

    def quoting(*args, **kwargs):
        raise ValueError("a token " + "y" * 5_000_000 + " is bad")

    monkeypatch.setattr(convert_module, "convert", quoting)
    _, options_path, weights_path = release
    with pytest.raises(SystemExit) as excinfo:
        main(["--options", options_path, "--weights", weights_path, "--output", str(tmp_path / "out")])
    message = str(excinfo.value.code)
    assert message.startswith("elmo convert: error: a token yyy") and len(message) < 1100, len(message)
    assert message.endswith("... (5,000,015 characters in all)"), message[-60:]
