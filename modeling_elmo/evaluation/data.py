"""Readers for the evaluation data: plain text, SST-2, CoNLL-U, the NLTK Penn Treebank sample and
sense-labelled JSONL.

Every reader returns plain Python lists (tokens are whitespace-split words) and raises `ValueError`
naming the file, the line and the bad value when the input does not have the expected form (a file that is not
text, e.g. a binary file, included). Invalid UTF-8 is replaced by U+FFFD and counted, as by every command of the
package. The file readers read local copies (``elmo evaluate --data-dir``);
`load_sst2_from_hub` and `load_ud_pos_from_hub` are the Hub equivalents built on `datasets.load_dataset`: they fail
within seconds with `HubUnreachableError` when the Hub cannot be reached.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..utils.config_checks import shown
from ..utils.io_utils import (
    MAX_LINE_BYTES,
    MAX_SENTENCE_TOKENS,
    LineTooLongError,
    hub_reachable,
    iter_lines,
)  # hub_reachable: one probe for every command (re-exported here)
from ..utils.loading import HubUnreachableError

__all__ = [
    "SENSE_LABEL_PATTERN",
    "TaggedSentence",
    "WsdOccurrence",
    "LabelledSentence",
    "HubUnreachableError",
    "hub_reachable",
    "read_text_sentences",
    "read_sst2",
    "read_conllu",
    "read_ptb_tagged",
    "split_ptb_by_file",
    "read_wsd_jsonl",
    "load_sst2_from_hub",
    "load_ud_pos_from_hub",
]

logger = logging.getLogger(__name__)

#: Accepted sense labels: one "word" of letters, digits and ``_ . : % - / ' +``. This admits the
#: Senseval lexical-sample labels (``HARD1``, ``interest_6``, ``product``) and WordNet sense keys
#: (``bank%1:14:00::``); anything else (empty strings, whitespace, numbers, lists, null) is rejected.
SENSE_LABEL_PATTERN = re.compile(r"^[A-Za-z0-9_.:%/'+-]+$")


@dataclass(frozen=True)
class LabelledSentence:
    """A sentence (list of words) with one class label (sentiment)."""

    tokens: list[str]
    label: int


@dataclass(frozen=True)
class TaggedSentence:
    """A sentence with one tag per word (POS)."""

    tokens: list[str]
    tags: list[str]
    source: str = ""


@dataclass(frozen=True)
class WsdOccurrence:
    """One occurrence of an ambiguous word: ``tokens[index]`` is the occurrence, ``word`` the key that
    groups occurrences (the lemma when the file gives one, else the surface word), ``sense`` its label."""

    tokens: list[str]
    index: int
    word: str
    sense: str
    line: int = 0


def _require_nonempty(items: list, what: str, path: Path | str) -> list:
    if not items:
        raise ValueError(f"{what} {str(path)!r} is empty: no examples to evaluate on")
    return items


#: The most distinct tags a tagging probe learns (UD's XPOS tag sets have a few thousand at most).
MAX_TAGS = 5_000


@contextlib.contextmanager
def _refusing_long_lines(path: Path, what: str) -> Iterator[None]:
    try:
        yield
    except LineTooLongError as error:
        raise ValueError(
            f"{what} {str(path)!r}: {error}; a line holds one sentence or record (at most {MAX_LINE_BYTES:,} bytes)"
        ) from None


def _check_sentence_length(count: int, where: str) -> None:
    if count > MAX_SENTENCE_TOKENS:
        raise ValueError(
            f"{where}: a sentence of {count:,} tokens; sentences are embedded whole, so at most "
            f"{MAX_SENTENCE_TOKENS:,} tokens each"
        )


def _check_tag_count(tags: set[str], tag: str, where: str) -> None:
    tags.add(tag)
    if len(tags) > MAX_TAGS:
        raise ValueError(
            f"{where}: tag {shown(tag)} is distinct tag number {len(tags):,} of the file; a tagging probe "
            f"learns at most {MAX_TAGS:,} (is the tag column right?)"
        )


def _text_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """(line number, line without its line break) of a UTF-8 text file (a byte-order mark is dropped; ``\n``,
    ``\r\n`` and a lone ``\r`` end a line).

    The rule of every command: invalid UTF-8 bytes are replaced by U+FFFD, and the lines that held some are counted
    and reported in one warning per file. Raises `ValueError` naming the file and the line when the file is missing
    or holds a NUL byte (not text: most likely a binary file)."""
    if not path.is_file():
        raise ValueError(f"{what} {str(path)!r} {'is not a file' if path.exists() else 'does not exist'}")
    invalid, first_invalid = 0, 0
    with open(path, "rb") as handle, _refusing_long_lines(path, what):
        for lineno, raw in enumerate(iter_lines(handle, max_line_bytes=MAX_LINE_BYTES), start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if b"\x00" in raw:
                raise ValueError(f"{what} {str(path)!r} is not text: line {lineno} holds a NUL byte (a binary file?)")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                invalid, first_invalid = invalid + 1, first_invalid or lineno
            yield lineno, line
    if invalid:
        logger.warning(
            "%s %s: %d line(s) held invalid UTF-8 (replaced by U+FFFD); the first is line %d.",
            what,
            path,
            invalid,
            first_invalid,
        )


def read_text_sentences(path: str | Path, max_sentences: int | None = None) -> list[list[str]]:
    """One sentence per line, whitespace-separated tokens; blank lines are skipped.

    Raises `ValueError` if the file holds no sentence.
    """
    path = Path(path)
    sentences: list[list[str]] = []
    for lineno, line in _text_lines(path, "text file"):
        tokens = line.split()
        _check_sentence_length(len(tokens), f"{path}:{lineno}")
        if tokens:
            sentences.append(tokens)
            if max_sentences is not None and len(sentences) >= max_sentences:
                break
    return _require_nonempty(sentences, "text file", path)


def read_sst2(path: str | Path, max_examples: int | None = None) -> list[LabelledSentence]:
    """Read an SST-2 TSV with a header row.

    Both column orders are accepted: the shared copy's ``label<TAB>sentence`` and GLUE's
    ``sentence<TAB>label`` (the label column is the one whose values are 0/1 on the first data row).
    """
    path = Path(path)
    out: list[LabelledSentence] = []
    label_col = None
    for lineno, line in _text_lines(path, "SST-2 file"):
        if lineno == 1 or not line.strip():  # the header
            continue
        row = line.split("\t")
        if len(row) != 2:
            raise ValueError(f"{path}:{lineno}: expected 2 tab-separated columns, got {len(row)}: {shown(row)}")
        if label_col is None:
            label_col = 0 if row[0].strip() in ("0", "1") else 1
        label_text, text = row[label_col].strip(), row[1 - label_col]
        if label_text not in ("0", "1"):
            raise ValueError(f"{path}:{lineno}: label must be 0 or 1, got {shown(label_text)}")
        tokens = text.split()
        if not tokens:
            raise ValueError(f"{path}:{lineno}: empty sentence")
        _check_sentence_length(len(tokens), f"{path}:{lineno}")
        out.append(LabelledSentence(tokens, int(label_text)))
        if max_examples is not None and len(out) >= max_examples:
            break
    return _require_nonempty(out, "SST-2 file", path)


def read_conllu(path: str | Path, column: str = "upos", max_sentences: int | None = None) -> list[TaggedSentence]:
    """Read a CoNLL-U file; ``column`` is ``"upos"`` (column 4) or ``"xpos"`` (column 5).

    Multiword-token ranges (``1-2``) and empty nodes (``1.1``) are skipped, so the tokens are the
    syntactic words, as in the UD POS task.
    """
    col = {"upos": 3, "xpos": 4}.get(column)
    if col is None:
        raise ValueError(f"column must be 'upos' or 'xpos', got {column!r}")
    path = Path(path)
    out: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    seen_tags: set[str] = set()
    sent_id = ""

    def flush() -> None:
        nonlocal tokens, tags, sent_id
        if tokens:
            out.append(TaggedSentence(tokens, tags, sent_id))
        tokens, tags, sent_id = [], [], ""

    for lineno, line in _text_lines(path, "CoNLL-U file"):
        if not line.strip():
            flush()
            if max_sentences is not None and len(out) >= max_sentences:
                break
            continue
        if line.startswith("#"):
            if line.startswith("# sent_id"):
                sent_id = line.split("=", 1)[-1].strip()
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise ValueError(f"{path}:{lineno}: a CoNLL-U line has 10 tab-separated fields, got {len(fields)}")
        if "-" in fields[0] or "." in fields[0]:
            continue
        tokens.append(fields[1])
        tags.append(fields[col])
        _check_sentence_length(len(tokens), f"{path}:{lineno}")
        _check_tag_count(seen_tags, fields[col], f"{path}:{lineno}")
    flush()
    if max_sentences is not None:
        out = out[:max_sentences]
    return _require_nonempty(out, "CoNLL-U file", path)


def read_ptb_tagged(path: str | Path) -> list[TaggedSentence]:
    """Read ``pos-ptb-sample/treebank_tagged.tsv``: ``word<TAB>tag`` lines, blank line between
    sentences, ``# wsj_NNNN.mrg`` comment lines (no tab) naming the source file of what follows."""
    path = Path(path)
    out: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    seen_tags: set[str] = set()
    source = ""
    for lineno, line in _text_lines(path, "tagged file"):
        if "\t" not in line:
            if tokens:
                out.append(TaggedSentence(tokens, tags, source))
                tokens, tags = [], []
            if line.startswith("#"):
                source = line[1:].strip()
            elif line.strip():
                raise ValueError(f"{path}:{lineno}: expected 'word<TAB>tag', got {shown(line)}")
            continue
        word, tag = line.split("\t", 1)
        tokens.append(word)
        tags.append(tag)
        _check_sentence_length(len(tokens), f"{path}:{lineno}")
        _check_tag_count(seen_tags, tag, f"{path}:{lineno}")
    if tokens:
        out.append(TaggedSentence(tokens, tags, source))
    return _require_nonempty(out, "tagged file", path)


