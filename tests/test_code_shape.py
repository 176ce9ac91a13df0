"""The shape of the code a reader takes in at once: no module over 400 lines and no function over 60 lines anywhere in
the package, and no import cycle among its modules (the imports at module level and in its module-level ``if`` /
``try`` blocks, ``if TYPE_CHECKING:`` ones included: a cycle of types is one of meanings too)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / "alrp_d2"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_level_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """The statements of a module's top level that may import: its body, into ``if`` (``if TYPE_CHECKING:``
    included) and ``try`` blocks; not the bodies of its functions and classes."""
    for node in tree.body:
        if isinstance(node, (ast.If, ast.Try)):
            yield from ast.walk(node)
        else:
            yield node


def imports(path: Path, name: str, modules: Set[str]) -> Set[str]:
    """The package modules that the module ``name`` (at ``path``) imports at its top level."""
    found = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in module_level_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.update(m for m in [target] + [f"{target}.{alias.name}" for alias in node.names] if m in modules)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
    return found - {name}


def import_graph(root: Path) -> Dict[str, Set[str]]:
    paths = {module_name(path, root): path for path in root.rglob("*.py")}
    return {name: imports(path, name, set(paths)) for name, path in paths.items()}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[List[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_in_the_package():
    graph = import_graph(PACKAGE)
    assert len(graph) > 100 and graph["alrp_d2.engine.trainer"]  # the whole package is read
    assert cycles(graph) == []


def test_the_cycle_check_sees_relative_and_type_checking_imports_not_those_in_functions(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("from .a import f\n")
    (root / "sub" / "a.py").write_text("from ..b import g\n")
    (root / "b.py").write_text("try:\n    from .sub import a\nexcept ImportError:\n    pass\n")
    (root / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import x\n")
    (root / "d.py").write_text("from . import c\n")
    (root / "e.py").write_text("def f():\n    from . import g\n")
    (root / "g.py").write_text("from . import e\n")
    assert cycles(import_graph(root)) == [["pkg.b", "pkg.sub", "pkg.sub.a"], ["pkg.c", "pkg.d"]]


def test_modules_and_functions_of_the_package_are_short():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(PACKAGE.parent)
        if len(source.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{where}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{where}:{node.lineno} {node.name}: {lines} lines")
    assert too_long == []
