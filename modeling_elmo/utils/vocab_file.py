"""A word vocabulary file (``vocab.txt``) checked and copied as a stream, before any tokenizer is built from it.

`ElmoTokenizer` holds its vocabulary as a dict, about 140 bytes a word (a 10,000,000-line file of 89 MB takes over
1.3 GB). The commands read a model folder's file here first: `count_vocabulary_words` gives the tokenizer's
``vocab_size`` and finds every line the tokenizer would refuse while holding 8 bytes a word (a hash), so a file that
does not fit the model's softmax is refused in one line before anything is built; `copy_vocabulary_file` publishes a
checked file without building the mapping at all.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..tokenization_elmo import SPECIAL_WORDS

__all__ = ["copy_vocabulary_file", "count_vocabulary_words", "vocabulary_size_of"]

#: bilm-tf's last line, which is no word (skipped, as the tokenizer skips it).
MAX_TERM_ID = "!!!MAXTERMID"


def _words(path: str | os.PathLike) -> Iterator[tuple[int, str | None]]:
    """``(line number, word)`` of each line that gets an id, as `ElmoTokenizer` reads the file: the special words
    listed first are skipped (they have ids 0-3 anyway), as is bilm-tf's last line; a line that is empty or a special
    word after other words comes as ``(number, None)`` when it is empty, else as the word (a repeat)."""
    shown = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"vocabulary file {shown!r} does not exist.")
    leading = True
    try:
        with open(path, encoding="utf-8") as handle:  # universal newlines, as the tokenizer opens it
            for number, line in enumerate(handle, start=1):
                word = line.rstrip("\n")
                if leading and word in SPECIAL_WORDS:
                    continue
                leading = False
                if not word.strip():
                    yield number, None
                elif word != MAX_TERM_ID:
                    yield number, word
    except UnicodeDecodeError as error:
        raise ValueError(f"vocabulary file {shown!r} is not UTF-8 text ({error.reason}).") from None


def _refusal(path: str | os.PathLike, number: int, word: str | None) -> ValueError:
    """The tokenizer's own line for a line that would shift the ids of the words after it."""
    shifts = "would shift the id of every later word"
    if word:
        problem = f"repeats the word {word[:80]!r} (a repeated word {shifts})"
    else:
        problem = f"is empty (an empty line {shifts})"
    return ValueError(f"vocabulary file {os.fspath(path)!r}: line {number} {problem}).")


def count_vocabulary_words(path: str | os.PathLike) -> int:
    """The ``vocab_size`` `ElmoTokenizer` gets from the file (the 4 special words and one id per other line), read as
    a stream; a `ValueError` naming the first line the tokenizer refuses (empty, a repeated word), with its words.

    Memory: one line and 8 bytes a word (each word's hash, sorted in place), never the words themselves."""
    hashes, first_bad = array("q"), None
    for number, word in _words(path):
        if word is None or word in SPECIAL_WORDS:
            first_bad = (number, word)
            break
        hashes.append(hash(word))
    ordered = np.frombuffer(hashes, dtype=np.int64)
    ordered.sort()  # in place: the words' hashes are held once
    equal = ordered[1:][ordered[1:] == ordered[:-1]]
    if equal.size:  # a repeat, or two words of one hash: the words of those hashes decide, read again
        candidates, seen = set(equal.tolist()), {}
        for number, word in _words(path):
            if word is not None and hash(word) in candidates:
                if word in seen:
                    raise _refusal(path, number, word)
                seen[word] = number
            if first_bad and number >= first_bad[0]:
                break
    if first_bad:
        raise _refusal(path, *first_bad)
    return len(SPECIAL_WORDS) + len(hashes)


def vocabulary_size_of(path: str | os.PathLike) -> int:
    """`count_vocabulary_words` of ``path``, or the 4 special words when there is no such file (as the tokenizer of a
    folder without ``vocab.txt`` has): the number to compare with a softmax's ``vocab_size`` before building
    anything."""
    return count_vocabulary_words(path) if os.path.lexists(path) else len(SPECIAL_WORDS)


def copy_vocabulary_file(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Write the file `ElmoTokenizer.save_vocabulary` would write for ``source`` (the special words first, then one
    word per line in id order) to the new file ``target``, as a stream. ``source`` must have passed
    `count_vocabulary_words`."""
    with open(Path(target), "x", encoding="utf-8") as out:
        out.write("".join(word + "\n" for word in SPECIAL_WORDS))
        for _, word in _words(source):
            out.write(word + "\n")
