"""The shape of the code a reader takes in at once: no module over 400 lines and no function over 60 lines anywhere in
the package, no import cycle among its modules (the imports at module level and in its module-level ``if`` /
``try`` blocks, ``if TYPE_CHECKING:`` ones included: a cycle of types is one of meanings too), and imports only down
the floors of :data:`FLOORS` (every import, those inside functions included; docs/architecture.md, "Floors")."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Sequence, Set, Tuple

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "alrp_d2"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60
#: The floors of the package, lowest first. A module imports from its own unit (the longest name of a floor that it
#: starts with) and from the floors below, never from a floor above nor from another unit of its own floor.
FLOORS: Tuple[Tuple[str, ...], ...] = (
    ("alrp_d2.checks", "alrp_d2.json_file", "alrp_d2.known_warnings", "alrp_d2.user_modules"),
    ("alrp_d2.losses",),
    ("alrp_d2.criteria",),
    ("alrp_d2.detr", "alrp_d2.lrp"),
    ("alrp_d2.modeling", "alrp_d2.data"),
    ("alrp_d2.checkpoint", "alrp_d2.config"),
    ("alrp_d2.evaluation",),
    ("alrp_d2.engine",),
    ("alrp_d2.lazy_config", "alrp_d2.model_zoo", "alrp_d2"),
)


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


def imports(path: Path, name: str, modules: Set[str], everywhere: bool = False) -> Set[str]:
    """The package modules that the module ``name`` (at ``path``) imports at its top level (``everywhere``: in its
    functions too)."""
    found = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree) if everywhere else module_level_nodes(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.update(m for m in [target] + [f"{target}.{alias.name}" for alias in node.names] if m in modules)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
    return found - {name}


def import_graph(root: Path, everywhere: bool = False) -> Dict[str, Set[str]]:
    paths = {module_name(path, root): path for path in root.rglob("*.py")}
    return {name: imports(path, name, set(paths), everywhere) for name, path in paths.items()}


def unit_and_floor(module: str, floors: Sequence[Iterable[str]]) -> Tuple[str, int]:
    """The unit of ``floors`` that ``module`` belongs to (the longest that it is or lies in; the top package holds
    only itself) and its floor."""
    placed = [(unit, floor) for floor, units in enumerate(floors) for unit in units]
    inside = [
        (unit, floor) for unit, floor in placed if module == unit or module.startswith(unit + ".") and "." in unit
    ]
    assert inside, f"{module} lies on no floor: place it in FLOORS"
    return max(inside, key=lambda placement: len(placement[0]))


def upward_imports(graph: Dict[str, Set[str]], floors: Sequence[Iterable[str]]) -> List[str]:
    """The imports of ``graph`` from a higher floor, or from another unit of the same floor; an import of one of the
    module's own packages (``from .. import data``: the package is loaded before the module) is none."""
    found = []
    for module in sorted(graph):
        unit, floor = unit_and_floor(module, floors)
        for imported in sorted(graph[module]):
            if module.startswith(imported + "."):
                continue
            imported_unit, imported_floor = unit_and_floor(imported, floors)
            if imported_floor > floor or (imported_floor == floor and imported_unit != unit):
                found.append(f"{module} (floor {floor}) imports {imported} (floor {imported_floor})")
    return found


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


def test_imports_only_go_down_the_floors():
    graph = import_graph(PACKAGE, everywhere=True)
    assert "alrp_d2.config" in graph["alrp_d2"]  # imports inside functions are read (the package's __getattr__)
    assert upward_imports(graph, FLOORS) == []


def test_the_floor_check_refuses_an_import_up_or_sideways_and_in_a_function(tmp_path):
    root = tmp_path / "pkg"
    for sub in ("low", "mid", "side", "high"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "low" / "a.py").write_text("from .. import low\n")
    (root / "mid" / "b.py").write_text("from ..low import a\ndef f():\n    from ..high import c\n")
    (root / "side" / "d.py").write_text("from ..mid import b\n")
    (root / "high" / "c.py").write_text("from ..mid import b\nfrom ..low.a import x\n")
    floors = (("pkg.low",), ("pkg.mid", "pkg.side"), ("pkg.high", "pkg"))
    sideways = ["pkg.side.d (floor 1) imports pkg.mid (floor 1)", "pkg.side.d (floor 1) imports pkg.mid.b (floor 1)"]
    assert upward_imports(import_graph(root, everywhere=True), floors) == [
        "pkg.mid.b (floor 1) imports pkg.high (floor 2)",
        "pkg.mid.b (floor 1) imports pkg.high.c (floor 2)",
        *sideways,
    ]
    assert upward_imports(import_graph(root), floors) == sideways
    (root / "new.py").write_text("")
    with pytest.raises(AssertionError, match="pkg.new lies on no floor"):
        upward_imports(import_graph(root), floors)


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
