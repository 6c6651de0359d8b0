"""`modeling_elmo.hub.safety`: pickled weights are refused, tokens are neither published nor read from the folders
being published, and the custom code shipped with a model passes an audit (checked statically and by importing it
with files and sockets blocked)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from huggingface_hub import constants

from modeling_elmo.folders.run_folder import CODE_FILES
from modeling_elmo.hub.safety import audit_shipped_code, resolve_token, scan_for_secrets
from modeling_elmo.utils.loading import refuse_pickled_weights

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "modeling_elmo"
TOKEN = "hf_" + "Z" * 34


# --------------------------------------------------------------------------------------------- pickles
def test_pickled_weights_are_refused_with_an_explanation_and_training_state_is_not(tmp_path):
    for name in ("model.safetensors", "optimizer.pt", "training_args.bin", "random_states_0.pkl", "scheduler.bin"):
        (tmp_path / name).write_bytes(b"x")
    refuse_pickled_weights(tmp_path)  # the optimizer/training-args pickles of a run are not weights: accepted
    refuse_pickled_weights(tmp_path / "not-a-folder")  # a Hub id: nothing to look at
    for name in ("pytorch_model.bin", "weights.pt", "model.ckpt", "pytorch_model-00001-of-00002.bin"):
        (tmp_path / name).write_bytes(b"\x80\x04pickle")
        with pytest.raises(ValueError, match=rf"pickled weights \['{name}'\].*arbitrary code"):
            refuse_pickled_weights(tmp_path)
        (tmp_path / name).unlink()


# --------------------------------------------------------------------------------------------- tokens
def test_a_token_in_a_file_to_publish_is_refused_naming_the_file(tmp_path):
    (tmp_path / "README.md").write_text(f"my token is {TOKEN}")
    (tmp_path / "model.safetensors").write_bytes(TOKEN.encode())  # binary files are not scanned
    scan_for_secrets(tmp_path, ["model.safetensors"])
    with pytest.raises(ValueError, match="README.md contains what looks like a Hugging Face access token"):
        scan_for_secrets(tmp_path, ["model.safetensors", "README.md"])


@pytest.mark.parametrize(
    "text, kind",
    [
        ("AKIA" + "QWERTYUIOPASDFGH" + "_prod", "an AWS access key id"),  # a label, a file name
        ("label_" + TOKEN, "a Hugging Face access token"),
        ("data/x_" + TOKEN + ".txt", "a Hugging Face access token"),
        ("my_" + "ghp_" + "a1B2" * 9 + "_ci", "a GitHub token"),
        ("key_github_pat_" + "a1B2" * 6, "a GitHub fine-grained token"),
    ],
)
def test_a_credential_joined_to_other_words_by_an_underscore_is_found(tmp_path, text, kind):
    """Attacker pass on the secret scan: ``_`` is a word character, so a regex word boundary did not see a credential
    written as ``AKIA..._prod`` or ``label_hf_...`` (an ``id2label`` entry, a vocabulary word, a data file name)."""
    (tmp_path / "vocab.txt").write_text(f"<pad>\n{text}\n")
    with pytest.raises(ValueError, match=f"vocab.txt contains what looks like {kind}"):
        scan_for_secrets(tmp_path, ["vocab.txt"])
    (tmp_path / "vocab.txt").write_text("<pad>\nxAKIAQWERTYUIOPASDFGH\nahf_" + "Z" * 34 + "\n")  # inside longer words
    scan_for_secrets(tmp_path, ["vocab.txt"])


def test_the_token_comes_from_the_environment_or_the_stored_login_never_from_a_published_folder(tmp_path, monkeypatch):
    login = tmp_path / "login" / "token"
    login.parent.mkdir()
    login.write_text(TOKEN)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(login))
    assert resolve_token([tmp_path / "model"]) == TOKEN
    with pytest.raises(ValueError, match="lies inside .*login, a folder being published; refusing to read a token"):
        resolve_token([tmp_path / "login"])
    monkeypatch.setenv("HF_TOKEN", "hf_" + "E" * 34)
    assert resolve_token([tmp_path / "model"]) == "hf_" + "E" * 34
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "nothing" / "token"))
    with pytest.raises(ValueError, match="no Hugging Face token: set the HF_TOKEN environment variable"):
        resolve_token()


# --------------------------------------------------------------------------------------------- shipped code
def test_shipped_code_imports_only_torch_transformers_numpy_tokenizers_and_each_other():
    problems = audit_shipped_code(PACKAGE_DIR / name for name in CODE_FILES)
    assert problems == []


def test_code_audit_catches_network_pickle_foreign_and_file_access(tmp_path):
    bad = tmp_path / "modeling_elmo.py"
    bad.write_text(
        textwrap.dedent("""
        import socket
        import requests
        from urllib.request import urlopen
        import pickle
        from .evaluation import metrics
        from ..other import x
        import torch
        CONFIG = open("settings.txt").read()
        def later():
            return torch.load("weights.bin")
    """)
    )
    problems = "\n".join(audit_shipped_code([bad]))
    for expected in (
        "imports socket",
        "imports requests",
        "imports urllib.request",
        "imports pickle",
        "relative import of .evaluation",
        "relative import of ..other",
        "opens a file at import time",
        "calls torch.load",
    ):
        assert expected in problems, expected


def test_code_audit_admits_the_package_kernels_import_only_inside_a_function_and_only_that_module(tmp_path):
    code = tmp_path / "modeling_elmo.py"
    code.write_text(
        textwrap.dedent("""
        def find():
            try:
                from modeling_elmo.acceleration import packed_kernels as kernels
            except ImportError:
                return None
            return kernels
    """)
    )
    assert audit_shipped_code([code]) == []
    code.write_text(
        textwrap.dedent("""
        from modeling_elmo.acceleration import packed_kernels
        def find():
            from modeling_elmo.acceleration import packed_kernels, other
            from modeling_elmo import hub
            import modeling_elmo.acceleration.packed_kernels
    """)
    )
    problems = audit_shipped_code([code])
    assert [problem.split(":")[1] for problem in problems] == ["2", "4", "5", "6"], problems


def test_shipped_files_contain_no_private_torch_operator():
    """The files the audit ships (`CODE_FILES`) name no private torch API anywhere, comments and docstrings included:
    the packed oneDNN/MKL products live in the package-only ``packed_kernels.py``."""
    assert "modeling_elmo.py" in CODE_FILES and "packed_kernels.py" not in CODE_FILES
    for name in CODE_FILES:
        text = (PACKAGE_DIR / name).read_text(encoding="utf-8")
        assert "torch.ops." not in text and "torch._" not in text and "._triton" not in text, name
        assert "set_num_threads" not in text, name  # no process-wide setting changed by a forward
    assert audit_shipped_code(
        [PACKAGE_DIR / "acceleration" / "packed_kernels.py"]
    )  # the audit does see the package's fast form


def test_code_audit_refuses_private_torch_operators_and_modules(tmp_path):
    bad = tmp_path / "lstm_kernels.py"
    bad.write_text(
        textwrap.dedent("""
        import torch
        import torch._dynamo
        from torch.utils._triton import has_triton
        from torch import _assert_async
        def fast(x, w):
            packed = torch.ops.mkldnn._reorder_linear_weight(w, 8)
            torch._assert_async(x.isfinite().all())
            return torch.ops.aten.mm(x, w), torch.__version__, torch.nn.functional.linear(x, w)
    """)
    )
    problems = audit_shipped_code([bad])
    found = {problem.split(": ", 1)[1].split(",")[0] for problem in problems}
    assert found == {
        "imports torch._dynamo",
        "imports torch.utils._triton.has_triton",
        "imports torch._assert_async",
        "uses torch.ops.mkldnn._reorder_linear_weight",
        "uses torch._assert_async",
        "uses torch.ops.aten.mm",
    }, problems
    assert len(problems) == 6 and all("private torch API" in problem for problem in problems)


IMPORT_GUARD = textwrap.dedent("""
    import ast, builtins, importlib, io, socket, sys
    from pathlib import Path

    package = Path(sys.argv[1])
    # The allowed third-party libraries may do what they like when imported: import every module the shipped
    # files name (and the names they take from it) before the guard goes up.
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    getattr(module, alias.name, None)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)

    def refuse(*args, **kwargs):
        raise AssertionError(f"blocked at import time: {args[:1]}")

    class NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            refuse("socket.socket")

    builtins.open = io.open = refuse
    socket.socket = NoSocket
    socket.create_connection = refuse
    sys.dont_write_bytecode = True
    sys.path.insert(0, str(package.parent))
    for name in ("configuration_elmo", "tokenization_elmo", "modeling_elmo"):
        importlib.import_module(f"{package.name}.{name}")
    if sys.argv[2:] == ["--build-model"]:  # building a model opens nothing either
        config = sys.modules[f"{package.name}.configuration_elmo"].ElmoConfig(projection_dim=8, cell_size=16,
            char_cnn_filters=[[1, 4]], num_highway_layers=0)
        sys.modules[f"{package.name}.modeling_elmo"].ElmoModel(config)
    print("IMPORT-OK")
""")


@pytest.mark.slow
def test_shipped_code_opens_no_file_and_no_socket_at_import(tmp_path):
    package = tmp_path / "hub_code_under_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in CODE_FILES:
        shutil.copyfile(PACKAGE_DIR / name, package / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_GUARD, str(package), "--build-model"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0 and "IMPORT-OK" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize(
    "sneaky",
    [
        "_SNEAKY = open(__file__).read()",
        "import socket\n_SNEAKY = socket.socket()",
        "import pathlib\n_SNEAKY = pathlib.Path(__file__).read_text()",
    ],
)
@pytest.mark.slow
def test_import_guard_catches_a_file_or_socket_opened_at_import(sneaky, tmp_path):
    package = tmp_path / "hub_code_bad"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "configuration_elmo.py").write_text("import math\n" + sneaky + "\n")
    (package / "tokenization_elmo.py").write_text("import re\n")
    (package / "modeling_elmo.py").write_text("from .configuration_elmo import math\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_GUARD, str(package)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0 and "blocked at import time" in result.stderr, result.stderr[-2000:]
