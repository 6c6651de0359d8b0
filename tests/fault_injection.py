"""Fault injection for the writing commands: run an ``elmo`` command in a child process that SIGKILLs itself just
before (or just after) its N-th file step, then rerun it and check what the user finds.

A *step* is a call, made by this package, of ``os.replace``, ``os.rename``, ``os.unlink``, ``os.remove``,
``os.rmdir``, ``os.fsync`` or ``shutil.rmtree`` (a ``Path`` method counts where the package called it; the calls
``shutil.rmtree`` makes inside count as its one step). The child counts them, writes each to a log, and at step N
kills itself with ``os.kill(os.getpid(), SIGKILL)``: a real kill, nothing is flushed or cleaned up.

Children are forked from one server process that has imported the package, torch and transformers once (``python
fault_injection.py serve``, requests as JSON lines on its stdin), so a run costs what the command does, not the ~5 s
of imports; the shim is installed in the forked child only. This module imports only the standard library at its
top, so the server starts with nothing of the test suite.

`FaultHarness.check` runs a `Scenario`: the command once without a kill (its steps K and the clean result), then for
every N in 1..K and both kill points, from the same starting state (an earlier complete output and the user's own
files beside and inside it): the killed run, then the command again (the scenario's rerun), and the checks:

(a) ``earlier``: the earlier output is whole after the kill, or the new one is (the swap finished), or the rerun says
    in a line that it restored or finished an interrupted run;
(b) ``user files``: every file of the user's is there with the same bytes, after the kill and after the rerun;
(c) ``rerun``: the rerun exits 0 and its result equals the clean run's.

Failures are collected as `Failure` records (command, step, kill point, check, line) rather than raised one by one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEP_FUNCTIONS = (
    ("os", "replace"),
    ("os", "rename"),
    ("os", "unlink"),
    ("os", "remove"),
    ("os", "rmdir"),
    ("os", "fsync"),
    ("shutil", "rmtree"),
)
KILL_POINTS = ("before", "after")


# ----------------------------------------------------------------------------------------------- the child's shim
def _package_dir() -> str:
    import modeling_elmo

    return str(Path(modeling_elmo.__file__).resolve().parent) + os.sep


def install(log_path: str, kill_at: int = 0, when: str = "before") -> None:
    """Patch the step functions of `STEP_FUNCTIONS` in this process: count each call the package makes, append it to
    ``log_path`` (one JSON line: step, function, caller), and SIGKILL this process just ``when`` (``before`` or
    ``after``) step ``kill_at`` (0: never)."""
    package = _package_dir()
    skipped = {os.path.normcase(p) for p in (shutil.__file__, Path(__file__).resolve().as_posix())}
    import pathlib

    skipped.add(pathlib.__file__)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    state = {"count": 0, "inside": False}

    def caller() -> str | None:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename in skipped:
            frame = frame.f_back
        if frame is None or not frame.f_code.co_filename.startswith(package):
            return None
        return f"{frame.f_code.co_filename[len(package) :]}:{frame.f_lineno}"

    def wrap(module: Any, name: str) -> None:
        real = getattr(module, name)

        def step(*args: Any, **kwargs: Any) -> Any:
            where = None if state["inside"] else caller()
            if where is None:
                return real(*args, **kwargs)
            state["count"] += 1
            count = state["count"]
            target = os.fspath(args[0]) if args and isinstance(args[0], (str, os.PathLike)) else repr(args[:1])
            record = {"step": count, "call": f"{module.__name__}.{name}", "at": where, "path": target}
            os.write(log, (json.dumps(record) + "\n").encode())
            if count == kill_at and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            state["inside"] = True
            try:
                return real(*args, **kwargs)
            finally:
                state["inside"] = False
                if count == kill_at and when == "after":
                    os.kill(os.getpid(), signal.SIGKILL)

        setattr(module, name, step)

    for module_name, name in STEP_FUNCTIONS:
        wrap(sys.modules[module_name], name)


# ----------------------------------------------------------------------------------------------- the server
def serve() -> None:
    """Import the package once, then for each request line (JSON: argv, cwd, env, log, kill_at, when, prelude, out,
    err) fork a child that runs ``elmo ARGV`` with the shim installed; answer one JSON line with its status (the exit
    code, or minus the signal that ended it)."""
    import torch  # noqa: F401  the imports every command needs, paid once
    import transformers  # noqa: F401

    from modeling_elmo.cli import main

    answer = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 70
            try:
                os.chdir(request["cwd"])
                os.environ.update(request["env"])
                for fd, name in ((1, request["out"]), (2, request["err"])):
                    handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(handle, fd)
                    os.close(handle)
                exec(request.get("prelude", ""), {})  # noqa: S102  the test's own code (a release table entry)
                install(request["log"], request["kill_at"], request["when"])
                try:
                    code = main(request["argv"])
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else (print(exit_.code, file=sys.stderr) or 1)
                code = code or 0
            except BaseException:  # noqa: BLE001  a traceback is the command's to show
                import traceback

                traceback.print_exc()
                code = 71
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        result = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        answer.write(json.dumps({"status": result}) + "\n")
        answer.flush()


# ----------------------------------------------------------------------------------------------- the harness
@dataclasses.dataclass(frozen=True)
class Run:
    status: int  # exit code, or -9 when killed
    out: str
    err: str
    steps: list[dict]

    @property
    def last_line(self) -> str:
        lines = [line for line in (self.out + "\n" + self.err).splitlines() if line.strip()]
        return lines[-1] if lines else ""


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One writing command and its starting state.

    ``setup(root, run)`` builds the starting state under ``root`` (the earlier output and the user's files;
    ``run(argv, kill_at=0, when="before")`` runs a command there) and returns the paths of the user's files (relative
    to root); ``argv(root)`` the command, ``rerun(root)`` the command that a user runs after a kill (default: the
    same); ``earlier(root)`` a digest of the earlier output as it stands (None
    when absent); ``result(root)`` a digest of the command's output, compared to the clean run's by ``same``."""

    name: str
    setup: Callable[[Path, Callable[..., Run]], list[str]]
    argv: Callable[[Path], list[str]]
    result: Callable[[Path], Any]
    earlier: Callable[[Path], Any] = lambda root: None
    rerun: Callable[[Path], list[str]] | None = None
    same: Callable[[Any, Any], bool] = lambda a, b: a == b
    prelude: str = ""
    env: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Failure:
    command: str
    step: int
    when: str
    call: str  # the step's call and where the package made it
    check: str  # "earlier", "user files" or "rerun"
    line: str

    def __str__(self) -> str:
        return f"{self.command} step {self.step} ({self.when} {self.call}): {self.check}: {self.line}"


