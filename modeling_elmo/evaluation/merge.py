"""``elmo evaluate``'s output folder across runs: the results already there are read (and must be this model's), the
files it would replace must be its own (its manifest records them), and the new task results are merged into the
earlier ones task by task (`merge_task_results`: evaluating one task never removes another task's results).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..folders.files import TEMPORARY_FILE, remove_file
from ..folders.manifest import file_record, read_manifest, save_manifest
from ..folders.run_folder import EvaluationFolder
from ..utils.results import EvaluationResults, read_results

COMMAND = "elmo evaluate"


def own_manifest(out: EvaluationFolder) -> bool:
    manifest = read_manifest(out.root)
    return manifest is not None and manifest["command"] == COMMAND


def check_own_outputs(out: EvaluationFolder, previous: EvaluationResults | None) -> None:
    """Raise `ValueError` naming the file if one that ``elmo evaluate`` would replace in ``out`` (the report, a plot)
    was not written by it, as it wrote it: recorded in the folder's manifest with its size and sha256 (by name only
    in a manifest of an earlier version), or (a folder of an earlier version, without one) beside a results file
    that elmo evaluate wrote."""
    manifest = (read_manifest(out.root) or {}) if own_manifest(out) else {}
    recorded, pending = manifest.get("files", {}), manifest.get("pending", {})
    legacy = not own_manifest(out) and previous is not None and previous.source == COMMAND
    for path in (out.report_file, *(out.root / name for name in EvaluationFolder.PLOTS.values())):
        if not os.path.lexists(path) or legacy:
            continue
        if path.name not in recorded and path.name not in pending:
            raise ValueError(
                f"{path} was not written by elmo evaluate, which would replace it; move it away or "
                "choose another --output-dir."
            )
        record = file_record(path)
        if path.name in pending and record == pending[path.name]:
            continue  # what a killed run had put in place
        if path.name not in recorded or (recorded[path.name] is not None and record != recorded[path.name]):
            raise ValueError(
                f"{path} differs from what elmo evaluate wrote (changed since), and elmo evaluate would "
                "replace it; move it away or choose another --output-dir."
            )


class RecordedWrites:
    """The manifest of ``out`` kept true while a run replaces its files one by one: before each file takes its name,
    the manifest records it as pending (and its temporary), beside the records of the files as they were, so that a
    run killed between two files leaves a folder whose every file the manifest proves. `remove_left_temporaries`
    removes the temporaries a killed run left, where each is exactly as recorded."""

    def __init__(self, out: EvaluationFolder):
        self.out = out
        manifest = (read_manifest(out.root) or {}) if own_manifest(out) else {}
        self.records: dict = dict(manifest.get("files", {}))
        self.pending: dict = dict(manifest.get("pending", {}))  # a killed run's: still true of what it put in place
        self.temporaries: dict = {}
        self.left: dict = dict(manifest.get("temporaries", {}))

    def remove_left_temporaries(self) -> None:
        for name, record in self.left.items():
            path = self.out.root / name
            match = TEMPORARY_FILE.fullmatch(name)
            if match and Path(name).name == name and file_record(path) == record and os.lstat(path).st_nlink == 1:
                remove_file(path)

    def before_replace(self, path: Path, temporary: Path) -> None:
        record = file_record(temporary)
        self.pending[path.name] = record
        self.temporaries[temporary.name] = record
        save_manifest(self.out.root, COMMAND, self.records, pending=self.pending, temporaries=self.temporaries)


def previous_results(out: EvaluationFolder, model_name: str) -> EvaluationResults | None:
    """The results already in ``out`` (None when there are none), which the new ones are merged into; raises
    `ValueError` for a file that cannot be read or holds another model's results (it is never replaced)."""
    if not os.path.lexists(out.results_file):
        return None
    if out.results_file.is_symlink() or not out.results_file.is_file():
        raise ValueError(
            f"{out.results_file} is not a regular file; elmo evaluate never replaces one. Choose another --output-dir."
        )
    try:
        previous = read_results(out.results_file)
    except ValueError as error:
        raise ValueError(
            f"the results already in {out.results_file} cannot be read, so the new ones cannot be "
            f"merged into them ({error}); move the file away or choose another --output-dir."
        ) from None
    if previous.model != model_name:
        raise ValueError(
            f"{out.results_file} holds the results of model {previous.model!r}, not {model_name!r}; choose "
            "another --output-dir."
        )
    return previous


#: The per-task entries of ``details`` (task name -> value), merged task by task.
_PER_TASK_DETAILS = ("datasets", "tasks", "untrained_tasks", "timings_seconds", "untrained_timings_seconds")


def merge_task_results(
    previous: EvaluationResults | None, new: EvaluationResults, tasks: list[str]
) -> EvaluationResults:
    """``new`` (the results of ``tasks``) with the records of the other tasks kept from ``previous``: evaluating one
    task never removes another task's results. The per-task details are merged the same way; the rest of
    ``details`` (settings, model) is the new run's."""
    if previous is None:
        return new
    perplexity = ([] if "perplexity" in tasks else list(previous.perplexity)) + list(new.perplexity)
    scores = [s for s in previous.scores if s.task not in tasks] + list(new.scores)
    details = {**previous.details, **new.details}
    for key in _PER_TASK_DETAILS:
        old = previous.details.get(key)
        if isinstance(old, dict):
            details[key] = {**{t: v for t, v in old.items() if t not in tasks}, **(new.details.get(key) or {})}
    seed = new.untrained_seed if new.untrained_seed is not None else previous.untrained_seed
    return dataclasses.replace(new, perplexity=perplexity, scores=scores, details=details, untrained_seed=seed)
