"""The README's examples run as written: each Python block on its own (a fresh namespace: a reader may paste any one
of them alone) and each ``elmo ...`` line of its shell blocks through the ``elmo`` entry point, offline, in a folder
that holds what the README assumes exists (a small pretrained model in ``outputs/elmo-quickstart``,
``my_corpus.txt``, ``heldout.txt``). The README's ``elmo pretrain`` line, run on a small corpus of real text, ends
below the unigram baseline's perplexity.

The two quick-start commands are not run here: ``scripts/quickstart.sh`` has its own test, and ``.ci/run`` runs this
suite. What a fresh clone with no ``../shared`` beside it does is: the README's test command passes on the
data-dependent test files, each of their data tests skipping with its reason, and ``.ci/run`` insists on the data in
CI only. ``elmo convert --release`` downloads from a local server that serves a synthetic release (``release_server``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM, ElmoTokenizer, cli, save_model_folder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from efml_fixtures import write_efml_model, zip_folder  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: Shell lines of the README that this test does not run, and why.
NOT_RUN = {
    "bash scripts/quickstart.sh": "tested by its own test (it installs a virtual environment)",
    "bash .ci/run": "CI runs this suite",
    "pip install .": "the package is installed in the environment that runs the tests",
    'pip install ".[dev]"': "the package is installed in the environment that runs the tests",
    "pip install torch --index-url https://download.pytorch.org/whl/cpu": "the environment has its torch",
    "OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python -m pytest tests -q": "this is the test suite itself",
}


def _blocks() -> list[tuple[str, str]]:
    """The fenced ``python`` and ``bash`` blocks, in the order of the README."""
    return re.findall(r"```(python|bash)\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def _commands(block: str) -> list[str]:
    """The command lines of a shell block (continuations joined, comments dropped)."""
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            commands.append(line)
    return commands


def _shell_commands() -> list[str]:
    return [command for language, block in _blocks() if language == "bash" for command in _commands(block)]


def test_every_shell_line_of_the_readme_is_an_elmo_command_or_explained():
    for command in _shell_commands():
        assert command.startswith("elmo ") or command in NOT_RUN, f"the README test cannot run {command!r}"


@pytest.fixture
def reader_folder(tmp_path, monkeypatch, server, served):
    """A working folder with what the README's examples assume, and a local server for the release download."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("ELMO_RELEASES_BASE_URL", server.url)
    # the ELMoForManyLangs release: a synthetic model in the published layout, at the Chinese model's address
    monkeypatch.setenv("ELMO_EFML_BASE_URL", server.url.replace("/models/elmo", "/repository/11"))
    efml = write_efml_model(tmp_path / "efml-source" / "zh.model")
    server.files["/repository/11/179.zip"] = zip_folder(efml, tmp_path / "efml-source" / "179.zip").read_bytes()
    torch.manual_seed(0)
    words = "the bank closed early a river film great acting mess warm funny dull tired story".split()
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = ElmoTokenizer(vocab_file=str(tmp_path / "vocab.txt"))
    config = ElmoConfig(
        projection_dim=16,
        cell_size=32,
        char_embedding_dim=8,
        char_cnn_filters=[[1, 8], [2, 8], [3, 16]],
        num_highway_layers=1,
        vocab_size=tokenizer.vocab_size,
    )
    save_model_folder(ElmoForBidirectionalLM(config), tokenizer, tmp_path / "outputs" / "elmo-quickstart")
    text = "\n".join(" ".join(words[i:] + words[:i]) for i in range(len(words))) + "\n"
    (tmp_path / "my_corpus.txt").write_text(text * 150)  # 2,250 lines
    (tmp_path / "heldout.txt").write_text(text)
    return tmp_path


@pytest.mark.slow
def test_readme_examples_run_as_written(reader_folder):
    namespaces = []
    for language, block in _blocks():
        if language == "python":
            namespaces.append({"__name__": "__readme__"})
            exec(compile(block, str(README), "exec"), namespaces[-1])  # noqa: S102 (the README's own code)
            continue
        for command in _commands(block):
            if command not in NOT_RUN:
                status = cli.main(shlex.split(command)[1:])
                assert status in (0, None), f"{command!r} exited with {status}"
    assert (reader_folder / "outputs" / "my-elmo" / "model.safetensors").is_file()
    assert (reader_folder / "outputs" / "elmo-original" / "model.safetensors").is_file()
    assert (reader_folder / "outputs" / "elmo-efml-zh" / "char_vocab.json").is_file()
    assert (reader_folder / "outputs" / "features.h5").is_file()
    assert (reader_folder / "outputs" / "sentiment" / "config.json").is_file()
    # the classifier step trains real numbers: the new head starts from its initialisation, not from memory
    [namespace] = [n for n in namespaces if "classifier" in n and "trainer" in n]
    losses = [entry["train_loss"] for entry in namespace["trainer"].state.log_history if "train_loss" in entry]
    head = namespace["classifier"].classifier
    assert losses and all(0 < loss < 10 for loss in losses), losses
    assert torch.isfinite(head.weight).all() and head.weight.abs().max() < 1.0


def _readme_pretraining_perplexities(tmp_path, monkeypatch, lines: list[str]) -> dict:
    """The validation record of the README's ``elmo pretrain`` line, as written (default optimiser and learning rate),
    with ``lines`` as ``my_corpus.txt``."""
    import json

    from support import reset_accelerate_state

    [command] = [c for c in _shell_commands() if c.startswith("elmo pretrain ")]
    argv = shlex.split(command)
    assert "--optimizer" not in argv and "--learning-rate" not in argv  # the defaults are what is tested
    monkeypatch.chdir(tmp_path)
    (tmp_path / argv[argv.index("--train-file") + 1]).write_text("".join(lines), encoding="utf-8")
    status = cli.main([*argv[1:], "--no-plot", "--cache-dir", str(tmp_path / "datasets-cache")])
    reset_accelerate_state()
    assert status in (0, None)
    results = json.loads((tmp_path / argv[argv.index("--output-dir") + 1] / "eval_results.json").read_text())
    [validation] = [r for r in results["perplexity"] if r["split"] == "validation"]
    return validation


