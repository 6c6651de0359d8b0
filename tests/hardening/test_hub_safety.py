"""`modeling_elmo.hub.safety`: pickled weights are refused, tokens are neither published nor read from the folders
being published, and the custom code shipped with a model passes an audit (checked statically and by importing it
with files and sockets blocked)."""

from __future__ import annotations

import base64
import json
import os
import random
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

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "modeling_elmo"
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


# Example credentials of each kind (made up; the AWS pair is the documentation's example).
AWS_KEY_ID, AWS_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx4kPZ1\n-----END RSA PRIVATE KEY-----"
GITHUB = "ghp_" + "a1B2" * 9


def _refusal(folder: Path, name: str) -> str:
    with pytest.raises(ValueError) as error:
        scan_for_secrets(folder, [name])
    return str(error.value)


@pytest.mark.parametrize(
    "text, kind",
    [
        (f"aws_secret_access_key = {AWS_SECRET}\n[default]\n", "an AWS secret access key (aws_secret_access_key"),
        (f'{{"AWS_SECRET_ACCESS_KEY": "{AWS_SECRET}"}}\n', "an AWS secret access key (aws_secret_access_key"),
        (f"id {AWS_KEY_ID}\nsecret {AWS_SECRET}\n", "an AWS secret access key (beside its AKIA... id)"),
        (f"{AWS_SECRET} {AWS_KEY_ID}\n", "an AWS secret access key (beside its AKIA... id)"),
        (PEM + "\n", "a PEM private key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n", "a PEM private key"),
        ("-----BEGIN PRIVATE KEY-----\n", "a PEM private key"),
        ("-----BEGIN ENCRYPTED PRIVATE KEY-----\n", "a PEM private key"),
    ],
)
def test_aws_secret_keys_and_pem_private_keys_are_refused_naming_the_file_and_line(tmp_path, text, kind):
    (tmp_path / "README.md").write_text("# a card\n\nsome text\n" + text)
    message = _refusal(tmp_path, "README.md")
    assert message.startswith(f"README.md contains what looks like {kind}") and "(line 4)" in message, message
    assert AWS_SECRET not in message and "MIIE" not in message


@pytest.mark.parametrize(
    "text",
    [
        "a sha1 of the weights: 2fd4e1c67a2d28fced849ee1bb76e7391b93eb12\n",  # 40 characters, no key id beside it
        "a path: data/wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
        "aws_secret_access_key = (set it in your environment)\n",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n",
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUJ\n",
        "an access key id looks like AKIA followed by sixteen letters or digits\n",
    ],
)
def test_a_public_key_a_digest_or_a_mention_of_a_key_is_not_a_secret(tmp_path, text):
    (tmp_path / "README.md").write_text(text)
    scan_for_secrets(tmp_path, ["README.md"])


@pytest.mark.parametrize(
    "name, text, kind, line",
    [
        ("vocab.txt", f"the\nof\n{TOKEN[:3]}\n{TOKEN[3:]}\n", "a Hugging Face access token", 3),
        ("vocab.txt", f"the\nh\nf\n_\n{TOKEN[3:15]}\n{TOKEN[15:]}\nend\n", "a Hugging Face access token", 2),
        ("vocab.txt", f"the\n{AWS_KEY_ID[:4]}\n{AWS_KEY_ID[4:12]}\n{AWS_KEY_ID[12:]}\n", "an AWS access key id", 2),
        ("vocab.txt", f"x\n{GITHUB[:10]}\n{GITHUB[10:]}\n", "a GitHub token", 2),
        ("vocab.txt", "x\ngithub\n_pat_\n" + "11ABCDEFG0" * 3 + "\n", "a GitHub fine-grained token", 2),
        ("README.md", f"labels: {TOKEN[:9]} {TOKEN[9:]}\n", "a Hugging Face access token", 1),
        ("README.md", f"- {AWS_KEY_ID[:4]}-{AWS_KEY_ID[4:]}\n", "an AWS access key id", 1),
        (
            "config.json",
            json.dumps({"id2label": {"0": TOKEN[:3], "1": TOKEN[3:20], "2": TOKEN[20:]}, "vocab_size": 7}, indent=2),
            "a Hugging Face access token",
            3,
        ),
        (
            "config.json",
            json.dumps({"label2id": {AWS_KEY_ID[:8]: 0, AWS_KEY_ID[8:]: 1}, "x": 2}, indent=2),
            "an AWS access key id",
            3,
        ),
    ],
)
def test_a_token_split_over_adjacent_words_or_lines_is_found_naming_the_line(tmp_path, name, text, kind, line):
    """``hf_`` on one line of vocab.txt and the rest on the next (or in the next label, the next word of the card)
    was published: each piece alone is no token. Adjacent pieces are joined and scanned again."""
    (tmp_path / name).write_text(text)
    message = _refusal(tmp_path, name)
    assert message.startswith(f"{name} contains what looks like {kind}") and f"(line {line})" in message, message


