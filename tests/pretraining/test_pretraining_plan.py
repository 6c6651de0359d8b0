"""The run's plan: the data files, vocabulary and starting configuration are resolved once, and the data loading, the
run's fingerprint and the model use what was planned."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import reset_accelerate_state

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM
from modeling_elmo.pretraining import arguments, parse_args, plan_run
from modeling_elmo.pretraining import plan as plan_module
from modeling_elmo.pretraining.data import Vocabulary
from modeling_elmo.pretraining.state import data_fingerprint
from modeling_elmo.pretraining.trainer import prepare_data

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog"]


def _write_lines(path: Path, count: int, start: int = 0) -> Path:
    path.write_text(
        "".join(f"{WORDS[i % 7]} {WORDS[(i + 2) % 7]} {WORDS[(i + 4) % 7]}\n" for i in range(start, start + count)),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def accelerator():
    from accelerate import Accelerator

    yield Accelerator(cpu=True)
    reset_accelerate_state()


def _args(tmp_path: Path, *extra: str):
    return parse_args(
        [
            *("--output-dir", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache")),
            *("--validation-split-percentage", "0", "--max-steps", "1"),
            *extra,
        ]
    )


@pytest.mark.parametrize("given", ["folder", "glob"])
def test_a_file_added_to_the_folder_after_planning_is_not_read(tmp_path, accelerator, given):
    folder = tmp_path / "corpus"
    folder.mkdir()
    planned = _write_lines(folder / "a.txt", 12)
    args = _args(tmp_path, "--train-file", str(folder if given == "folder" else folder / "*.txt"))
    plan = plan_run(args)
    assert plan.files == {"train": (str(planned),)}
    assert plan.data_fingerprint == data_fingerprint({"train": [str(planned)]}, None)

    added = _write_lines(folder / "b.txt", 30, start=3)  # the folder changes between planning and loading
    data = prepare_data(plan.data, accelerator, plan)
    assert len(data.splits["train"]) == 12, "only the planned file's lines are read"
    assert plan_run(args).data_fingerprint != plan.data_fingerprint, "a new plan would see the added file"
    assert plan_run(args).files == {"train": (str(planned), str(added))}


@pytest.mark.parametrize("change", ["appended", "removed"])
def test_a_planned_file_changed_before_loading_is_refused_naming_it(tmp_path, accelerator, change):
    planned = _write_lines(tmp_path / "train.txt", 12)
    args = _args(tmp_path, "--train-file", str(planned))
    plan = plan_run(args)
    if change == "appended":
        with open(planned, "a", encoding="utf-8") as handle:
            handle.write("the dog sat\n")
    else:
        planned.unlink()
    message = "changed after the run started" if change == "appended" else "was removed after the run started"
    with pytest.raises(ValueError, match=f"--train-file: {str(planned)!r} {message}"):
        prepare_data(plan.data, accelerator, plan)


@pytest.mark.parametrize("how", ["in place", "replaced"])
def test_a_planned_file_rewritten_with_its_size_and_mtime_kept_is_refused_naming_it(tmp_path, accelerator, how):
    """Issue 35: a copy over the file that keeps its size and mtime (``cp -p`` writes in place, ``rsync -t`` renames
    a new file over it) is noticed mid-run: a new ctime, or a new inode."""
    import os
    import time

    planned = _write_lines(tmp_path / "train.txt", 12)
    args = _args(tmp_path, "--train-file", str(planned))
    plan = plan_run(args)
    before = os.stat(planned)
    time.sleep(0.02)  # a later ctime, on file systems of coarse time stamps too
    swapped = planned.read_bytes().replace(b"the", b"dog")
    if how == "in place":
        planned.write_bytes(swapped)
    else:
        staged = tmp_path / ".train.txt.rsync"
        staged.write_bytes(swapped)
        os.utime(staged, ns=(before.st_atime_ns, before.st_mtime_ns))
        os.replace(staged, planned)
    os.utime(planned, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(planned)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with pytest.raises(ValueError) as raised:
        prepare_data(plan.data, accelerator, plan)
    assert str(raised.value) == (
        f"--train-file: {str(planned)!r} changed after the run started (rewritten or replaced, with the same size); "
        "run the command again once the data are complete."
    )


def test_an_unchanged_planned_file_passes_the_mid_run_check(tmp_path):
    planned = _write_lines(tmp_path / "train.txt", 12)
    plan = plan_run(_args(tmp_path, "--train-file", str(planned)))
    planned.read_bytes()  # reading changes neither its ctime nor its inode
    plan.check_files_unchanged()


def test_the_starting_model_and_the_vocabulary_are_read_once(tmp_path, accelerator, monkeypatch):
    vocab = Vocabulary(WORDS)
    model = tmp_path / "start"
    ElmoForBidirectionalLM(
        ElmoConfig(
            vocab_size=len(vocab),
            projection_dim=8,
            cell_size=16,
            char_embedding_dim=4,
            char_cnn_filters=[[1, 4], [2, 8]],
            num_highway_layers=1,
        )
    ).save_pretrained(model)
    vocab.save(model / "vocab.txt")
    vocab.save(tmp_path / "vocab.txt")
    train = _write_lines(tmp_path / "train.txt", 12)

    from modeling_elmo.pretraining import data as data_module

    vocab_reads, config_reads = [], []
    read_vocabulary, read_preset = data_module.read_vocabulary_file, arguments.read_model_preset
    monkeypatch.setattr(
        data_module, "read_vocabulary_file", lambda path: vocab_reads.append(Path(path)) or read_vocabulary(path)
    )
    monkeypatch.setattr(plan_module, "read_model_preset", lambda name: config_reads.append(name) or read_preset(name))

    args = _args(
        tmp_path,
        "--train-file",
        str(train),
        "--init-from-model",
        str(model),
        "--vocab-file",
        str(tmp_path / "vocab.txt"),
    )
    plan = plan_run(args)
    data = prepare_data(plan.data, accelerator, plan)
    assert sorted(vocab_reads) == sorted([model / "vocab.txt", tmp_path / "vocab.txt"]), "each vocabulary read once"
    assert config_reads == [str(model / "config.json")], "the starting model's config read once"
    assert data.vocab == vocab and plan.init_from == model
    assert plan.model_config["projection_dim"] == 8, "the starting model's architecture is the run's"


def test_a_plan_without_a_starting_model_fixes_no_vocabulary_and_cannot_be_changed(tmp_path):
    train = _write_lines(tmp_path / "train.txt", 12)
    plan = plan_run(_args(tmp_path, "--train-file", str(train)))
    assert plan.init_from is None and plan.resume_path is None and plan.vocab is None
    assert plan.folder_mode == "new" and plan.run.root == tmp_path / "run"
    with pytest.raises(AttributeError):  # frozen: nothing later changes what was planned
        plan.files = {}


def _starting_model_with(tmp_path, **config_changes) -> Path:
    import json

    vocab = Vocabulary(WORDS)
    model = tmp_path / "start"
    config = ElmoConfig(
        vocab_size=len(vocab),
        projection_dim=8,
        cell_size=16,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        num_highway_layers=1,
    )
    ElmoForBidirectionalLM(config).save_pretrained(model)
    vocab.save(model / "vocab.txt")
    saved = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**saved, **config_changes}))
    return model


@pytest.mark.parametrize(
    "impl", ["attacker/helpers--evil_mod.EvilPipe", "../../evil_mod.X", "evil_mod.Y", "modeling_elmo.NoSuchPipeline"]
)
def test_a_starting_model_whose_custom_pipeline_names_foreign_code_is_refused_in_one_line(tmp_path, impl):
    """X5: `--init-from-model` never carries another folder's code references into the user's new model."""
    pipelines = {"text-classification": {"impl": impl, "pt": ["AutoModel"], "type": "text"}}
    model = _starting_model_with(tmp_path, custom_pipelines=pipelines)
    train = _write_lines(tmp_path / "train.txt", 12)
    with pytest.raises(ValueError) as raised:
        plan_run(_args(tmp_path, "--train-file", str(train), "--init-from-model", str(model)))
    message = str(raised.value)
    assert message.startswith(f"--init-from-model {str(model)!r}: its config.json custom_pipelines entry")
    assert repr(impl) in message and "refusing to start a model from it" in message
    assert not (tmp_path / "run").exists()


def test_a_starting_models_own_pipeline_and_auto_map_are_not_carried_into_the_new_model(tmp_path):
    from modeling_elmo.pipeline_elmo import CUSTOM_PIPELINES

    foreign_auto_map = {"AutoModel": "attacker/repo--evil.Model"}
    model = _starting_model_with(tmp_path, custom_pipelines=CUSTOM_PIPELINES, auto_map=foreign_auto_map)
    train = _write_lines(tmp_path / "train.txt", 12)
    plan = plan_run(_args(tmp_path, "--train-file", str(train), "--init-from-model", str(model)))
    assert "custom_pipelines" not in plan.model_config and "auto_map" not in plan.model_config
    from modeling_elmo import AUTO_MAP

    assert ElmoConfig(**plan.model_config).auto_map == AUTO_MAP