def split_ptb_by_file(
    sentences: list[TaggedSentence], dev_fraction: float = 0.2
) -> tuple[list[TaggedSentence], list[TaggedSentence]]:
    """Deterministic train/dev split of the PTB sample by source file: the last ``dev_fraction`` of the
    files in sorted order are dev (no sentence of a document is on both sides)."""
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction!r}")
    files = sorted({s.source for s in sentences})
    if len(files) < 2:
        raise ValueError(f"need at least 2 source files to split by file, got {len(files)}")
    n_dev = max(1, round(len(files) * dev_fraction))
    dev_files = set(files[-n_dev:])
    train = [s for s in sentences if s.source not in dev_files]
    dev = [s for s in sentences if s.source in dev_files]
    return train, dev


def read_wsd_jsonl(path: str | Path) -> list[WsdOccurrence]:
    """Read sense-labelled occurrences, one JSON object per line::

        {"tokens": ["he", "served", "dinner"], "index": 1, "word": "served", "lemma": "serve", "sense": "SERVE10"}

    - ``tokens``: non-empty list of strings (the sentence, already split into words).
    - ``index`` (optional): position of the occurrence. Without it, ``word`` must occur exactly once in
      ``tokens`` and its position is used.
    - ``word``: the occurrence's surface word; with ``index``, ``tokens[index]`` must equal it.
    - ``lemma`` (optional): the key that groups occurrences of "the same word" (default: ``word``), so
      inflected forms (served / serves) are compared with each other.
    - ``sense``: a label matching `SENSE_LABEL_PATTERN`.

    Blank lines are skipped. Any violation raises `ValueError` naming the file and line.
    """
    path = Path(path)
    out: list[WsdOccurrence] = []
    for lineno, line in _text_lines(path, "WSD file"):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"{where}: not valid JSON ({getattr(e, 'msg', e)})") from None
        out.append(parse_wsd_record(obj, where, lineno))
    return _require_nonempty(out, "WSD file", path)


