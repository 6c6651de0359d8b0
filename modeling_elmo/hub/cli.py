"""``elmo push`` / ``scripts/push_to_hub.py``: publish a model folder to the Hugging Face Hub.

1. checks the input: the repository id, the model folder (`check_model_folder`), and, unless ``--dry-run``, that a
   token exists (``HF_TOKEN`` or the stored login, never a file in the folder);
2. assembles the repository folder (`assemble_repo_folder`) and prints the plan: the allow-listed files;
3. uploads exactly that file list (`upload_repo_folder`). ``--dry-run`` stops after step 2 and never touches the
   network.

Bad input ends the command with one line, ``elmo push: error: ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
from pathlib import Path

from ..folders import manifest as manifest_module
from ..folders.run_folder import RunFolder, read_json_object
from ..utils.io_utils import command_error
from ..utils.results import read_results
from . import card as card_module
from . import card_index
from .card import CARD_KINDS, CardInputs
from .publish import COMMAND, assemble_repo_folder, check_model_folder, upload_repo_folder, validate_repo_id
from .safety import resolve_token

__all__ = ["build_parser", "main"]

PROG = "elmo push"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="elmo push",
        allow_abbrev=False,
        description="Assemble the Hub repository folder of an ELMo model (weights, custom code, tokenizer, model "
        "card, plots) and upload it. With --dry-run only the folder is written and the upload plan "
        "printed; nothing touches the network.",
    )
    parser.add_argument(
        "model_dir",
        help="folder written by save_pretrained, elmo pretrain or elmo convert "
        "(config.json, model.safetensors, tokenizer files)",
    )
    parser.add_argument("--repo-id", required=True, help="Hub repository, 'name' or 'namespace/name'")
    parser.add_argument(
        "--output-dir",
        help="where to write the repository folder (default: MODEL_DIR-hub next "
        "to the model folder with --dry-run, a temporary folder otherwise)",
    )
    parser.add_argument("--dry-run", action="store_true", help="write the folder and list the files; no upload")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", help="branch to commit to (created if missing; default main)")
    parser.add_argument("--commit-message", help="commit message (default 'Upload ELMo model')")
    parser.add_argument(
        "--card-kind",
        default="auto",
        choices=("auto",) + CARD_KINDS,
        help="model-card template (default: classifier for a classification head, converted for a "
        "converted release, else pretrained)",
    )
    parser.add_argument("--template", help="a Jinja model-card template instead of model_cards/<kind>.md")
    parser.add_argument("--license", help="license id for the card (default: from the metadata, else apache-2.0)")
    parser.add_argument("--language", action="append", help="language code (repeatable; default en)")
    parser.add_argument("--dataset", action="append", dest="datasets", help="training dataset (repeatable)")
    parser.add_argument(
        "--data-license",
        action="append",
        dest="data_licenses",
        metavar="[DATA=]LICENSE",
        help="licence of the training data, of all of it or of the named part (repeatable; default: "
        "what elmo pretrain --data-license recorded). A model published under a permissive "
        "licence over data of unknown or research-only licence gets a warning",
    )
    parser.add_argument("--base-model", help="Hub id of the biLM a classifier was trained from")
    parser.add_argument(
        "--eval-results",
        "--eval-suite",
        action="append",
        default=[],
        metavar="FILE",
        help=f"results file (docs/results.md; repeatable) instead of the model folder's "
        f"{RunFolder.EVAL_RESULTS} and {RunFolder.EVALUATION}/{RunFolder.EVAL_RESULTS}",
    )
    parser.add_argument(
        "--training-metadata",
        metavar="FILE",
        help=f"training metadata JSON instead of the model folder's {RunFolder.TRAINING_METADATA}",
    )
    parser.add_argument(
        "--plot",
        action="append",
        default=[],
        help="image to publish under plots/ (repeatable; the model folder's plots are added)",
    )
    return parser


def _card_inputs(args) -> CardInputs:
    metadata = None
    if args.training_metadata:
        metadata = read_json_object(args.training_metadata, "training metadata")
        if metadata is None:
            raise ValueError(f"training metadata file {args.training_metadata!r} does not exist.")
    return CardInputs(
        kind=args.card_kind,
        license=args.license,
        language=args.language,
        datasets=args.datasets,
        data_licenses=args.data_licenses,
        base_model=args.base_model,
        results=[read_results(path) for path in args.eval_results],
        metadata=metadata,
        template=args.template,
    )


@contextlib.contextmanager
def _warnings_on_stderr():
    """The card's warnings (a data licence, a value left out of the metadata) and what was done about an interrupted
    earlier push (`modeling_elmo.folders.manifest.recover_interrupted`) as ``elmo push: warning: ...`` lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: warning: %(message)s"))
    handler.setLevel(logging.WARNING)
    loggers = [logging.getLogger(m.__name__) for m in (card_module, card_index, manifest_module)]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _check_unchanged(output_dir: Path, files: list[str]) -> None:
    """Raise `ValueError` unless ``output_dir`` holds exactly the ``files`` that were assembled, checked and recorded in
    its manifest, each as recorded (size and sha256): what is uploaded is what was scanned."""
    missing = [name for name in files if not (output_dir / name).is_file()]
    changed = missing or manifest_module.foreign_files(output_dir, COMMAND)
    if changed:
        raise ValueError(
            f"the repository folder {str(output_dir)!r} changed after it was assembled and checked "
            f"({changed[0]!r} {'is missing' if missing else 'is not as written'}); nothing was uploaded. Run the "
            "push again."
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with _warnings_on_stderr():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        validate_repo_id(args.repo_id)
        model_dir = check_model_folder(args.model_dir).root
        token = None
        if args.output_dir:
            output_dir = Path(args.output_dir)
        elif args.dry_run:
            output_dir = model_dir.resolve().parent / f"{model_dir.resolve().name}-hub"
        else:
            output_dir = None
        if not args.dry_run:
            token = resolve_token([model_dir] + ([output_dir] if output_dir else []))
        card = _card_inputs(args)
        with contextlib.ExitStack() as stack:
            if output_dir is None:
                output_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="elmo-hub-"))) / "repo"
            # held from assembling to the end of the upload: another push cannot replace the folder being sent
            stack.enter_context(manifest_module.output_lock(output_dir, COMMAND))
            files = assemble_repo_folder(model_dir, output_dir, args.repo_id, card, plots=args.plot)
            total = sum((output_dir / name).stat().st_size for name in files)
            print(f"Repository folder: {output_dir}")
            for name in files:
                print(f"  {name}  ({(output_dir / name).stat().st_size:,} bytes)")
            print(f"{len(files)} files, {total:,} bytes")
            if args.dry_run:
                print(
                    f"Dry run: would create {args.repo_id} (private={args.private}) and upload these files to "
                    f"revision {args.revision or 'main'}; nothing was sent."
                )
                return 0
            _check_unchanged(output_dir, files)
            url = upload_repo_folder(
                output_dir,
                args.repo_id,
                token=token,
                files=files,
                private=args.private,
                revision=args.revision,
                commit_message=args.commit_message,
            )
            print(f"Uploaded to {url}")
    except ValueError as error:
        raise command_error("push", error) from None
    return 0