def test_a_split_token_across_two_blocks_of_a_large_file_is_found(tmp_path):
    """The file is read a block at a time; the pieces of a token on either side of a block's end are joined."""
    from modeling_elmo.hub.safety import find_secret

    head = "".join(f"w{i}\n" for i in range(300))
    (tmp_path / "vocab.txt").write_text(head + f"{TOKEN[:5]}\n{TOKEN[5:]}\nw\n")
    for block_size in (len(head) + 2, len(head) + len(TOKEN[:5]) + 1, 64):
        assert find_secret(tmp_path / "vocab.txt", block_size=block_size) == (
            "a Hugging Face access token (hf_...)",
            301,
        )


@pytest.mark.parametrize(
    "encoded",
    [
        base64.b64encode(TOKEN.encode()).decode(),
        base64.b64encode(f"my login: {TOKEN} (keep it)".encode()).decode(),
        base64.b64encode(f"({AWS_KEY_ID})".encode()).decode(),
        base64.urlsafe_b64encode(f"??>{GITHUB}".encode()).decode(),
        base64.b64encode(PEM.encode()).decode(),
        base64.encodebytes(("a long text before the token " * 4 + TOKEN).encode()).decode(),  # wrapped at 76
    ],
)
def test_base64_that_decodes_to_a_token_is_found(tmp_path, encoded):
    (tmp_path / "README.md").write_text(f"# card\n\nweights id: {encoded}\n")
    message = _refusal(tmp_path, "README.md")
    assert ", base64-encoded (line 3" in message and encoded.splitlines()[0] not in message, message


def test_ordinary_vocabulary_base64_data_and_near_misses_pass(tmp_path):
    """The real vocabulary of the built-in corpus, base64 of an image and of random bytes, acronyms and long words
    on adjacent lines: nothing is refused."""
    corpus = PACKAGE_DIR / "corpora" / "austen-emma"
    words = {
        w for part in ("train", "validation", "test") for line in open(corpus / f"{part}.txt") for w in line.split()
    }
    assert len(words) > 5000
    (tmp_path / "vocab.txt").write_text("<pad>\n" + "\n".join(sorted(words)) + "\n")
    (tmp_path / "shuffled.txt").write_text("\n".join(random.Random(0).sample(sorted(words), len(words))) + "\n")
    random_bytes = random.Random(1).randbytes(200_000)
    image = base64.encodebytes(b"\x89PNG\r\n\x1a\n" + random_bytes).decode()
    (tmp_path / "README.md").write_text(
        f"# card\n\n![plot](data:image/png;base64,{base64.b64encode(random_bytes).decode()})\n\n{image}\n"
        "ASIA\nNATO\nUSA\nUNESCO\nhf\nmodel\nA\nKIA\ngh\np\nthe\ninternationalization\ncharacteristically\n"
        f"AKIA is how a key id starts; hf_ a token; {'Q' * 16}\n"
    )
    (tmp_path / "config.json").write_text(
        json.dumps({"id2label": {str(i): f"B-{t}" for i, t in enumerate(["PER", "LOC", "ORG", "MISC"])}}, indent=2)
    )
    scan_for_secrets(tmp_path, ["vocab.txt", "shuffled.txt", "README.md", "config.json"])


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
    the packed oneDNN/MKL products live in the package-only ``acceleration/cpu_kernels.py``."""
    assert "modeling_elmo.py" in CODE_FILES and "packed_kernels.py" not in CODE_FILES
    for name in CODE_FILES:
        text = (PACKAGE_DIR / name).read_text(encoding="utf-8")
        assert "torch.ops." not in text and "torch._" not in text and "._triton" not in text, name
        assert "set_num_threads" not in text, name  # no process-wide setting changed by a forward
    assert audit_shipped_code(
        [PACKAGE_DIR / "acceleration" / "cpu_kernels.py"]
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
