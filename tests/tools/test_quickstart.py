"""`scripts/quickstart.sh` uses the environment the reader already has (an activated one, or a python3 on the PATH
that imports the package), and builds .venv only when there is none."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test runs scripts/quickstart.sh in a process

REPO = Path(__file__).resolve().parents[2]


def _which(env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "quickstart.sh"), "--which-python"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def _base_env(path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH")}
    env["PATH"] = path
    return env


def test_an_activated_environment_is_used(tmp_path):
    active = tmp_path / "env"
    (active / "bin").mkdir(parents=True)
    (active / "bin" / "python").symlink_to(sys.executable)
    assert _which({**_base_env("/usr/bin:/bin"), "VIRTUAL_ENV": str(active)}) == (
        f"{active}/bin/python (the active environment {active})"
    )


def test_a_python3_on_the_path_that_has_the_dependencies_is_used(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # this environment's python
    (bin_dir / "python3").chmod(0o755)
    assert _which(_base_env(f"{bin_dir}:/usr/bin:/bin")) == (
        f"{bin_dir}/python3 (python3 on the PATH, which has the package and its dependencies)"
    )


def test_without_an_environment_it_is_dot_venv(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 1\n")  # a python3 without the dependencies
    (bin_dir / "python3").chmod(0o755)
    assert (
        _which(_base_env(f"{bin_dir}:/usr/bin:/bin"))
        == ".venv/bin/python (no active environment: .venv in the repository)"
    )
