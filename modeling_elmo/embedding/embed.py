"""Bulk ELMo feature export to HDF5: the ``elmo embed`` command.

A port of the removed ``allennlp elmo`` command (AllenNLP v0.9). The input is a text file with one sentence per line,
already tokenised and split on whitespace (or, with ``raw_text``, split by the tokenizer's pre-tokenizer). The output
is an HDF5 file in the old command's layout:

* one float32 dataset per input line, key ``str(line_index)`` (0-based), of shape ``(L + 1, tokens, 2P)`` for
  ``--all``, or ``(tokens, 2P)`` for ``--top`` (the last layer) and ``--average`` (the mean of the L + 1 layers);
* a dataset ``sentence_to_index`` of shape ``(1,)`` and variable-length string type holding a JSON object
  ``{sentence text: key}`` (a repeated sentence keeps the key of its last line), unless ``forget_sentences`` or
  ``use_sentence_keys`` is set.

With ``use_sentence_keys`` the sentence text itself is the key; lines containing ``/``, blank lines, the names
``.`` and ``sentence_to_index`` and repeated sentences are refused before any work starts.

How a run proceeds (see `embed_file`):

* The input is streamed, never read whole. It is cut into chunks of ``chunk_size`` consecutive lines; within a chunk
  the sentences are sorted by length (longest first) and batched, which saves padding; every sentence is still
  written under its own line index.
* Each finished chunk is written atomically to ``OUTPUT.partial/chunk-NNNNNNNN.h5``. When all chunks exist, they are
  merged into ``OUTPUT`` (written under a temporary name in the same folder, then renamed), and ``OUTPUT.partial`` is
  removed. ``OUTPUT`` therefore only ever exists complete; a killed run leaves ``OUTPUT.partial`` behind, and
  ``resume=True`` embeds only the chunks that are missing there (at most one chunk of work per process is lost).
  The merge needs disk space for a second copy of the output while it runs.
* Under ``accelerate launch`` every process embeds the chunks ``k`` with ``k % num_processes == process_index``, and
  the main process merges. A run may be resumed with a different number of processes.
* Blank lines give an empty array, ``(L + 1, 0, 2P)`` for ``--all`` or ``(0, 2P)`` otherwise (the old command raised
  an error). Invalid UTF-8 bytes are replaced by U+FFFD and the affected lines are counted and reported.
* The model runs under `torch.inference_mode()` and stateless, so a sentence's vectors depend on nothing but the
  sentence (not on its batch, the sort order or the number of processes). The command loads it with
  `modeling_elmo.embedding.inference.load_elmo_model`, which refuses weights that do not match ``config.json``.
* While a run works on ``OUTPUT``, its (main) process holds an exclusive `fcntl.flock` on ``OUTPUT.lock``; a second
  run on the same output stops at once. The lock file is removed at the end; a killed run's lock is released by
  the operating system.
* Refused before anything is written, each with one line naming the path: an output that is the input (also
  through a link), a binary input (a NUL byte in its first 64 KiB), an output folder that is missing, is a file or
  is not writable, and an output that is a folder.

The running of the model (`ElmoEmbedder`, `make_batches`) lives in `modeling_elmo.embedding.inference`, the reading
of the input in `modeling_elmo.embedding.input_lines`, the chunk files and their merge in
`modeling_elmo.embedding.hdf5_output`, the run record and what ``--overwrite`` may replace in
`modeling_elmo.embedding.resume`; this module is the command around them: paths, the lock, processes and the command
line.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..utils.io_utils import command_error, error_line, exclusive_lock, scan_lines
from ..utils.launch import LaunchError, check_process_count, launched_processes, use_cpu_backend
from ..utils.loading import without_transformers_progress_bars
from .hdf5_output import SENTENCE_TO_INDEX, Embedder, EmbedReport, chunk_path, merge_chunks, write_chunk
from .inference import DTYPES, ElmoEmbedder, check_compute_dtype, load_elmo_tokenizer
from .input_lines import iter_chunks
from .partial_folder import PartialRecords, proven_names, remove_proven
from .resume import check_replaceable, check_resumable, prepare_partial

logger = logging.getLogger(__name__)

LAYER_MODES = ("all", "top", "average")
DEFAULT_BATCH_SIZE = 64
DEFAULT_CHUNK_SIZE = 10_000


# ---------------------------------------------------------------------------------------------------- input


def _check_sentence_keys(path: Path, tokenize: Callable[[str], list[str]]) -> None:
    """Refuse inputs whose sentences cannot be HDF5 keys (``use_sentence_keys``): '/', blank, '.', duplicates."""
    seen: dict[str, int] = {}
    for _, lines in iter_chunks(path, DEFAULT_CHUNK_SIZE, lambda k: True):
        for index, key, _ in lines:
            if not tokenize(key):
                raise ValueError(f"--use-sentence-keys: line {index} is blank and cannot be a key.")
            if "/" in key or key in (".", SENTENCE_TO_INDEX):
                raise ValueError(
                    f"--use-sentence-keys: line {index} ({key[:80]!r}) cannot be an HDF5 key "
                    "(it contains '/' or is '.' or 'sentence_to_index'); use line-number keys."
                )
            if key in seen:
                raise ValueError(
                    f"--use-sentence-keys: line {index} repeats the sentence of line {seen[key]} "
                    f"({key[:80]!r}); keys must be unique, use line-number keys."
                )
            seen[key] = index


# ---------------------------------------------------------------------------------------------------- files


def _partial_dir(output: Path) -> Path:
    return output.with_name(output.name + ".partial")


def _lock_path(output: Path) -> Path:
    return output.with_name(output.name + ".lock")


def _check_paths(input_path: Path, output: Path) -> None:
    """Refuse, before anything is written, inputs and outputs that cannot work (each error names the path)."""
    if not input_path.exists():
        raise ValueError(f"input file {str(input_path)!r} does not exist.")
    if not input_path.is_file():
        raise ValueError(f"input {str(input_path)!r} is not a file.")
    _check_text_file(input_path)
    parent = output.parent
    if not parent.exists():
        raise ValueError(f"output folder {str(parent)!r} does not exist.")
    if not parent.is_dir():
        raise ValueError(f"the output's folder {str(parent)!r} is a file, not a folder.")
    if output.is_dir():
        raise ValueError(f"output path {str(output)!r} is a folder; give a file name.")
    if output.exists() and os.path.samefile(input_path, output):
        raise ValueError(
            f"output {str(output)!r} is the input file {str(input_path)!r}; writing it would destroy "
            "the input. Choose another output."
        )


def _check_text_file(path: Path, block_size: int = 1 << 16) -> None:
    """Refuse a binary file: a NUL byte in the first block (UTF-8 text has none; invalid UTF-8 alone is accepted)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(block_size)
    except OSError as error:
        raise ValueError(f"cannot read input file {str(path)!r}: {error.strerror}.") from None
    offset = head.find(b"\0")
    if offset >= 0:
        raise ValueError(
            f"input file {str(path)!r} is not text: it has a NUL byte at offset {offset} (a binary "
            "file, or UTF-16 text; elmo embed reads UTF-8 text, one sentence per line)."
        )


