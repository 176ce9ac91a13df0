"""Test modules share code through helper modules: no test module imports another test module."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(path: Path):
    """The ``test_*`` modules that the module at ``path`` imports."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [alias.name for alias in node.names if not node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        yield from (name for name in names if name.split(".")[-1].startswith("test_"))


def test_no_test_module_imports_another():
    found = {
        str(path.relative_to(TESTS)): sorted(set(imported_test_modules(path))) for path in TESTS.rglob("test_*.py")
    }
    assert {path: modules for path, modules in found.items() if modules} == {}


def test_the_check_sees_relative_and_absolute_imports(tmp_path):
    module = tmp_path / "test_example.py"
    module.write_text("from .test_other import helper\nfrom ..test_third import x\nimport tests.test_fourth\n")
    assert list(imported_test_modules(module)) == ["test_other", "test_third", "tests.test_fourth"]
