"""The resume records of ``elmo embed``: the run record (``OUTPUT.partial/run.json``: the settings a resumed run must
share with the interrupted one), the start or continuation of ``OUTPUT.partial``, and what ``--overwrite`` may
replace (only what an earlier run wrote, as its records in `modeling_elmo.embedding.partial_folder` prove)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..utils.io_utils import read_json_object
from .hdf5_output import is_embed_output
from .partial_folder import PartialRecords, proven_names, remove_proven, unproven_entries

RUN_FILE = "run.json"
#: Settings that must not change between a killed run and its resumption (they change the chunks' contents).
#: ``input_sha256`` hashes the whole input; ``model_weights_sha256`` the weights the model runs with (`ElmoEmbedder.
#: weights_fingerprint`: a model whose weights were replaced under the same path is another model).
RESUME_KEYS = (
    "input_size",
    "input_sha256",
    "mode",
    "model",
    "model_weights_sha256",
    "chunk_size",
    "raw_text",
    "forget_sentences",
    "use_sentence_keys",
    "num_layers",
    "output_size",
)


def check_replaceable(output: Path, partial: Path) -> None:
    """``--overwrite`` replaces only what an earlier ``elmo embed`` wrote: an output that is not a regular file (a
    device such as ``/dev/null``, a FIFO) or not an HDF5 file of elmo embed, and a ``.partial`` folder that is not an
    interrupted run's (its record, chunk files), are refused naming them."""
    if os.path.lexists(output) and not output.is_symlink() and not output.is_file():
        raise ValueError(
            f"output {str(output)!r} exists and is not a regular file (a device or a FIFO); elmo embed "
            "never replaces one. Choose another output."
        )
    if output.is_file() and not is_embed_output(output):
        raise ValueError(
            f"output {str(output)!r} exists and is not an HDF5 file written by elmo embed; --overwrite "
            "replaces only those. Choose another output."
        )
    if os.path.lexists(partial):
        foreign = [partial.name] if partial.is_symlink() or not partial.is_dir() else unproven_entries(partial)
        if foreign:
            raise ValueError(
                f"{str(partial)!r} holds what an interrupted elmo embed run does not write "
                f"({', '.join(foreign[:5])}); --overwrite never deletes it. Move it away."
            )


def prepare_partial(partial: Path, settings: dict[str, Any], *, resume: bool) -> None:
    """Main process: start ``partial`` (the run record, recorded), or continue the interrupted run in it
    (``resume``: what the killed run was writing is removed where its records prove it); with ``--overwrite``
    the interrupted run's files are removed first, only those its records list as they are
    (`partial_folder.remove_proven`: `check_replaceable` refused anything else)."""
    if partial.exists() and not resume:  # overwrite: discard the interrupted run
        left = remove_proven(partial)
        if left:  # appeared since the check
            raise ValueError(
                f"{str(partial)!r} holds what an interrupted elmo embed run does not write ({', '.join(left[:5])}); "
                "--overwrite never deletes it. Move it away."
            )
    if partial.exists():
        check_resumable(partial, settings)
        if RUN_FILE not in proven_names(partial):
            raise ValueError(
                f"{str(partial)!r} holds no record of elmo embed proving its {RUN_FILE} (a run of an earlier version, "
                "or files that are not a run's); nothing was deleted: remove it yourself if it is not yours, then "
                "run again."
            )
        remove_proven(partial, temporaries_only=True)  # what the killed run was writing
        return
    partial.mkdir()
    PartialRecords(partial).write_text(partial / RUN_FILE, json.dumps(settings, indent=2))


def check_resumable(partial: Path, settings: dict[str, Any]) -> None:
    run_file = partial / RUN_FILE
    if not run_file.is_file():
        raise ValueError(
            f"{str(partial)!r} has no {RUN_FILE}; it is not an interrupted `elmo embed` run. "
            "Pass --overwrite to start again."
        )
    recorded = read_json_object(run_file, "run", required=True)
    changed = [k for k in RESUME_KEYS if recorded.get(k) != settings[k]]
    if changed:

        def describe(key: str) -> str:
            if key in ("input_sha256", "model_weights_sha256") and key not in recorded:
                return f"{key} was not recorded (a run of an earlier version)"
            if key in ("input_size", "input_sha256"):
                return f"the input file changed ({key}: {recorded.get(key)!r} -> {settings[key]!r})"
            if key == "model_weights_sha256":
                return (
                    f"the model's weights changed (sha256 {str(recorded.get(key))[:16]}... -> "
                    f"{str(settings[key])[:16]}...)"
                )
            return f"{key}: {recorded.get(key)!r} -> {settings[key]!r}"

        detail = ", ".join(describe(k) for k in changed if not (k == "input_size" and "input_sha256" in changed))
        raise ValueError(
            f"cannot resume {str(partial)!r}: settings differ from the interrupted run ({detail}). "
            "Pass --overwrite to start again."
        )


__all__ = ["RESUME_KEYS", "RUN_FILE", "check_replaceable", "check_resumable", "prepare_partial"]
