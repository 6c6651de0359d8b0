"""``elmo evaluate``'s output folder across runs: the results already there are read (and must be this model's), the
files it would replace must be its own (its manifest records them), and the new task results are merged into the
earlier ones task by task (`merge_task_results`: evaluating one task never removes another task's results).
"""

from __future__ import annotations

import dataclasses
import os

from ..folders.manifest import file_record, read_manifest
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
    recorded = (read_manifest(out.root) or {}).get("files", {}) if own_manifest(out) else {}
    legacy = not own_manifest(out) and previous is not None and previous.source == COMMAND
    for path in (out.report_file, *(out.root / name for name in EvaluationFolder.PLOTS.values())):
        if not os.path.lexists(path) or legacy:
            continue
        if path.name not in recorded:
            raise ValueError(
                f"{path} was not written by elmo evaluate, which would replace it; move it away or "
                "choose another --output-dir."
            )
        if recorded[path.name] is not None and file_record(path) != recorded[path.name]:
            raise ValueError(
                f"{path} differs from what elmo evaluate wrote (changed since), and elmo evaluate would "
                "replace it; move it away or choose another --output-dir."
            )


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
