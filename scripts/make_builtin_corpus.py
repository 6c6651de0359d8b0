#!/usr/bin/env python
"""Rebuild the packaged quick-start corpus ``modeling_elmo/corpora/austen-emma/`` from the NLTK Gutenberg file.

    python scripts/make_builtin_corpus.py PATH/TO/gutenberg/austen-emma.txt

The source is Jane Austen's *Emma* (1816; public domain) as distributed in the NLTK "Project Gutenberg
Selections" (``nltk_data/corpora/gutenberg/austen-emma.txt``). The script:

1. joins the wrapped lines of each paragraph (paragraphs are separated by blank lines) and drops the title line and
   the ``VOLUME``/``CHAPTER`` headings;
2. removes the underscores that mark italics (``_them_`` -> ``them``);
3. splits each paragraph into sentences after ``.``, ``!`` or ``?`` (not after ``Mr.``, ``Mrs.``, ``Dr.``, ``St.``);
4. separates punctuation from words (``clever,`` -> ``clever ,``; ``don't`` and ``Emma's`` stay one word);
5. writes one sentence per line: chapters 1-51 (volumes I, II and III up to chapter 15) to ``train.txt``,
   volume III chapters 16-17 to ``validation.txt`` and 18-19 to ``test.txt``.

The output is deterministic: running the script again on the same file gives the same bytes.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "modeling_elmo" / "corpora" / "austen-emma"
ABBREVIATIONS = ("Mr.", "Mrs.", "Dr.", "St.", "Messrs.")
#: A title (``Mr.``), a word with inner apostrophes or hyphens, a number, a dash run, or one punctuation character.
TOKEN = re.compile(r"(?:Mr|Mrs|Dr|St|Messrs)\.|[A-Za-z0-9]+(?:['’-][A-Za-z0-9]+)*|-{2,}|\S")


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(chapter number counted over the whole book, paragraph text) for every paragraph of the story."""
    chapter, out = 0, []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.strip().splitlines()]
        paragraph = " ".join(line for line in lines if line)
        if not paragraph or paragraph.startswith("[Emma by"):
            continue
        if re.fullmatch(r"VOLUME [IVX]+", paragraph):
            continue
        if re.fullmatch(r"CHAPTER [IVXL]+", paragraph):
            chapter += 1
            continue
        out.append((chapter, paragraph.replace("_", "")))
    return out


def sentences(paragraph: str) -> list[str]:
    pieces, start = [], 0
    for match in re.finditer(r"[.!?][\"')]*\s+(?=[\"'(]*[A-Z])", paragraph):
        before = paragraph[start : match.start() + 1].split()
        if before and before[-1] in ABBREVIATIONS:
            continue
        pieces.append(paragraph[start : match.end()].strip())
        start = match.end()
    pieces.append(paragraph[start:].strip())
    return [" ".join(TOKEN.findall(piece)) for piece in pieces if piece]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="the NLTK Gutenberg austen-emma.txt")
    args = parser.parse_args(argv)
    text = Path(args.source).read_text(encoding="utf-8")
    splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    for chapter, paragraph in paragraphs(text):
        split = "validation" if chapter in (52, 53) else "test" if chapter in (54, 55) else "train"
        splits[split].extend(sentences(paragraph))
    OUT.mkdir(parents=True, exist_ok=True)
    for split, lines in splits.items():
        (OUT / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{split}: {len(lines)} sentences, {sum(len(line.split()) for line in lines)} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