class FaultHarness:
    """The server process and the runs of `Scenario` s through it."""

    def __init__(self, work: Path, env: dict[str, str] | None = None):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        child_env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
        self.server = subprocess.Popen(
            [sys.executable, __file__, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env,
            cwd=str(self.work),
        )

    def close(self) -> None:
        if self.server.poll() is None:
            self.server.stdin.close()
            self.server.wait(timeout=60)

    def run(self, scenario: Scenario, root: Path, argv: list[str], kill_at: int = 0, when: str = "before") -> Run:
        log, out, err = (self.work / f"run.{suffix}" for suffix in ("log", "out", "err"))
        for path in (log, out, err):
            path.unlink(missing_ok=True)
        request = {
            "argv": argv,
            "cwd": str(root),
            "env": scenario.env,
            "log": str(log),
            "kill_at": kill_at,
            "when": when,
            "prelude": scenario.prelude,
            "out": str(out),
            "err": str(err),
        }
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        answer = self.server.stdout.readline()
        if not answer:
            raise RuntimeError("the fault-injection server ended")
        steps = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        status = json.loads(answer)["status"]
        return Run(status, out.read_text(errors="replace"), err.read_text(errors="replace"), steps)

    def _fresh(self, template: Path, root: Path) -> None:
        if root.exists():
            shutil.rmtree(root)
        shutil.copytree(template, root, symlinks=True)

    def check(
        self, scenario: Scenario, *, steps: Callable[[list[dict]], list[int]] | None = None
    ) -> tuple[list[Failure], dict]:
        """Run ``scenario`` killed at every step (or at ``steps(K)``) and point; returns the failures and a summary
        (the steps of the clean run, how many kills were run, seconds)."""
        started = time.perf_counter()
        template, root = self.work / scenario.name / "template", self.work / scenario.name / "root"
        for folder in (template, root):
            if folder.exists():
                shutil.rmtree(folder)
        root.mkdir(parents=True)  # built where every run happens: the paths a command records stay the same

        def run_here(argv: list[str], kill_at: int = 0, when: str = "before") -> Run:
            return self.run(scenario, root, argv, kill_at, when)

        user_files = scenario.setup(root, run_here)
        user_bytes = {name: (root / name).read_bytes() for name in user_files}
        earlier = scenario.earlier(root)
        root.rename(template)
        self._fresh(template, root)
        clean = self.run(scenario, root, scenario.argv(root))
        assert clean.status == 0, f"{scenario.name}: the clean run failed: {clean.err[-3000:]}"
        expected = scenario.result(root)
        failures: list[Failure] = []
        lost = _user_files_changed(root, user_bytes)
        if lost:
            failures.append(Failure(scenario.name, 0, "-", "the clean run, no kill", "user files", f"{lost}"))
        chosen = steps(clean.steps) if steps else range(1, len(clean.steps) + 1)
        kills = 0
        for number in chosen:
            call = clean.steps[number - 1]
            where = f"{call['call']} at {call['at']}"
            for when in KILL_POINTS:
                self._fresh(template, root)
                killed = self.run(scenario, root, scenario.argv(root), number, when)
                kills += 1

                def fail(check: str, line: str, number: int = number, when: str = when, where: str = where) -> None:
                    failures.append(Failure(scenario.name, number, when, where, check, line))
                    with open(self.work / "failures.txt", "a") as found:  # as they come: a long run can be read
                        found.write(f"{failures[-1]}\n")

                if killed.status != -signal.SIGKILL:
                    fail("kill", f"the run was not killed at this step (status {killed.status}): {killed.last_line}")
                    continue
                finished = _same(scenario, scenario.result, root, expected)  # the new output is whole already
                whole_after_kill = finished or scenario.earlier(root) == earlier
                lost = _user_files_changed(root, user_bytes)
                if lost:
                    fail("user files", f"after the kill: {lost}")
                rerun = self.run(scenario, root, (scenario.rerun or scenario.argv)(root))
                told = any("interrupted" in line for line in (rerun.out + rerun.err).splitlines())
                if not whole_after_kill and not told:
                    fail("earlier", "neither the earlier output nor the new one is whole, and the rerun says nothing")
                lost = _user_files_changed(root, user_bytes)
                if lost:
                    fail("user files", f"after the rerun: {lost}")
                right = _same(scenario, scenario.result, root, expected)
                if rerun.status != 0 and not (finished and right):  # refusing to redo a finished output is right
                    fail("rerun", f"exit {rerun.status}: {rerun.last_line}")
                elif not right:
                    fail(
                        "rerun",
                        f"exit {rerun.status} but the output differs from the clean run's: "
                        f"{_difference(scenario, root, expected)}",
                    )
        summary = {
            "steps": clean.steps,
            "chosen": list(chosen),
            "kills": kills,
            "seconds": time.perf_counter() - started,
        }
        return failures, summary


#: Set to run every step of every command (by default a command is killed at each of its distinct operations).
EVERY_STEP = os.environ.get("ELMO_FAULTS_EVERY_STEP") == "1"


def distinct_steps(steps: list[dict]) -> list[int]:
    """The steps to kill at: every one under ``ELMO_FAULTS_EVERY_STEP=1``; else the first step of each distinct
    operation (the same call at the same line of the package: the 10 unlinks of one folder's files are one) and the
    last step."""
    if EVERY_STEP:
        return [step["step"] for step in steps]
    first: dict[tuple[str, str], int] = {}
    for step in steps:
        first.setdefault((step["call"], step["at"]), step["step"])
    return sorted({*first.values(), *([steps[-1]["step"]] if steps else [])})


def _same(scenario: Scenario, result: Callable[[Path], Any], root: Path, expected: Any) -> bool:
    try:
        return scenario.same(result(root), expected)
    except Exception:  # noqa: BLE001  an output that cannot be read is not the expected one
        return False


def _difference(scenario: Scenario, root: Path, expected: Any) -> str:
    """What differs between the output under ``root`` and ``expected``: the names, where they are digests."""
    try:
        actual = scenario.result(root)
    except Exception as error:  # noqa: BLE001
        return f"it cannot be read ({type(error).__name__}: {error})"
    pairs = [(actual, expected)]
    both = lambda a, b: isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)  # noqa: E731
    while any(both(a, b) for a, b in pairs):  # (model, files) results: compare each part
        pairs = [pair for a, b in pairs for pair in (zip(a, b, strict=True) if both(a, b) else [(a, b)])]
    names = []
    for a, b in pairs:
        if isinstance(a, dict) and isinstance(b, dict):
            names += sorted(k for k in set(a) | set(b) if k not in a or k not in b or not _equal(a[k], b[k]))
        elif a is None or b is None:
            names.append("the output is missing" if a is None else "the clean output is missing")
    return ", ".join(map(str, names[:8])) or "the values"


def _equal(a: Any, b: Any) -> bool:
    try:
        import numpy as np

        return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6)) if hasattr(a, "shape") else a == b
    except Exception:  # noqa: BLE001
        return False


def _user_files_changed(root: Path, user_bytes: dict[str, bytes]) -> list[str]:
    changed = []
    for name, data in user_bytes.items():
        path = root / name
        if not path.is_file():
            changed.append(f"{name} deleted")
        elif path.read_bytes() != data:
            changed.append(f"{name} changed")
    return changed


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    serve()
