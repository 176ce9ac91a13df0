"""The shape of the code a reader takes in at once: no module over 400 lines and no function over 60 lines in the
losses core and the detectron2 modeling, and no import cycle among the package's modules (imports run when a module
is imported: those at module level and in its module-level ``if`` / ``try`` blocks, not ``if TYPE_CHECKING:``)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / "alrp_d2"
SIZED = ("losses", "modeling")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_time_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """The statements a module runs on import that may import: its body, into ``if`` / ``try`` blocks except
    ``if TYPE_CHECKING:``."""
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for n in node.orelse for n in ast.walk(n))
        elif isinstance(node, (ast.If, ast.Try)):
            yield from ast.walk(node)
        else:
            yield node


def imports(path: Path, name: str, modules: Set[str]) -> Set[str]:
    """The package modules that the module ``name`` (at ``path``) imports on import."""
    found = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in import_time_nodes(ast.parse(path.read_text())):
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


def test_the_cycle_check_sees_relative_imports_and_leaves_out_type_checking_ones(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("from .a import f\n")
    (root / "sub" / "a.py").write_text("from ..b import g\n")
    (root / "b.py").write_text("try:\n    from .sub import a\nexcept ImportError:\n    pass\n")
    (root / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import x\n")
    (root / "d.py").write_text("from . import c\n")
    assert cycles(import_graph(root)) == [["pkg.b", "pkg.sub", "pkg.sub.a"]]


def test_modules_and_functions_of_the_core_and_the_modeling_are_short():
    too_long = []
    for path in sorted(p for folder in SIZED for p in (PACKAGE / folder).rglob("*.py")):
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