@pytest.mark.slow
def test_the_readme_pretraining_command_beats_the_unigram_baseline(tmp_path, monkeypatch):
    """On the first 2,500 lines of the packaged novel (66,600 words): the validation perplexity of the README's
    ``elmo pretrain`` line is below the unigram model's."""
    from modeling_elmo.pretraining.arguments import builtin_corpus_file

    lines = Path(builtin_corpus_file("builtin:austen-emma", "train")).read_text(encoding="utf-8").splitlines(True)
    validation = _readme_pretraining_perplexities(tmp_path, monkeypatch, lines[:2500])
    assert validation["average"] < validation["unigram"]["average"], validation


@pytest.mark.slow
def test_the_readme_pretraining_command_beats_the_unigram_baseline_on_brown(tmp_path, monkeypatch, shared_data):
    """The same on other common text, the first 3,000 lines of the Brown corpus."""
    with open(shared_data / "lm-corpus" / "brown.txt", encoding="utf-8") as handle:
        lines = [line for _, line in zip(range(3000), handle, strict=False)]
    validation = _readme_pretraining_perplexities(tmp_path, monkeypatch, lines)
    assert validation["average"] < validation["unigram"]["average"], validation


# ----------------------------------------------------------------------------------------------- a fresh clone
def _fresh_clone(destination: Path) -> Path:
    """The files a clone of this checkout holds (tracked and not ignored; without git: the folder less what
    .gitignore names), copied to ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO, capture_output=True
    )
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            if (REPO / name).is_file():
                (destination / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, destination / name)
    else:
        shutil.copytree(
            REPO,
            destination,
            ignore=shutil.ignore_patterns(
                ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "runs", "outputs", ".transformers-tests"
            ),
        )
    return destination


def _environment_without_shared_data() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("ELMO_SHARED_DATA", "PYTHONPATH", "CI")}


@pytest.mark.slow
def test_the_readme_test_command_passes_on_a_fresh_clone_without_shared_data(tmp_path):
    """The README's test command, in a clone with nothing beside it, on the test files that read the shared data
    (their data tests only, ``-m shared_data``: two cores): it passes, and every one of them skips saying which
    folder is absent."""
    clone = _fresh_clone(tmp_path.resolve() / "work" / "clone")
    [command] = [c for c in _shell_commands() if " -m pytest tests" in c]
    words = shlex.split(command)
    settings = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=\S*", w))
    argv = [w for w in words if w not in {f"{k}={v}" for k, v in settings.items()}]
    assert argv[:4] == ["python", "-m", "pytest", "tests"] and settings.get("HF_HUB_OFFLINE") == "1", command
    data_files = sorted(
        p.relative_to(clone).as_posix()
        for p in (clone / "tests").rglob("test_*.py")
        if re.search(r"def \w+\([^)]*\bshared_data\b", p.read_text(encoding="utf-8"))
    )
    assert len(data_files) >= 4, data_files  # the evaluation, pretraining, embedding and Trainer tests
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *data_files, *argv[4:], "-m", "shared_data", "-rs", "-p", "no:cacheprovider"],
        cwd=clone,
        env={**_environment_without_shared_data(), **settings},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"=* ?\d+ skipped, \d+ deselected.*", summary), summary  # nothing passed, failed or erred
    skips = re.findall(r"^SKIPPED \[(\d+)\] (tests/\S+?):\d+: (.*)$", done.stdout, flags=re.M)
    assert sum(int(count) for count, _, _ in skips) == int(summary.split(" skipped")[0].split()[-1])
    assert {file for _, file, _ in skips} == set(data_files)
    absent = clone.parent / "shared" / "data"
    assert all(reason.startswith(f"shared data folder {absent} is absent") for _, _, reason in skips), skips


@pytest.mark.slow
def test_ci_run_insists_on_the_shared_data_in_ci_only(tmp_path):
    """``.ci/run`` in a clone with no ``../shared``: in CI one line names the missing folder and nothing is installed;
    anywhere else it says the data tests will skip and goes on (to ``scripts/install.sh``, here a stand-in that
    stops the run)."""
    clone = _fresh_clone(tmp_path.resolve() / "work" / "clone")
    (clone / "scripts" / "install.sh").write_text("echo install reached\nexit 7\n")
    env = _environment_without_shared_data()
    in_ci = subprocess.run(
        ["bash", ".ci/run"], cwd=clone, env={**env, "CI": "true"}, capture_output=True, text=True, timeout=60
    )
    absent = clone.parent / "shared" / "data"
    assert in_ci.returncode == 1 and "install reached" not in in_ci.stdout
    assert (
        in_ci.stderr == f".ci/run: error: CI needs the shared data folder {absent}/lm-corpus (tests would skip "
        "without it)\n"
    )
    anywhere = subprocess.run(["bash", ".ci/run"], cwd=clone, env=env, capture_output=True, text=True, timeout=60)
    assert anywhere.returncode == 7 and anywhere.stdout == "install reached\n", anywhere.stderr
    assert anywhere.stderr.startswith(f".ci/run: no shared data in {absent} (lm-corpus ")
    assert "the tests that read it skip, each with its reason" in anywhere.stderr
    flag = subprocess.run(
        ["bash", ".ci/run", "--require-data"], cwd=clone, env=env, capture_output=True, text=True, timeout=60
    )
    assert flag.returncode == 1 and flag.stderr == in_ci.stderr
