"""Shared test setup: one thread, offline Hub, private caches, the shared data folder and tiny models."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Before torch/transformers are imported by any test module.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_CACHE = Path(tempfile.mkdtemp(prefix="elmo-tests-"))
os.environ.setdefault("HF_MODULES_CACHE", str(_CACHE / "modules"))
os.environ.setdefault("HF_DATASETS_CACHE", str(_CACHE / "datasets"))

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Fixtures shared by several modules: a local HTTP server serving a synthetic original release.
pytest_plugins = ["release_server"]


def shared_data_dir() -> Path:
    """``../shared/data`` beside the repository, or ``$ELMO_SHARED_DATA``."""
    return Path(os.environ.get("ELMO_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (set ELMO_SHARED_DATA); CI always has it")
    return path


@pytest.fixture
def tiny_config():
    from modeling_elmo import ElmoConfig

    return ElmoConfig.from_json_file(str(REPO_ROOT / "configuration" / "elmo-tiny.json"))
