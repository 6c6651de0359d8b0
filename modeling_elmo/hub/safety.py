"""Safety checks of publishing: pickled weights are refused (`modeling_elmo.utils.loading.refuse_pickled_weights`, the
guard every loader applies), Hub tokens never leak into published files nor come from the folders being published,
and the custom code shipped with a model passes an audit.
"""

from __future__ import annotations

import ast
import binascii
import os
import re
import string
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..folders.run_folder import CODE_FILES
from ..utils.io_utils import is_within
from ..utils.loading import refuse_pickled_weights

__all__ = [
    "ALLOWED_CODE_IMPORTS",
    "PACKAGE_KERNELS_IMPORT",
    "FORBIDDEN_CALLS",
    "FORBIDDEN_STDLIB_IMPORTS",
    "HF_TOKEN_PATTERN",
    "PRIVATE_TORCH",
    "SECRET_PATTERNS",
    "SPLIT_TOKENS",
    "audit_shipped_code",
    "custom_pipelines_problem",
    "find_secret",
    "is_within",
    "refuse_pickled_weights",
    "resolve_token",
    "scan_for_secrets",
]

#: Third-party modules the shipped code files may import.
ALLOWED_CODE_IMPORTS = frozenset({"torch", "transformers", "numpy", "tokenizers"})
#: The one import of this package a shipped file may make, inside a function (never at import time): its packed
#: kernels (``modeling_elmo.installed_kernels``), found where the package is installed.
PACKAGE_KERNELS_IMPORT = ("modeling_elmo.acceleration", "packed_kernels")
#: Standard-library modules the shipped code must not import: network, processes, pickling, native code,
#: dynamic imports.
FORBIDDEN_STDLIB_IMPORTS = frozenset(
    {
        "socket",
        "ssl",
        "http",
        "urllib",
        "ftplib",
        "smtplib",
        "poplib",
        "imaplib",
        "telnetlib",
        "xmlrpc",
        "socketserver",
        "asyncio",
        "selectors",
        "webbrowser",
        "subprocess",
        "multiprocessing",
        "pty",
        "pickle",
        "cPickle",
        "shelve",
        "marshal",
        "dill",
        "ctypes",
        "importlib",
        "runpy",
        "code",
        "codeop",
        "zipimport",
        "tempfile",
        "shutil",
    }
)
#: Calls the shipped code must not contain anywhere (not only at import time).
FORBIDDEN_CALLS = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "__import__",
        "torch.load",
        "torch.hub.load",
        "pickle.load",
        "pickle.loads",
        "numpy.load",
        "np.load",
    }
)

#: Why a private part of torch is refused in shipped code: a model's code must keep working with the torch releases
#: its users have, and torch changes its internals (``torch.ops.*`` operators, underscored names) without notice.
PRIVATE_TORCH = "a private torch API (torch.ops.* or an underscored name), which changes between releases"

