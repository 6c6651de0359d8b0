"""transformers' own common test suites (`ModelTesterMixin`, `ConfigTester`, `TokenizerTesterMixin`), from the source
distribution of the installed release, unpacked by ``scripts/fetch_transformers_tests.py`` (CI's install step runs
it). A test module that needs them calls `suite_module`, which skips the module, saying how to get them, where they
are not unpacked (an offline clone)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest
import transformers

REPO_ROOT = Path(__file__).resolve().parent.parent


def suite_module(name: str):
    """``transformers_tests.<name>`` of the installed transformers version (skips the calling module without it)."""
    spec = importlib.util.spec_from_file_location(
        "fetch_transformers_tests", REPO_ROOT / "scripts" / "fetch_transformers_tests.py"
    )
    fetcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetcher)
    folder = fetcher.tests_folder(transformers.__version__)
    if not (folder / fetcher.PACKAGE / f"{name}.py").is_file():
        pytest.skip(
            f"transformers {transformers.__version__}'s common test suites are not unpacked in {folder}: run "
            "`python scripts/fetch_transformers_tests.py` (downloads its source distribution from PyPI)",
            allow_module_level=True,
        )
    if importlib.util.find_spec("parameterized") is None:
        pytest.skip(
            "transformers' common test suites need the `parameterized` package: pip install -e '.[dev]'",
            allow_module_level=True,
        )
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module(f"{fetcher.PACKAGE}.{name}")
