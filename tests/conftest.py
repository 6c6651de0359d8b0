"""Shared test setup: one thread, offline Hub, private caches, the shared data folder and tiny models."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
pytest_plugins = ["release_server", "support.evaluation"]


def shared_data_dir() -> Path:
    """``../shared/data`` beside the repository, or ``$ELMO_SHARED_DATA``."""
    return Path(os.environ.get("ELMO_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder; a test that uses it (directly or through another fixture) skips where it is absent,
    and carries the marker ``shared_data`` (``-m shared_data`` selects the data-dependent tests)."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (set ELMO_SHARED_DATA); CI always has it")
    return path


def pytest_unconfigure(config):
    """The private caches made above go with the session (they are this process's own temporary folder)."""
    shutil.rmtree(_CACHE, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "shared_data" in fixtures:
            item.add_marker(pytest.mark.shared_data)
        if "installed_wheel" in fixtures:  # builds and installs a wheel with pip: never in the fast loop
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def processes_only_in_slow_tests(request, monkeypatch):
    """The fast loop (``pytest -m "not slow"``) runs in this process: a test not marked ``slow`` that launches a
    process with ``subprocess`` (a script, a fresh interpreter, ``accelerate launch``) fails, naming the command."""
    if request.node.get_closest_marker("slow"):
        return

    def refuse(self, args, *rest, **options):
        command = args if isinstance(args, str) else " ".join(map(str, args))
        pytest.fail(f"launches a process ({command[:200]}): mark the test slow")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture
def tiny_config():
    from modeling_elmo import ElmoConfig

    return ElmoConfig.from_json_file(str(REPO_ROOT / "configuration" / "elmo-tiny.json"))


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory) -> Path:
    """The package as a user gets it: a wheel built from a clean copy of the checkout, installed without
    dependencies into a fresh ``--target`` folder (put it first on ``PYTHONPATH``; the dependencies are this
    environment's). Built once per test session."""
    root = tmp_path_factory.mktemp("wheel")
    wheel_dir, site, source = root / "wheel", root / "site", root / "source"
    # a copy without build outputs: setuptools would reuse a stale build/lib of the working tree
    shutil.copytree(
        REPO_ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "runs", "outputs", "results", ".pytest_cache"
        ),
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", str(source), "-w", str(wheel_dir)],
        check=True,
        capture_output=True,
        cwd=root,
    )
    (wheel,) = wheel_dir.glob("modeling_elmo-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        cwd=root,
    )
    shutil.rmtree(source)
    return site


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    """Every test ends with accelerate's process-wide state forgotten (training runs in this process leave it set)."""
    yield
    from support import reset_accelerate_state

    reset_accelerate_state()