#: Where a credential starts and ends: not inside a longer run of letters and digits. Not a regex word boundary
#: (``\b``): ``_`` is a word character, so ``token_hf_...``, ``AKIA..._prod`` or ``x_ghp_...`` (a label, a file name)
#: would hide the credential from it.
_START, _END = r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])"
#: A Hugging Face access token (user or organisation).
HF_TOKEN_PATTERN = re.compile(rf"{_START}hf_[A-Za-z0-9]{{30,}}{_END}")
_AWS_KEY_ID = r"(?:AKIA|ASIA)[0-9A-Z]{16}"
#: An AWS secret access key: 40 characters of base64's alphabet, not inside a longer run of them.
_AWS_SECRET = r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
#: How far apart an AWS key id and its secret key may stand to be "beside" each other (the same or the next lines of
#: a credentials file, a card, two labels).
_AWS_PAIR_GAP = 200
#: The credentials a published text file must not hold, by what they are (the name goes into the refusal): AWS secret
#: access keys (an ``aws_secret_access_key`` assignment, or 40 base64 characters beside an access key id), a PEM
#: private-key block, a Hugging Face token, an AWS access key id (long-term ``AKIA``, temporary ``ASIA``), GitHub
#: tokens (classic ``ghp_`` and the OAuth, user-to-server, server-to-server and refresh kinds, and fine-grained
#: ``github_pat_``).
_AWS_PAIR = "an AWS secret access key (beside its AKIA... id)"
_AWS_KEY_ID_PATTERN = re.compile(rf"{_START}{_AWS_KEY_ID}{_END}")
SECRET_PATTERNS = {
    "an AWS secret access key (aws_secret_access_key = ...)": re.compile(
        r"(?i)aws[_-]?secret[_-]?access[_-]?key[\"']?\s*[:=]\s*[\"']?" + _AWS_SECRET
    ),
    _AWS_PAIR: re.compile(
        rf"{_START}{_AWS_KEY_ID}{_END}[\s\S]{{0,{_AWS_PAIR_GAP}}}?{_AWS_SECRET}"
        rf"|{_AWS_SECRET}[\s\S]{{0,{_AWS_PAIR_GAP}}}?{_START}{_AWS_KEY_ID}{_END}"
    ),
    "a PEM private key (-----BEGIN ... PRIVATE KEY-----)": re.compile(r"(?i)-----\s*BEGIN[A-Z0-9 ]*PRIVATE\s+KEY"),
    "a Hugging Face access token (hf_...)": HF_TOKEN_PATTERN,
    "an AWS access key id (AKIA...)": _AWS_KEY_ID_PATTERN,
    "a GitHub token (ghp_...)": re.compile(rf"{_START}gh[pousr]_[A-Za-z0-9]{{36,}}{_END}"),
    "a GitHub fine-grained token (github_pat_...)": re.compile(rf"{_START}github_pat_[A-Za-z0-9_]{{22,}}"),
}


@dataclass(frozen=True)
class _TokenShape:
    """A token as a prefix and a body: what the scan of split tokens joins adjacent words into."""

    what: str
    prefixes: tuple[str, ...]
    body: frozenset[str]
    shortest: int
    longest: int | None = None


_ALNUM = frozenset(string.ascii_letters + string.digits)
#: The tokens looked for when written in pieces over adjacent words or lines (``hf_`` on one line of ``vocab.txt``,
#: the rest on the next; ``AKIA`` in one label, the rest in the next).
SPLIT_TOKENS = (
    _TokenShape("a Hugging Face access token (hf_...)", ("hf_",), _ALNUM, 30),
    _TokenShape(
        "an AWS access key id (AKIA...)", ("AKIA", "ASIA"), frozenset(string.ascii_uppercase + string.digits), 16, 16
    ),
    _TokenShape("a GitHub token (ghp_...)", tuple(f"gh{c}_" for c in "pousr"), _ALNUM, 36),
    _TokenShape("a GitHub fine-grained token (github_pat_...)", ("github_pat_",), _ALNUM | {"_"}, 22),
)
#: At most this many characters of adjacent pieces are joined into one candidate token.
SPLIT_TOKEN_CHARACTERS = 160
#: A piece of a split token: a run of letters, digits and ``_`` (anything else, a line break, a space, a quote, a
#: comma, a dash, separates pieces).
_PIECE = re.compile(r"[A-Za-z0-9_]+")
#: In a JSON file the pieces skip what is not a label or value: a number outside quotes (``label2id``'s ids) and a
#: key made of digits only (``id2label``'s ids), so that ``{"0": "hf_AB...", "1": "CD..."}`` joins the two labels.
_JSON_PIECE = re.compile(
    r'"\d+"\s*:|(?<![A-Za-z0-9_."])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![A-Za-z0-9_."])|([A-Za-z0-9_]+)'
)
_PREFIXES = sorted({p for shape in SPLIT_TOKENS for p in shape.prefixes}, key=len)
#: Where a split token may start: a piece that begins with a token's prefix, or that is a beginning of one (``h``,
#: ``hf``, ``AK``, ``github``) and ends there.
_SPLIT_START = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    + "|".join(re.escape(p) for p in _PREFIXES)
    + "|(?:"
    + "|".join(sorted({re.escape(p[:n]) for p in _PREFIXES for n in range(1, len(p))}, key=len, reverse=True))
    + ")(?![A-Za-z0-9_]))"
)
#: What a credential of `SECRET_PATTERNS` begins with: the base64 scan looks for these, encoded.
ENCODED_PREFIXES = (
    "hf_",
    "AKIA",
    "ASIA",
    *(f"gh{c}_" for c in "pousr"),
    "github_pat_",
    "-----BEGIN",
    "aws_secret_access_key",
    "AWS_SECRET_ACCESS_KEY",
)


