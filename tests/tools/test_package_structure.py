"""The package's structure: no import circles, counted over every import statement of every module (at the top of a
module, inside a function, under ``TYPE_CHECKING``), so a circle hidden behind a deferred import is found too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "modeling_elmo"


def package_modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """``dotted name -> (file, is a package __init__)`` for every ``.py`` file of ``root/package``."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """``module -> the package's modules it imports``. ``from . import name`` is an edge to the submodule ``name``
    when there is one (the package itself is already being imported), else to the package."""
    modules = package_modules(root, package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target not in modules:
                    continue
                submodules = {f"{target}.{alias.name}" for alias in node.names} & modules.keys()
                edges |= submodules
                if len(submodules) < len(node.names):
                    edges.add(target)
        edges.discard(name)
        graph[name] = edges
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_the_package_has_no_import_circle():
    graph = import_graph(REPO_ROOT, PACKAGE)
    assert "modeling_elmo.conversion.convert" in graph and "modeling_elmo.conversion.original_format" in graph
    assert import_circles(graph) == []


def test_nothing_that_convert_imports_imports_convert_back():
    graph = import_graph(REPO_ROOT, PACKAGE)
    reached, todo = set(), ["modeling_elmo.conversion.convert"]
    while todo:
        for other in graph[todo.pop()] - reached:
            reached.add(other)
            todo.append(other)
    assert "modeling_elmo.conversion.convert" not in reached
    assert {
        "modeling_elmo.conversion.parity",
        "modeling_elmo.conversion.releases",
        "modeling_elmo.conversion.original_format",
    } <= reached


def test_the_original_format_module_is_a_leaf_of_the_conversion_modules():
    graph = import_graph(REPO_ROOT, PACKAGE)
    assert graph["modeling_elmo.conversion.original_format"].isdisjoint(
        {"modeling_elmo.conversion.convert", "modeling_elmo.conversion.parity", "modeling_elmo.conversion.releases"}
    )
    for user in (
        "modeling_elmo.conversion.convert",
        "modeling_elmo.conversion.parity",
        "modeling_elmo.conversion.releases",
    ):
        assert "modeling_elmo.conversion.original_format" in graph[user], user


def test_the_http_client_knows_no_catalogue_and_both_catalogues_use_it():
    graph = import_graph(REPO_ROOT, PACKAGE)
    conversion = {name for name in graph if name.startswith("modeling_elmo.conversion")}
    cache = "modeling_elmo.conversion.cache_folder"  # the HTTP client's cache folder, its file safety from folders/
    safety = {f"modeling_elmo.folders.{name}" for name in ("files", "opening", "locks")}
    assert graph[cache] <= {"modeling_elmo.utils.io_utils", *safety}
    assert graph["modeling_elmo.conversion.download"] <= {"modeling_elmo.utils.io_utils", cache}
    assert graph["modeling_elmo.conversion.download"].isdisjoint(conversion - {cache})
    for catalogue in ("modeling_elmo.conversion.releases", "modeling_elmo.conversion.efml_releases"):
        assert "modeling_elmo.conversion.download" in graph[catalogue], catalogue


def test_the_circle_finder_finds_a_circle_behind_a_deferred_import(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import a\n")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def f():\n    from ..c import x\n")
    (package / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from .a import y\n")
    (package / "d.py").write_text("from . import a\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg"] == {"pkg.a"} and graph["pkg.d"] == {"pkg.a"}
    assert import_circles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


SHIPPED_FILES = ("configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "pipeline_elmo.py")


def _shipped_trees() -> dict[str, ast.Module]:
    return {name: ast.parse((REPO_ROOT / PACKAGE / name).read_text(encoding="utf-8"), name) for name in SHIPPED_FILES}


def test_the_shipped_files_override_no_saving_or_loading_internals_and_read_no_module_table():
    """The files copied to every model folder: no ``save_pretrained`` and no ``_load_*`` method of their own, no
    ``sys.modules`` read; the package's kernels module reads nothing of the model file back."""
    for name, tree in _shipped_trees().items():
        methods = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert "save_pretrained" not in methods, name
        assert not [m for m in methods if m.startswith("_load")], name
        modules = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "modules"]
        assert not [n for n in modules if isinstance(n.value, ast.Name) and n.value.id == "sys"], name
    for path in sorted((REPO_ROOT / PACKAGE / "acceleration").glob("*.py")):  # packed_kernels.py and its parts
        kernels = path.read_text(encoding="utf-8")
        assert "sys.modules" not in kernels and "RECURRENCE_INTERFACE" not in kernels, path.name
        assert "modeling_elmo.modeling_elmo" not in kernels and "from ..modeling_elmo" not in kernels, path.name


def test_the_shipped_files_import_one_package_module_once_guarded_by_import_error():
    """Besides each other (relative imports), the shipped files import of the package only its fast kernels, once,
    inside a ``try`` that turns an `ImportError` into the public form (as transformers' Mamba imports ``mamba_ssm``)."""
    found, trees = [], _shipped_trees()
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(name, alias.name, node) for alias in node.names if alias.name.split(".")[0] == PACKAGE]
            elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == PACKAGE:
                found.append((name, f"{node.module}.{node.names[0].name}", node))
    assert [(name, module) for name, module, _ in found] == [
        ("modeling_elmo.py", "modeling_elmo.acceleration.packed_kernels")
    ]
    guarded = [
        handler
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Try) and found[0][2] in node.body
        for handler in node.handlers
        if isinstance(handler.type, ast.Name) and handler.type.id == "ImportError"
    ]
    assert len(guarded) == 1
