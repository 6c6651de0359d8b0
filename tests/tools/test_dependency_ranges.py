"""`pip install` of the package (its wheel and its source) keeps a torch the ranges admit, offline.

Each test asks pip for an install plan (``--dry-run --report``) in a fresh virtual environment that holds a torch of a
given version (a metadata-only distribution, ahead of everything else) and sees this environment's packages after its
own, with no index: every other dependency is already installed, so the plan can keep that torch or fail. With a torch
outside the ranges, pip would have to replace it and, without an index, cannot.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # pip runs in a process and builds the package

REPO_ROOT = Path(__file__).resolve().parents[2]


def environment_with_torch(root: Path, version: str) -> Path:
    """A venv under ``root`` whose own site-packages holds only ``torch==version`` (its metadata) and which reads the
    rest from this interpreter's site-packages (a ``.pth`` line after its own); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    python = root / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "zz-this-environment.pth").write_text(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    return python


def install_plan(python: Path, target: str, cwd: Path) -> subprocess.CompletedProcess:
    """``pip install --dry-run --report cwd/report.json target`` with no index and no pip configuration."""
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    options = ["--dry-run", "--quiet", "--report", str(cwd / "report.json"), "--no-index", "--no-build-isolation"]
    environment = {"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null"}
    return subprocess.run(
        [*pip, "install", *options, target], capture_output=True, text=True, cwd=cwd, timeout=600, env=environment
    )


def planned(cwd: Path) -> dict[str, str]:
    """``name -> version`` of what the report says pip would install."""
    report = json.loads((cwd / "report.json").read_text())
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A clean copy of the checkout (setuptools would reuse a stale build/ of the working tree)."""
    copy = tmp_path_factory.mktemp("source") / "modeling-elmo"
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "runs", "outputs")
    shutil.copytree(REPO_ROOT, copy, ignore=ignore)
    return copy


@pytest.mark.parametrize("torch_version", ["2.6.0", "2.15.0"])
def test_installing_the_source_keeps_an_installed_torch_the_ranges_admit(tmp_path, source, torch_version):
    python = environment_with_torch(tmp_path / "venv", torch_version)
    run = install_plan(python, str(source), tmp_path)
    assert run.returncode == 0, run.stderr
    assert planned(tmp_path) == {"modeling-elmo": "0.1.0"}


@pytest.mark.parametrize("torch_version", ["2.6.0", "2.15.0"])
def test_installing_the_wheel_keeps_an_installed_torch_the_ranges_admit(tmp_path, installed_wheel, torch_version):
    (wheel,) = (installed_wheel.parent / "wheel").glob("modeling_elmo-*.whl")
    python = environment_with_torch(tmp_path / "venv", torch_version)
    run = install_plan(python, str(wheel), tmp_path)
    assert run.returncode == 0, run.stderr
    assert planned(tmp_path) == {"modeling-elmo": "0.1.0"}


def test_a_torch_older_than_the_range_would_be_replaced(tmp_path, source):
    python = environment_with_torch(tmp_path / "venv", "2.5.1")
    run = install_plan(python, str(source), tmp_path)
    assert run.returncode != 0  # without an index pip cannot find the newer torch it needs
    assert "torch>=2.6" in run.stderr