def _output_lock(output: Path) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock on ``OUTPUT.lock`` while the block runs (`io_utils.exclusive_lock`): another run writing
    the same output is refused at once, and a killed run leaves no stale lock."""
    path = _lock_path(output)
    return exclusive_lock(
        path,
        busy=f"another {{holder}} run is writing {str(output)!r} (it holds {str(path)!r}); "
        "wait for it to end, or choose another output.",
        unwritable=f"cannot write next to the output {str(output)!r}",
        holder="elmo embed",
    )


# ---------------------------------------------------------------------------------------------------- driver


class _Processes:
    """Rank, world size and barrier; single-process unless running under `accelerate launch`/torchrun."""

    def __init__(self) -> None:
        self.state = None
        if launched_processes() > 1:
            from accelerate import PartialState

            self.state = PartialState(cpu=use_cpu_backend())
            try:
                check_process_count(self.state.num_processes, self.state.distributed_type)
            except LaunchError as error:
                raise command_error("embed", error) from None
        self.index = self.state.process_index if self.state else 0
        self.count = self.state.num_processes if self.state else 1

    @property
    def is_main(self) -> bool:
        return self.index == 0

    @property
    def device(self) -> torch.device | None:
        return self.state.device if self.state else None

    def wait(self) -> None:
        if self.state is not None:
            self.state.wait_for_everyone()


def embed_file(
    input_file: str | os.PathLike,
    output_file: str | os.PathLike,
    embedder: Embedder | Callable[[], Embedder],
    *,
    mode: str,
    model_name: str = "",
    batch_size: int = DEFAULT_BATCH_SIZE,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_batch_tokens: int | None = None,
    tokenize: Callable[[str], list[str]] = str.split,
    raw_text: bool = False,
    forget_sentences: bool = False,
    use_sentence_keys: bool = False,
    overwrite: bool = False,
    resume: bool = False,
    show_progress: bool = True,
    processes: _Processes | None = None,
) -> EmbedReport:
    """Embed every line of ``input_file`` into the HDF5 file ``output_file`` (see the module docstring).

    Args:
        embedder: an `Embedder` (e.g. `ElmoEmbedder`), or a function building one (called once the arguments have
            been checked, so bad arguments fail before a model is loaded).
        mode: ``"all"``, ``"top"`` or ``"average"``.
        model_name: recorded in the output's attributes and checked on resume.
        tokenize: splits a line into words (``str.split`` for pre-tokenised text).
        raw_text: only recorded (it must match on resume); pass the matching ``tokenize``.
        chunk_size: lines per chunk: the sorting buffer and the unit of resumable work.
        max_batch_tokens: also cap a batch's padded token count (bounds memory on very long lines).
        overwrite: replace an existing output (and discard an interrupted run's ``OUTPUT.partial``).
        resume: continue an interrupted run from ``OUTPUT.partial`` (starts afresh if there is none).

    Returns:
        an `EmbedReport`. Counts over the whole input are filled in on the process that merged.
    """
    if mode not in LAYER_MODES:
        raise ValueError(f"mode must be one of {LAYER_MODES}, got {mode!r}.")
    processes = processes or _Processes()
    for name, value in (("batch_size", batch_size), ("chunk_size", chunk_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    if max_batch_tokens is not None and (not isinstance(max_batch_tokens, int) or max_batch_tokens < 1):
        raise ValueError(f"max_batch_tokens must be a positive integer or None, got {max_batch_tokens!r}.")
    if overwrite and resume:
        raise ValueError("overwrite and resume exclude each other.")
    input_path, output = Path(input_file), Path(output_file)
    _check_paths(input_path, output)
    # Only the main process writes OUTPUT, OUTPUT.partial's run file and the merge; it holds the lock for the run.
    with _output_lock(output) if processes.is_main else contextlib.nullcontext():
        return _embed_locked(
            input_path,
            output,
            embedder,
            processes,
            mode=mode,
            model_name=model_name,
            batch_size=batch_size,
            chunk_size=chunk_size,
            max_batch_tokens=max_batch_tokens,
            tokenize=tokenize,
            raw_text=raw_text,
            forget_sentences=forget_sentences,
            use_sentence_keys=use_sentence_keys,
            overwrite=overwrite,
            resume=resume,
            show_progress=show_progress,
        )


def _embed_locked(
    input_path: Path,
    output: Path,
    embedder: Embedder | Callable[[], Embedder],
    processes: _Processes,
    *,
    mode: str,
    model_name: str,
    batch_size: int,
    chunk_size: int,
    max_batch_tokens: int | None,
    tokenize: Callable[[str], list[str]],
    raw_text: bool,
    forget_sentences: bool,
    use_sentence_keys: bool,
    overwrite: bool,
    resume: bool,
    show_progress: bool,
) -> EmbedReport:
    partial = _partial_dir(output)
    if partial.is_symlink() or (os.path.lexists(partial) and not partial.is_dir()):  # --resume would work through it
        raise ValueError(
            f"{str(partial)!r}, where an interrupted run's chunks are kept, is "
            f"{'a symbolic link' if partial.is_symlink() else 'not a folder'}; elmo embed never reads or writes "
            "through one. Remove it if it is not yours to keep."
        )
    if output.exists() and not overwrite:
        raise ValueError(f"output file {str(output)!r} already exists; pass --overwrite to replace it.")
    if overwrite:
        check_replaceable(output, partial)
    if partial.exists() and not (overwrite or resume):
        raise ValueError(
            f"{str(partial)!r} holds an interrupted run; pass --resume to continue it or --overwrite to start again."
        )
    if use_sentence_keys:
        _check_sentence_keys(input_path, tokenize)

    if callable(embedder) and not hasattr(embedder, "embed_batch"):
        embedder = embedder()
    num_lines, input_sha256 = scan_lines(input_path)  # one streamed pass: the line count and a hash of every byte
    settings = {
        "input_size": input_path.stat().st_size,
        "input_sha256": input_sha256,
        "mode": mode,
        "model": model_name,
        "model_weights_sha256": getattr(embedder, "weights_fingerprint", None),
        "chunk_size": chunk_size,
        "raw_text": raw_text,
        "forget_sentences": forget_sentences,
        "use_sentence_keys": use_sentence_keys,
        "num_layers": embedder.num_layers,
        "output_size": embedder.output_size,
    }
    num_chunks = math.ceil(num_lines / chunk_size)
    report = EmbedReport(output_file=str(output), num_lines=num_lines)

    processes.wait()  # every process has checked the paths before the main one creates or removes anything
    if processes.is_main:
        prepare_partial(partial, settings, resume=resume)
    processes.wait()
    if resume:  # every process checks the recorded settings itself
        check_resumable(partial, settings)

    records = PartialRecords(partial, processes.index)
    mine = [k for k in range(num_chunks) if k % processes.count == processes.index]
    recorded = proven_names(partial)  # a file merely named like a chunk is not one
    done = {k for k in mine if chunk_path(partial, k).name in recorded}
    lines_of = lambda k: min(chunk_size, num_lines - k * chunk_size)  # noqa: E731
    report.resumed_lines = sum(lines_of(k) for k in done)
    todo = set(mine) - done
    if num_lines == 0:
        logger.warning("input file %s is empty; the output holds no sentences.", input_path)
    start = time.perf_counter()
    with tqdm(
        total=sum(lines_of(k) for k in mine),
        initial=report.resumed_lines,
        unit="sent",
        dynamic_ncols=True,
        disable=not (show_progress and processes.is_main),
        desc="elmo embed",
    ) as progress:
        for k, lines in iter_chunks(input_path, chunk_size, lambda k: k in todo):
            report.num_tokens += write_chunk(
                chunk_path(partial, k),
                lines,
                embedder,
                mode=mode,
                tokenize=tokenize,
                batch_size=batch_size,
                max_batch_tokens=max_batch_tokens,
                use_sentence_keys=use_sentence_keys,
                forget_sentences=forget_sentences,
                progress=progress,
                records=records,
            )
            report.embedded_lines += len(lines)
    report.seconds = time.perf_counter() - start
    processes.wait()
    if processes.is_main:
        recorded = proven_names(partial)
        missing = [k for k in range(num_chunks) if chunk_path(partial, k).name not in recorded]
        if missing:
            raise RuntimeError(f"chunks {missing[:10]} of {partial} are missing after embedding.")
        merge_chunks(partial, output, num_chunks, settings=settings, report=report, records=records)
        left = remove_proven(partial)
        if left:
            logger.warning(
                "%s: %r was kept: it holds %s, which no record of elmo embed lists; remove it yourself if it is "
                "not yours.",
                output,
                str(partial),
                ", ".join(left[:5]) + (f" (and {len(left) - 5} more)" if len(left) > 5 else ""),
            )
        report.merged = True
        if report.invalid_utf8_lines:
            logger.warning(
                "%d line(s) of %s held invalid UTF-8 (replaced by U+FFFD), the first is line %d.",
                report.invalid_utf8_lines,
                input_path,
                report.first_invalid_utf8_line,
            )
    return report


# ---------------------------------------------------------------------------------------------------- CLI


def build_parser(prog: str = "elmo embed") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        description="Write ELMo layer activations for every line of a text file to an HDF5 file (the layout of "
        "the old `allennlp elmo` command). Run under `accelerate launch` to use several GPUs/nodes.",
    )
    parser.add_argument("input_file", help="text file, one sentence per line (whitespace-tokenised unless --raw-text)")
    parser.add_argument("output_file", help="HDF5 file to write")
    parser.add_argument("--model", required=True, help="folder or Hub id of an ELMo model (ElmoModel or a head)")
    layers = parser.add_mutually_exclusive_group(required=True)
    layers.add_argument(
        "--all",
        dest="mode",
        action="store_const",
        const="all",
        help="write all L+1 layers: (L+1, tokens, 2P) per sentence",
    )
    layers.add_argument(
        "--top", dest="mode", action="store_const", const="top", help="write the top layer: (tokens, 2P)"
    )
    layers.add_argument(
        "--average",
        dest="mode",
        action="store_const",
        const="average",
        help="write the mean of the L+1 layers: (tokens, 2P)",
    )
    parser.add_argument(
        "--raw-text",
        action="store_true",
        help="split lines with the tokenizer's pre-tokenizer instead of on whitespace",
    )
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences per forward pass")
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=None,
        help="also cap the padded tokens per batch (bounds memory with very long lines)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=DEFAULT_CHUNK_SIZE,
        help="lines sorted by length together; also the unit of work that --resume keeps",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="e.g. cpu, cuda, cuda:1 (default: cuda if available; under accelerate: its device)",
    )
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="compute dtype (bfloat16: a GPU or a CPU with native bf16; float16: a GPU); the file is always float32",
    )
    parser.add_argument("--forget-sentences", action="store_true", help="do not write the sentence_to_index dataset")
    parser.add_argument(
        "--use-sentence-keys",
        action="store_true",
        help="key each dataset by its sentence instead of its line number (refuses '/' and repeats)",
    )
    run = parser.add_mutually_exclusive_group()
    run.add_argument("--overwrite", action="store_true", help="replace an existing output or interrupted run")
    run.add_argument("--resume", action="store_true", help="continue the interrupted run in OUTPUT.partial")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``elmo embed``: every refused input ends the command with one line ``elmo embed: error: ...`` (exit 1)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    processes = _Processes()
    device = processes.device or torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if processes.count > 1 and args.device is not None:
        logger.warning("--device %s ignored: accelerate assigns %s to this process.", args.device, device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise command_error("embed", f"--device {args.device} asked for a GPU, but torch sees none.")
    dtype = DTYPES[args.dtype]
    try:
        check_compute_dtype(device, dtype, f"--dtype {args.dtype} on {device}")
    except ValueError as error:
        raise command_error("embed", error) from None

    def load() -> ElmoEmbedder:  # called by embed_file once the paths have been checked
        with without_transformers_progress_bars():
            return ElmoEmbedder.from_pretrained(args.model, device=device, dtype=dtype, words=False)

    try:
        tokenize: Callable[[str], list[str]] = str.split
        if args.raw_text:
            tokenize = load_elmo_tokenizer(args.model, words=False).split_words
        report = embed_file(
            args.input_file,
            args.output_file,
            load,
            mode=args.mode,
            model_name=args.model,
            batch_size=args.batch_size,
            chunk_size=args.chunk_size,
            max_batch_tokens=args.max_batch_tokens,
            tokenize=tokenize,
            raw_text=args.raw_text,
            forget_sentences=args.forget_sentences,
            use_sentence_keys=args.use_sentence_keys,
            overwrite=args.overwrite,
            resume=args.resume,
            show_progress=not args.no_progress,
            processes=processes,
        )
    except (ValueError, FloatingPointError) as err:  # bad input, or a model whose vectors are not finite
        raise command_error("embed", err) from None
    except OSError as err:  # e.g. the disk filled up: finished chunks stay in OUTPUT.partial
        partial = _partial_dir(Path(args.output_file))
        kept = len(list(partial.glob("chunk-*.h5"))) if partial.is_dir() else 0
        hint = (
            f"; {kept} finished chunk(s) are kept in {str(partial)!r}: rerun with --resume to continue from them"
            if kept
            else ""
        )
        raise command_error("embed", f"{error_line(err)}{hint}.") from None
    if report.merged:
        print(
            f"elmo embed: wrote {report.num_lines} sentences to {report.output_file} "
            f"({report.embedded_lines} embedded now at {report.sentences_per_second:.1f} sentences/s on this "
            f"process, {report.resumed_lines} resumed; {report.blank_lines} blank, "
            f"{report.invalid_utf8_lines} with invalid UTF-8).",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
