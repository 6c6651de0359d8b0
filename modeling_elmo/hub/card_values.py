"""The user's values made safe for a public model card: cut to a bounded length, paths and credentials masked,
Markdown and HTML escaped for the text, markup stripped for the YAML metadata.

Every string that comes from the user (metadata, results files, labels, command-line values) goes through these
before it reaches a card (`modeling_elmo.hub.card` for the text, `modeling_elmo.hub.card_index` for the metadata).
"""

from __future__ import annotations

import html
import os
import re
from typing import Any

from ..utils.results import data_file_label
from .safety import HF_TOKEN_PATTERN

__all__ = ["MAX_SHOWN_CHARACTERS", "escape_markdown"]


def _words(key: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key)).lower()) if w]


#: The most characters of one value (a dataset's name, a setting) that the card shows: a value of megabytes in a
#: results file is cut, never published whole (in the text or the metadata).
MAX_SHOWN_CHARACTERS = 200


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN_CHARACTERS else f"{text[:MAX_SHOWN_CHARACTERS]}…"


def _slug(text: str) -> str:
    return "-".join(_words(str(text)[: 2 * MAX_SHOWN_CHARACTERS]))[:MAX_SHOWN_CHARACTERS].strip("-") or "unknown"


def _scrub(value: Any) -> Any:
    """A value safe to print in a public card: absolute paths become their last part (with its folder for a glob,
    `data_file_label`), tokens and the user and password of a URL are masked."""
    if isinstance(value, str):
        value = HF_TOKEN_PATTERN.sub("hf_***", value)
        value = re.sub(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@", r"\1***@", value)
        if os.path.isabs(value) or re.match(r"^[A-Za-z]:[\\/]", value) or value.startswith("~"):
            value = data_file_label(value) or value
    return value


#: Markdown punctuation that could start markup mid-line; ``_`` only where it could open or close emphasis (not
#: between two letters or digits, as in ``tiny_corpus``).
_MARKDOWN_SPECIAL = re.compile(r"([\\`*{}\[\]()!|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def escape_markdown(text: Any) -> str:
    """``text`` as literal characters in Markdown and HTML: no tag, link, image, emphasis, code span or table
    cell boundary can come out of it (Markdown punctuation is backslash-escaped, ``& < >`` become entities, line
    breaks become spaces; quotes stay, as no tag can be opened to put them in)."""
    text = " ".join(str(text).split())
    return html.escape(_MARKDOWN_SPECIAL.sub(r"\\\1", text), quote=False)


def _plain(text: Any) -> str:
    """A name for the YAML metadata: one line, no markup characters."""
    return " ".join(re.sub(r"[<>&\"'`\\{}\[\]]", "", str(_scrub(str(text)[: 2 * MAX_SHOWN_CHARACTERS]))).split())[
        :MAX_SHOWN_CHARACTERS
    ]
