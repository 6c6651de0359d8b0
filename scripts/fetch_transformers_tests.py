"""Unpack the common test suites of the installed transformers release, for tests/test_*_common.py.

transformers' own mixins (`ModelTesterMixin`, `ConfigTester`, `TokenizerTesterMixin`) ship in the ``tests/`` folder
of its source distribution, not in the wheel. This downloads the sdist of exactly the installed version with pip and
unpacks that folder as the package ``transformers_tests`` under

    $TRANSFORMERS_TESTS_DIR (default: .transformers-tests/ in the clone) / <version> / transformers_tests/

where the ELMo test files find it. It does nothing when that version is already there.

The sdist leaves out three helper modules the mixins import, and the sample text the tokenizer tests read:
``exporters/test_export.py`` (the export tests mixed into `ModelTesterMixin`), ``generation/test_utils.py``
(`GenerationTesterMixin`, named only in an ``issubclass`` check) and ``utils/test_configuration_utils.py``
(``config_common_kwargs``). They are replaced by the small modules below, which
say so in ``STANDINS.txt``: no export test of the mixin runs (ELMo's export has tests of its own), a model that does
not generate does not inherit `GenerationTesterMixin` anyway, the common configuration keys are listed here,
and ``fixtures/sample_text.txt`` is a short text of our own.

Usage: python scripts/fetch_transformers_tests.py   (prints the folder to put on sys.path)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "transformers_tests"

STANDINS = {
    "exporters/test_export.py": '''"""Stand-in: the transformers sdist does not ship tests/exporters/;
the mixin's export tests do not run here."""


class ExportTesterMixin:
    pass
''',
    "generation/test_utils.py": '''"""Stand-in: the transformers sdist does not ship tests/generation/.
`ModelTesterMixin` only checks that a tester of a model that can generate inherits this class;
ELMo's classes do not generate."""


class GenerationTesterMixin:
    pass
''',
    "fixtures/sample_text.txt": """Characters make words, and words make sentences.
A language model reads a sentence from left to right, and another one reads it from right to left.
The vectors of both directions are concatenated for every word.

A task model mixes the layers with weights of its own, learned for the task.
Padding takes no part in the mix, and an empty sentence gives zeros.
""",
    "utils/test_configuration_utils.py": '''"""Stand-in: the transformers sdist does not ship tests/utils/.
Keys every `PreTrainedConfig` accepts, each with a value other than its default:
`ConfigTester.check_config_arguments_init` checks a config keeps them."""

config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "tie_word_embeddings": False,
    "is_encoder_decoder": True,
    "chunk_size_feed_forward": 5,
    "architectures": ["ElmoModel"],
    "finetuning_task": "sst2",
    "id2label": {0: "negative", 1: "positive"},
    "label2id": {"negative": 0, "positive": 1},
    "tokenizer_class": "ElmoTokenizer",
    "prefix": "elmo",
    "bos_token_id": 6,
    "pad_token_id": 7,
    "eos_token_id": 8,
    "sep_token_id": 9,
    "decoder_start_token_id": 10,
    "task_specific_params": {"classification": {"num_labels": 2}},
    "problem_type": "regression",
}
''',
}


def tests_folder(version: str) -> Path:
    """Where the suites of transformers ``version`` are (or go)."""
    root = os.environ.get("TRANSFORMERS_TESTS_DIR") or Path(__file__).resolve().parent.parent / ".transformers-tests"
    return Path(root) / version


def fetch(version: str) -> Path:
    """Download and unpack the suites of transformers ``version``; returns the folder holding ``transformers_tests``."""
    target = tests_folder(version)
    if (target / PACKAGE / "test_modeling_common.py").is_file():
        return target
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"transformers=={version}",
                "--no-binary",
                ":all:",
                "--no-deps",
                "-q",
                "-d",
                scratch,
            ],
            check=True,
        )
        archive = next(Path(scratch).glob("transformers-*.tar.gz"))
        staged = Path(scratch) / PACKAGE
        prefix = f"transformers-{version}/tests/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
            for member in members:
                relative = member.name[len(prefix) :]
                if (
                    not relative.endswith((".py", ".txt", ".json"))
                    or relative.startswith(("/", ".."))
                    or "/../" in relative
                ):
                    continue
                destination = staged / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(tar.extractfile(member).read())
        if not (staged / "test_modeling_common.py").is_file():
            raise SystemExit(f"the transformers {version} sdist has no tests/test_modeling_common.py")
        written = []
        for relative, text in STANDINS.items():
            if not (staged / relative).is_file():
                (staged / relative).parent.mkdir(parents=True, exist_ok=True)
                (staged / relative).write_text(text)
                written.append(relative)
        for folder in [staged, *(p for p in staged.rglob("*") if p.is_dir() and p.name != "fixtures")]:
            (folder / "__init__.py").touch()
        (staged / "STANDINS.txt").write_text("".join(f"{r}\n" for r in written))
        target.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target / PACKAGE, ignore_errors=True)
        shutil.move(str(staged), str(target / PACKAGE))
    return target


def main() -> None:
    import transformers

    print(fetch(transformers.__version__))


if __name__ == "__main__":
    main()
