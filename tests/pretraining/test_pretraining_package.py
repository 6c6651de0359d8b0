"""The product as a user gets it: packaged presets, recipes and corpus found through importlib.resources, the
installed wheel running pretrain -> embed -> evaluate outside the checkout, the quick-start recipe offline, the
launch check shared with ``elmo embed``, and the benchmark script's imports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modeling_elmo.pretraining import arguments, parse_args
from modeling_elmo.pretraining import main as pretrain_main
from modeling_elmo.pretraining.data import expand_text_files
from modeling_elmo.utils import launch

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "modeling_elmo" / "corpora" / "austen-emma"


def _offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_TOKEN")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", **extra)
    return env


# ----------------------------------------------------------------------------------------------- packaged files
def test_presets_recipes_and_accelerate_configs_are_package_data_equal_to_the_checkout():
    files = arguments.configuration_files()
    assert arguments.preset_names() == sorted(p.stem for p in (REPO / "configuration").glob("elmo-*.json"))
    assert arguments.recipe_names() == sorted(p.stem for p in (REPO / "configuration" / "recipes").glob("*.yaml"))
    for path in (REPO / "configuration" / "accelerate").glob("*.yaml"):
        assert (files / "accelerate" / path.name).read_text() == path.read_text()
    spacy_configs = sorted((REPO / "configuration" / "spacy").glob("*.cfg"))
    assert spacy_configs
    for path in spacy_configs:
        assert (files / "spacy" / path.name).read_text() == path.read_text()
    assert arguments.read_model_preset("tiny") == json.loads((REPO / "configuration" / "elmo-tiny.json").read_text())
    with pytest.raises(ValueError, match="neither a file nor a preset.*elmo-tiny"):
        arguments.read_model_preset("elmo-huge")


def test_builtin_corpus_names_resolve_to_the_split_of_the_flag_and_are_small_public_domain_text():
    assert expand_text_files(["builtin:austen-emma"], "--train-file") == [
        arguments.builtin_corpus_file("builtin:austen-emma", "train")
    ]
    assert Path(expand_text_files(["builtin:austen-emma"], "--validation-file")[0]).name == "validation.txt"
    assert Path(expand_text_files(["builtin:austen-emma/test"], "--train-file")[0]).name == "test.txt"
    with pytest.raises(ValueError, match="no packaged corpus 'dickens'.*austen-emma"):
        expand_text_files(["builtin:dickens"])
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        expand_text_files(["builtin:austen-emma/dev"])
    sizes = {p.name: p.stat().st_size for p in CORPUS.glob("*.txt")}
    assert sum(sizes.values()) < 2_000_000 and set(sizes) == {"train.txt", "validation.txt", "test.txt"}
    assert "public domain" in (CORPUS / "README.md").read_text().lower()
    train = set((CORPUS / "train.txt").read_text().splitlines())
    for split in ("validation.txt", "test.txt"):  # held-out chapters: only short stock phrases ('" Yes . "') recur
        long_lines = [line for line in (CORPUS / split).read_text().splitlines() if len(line.split()) >= 10]
        assert len(long_lines) > 100 and not train & set(long_lines)


def test_a_data_source_on_the_command_line_replaces_the_recipes():
    recipe = parse_args(["--config", "quickstart"])
    assert recipe.train_file == recipe.validation_file == recipe.test_file == ["builtin:austen-emma"]
    hub = parse_args(
        ["--config", "quickstart", "--dataset-name", "wikitext", "--dataset-config-name", "wikitext-2-raw-v1"]
    )
    assert (hub.dataset_name, hub.train_file, hub.validation_file, hub.test_file) == ("wikitext", None, None, None)
    own = parse_args(["--config", "quickstart", "--train-file", "mine.txt"])
    assert (own.train_file, own.validation_file) == (["mine.txt"], None)
    assert own.max_steps == recipe.max_steps  # the rest of the recipe stays


@pytest.mark.slow
def test_quickstart_recipe_trains_offline_on_the_packaged_corpus(tmp_path):
    out = tmp_path / "quick"
    assert (
        pretrain_main(
            [
                "--config",
                "quickstart",
                "--output-dir",
                str(out),
                "--max-steps",
                "3",
                "--eval-steps",
                "0",
                "--max-eval-examples",
                "30",
                "--no-plot",
                "--cache-dir",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )
    results = json.loads((out / "eval_results.json").read_text())
    assert [p["dataset"] for p in results["perplexity"]] == ["builtin:austen-emma"] * 2


@pytest.mark.slow
def test_unreachable_hub_dataset_is_one_line_naming_the_offline_alternative_within_seconds(tmp_path):
    out = tmp_path / "wikitext"
    started = time.time()
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "pretrain.py"),
            "--config",
            "quickstart",
            "--dataset-name",
            "wikitext",
            "--dataset-config-name",
            "wikitext-2-raw-v1",
            "--output-dir",
            str(out),
        ],
        env=_offline_env(HF_DATASETS_CACHE=str(tmp_path / "empty-cache")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and time.time() - started < 60
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("elmo pretrain: error: --dataset-name wikitext") and "builtin:austen-emma" in line
    assert not out.exists()


# ----------------------------------------------------------------------------------------------- the wheel
@pytest.mark.slow
def test_installed_wheel_pretrains_embeds_and_evaluates_outside_the_checkout(tmp_path, installed_wheel):
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = _offline_env(
        PYTHONPATH=str(installed_wheel),
        HF_MODULES_CACHE=str(tmp_path / "modules"),
        HF_DATASETS_CACHE=str(tmp_path / "datasets"),
        HF_HOME=str(tmp_path / "hf-home"),
    )

    def elmo(*argv: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "modeling_elmo.cli", *argv],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import modeling_elmo.pretraining.arguments as a; print(a.__file__); "
            "print(a.builtin_corpus_file('builtin:austen-emma', 'test'))",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    module_file, test_text = probe.stdout.split()
    assert Path(module_file).is_relative_to(installed_wheel) and Path(test_text).is_relative_to(installed_wheel)
    elmo(
        "pretrain",
        "--model-config",
        "elmo-tiny",
        "--train-file",
        "builtin:austen-emma",
        "--validation-file",
        "builtin:austen-emma",
        "--max-steps",
        "3",
        "--vocab-size",
        "500",
        "--per-device-train-batch-size",
        "8",
        "--max-eval-examples",
        "20",
        "--no-plot",
        "--output-dir",
        "run",
    )
    (work / "sentences.txt").write_text("Emma was happy .\nMr. Knightley came in .\n", encoding="utf-8")
    elmo("embed", "--model", "run", "--top", "--no-progress", "sentences.txt", "vectors.hdf5")
    import h5py

    with h5py.File(work / "vectors.hdf5") as vectors:
        assert vectors["0"].shape == (4, 32) and vectors["1"].shape == (5, 32)
    elmo("evaluate", "run", "--task", "perplexity", "--text", test_text, "--max-sentences", "20", "--no-progress")
    (ppl,) = json.loads((work / "run" / "evaluation" / "eval_results.json").read_text())["perplexity"]
    assert 1 < ppl["average"] < 500 * 2


# ----------------------------------------------------------------------------------------------- the scripts
#: The scripts that import the package (make_builtin_corpus.py and fetch_transformers_tests.py need none of it).
SCRIPTS = sorted(p for p in (REPO / "scripts").glob("*.py") if "from modeling_elmo" in p.read_text(encoding="utf-8"))


def python_without_the_checkout(folder: Path, *first: Path) -> Path:
    """A new virtual environment's interpreter that sees ``first`` and then this environment's installed libraries
    (listed in a ``.pth`` file: the editable install's finder is not among them, nor is the checkout)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, capture_output=True)
    (site,) = folder.glob("lib/python*/site-packages")
    libraries = [
        p
        for p in sys.path
        if p and Path(p).is_dir() and ("site-packages" in Path(p).parts or not Path(p).resolve().is_relative_to(REPO))
    ]  # .venv may be in the clone
    (site / "elmo_test_libraries.pth").write_text("\n".join([*map(str, first), *libraries]) + "\n", encoding="utf-8")
    return folder / "bin" / "python"


@pytest.mark.slow
def test_scripts_edit_no_import_path_and_say_in_one_line_how_to_install_when_the_package_is_missing(tmp_path):
    assert len(SCRIPTS) >= 7
    python = python_without_the_checkout(tmp_path / "venv")
    probe = subprocess.run(
        [str(python), "-c", "import torch, accelerate; import modeling_elmo"],
        capture_output=True,
        text=True,
        env=_offline_env(),
        cwd=tmp_path,
    )
    assert "No module named 'modeling_elmo'" in probe.stderr  # the libraries are there, the package is not
    for script in (REPO / "scripts").glob("*.py"):
        assert not re.search(r"sys\.path\.(insert|append)|sys\.path\s*[+]?=", script.read_text(encoding="utf-8")), (
            script.name
        )
    for script in SCRIPTS:
        done = subprocess.run(
            [str(python), str(script), "--help"],
            capture_output=True,
            text=True,
            env=_offline_env(),
            cwd=tmp_path,
            timeout=120,
        )
        assert done.returncode == 1 and done.stdout == "", (script.name, done.stderr[-2000:])
        assert done.stderr.splitlines() == [
            f"scripts/{script.name}: the modeling_elmo package is not installed: run "
            "`pip install .` in the clone (or `bash scripts/install.sh` for a virtual "
            "environment with the test tools)."
        ], script.name


@pytest.mark.slow
def test_accelerate_launch_of_the_clones_pretrain_script_trains_with_a_non_editable_install(tmp_path, installed_wheel):
    """`pip install .` (not editable), then `accelerate launch scripts/pretrain.py --config quickstart` from the
    clone's scripts folder: the script imports the installed package, whose package data (recipes, presets, corpus)
    the clone's folder does not have."""
    python = python_without_the_checkout(tmp_path / "venv", installed_wheel)
    env = _offline_env(HF_HOME=str(tmp_path / "hf-home"), HF_DATASETS_CACHE=str(tmp_path / "datasets"))
    where = subprocess.run(
        [str(python), "-c", "import modeling_elmo; print(modeling_elmo.__file__)"],
        cwd=REPO / "scripts",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(installed_wheel)
    out = tmp_path / "quick"
    done = subprocess.run(
        [
            str(python),
            "-m",
            "accelerate.commands.launch",
            "--num_processes",
            "1",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "pretrain.py",
            "--config",
            "quickstart",
            "--max-steps",
            "2",
            "--eval-steps",
            "0",
            "--max-eval-examples",
            "20",
            "--no-plot",
            "--output-dir",
            str(out),
        ],
        cwd=REPO / "scripts",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "training_metadata.json").read_text())["global_step"] == 2
    assert [p["dataset"] for p in json.loads((out / "eval_results.json").read_text())["perplexity"]] == [
        "builtin:austen-emma"
    ] * 2


# ----------------------------------------------------------------------------------------------- launch and bench
def test_launch_check_refuses_a_state_with_another_process_count(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launch.launched_processes() == 2
    with pytest.raises(
        launch.LaunchError, match="launched as 2 processes but accelerate set up 1 .NO.; .*ACCELERATE_USE_CPU=1"
    ):
        launch.check_process_count(1, "NO")
    launch.check_process_count(2, "MULTI_CPU")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    assert launch.use_cpu_backend()  # several processes, no GPU: gloo
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not launch.use_cpu_backend()
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    assert launch.use_cpu_backend()
    monkeypatch.setenv("WORLD_SIZE", "zero")
    with pytest.raises(launch.LaunchError, match="WORLD_SIZE must be a positive integer, got 'zero'"):
        launch.launched_processes()


def test_embed_uses_the_shared_launch_check(monkeypatch):
    from modeling_elmo.embedding import embed

    monkeypatch.setenv("WORLD_SIZE", "2")

    class OneProcess:
        def __init__(self, cpu: bool):
            self.num_processes, self.distributed_type, self.process_index = 1, "NO", 0

    monkeypatch.setattr("accelerate.PartialState", OneProcess)
    with pytest.raises(SystemExit, match="elmo embed: error: launched as 2 processes but accelerate set up 1"):
        embed._Processes()


def test_cpu_benchmark_window_batches_have_one_shape_so_ddp_processes_wait_on_no_longer_batch(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts" / "bench"))
    import bench_pretrain_cpu as bench

    lines = bench.load_sentences(CORPUS / "train.txt", limit=400)
    vocab = bench.most_frequent_words(lines, 300)
    windows = bench.make_batches(lines, vocab, 8, 4, "windows")
    sentences = bench.make_batches(lines, vocab, 8, 4, "sentences")
    assert len(windows) == 4 and {tuple(b["input_ids"].shape) for b in windows} == {
        tuple(windows[0]["input_ids"].shape)
    }
    assert windows[0]["input_ids"].shape[:2] == (8, 20)  # 20 positions of the <S> w.. </S> stream
    assert bool(windows[0]["attention_mask"].all())
    assert len({b["input_ids"].shape[1] for b in sentences}) > 1  # pools from across the length range


@pytest.mark.slow
def test_cpu_benchmark_imports_the_public_api_and_runs_two_steps():
    script = REPO / "scripts" / "bench" / "bench_pretrain_cpu.py"
    env = _offline_env()
    assert (
        "--presets"
        in subprocess.run(
            [sys.executable, str(script), "--help"], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--presets",
            "elmo-tiny",
            "--steps",
            "2",
            "--no-ddp",
            "--text",
            str(CORPUS / "train.txt"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [line["bench"] for line in lines] == ["fp32_matmul", "bf16_matmul", "cpu_train"]
    record = lines[-1]
    assert record["preset"] == "elmo-tiny" and record["tokens_per_s"] > 0
    bf16 = record["fused_bf16"]  # the same steps in bf16 autocast, against the bf16 matmul peak
    assert bf16["fraction_of_matmul_peak"] == pytest.approx(bf16["achieved_flop_per_s"] / lines[1]["flop_per_s"])
    assert record["bf16_over_fp32"] > 0 and abs(bf16["final_loss"] - record["fused"]["final_loss"]) < 0.05
    # the same rates in CPU time, against the matmul peak in CPU time
    fused, matmul = record["fused"], lines[0]
    assert 0 < fused["cpu_share"] <= 1.05 and matmul["flop_per_cpu_s"] > 0
    wall_to_cpu = matmul["flop_per_s"] / matmul["flop_per_cpu_s"] / fused["cpu_share"]
    assert fused["fraction_of_matmul_peak_cpu_time"] == pytest.approx(
        fused["fraction_of_matmul_peak"] * wall_to_cpu, rel=0.02
    )


def test_the_lm_corpus_recipes_record_a_licence_for_every_training_file_and_the_card_warns_of_the_research_only_one():
    from modeling_elmo.hub.card import data_license_warning
    from modeling_elmo.pretraining.arguments import parse_args
    from modeling_elmo.utils.results import data_file_label

    for name in ("cpu-lm-corpus", "27m-lm-corpus", "27m-lm-corpus-h200", "27m-lm-corpus-reviews"):
        args = parse_args(["--config", name])
        assert {entry.split("=")[0] for entry in args.data_license} == {data_file_label(f) for f in args.train_file}
        warning = data_license_warning("apache-2.0", args.data_license)
        assert "(reuters_training.txt: research-only (Reuters-21578))" in warning, name  # and nothing else


def test_the_quickstart_recipe_records_the_builtin_corpus_as_public_domain_and_the_card_does_not_warn():
    from modeling_elmo.hub.card import data_license_warning
    from modeling_elmo.pretraining.arguments import parse_args
    from modeling_elmo.utils.results import data_file_label

    args = parse_args(["--config", "quickstart"])
    assert args.data_license == [f"{data_file_label(args.train_file[0])}=public-domain"]
    assert "Public domain" in (REPO / "modeling_elmo" / "corpora" / "austen-emma" / "README.md").read_text()
    assert data_license_warning("apache-2.0", args.data_license) is None
    # the recipe's licence goes with the recipe's data: a file of one's own is not called public domain
    own = parse_args(["--config", "quickstart", "--train-file", "my_corpus.txt"])
    assert own.data_license is None and "is not recorded" in data_license_warning("apache-2.0", own.data_license)
    stated = parse_args(["--config", "quickstart", "--train-file", "my_corpus.txt", "--data-license", "cc-by-4.0"])
    assert stated.data_license == ["cc-by-4.0"]


def test_the_results_name_the_training_files_a_glob_with_its_folder():
    from modeling_elmo.pretraining.arguments import parse_args
    from modeling_elmo.pretraining.evaluation import dataset_description

    args = parse_args(["--train-file", "/data/lm-corpus/gutenberg/*.txt", "/data/lm-corpus/masc.txt"])
    assert dataset_description(args, "validation") == "gutenberg/*.txt, masc.txt (1% of the lines held out)"
