"""Safety checks of publishing: pickled weights are refused (`modeling_elmo.utils.loading.refuse_pickled_weights`, the
guard every loader applies), Hub tokens never leak into published files nor come from the folders being published,
and the custom code shipped with a model passes an audit.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Iterable, Iterator
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
    "audit_shipped_code",
    "custom_pipelines_problem",
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
#: The credentials a published text file must not hold, by what they are (the name goes into the refusal): a Hugging
#: Face token, an AWS access key id (long-term ``AKIA``, temporary ``ASIA``), GitHub tokens (classic ``ghp_`` and
#: the OAuth, user-to-server, server-to-server and refresh kinds, and fine-grained ``github_pat_``).
SECRET_PATTERNS = {
    "a Hugging Face access token (hf_...)": HF_TOKEN_PATTERN,
    "an AWS access key id (AKIA...)": re.compile(rf"{_START}(?:AKIA|ASIA)[0-9A-Z]{{16}}{_END}"),
    "a GitHub token (ghp_...)": re.compile(rf"{_START}gh[pousr]_[A-Za-z0-9]{{36,}}{_END}"),
    "a GitHub fine-grained token (github_pat_...)": re.compile(rf"{_START}github_pat_[A-Za-z0-9_]{{22,}}"),
}


# ----------------------------------------------------------------------------------------------- secrets
def scan_for_secrets(folder: str | os.PathLike, files: Iterable[str]) -> None:
    """Raise `ValueError` naming the file and the kind of credential if a text file of ``files`` (relative to
    ``folder``) contains one of `SECRET_PATTERNS` (the token itself is not repeated)."""
    for name in files:
        if name.endswith((".json", ".md", ".py", ".txt")):
            for text in _whole_lines(Path(folder) / name):
                for what, pattern in SECRET_PATTERNS.items():
                    if pattern.search(text):
                        raise ValueError(f"{name} contains what looks like {what}; refusing to publish it.")


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