def parse_wsd_record(obj: object, where: str = "<record>", lineno: int = 0) -> WsdOccurrence:
    """Validate one WSD record (see `read_wsd_jsonl`); ``where`` prefixes error messages."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    tokens = obj.get("tokens")
    if isinstance(tokens, list):
        _check_sentence_length(len(tokens), where)
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) and t.strip() for t in tokens):
        raise ValueError(f"{where}: 'tokens' must be a non-empty list of non-empty strings, got {shown(tokens)}")
    word = obj.get("word")
    if not isinstance(word, str) or not word:
        raise ValueError(f"{where}: 'word' must be a non-empty string, got {shown(word)}")
    index = obj.get("index")
    if index is None:
        positions = [i for i, t in enumerate(tokens) if t == word]
        if not positions:
            raise ValueError(
                f"{where}: word {shown(word)} does not occur in its sentence {shown(' '.join(tokens[:100]))}"
            )
        if len(positions) > 1:
            raise ValueError(
                f"{where}: word {shown(word)} occurs {len(positions)} times in its sentence; give 'index' to say which"
            )
        index = positions[0]
    elif isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(tokens):
        raise ValueError(f"{where}: 'index' {shown(index)} is not a position in a sentence of {len(tokens)} tokens")
    elif tokens[index] != word:
        raise ValueError(
            f"{where}: word {shown(word)} is missing from its sentence at index {index} (found {shown(tokens[index])})"
        )
    lemma = obj.get("lemma", word)
    if not isinstance(lemma, str) or not lemma:
        raise ValueError(f"{where}: 'lemma' must be a non-empty string, got {shown(lemma)}")
    sense = obj.get("sense")
    if not isinstance(sense, str) or not SENSE_LABEL_PATTERN.match(sense):
        raise ValueError(
            f"{where}: unknown sense label format {shown(sense)}: a sense is one token of letters, digits "
            "and _ . : % / ' + - (e.g. 'HARD1', 'bank%1:14:00::')"
        )
    return WsdOccurrence(list(tokens), int(index), lemma, sense, lineno)


# --------------------------------------------------------------------------------------------------
# Hub loaders. Written against the public dataset layouts; the tests replace `datasets.load_dataset`.
# --------------------------------------------------------------------------------------------------
def _load_from_hub(path: str, **kwargs):
    """`datasets.load_dataset(path, **kwargs)`, or `HubUnreachableError` within seconds (no retries) when the Hub
    cannot be reached: offline mode without a cached copy, or no connection to the endpoint."""
    import datasets
    from huggingface_hub import constants

    from ..utils.compat import is_offline_mode

    advice = (
        "pass --data-dir FOLDER with a local copy of the probe data (see docs/evaluation.md), or set "
        "HF_HUB_OFFLINE=1 to use a copy in the local datasets cache"
    )
    if not is_offline_mode() and not hub_reachable():
        raise HubUnreachableError(
            f"the Hugging Face Hub ({constants.ENDPOINT}) cannot be reached to download {path}: {advice}"
        )
    try:
        return datasets.load_dataset(path, **kwargs)
    except ConnectionError as error:  # offline mode and nothing cached
        raise HubUnreachableError(
            f"{path} is not in the local datasets cache and the Hub cannot be reached ({error}): "
            "pass --data-dir FOLDER with a local copy of the probe data (see docs/evaluation.md)"
        ) from None


def load_sst2_from_hub(split: str, max_examples: int | None = None) -> list[LabelledSentence]:
    """GLUE SST-2 from the Hub (``nyu-mll/glue``, config ``sst2``; columns ``sentence``, ``label``).

    ``split`` is ``"train"`` or ``"validation"`` (the Hub test split has no labels and is refused).
    """
    if split not in ("train", "validation"):
        raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    ds = _load_from_hub("nyu-mll/glue", name="sst2", split=split)
    rows = _records(ds, max_examples)
    out = [LabelledSentence(str(r["sentence"]).split(), int(r["label"])) for r in rows if str(r["sentence"]).split()]
    return _require_nonempty(out, "Hub split", f"nyu-mll/glue/sst2:{split}")


def load_ud_pos_from_hub(
    split: str,
    dataset: str = "universal-dependencies/universal_dependencies",
    config: str = "en_ewt",
    max_sentences: int | None = None,
) -> list[TaggedSentence]:
    """UD English EWT UPOS tags from the Hub.

    The dataset's main branch is a loading script, which `datasets` >= 4 no longer runs, so the Hub's
    parquet conversion is read (``revision="refs/convert/parquet"``, folder ``en_ewt``); columns
    ``tokens`` and ``upos`` (a sequence of `ClassLabel`, whose names are used).
    """
    if split not in ("train", "validation"):
        raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    ds = _load_from_hub(dataset, data_dir=config, revision="refs/convert/parquet", split=split)
    names = None
    feature = ds.features.get("upos") if hasattr(ds, "features") else None
    inner = getattr(feature, "feature", None)
    if inner is not None and hasattr(inner, "names"):
        names = inner.names
    out = []
    for r in _records(ds, max_sentences):
        tags = [names[t] if names is not None else str(t) for t in r["upos"]]
        out.append(TaggedSentence(list(r["tokens"]), tags, str(r.get("idx", ""))))
    return _require_nonempty(out, "Hub split", f"{dataset}/{config}:{split}")


def _records(ds, limit: int | None) -> Iterable[dict]:
    n = len(ds) if limit is None else min(limit, len(ds))
    return (ds[i] for i in range(n))
