"""Helpers shared by the test modules: float comparisons that hold on any CPU, and a fresh Python process that can
only run a saved folder's own code.

Floats computed by another process, after a reload, or by another kernel path may differ in their last bits: BLAS
libraries pick kernels (and so summation orders) by CPU, by matrix shape, and even by whether an operand requires a
gradient (torch's 3-D ``matmul`` folds into one matrix product or runs a batched one depending on it). Such values are
compared with `assert_same_numbers`, a tolerance of 1e-6 relative to the values' own scale. Exact equality is kept
only where the bits must match by construction (stored weights read back, integer ids, a resumed run on one machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

#: Relative tolerance for values recomputed across a reload, a process or a kernel path.
RELATIVE_TOLERANCE = 1e-6


def assert_same_numbers(actual: Any, expected: Any, rtol: float = RELATIVE_TOLERANCE, what: str = "") -> None:
    """``actual`` equals ``expected`` to ``rtol`` of the largest magnitude in ``expected`` (elementwise, shapes
    equal)."""
    actual = torch.as_tensor(np.asarray(actual) if not isinstance(actual, torch.Tensor) else actual)
    expected = torch.as_tensor(np.asarray(expected) if not isinstance(expected, torch.Tensor) else expected)
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(
        actual.to(expected.dtype),
        expected,
        rtol=rtol,
        atol=rtol * max(scale, 1e-12),
        msg=lambda m: f"{what}: {m}" if what else m,
    )


#: Prepended to every fresh-process script: the package cannot be imported there, so whatever runs is the folder's
#: own code (transformers loads it as ``transformers_modules.<folder>...``).
_BLOCK_PACKAGE = "import sys\nsys.modules['modeling_elmo'] = None  # only a saved folder's own code may run here\n"


def run_without_package(
    script: str, *argv: Any, workdir: Path, timeout: float = 600, python: str = sys.executable
) -> Any:
    """Run ``script`` in a new interpreter (``python``: this one, or another environment's) in ``workdir``, offline,
    with `modeling_elmo` unimportable.

    ``argv`` reaches the script as ``sys.argv[1:]``. The script's last line of output must be JSON, which is returned.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_TOKEN")}
    env.update(
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        HF_MODULES_CACHE=str(workdir / "modules"),
        HF_HOME=str(workdir / "hf-home"),
        HF_DATASETS_CACHE=str(workdir / "datasets"),
    )
    result = subprocess.run(
        [python, "-c", _BLOCK_PACKAGE + textwrap.dedent(script), *map(str, argv)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.strip().splitlines()
    assert lines, f"the script printed nothing; stderr: {result.stderr[-2000:]}"
    return json.loads(lines[-1])


def in_the_public_form(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (built by this package) computing in the public form, the one the shipped files run alone (without
    the package's packed recurrence): its outputs then match a `run_without_package` process's at
    `RELATIVE_TOLERANCE`, the packed form's only to 1e-5. Returns ``model``."""
    model.config.use_packed_kernels = False  # every module of a model shares its config
    return model


@contextlib.contextmanager
def lock_held_elsewhere(output: Path, command: str):
    """Within it, ``output``'s lock is held by a concurrent run of ``command`` (another thread)."""
    from modeling_elmo.folders.manifest import output_lock

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with output_lock(output, command):
            held.set()
            release.wait(60)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(30), f"the concurrent {command} did not take the lock of {output}"
        yield
    finally:
        release.set()
        thread.join(30)


def reset_accelerate_state() -> None:
    """Forget accelerate's process-wide state, so that the next `Accelerator` of this process starts afresh (several
    training runs in one test process)."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


#: The ways a hostile user plants an entry where a command writes (parametrize tests with these).
PLANTED_KINDS = ["link to a file outside", "dangling link", "FIFO"]


def plant(entry: Path, kind: str, victim: Path) -> str:
    """Plant ``entry`` as ``kind`` (one of `PLANTED_KINDS`): a link to the existing file ``victim`` (which holds
    "another user's file"), a link to the absent ``victim``, or a FIFO (opening it for writing would block for ever).
    Returns how a refusal names it: "a symbolic link" or "a FIFO"."""
    victim.parent.mkdir(parents=True, exist_ok=True)
    if kind == "FIFO":
        os.mkfifo(entry)
        return "a FIFO"
    if kind.startswith("link to"):
        victim.write_text("another user's file")
    entry.symlink_to(victim)
    return "a symbolic link"


#: ``python -c KILLED_AFTER_MOVING_ASIDE MODULE ARGS...``: run ``MODULE.main(ARGS)`` and `kill -9` the process right
#: after it moved the earlier output aside (the first rename into a ``.NAME.old-*/content`` folder).
KILLED_AFTER_MOVING_ASIDE = textwrap.dedent(
    """
    import importlib, os, signal, sys

    real_rename = os.rename

    def rename(source, target, *args, **kwargs):
        real_rename(source, target, *args, **kwargs)
        moved = os.fspath(target)
        if os.path.basename(moved) == "content" and ".old-" in os.path.basename(os.path.dirname(moved)):
            os.kill(os.getpid(), signal.SIGKILL)

    os.rename = rename
    sys.exit(importlib.import_module(sys.argv[1]).main(sys.argv[2:]))
    """
)


def left_by_a_killed_run(output: Path, kind: str, command: str, *, content: bool = True, pid: int = 999_999_999):
    """A temporary folder of ``kind`` beside ``output`` as `modeling_elmo.folders.files.new_temporary` makes it in
    another run (one that was killed, with process id ``pid``, started at clock tick 1: a process id of a live
    process given here is one reused since); returns its payload path."""
    import pytest

    from modeling_elmo.folders import files

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "getpid", lambda: pid)
        patch.setattr(files, "_run_token", lambda: "a-killed-run")
        patch.setattr(files, "_own_start_time", lambda: 1)
        payload = files.new_temporary(output, kind, command, content=content)
    files._MADE.discard(os.fspath(payload.parent))  # made by "another run"
    return payload


#: Runs ``elmo ARGS`` in this process and writes its peak resident memory (kilobytes, Linux) as the last line of
#: stderr, whether the command ends well or not: ``VmHWM`` of its own memory map (``getrusage``'s ``ru_maxrss`` starts
#: at the peak of the process that started it).
_PEAK_MEMORY_DRIVER = textwrap.dedent(
    """
    import re, sys
    from modeling_elmo.cli import main
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit:
        code = exit.code
    if isinstance(code, str):  # the one-line error of the command
        sys.stderr.write(code + "\\n")
        code = 1
    with open("/proc/self/status") as status:
        peak = re.search(r"VmHWM:\\s*(\\d+) kB", status.read()).group(1)
    sys.stderr.write(f"\\npeak-kb {peak}\\n")
    sys.exit(code)
    """
)


def elmo_peak_memory(*args: Any, cwd: Path | None = None) -> tuple[int, str, int]:
    """``elmo ARGS`` in a fresh process: (exit status, its stderr without the last line, peak resident bytes)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_MEMORY_DRIVER, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )
    err, _, last = done.stderr.rstrip().rpartition("\n")
    assert last.startswith("peak-kb "), done.stderr[-2000:]
    return done.returncode, err, int(last.split()[1]) * 1024


def random_corpus(path: Path, *, seed: int, words: int, lines: int, longest: int) -> Path:
    """A training text at ``path``: ``lines`` lines of 3 to ``longest - 1`` words drawn from ``w0`` ... by numpy's
    generator of ``seed``."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(words)]
    text = [" ".join(rng.choice(vocabulary, size=rng.integers(3, longest))) for _ in range(lines)]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def tiny_pretrain_args(corpus: Path, out: Path, *extra: str, checkpointing_steps: int, eval_examples: int = 20):
    """`elmo pretrain` arguments for a few quick updates on ``corpus`` into ``out`` (its HF cache beside it, batches
    of 8, a log line per update, seed 5, no plot), then ``extra``."""
    return [
        *("--train-file", str(corpus), "--output-dir", str(out), "--cache-dir", str(out.parent / "hf-cache")),
        *("--per-device-train-batch-size", "8", "--logging-steps", "1", "--seed", "5", "--no-plot"),
        *("--checkpointing-steps", str(checkpointing_steps), "--max-eval-examples", str(eval_examples)),
        *extra,
    ]