def _encoded_cores(prefix: bytes) -> set[str]:
    """The base64 characters that encode ``prefix`` whatever surrounds it: one string for each of the three places
    it may start within a group of three bytes, in both alphabets (standard and URL-safe)."""
    cores = set()
    for shift in range(3):
        encoded = binascii.b2a_base64(bytes(shift) + prefix + bytes(3), newline=False).decode()
        first, last = -(-8 * shift // 6), (8 * (shift + len(prefix))) // 6  # characters inside the prefix's bits
        cores |= {encoded[first:last], encoded[first:last].translate(str.maketrans("+/", "-_"))}
    return cores


#: Where base64 may hold a credential: one of the `ENCODED_PREFIXES`, encoded.
_ENCODED_PREFIX = re.compile(
    "|".join(sorted({re.escape(c) for p in ENCODED_PREFIXES for c in _encoded_cores(p.encode())}, key=len)[::-1])
)
_BASE64_CHARACTER = re.compile(r"[A-Za-z0-9+/_=\-]")
#: A run of base64 (either alphabet), possibly wrapped over lines.
_BASE64_RUN = re.compile(r"(?:[A-Za-z0-9+/_-]|\r?\n)+")
#: Base64 characters looked at around an encoded prefix: enough for the longest credential and the text around it.
_BASE64_WINDOW = 512
_URLSAFE = str.maketrans("-_", "+/")


# ----------------------------------------------------------------------------------------------- secrets
def scan_for_secrets(folder: str | os.PathLike, files: Iterable[str]) -> None:
    """Raise `ValueError` naming the file, the line and the kind of credential if a text file of ``files`` (relative
    to ``folder``) holds one (the token itself is not repeated): one of `SECRET_PATTERNS`, a token of `SPLIT_TOKENS`
    written in pieces over adjacent words or lines, or base64 that decodes to one of them."""
    for name in files:
        if name.endswith((".json", ".md", ".py", ".txt")):
            found = find_secret(Path(folder) / name, json_file=name.endswith(".json"))
            if found:
                what, line = found
                raise ValueError(f"{name} contains what looks like {what} (line {line}); refusing to publish it.")


def find_secret(path: Path, *, json_file: bool = False, block_size: int = 1 << 20) -> tuple[str, int] | None:
    """The kind and line number of the first credential in the text file ``path`` (see `scan_for_secrets`), or
    `None`. The file is read a block at a time; each block is scanned with the last lines of the one before it (up to
    4 KiB), so a credential or a split token over two blocks is seen: memory holds a block, not the file."""
    line = 1  # the line at which `text` starts
    tail = ""
    for block in _whole_lines(path, block_size):
        text = tail + block
        found = _secret_in(text, json_file)
        if found:
            what, offset = found
            return what, line + text.count("\n", 0, offset)
        keep = text[-4096:]
        cut = keep.find("\n") + 1 if len(text) > 4096 else 0
        tail = keep[cut:] if "\n" in keep else ""
        line += text.count("\n") - tail.count("\n")
    return None


def _secret_in(text: str, json_file: bool) -> tuple[str, int] | None:
    """The kind and offset of the first credential in ``text``, or `None`."""
    hits = []
    for rank, (what, pattern) in enumerate(SECRET_PATTERNS.items()):
        if what == _AWS_PAIR and not _AWS_KEY_ID_PATTERN.search(text):
            continue  # a secret key is looked for beside an id only where there is an id
        if match := pattern.search(text):
            hits.append((match.start(), rank, what))
    for rank, found in enumerate((_split_token(text, json_file), _base64_token(text)), len(SECRET_PATTERNS)):
        if found:
            hits.append((found[1], rank, found[0]))
    if not hits:
        return None
    offset, _, what = min(hits)
    return what, offset


def _split_token(text: str, json_file: bool) -> tuple[str, int] | None:
    """A token of `SPLIT_TOKENS` written over two or more adjacent pieces of ``text`` (see `_PIECE`, `_JSON_PIECE`),
    as (kind, offset of its first piece)."""
    pieces = _JSON_PIECE if json_file else _PIECE
    for start in _SPLIT_START.finditer(text):
        joined, count = "", 0
        for piece in pieces.finditer(text, start.start()):
            word = piece.group(1) if json_file else piece.group()
            if word is None:
                continue  # a number or an id key of a JSON file
            joined += word
            count += 1
            if len(joined) > SPLIT_TOKEN_CHARACTERS or not _may_become_token(joined):
                break
            if count > 1 and (what := _is_token(joined)):
                return what, start.start()
    return None


def _may_become_token(joined: str) -> bool:
    """Whether ``joined`` is the beginning of a token of `SPLIT_TOKENS` (or a whole one)."""
    for shape in SPLIT_TOKENS:
        for prefix in shape.prefixes:
            if prefix.startswith(joined):
                return True
            if joined.startswith(prefix):
                body = joined[len(prefix) :]
                if all(c in shape.body for c in body) and (shape.longest is None or len(body) <= shape.longest):
                    return True
    return False


def _is_token(joined: str) -> str | None:
    """The kind of token ``joined`` is, or `None`."""
    for shape in SPLIT_TOKENS:
        for prefix in shape.prefixes:
            if joined.startswith(prefix):
                body = joined[len(prefix) :]
                if (
                    len(body) >= shape.shortest
                    and (shape.longest is None or len(body) <= shape.longest)
                    and all(c in shape.body for c in body)
                ):
                    return shape.what
    return None


def _base64_token(text: str) -> tuple[str, int] | None:
    """A credential written as base64 (either alphabet, wrapped over lines or not) in ``text``, as (kind, offset).

    Where the text holds one of the `ENCODED_PREFIXES` encoded, the base64 around it is decoded at its four
    alignments and the decoded text scanned with `SECRET_PATTERNS`: only a whole credential counts, never a mere
    prefix, so ordinary long words and other base64 data (an image) do not."""
    for hit in _ENCODED_PREFIX.finditer(text):
        start = hit.start()
        low = max(0, start - _BASE64_WINDOW)
        while start > low and (_BASE64_CHARACTER.match(text, start - 1) or text[start - 1] in "\r\n"):
            start -= 1
        run = _BASE64_RUN.match(text, start, hit.start() + _BASE64_WINDOW)
        data = re.sub(r"\s", "", run.group() if run else "").rstrip("=").translate(_URLSAFE)
        for shift in range(4):
            part = data[shift:]
            part = part[: len(part) // 4 * 4] if len(part) % 4 == 1 else part + "=" * (-len(part) % 4)
            try:  # a last group of two or three characters is padded: the bytes it holds count
                decoded = binascii.a2b_base64(part).decode("latin-1")
            except binascii.Error:
                continue
            for what, pattern in SECRET_PATTERNS.items():
                if pattern.search(decoded):
                    return f"{what}, base64-encoded", start
    return None


def _whole_lines(path: Path, block_size: int = 1 << 20) -> Iterator[str]:
    """The text of ``path`` in pieces of about ``block_size`` characters that end at a line break (no credential
    holds one): memory holds a block and the longest line, not the file (a ``vocab.txt`` may have 10 M lines)."""
    carry = ""
    with open(path, encoding="utf-8", errors="replace") as handle:
        while block := handle.read(block_size):
            end = block.rfind("\n") + 1
            if end:
                yield carry + block[:end]
                carry = block[end:]
            else:
                carry += block
    if carry:
        yield carry


# ----------------------------------------------------------------------------------------------- code references
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The keys of a ``custom_pipelines`` entry transformers reads; ``default`` (a model to download) is not one a
#: published model may carry.
_PIPELINE_KEYS = frozenset({"impl", "pt", "tf", "type"})


def custom_pipelines_problem(value: object, code_dir: str | os.PathLike) -> str | None:
    """Why the ``custom_pipelines`` of a ``config.json`` may not be carried into a model or published, or `None`.

    Guarded as ``auto_map`` is: each task's ``impl`` must be ``module.Class`` with ``module.py`` one of the package's
    code files (`CODE_FILES`) present in ``code_dir`` and defining ``Class``: a reference to another repository
    (``owner/repo--module.Class``), a path (``../evil.X``) or any other module would make a client with
    ``trust_remote_code=True`` fetch and run code that is not the model's. ``pt``/``tf`` name classes, ``type`` is a
    word, and nothing else may be there."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"custom_pipelines must be an object of pipeline tasks, not {type(value).__name__}"
    for task, entry in value.items():
        if not isinstance(entry, dict):
            return f"custom_pipelines entry {task!r} must be an object, not {type(entry).__name__}"
        extra = sorted(set(entry) - _PIPELINE_KEYS)
        if extra:
            return f"custom_pipelines entry {task!r} has key(s) {', '.join(map(repr, extra))}, which no model may carry"
        impl = entry.get("impl")
        module, _, class_name = impl.partition(".") if isinstance(impl, str) else ("", "", "")
        code = Path(code_dir) / f"{module}.py"
        if not (_IDENTIFIER.fullmatch(module) and _IDENTIFIER.fullmatch(class_name) and code.name in CODE_FILES):
            return (
                f"custom_pipelines entry {task!r} names {impl!r}, not a class of the model's own code files "
                f"({', '.join(CODE_FILES)}): a client would fetch and run code from elsewhere"
            )
        if not code.is_file() or code.is_symlink():
            return f"custom_pipelines entry {task!r} names {impl!r}, but {code.name} is not in {str(code_dir)!r}"
        defined = {n.name for n in ast.parse(code.read_text(encoding="utf-8")).body if isinstance(n, ast.ClassDef)}
        if class_name not in defined:
            return f"custom_pipelines entry {task!r} names {impl!r}, but {code.name} defines no class {class_name}"
        for key in ("pt", "tf"):
            names = entry.get(key, [])
            names = [names] if isinstance(names, str) else names
            if not isinstance(names, list) or not all(isinstance(n, str) and _IDENTIFIER.fullmatch(n) for n in names):
                return f"custom_pipelines entry {task!r} has {key}={names!r}; it must list class names"
        if not isinstance(entry.get("type", "text"), str) or not _IDENTIFIER.fullmatch(entry.get("type", "text")):
            return f"custom_pipelines entry {task!r} has type={entry.get('type')!r}, not a pipeline type"
    return None


def resolve_token(forbidden_dirs: Iterable[str | os.PathLike] = ()) -> str:
    """The Hub token from ``HF_TOKEN`` or the stored login (``hf auth login``); raise `ValueError` if none.

    The token is never read from the folders being published: if the stored-login file
    (``huggingface_hub.constants.HF_TOKEN_PATH``) lies inside one of ``forbidden_dirs``, this raises instead.
    """
    from huggingface_hub import constants, get_token

    token_file = Path(constants.HF_TOKEN_PATH)
    for folder in forbidden_dirs:
        if is_within(token_file, Path(folder)):
            raise ValueError(
                f"the token file {token_file} lies inside {folder}, a folder being published; refusing to read a "
                "token from it. Set HF_TOKEN or log in with `hf auth login` (stored outside the folder)."
            )
    token = get_token()
    if not token:
        raise ValueError(
            "no Hugging Face token: set the HF_TOKEN environment variable or run `hf auth login` "
            "(or use --dry-run to only write the folder)."
        )
    return token


# ----------------------------------------------------------------------------------------------- code audit
def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _private_torch(dotted: str | None) -> bool:
    """Whether the dotted name (``torch.ops.mkl._mkl_linear``, ``torch.utils._triton``) reaches into torch's
    internals: its operator namespaces or a name with a leading underscore (dunders such as ``__version__`` are
    public)."""
    parts = (dotted or "").split(".")
    if parts[0] != "torch" or len(parts) < 2:
        return False
    return parts[1] == "ops" or any(part.startswith("_") and not part.endswith("__") for part in parts[1:])


def _imports_package_kernels(node: ast.ImportFrom) -> bool:
    """Whether ``node`` is exactly ``from modeling_elmo.acceleration import packed_kernels [as name]``."""
    module, name = PACKAGE_KERNELS_IMPORT
    return not node.level and node.module == module and [alias.name for alias in node.names] == [name]


def audit_shipped_code(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Problems in the custom-code files shipped to the Hub (an empty list means they pass).

    A shipped file may import torch, transformers, numpy, tokenizers, the other shipped files (relative
    imports), standard-library modules other than `FORBIDDEN_STDLIB_IMPORTS` (network, processes,
    pickling, native code, dynamic imports) and, inside a function, this package's kernels module
    (`PACKAGE_KERNELS_IMPORT`); it may not call any of `FORBIDDEN_CALLS` (``eval``, ``exec``,
    ``torch.load``, ...) nor use torch's private APIs (`PRIVATE_TORCH`: ``torch.ops.*``, ``torch._assert_async``,
    ``torch.utils._triton``, ...), and its module level (outside functions and classes) may not call ``open``.
    """
    paths = [Path(p) for p in paths]
    shipped_modules = {Path(name).stem for name in CODE_FILES}
    stdlib = set(sys.stdlib_module_names)
    problems = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        private_lines: set[int] = set()
        in_functions = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) in in_functions and _imports_package_kernels(node):
                continue
            if isinstance(node, ast.Attribute) and node.lineno not in private_lines and _private_torch(_dotted(node)):
                private_lines.add(node.lineno)  # the outermost chain of a line is met first: one problem per line
                problems.append(f"{path.name}:{node.lineno}: uses {_dotted(node)}, {PRIVATE_TORCH}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imported = (
                    [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else [f"{node.module}.{alias.name}" for alias in node.names]
                    if node.module and not node.level
                    else []
                )
                for name in imported:
                    if _private_torch(name):
                        problems.append(f"{path.name}:{node.lineno}: imports {name}, {PRIVATE_TORCH}")
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
                relative = False
            elif isinstance(node, ast.ImportFrom):
                relative = node.level > 0
                if relative:
                    names = [node.module] if node.module else [alias.name for alias in node.names]
                else:
                    names = [node.module or ""]
            else:
                if isinstance(node, ast.Call):
                    called = _dotted(node.func)
                    if called in FORBIDDEN_CALLS:
                        problems.append(f"{path.name}:{node.lineno}: calls {called}")
                continue
            for name in names:
                top = name.split(".")[0]
                if relative:
                    if node.level != 1 or top not in shipped_modules:
                        problems.append(
                            f"{path.name}:{node.lineno}: relative import of {'.' * node.level}{name}, "
                            f"not one of the shipped files {sorted(shipped_modules)}"
                        )
                elif top == "__future__" or top in ALLOWED_CODE_IMPORTS:
                    continue
                elif top in FORBIDDEN_STDLIB_IMPORTS:
                    problems.append(
                        f"{path.name}:{node.lineno}: imports {name} (network, process, pickle or dynamic-import module)"
                    )
                elif top not in stdlib:
                    problems.append(
                        f"{path.name}:{node.lineno}: imports {name}, which is not torch, transformers, "
                        "numpy, tokenizers nor the standard library"
                    )
        for statement in tree.body:  # module level only; function bodies run later
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for node in ast.walk(statement):
                if isinstance(node, ast.Call) and _dotted(node.func) in ("open", "io.open", "builtins.open"):
                    problems.append(f"{path.name}:{node.lineno}: opens a file at import time")
    return problems
