"""The fast loop (`pytest -m "not slow"`) stays in this process: tests/conftest.py fails a test not marked slow that
launches one, naming the command, and lets a slow test launch it."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_a_test_not_marked_slow_that_launches_a_process_fails_naming_the_command():
    with pytest.raises(pytest.fail.Exception, match=r"launches a process \(.+ -c pass\): mark the test slow"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.slow
def test_a_slow_test_launches_a_process():
    done = subprocess.run([sys.executable, "-c", "print(6 * 7)"], check=True, capture_output=True, text=True)
    assert done.stdout == "42\n"
