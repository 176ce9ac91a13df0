"""The two install paths pin the same versions: pip's constraints.txt and uv's ``[tool.uv] constraint-dependencies``
(uv does not read constraints.txt), detectron2 is pinned to one commit, and every subpackage is packaged."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _pins(lines: List[str]) -> Dict[str, str]:
    """``{normalised name: requirement}`` of pin lines (``name==version``), comments and blank lines aside."""
    pins = {}
    for line in lines:
        requirement = line.split("#", 1)[0].strip()
        if requirement:
            name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
            pins[re.sub(r"[-_.]+", "-", name).lower()] = requirement.replace(" ", "")
    return pins


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirement_names(requirements: List[str]) -> List[str]:
    return [re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]).lower() for r in requirements]


def test_uv_constraints_equal_pip_constraints():
    pip_pins = _pins((ROOT / "constraints.txt").read_text().splitlines())
    uv_pins = _pins(_pyproject()["tool"]["uv"]["constraint-dependencies"])
    assert uv_pins == pip_pins, (
        "pyproject.toml [tool.uv] constraint-dependencies and constraints.txt disagree: "
        f"only in uv: {sorted(set(uv_pins.items()) - set(pip_pins.items()))}, "
        f"only in pip: {sorted(set(pip_pins.items()) - set(uv_pins.items()))}"
    )


def test_every_requirement_is_pinned():
    project = _pyproject()["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    pinned = set(_pins((ROOT / "constraints.txt").read_text().splitlines()))
    unpinned = sorted(set(_requirement_names(requirements)) - pinned)
    assert not unpinned, f"requirements of pyproject.toml without a pin in constraints.txt: {unpinned}"


def test_detectron2_is_pinned_to_a_commit():
    """uv builds detectron2 from one commit (a full hash: ``uv lock`` then needs no network for it). A lock written
    with the vendored source (UV_NO_SOURCES_PACKAGE, UV_FIND_LINKS) is refused by CI's ``uv lock --check``."""
    rev = _pyproject()["tool"]["uv"]["sources"]["detectron2"]["rev"]
    assert re.fullmatch(r"[0-9a-f]{40}", rev), f"[tool.uv.sources] detectron2 rev {rev!r} is not a full commit hash"


def test_every_subpackage_is_packaged():
    """pyproject.toml lists the packages (for the configs' package-dir): a new subpackage must be listed too."""
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    found = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "alrp_d2").rglob("__init__.py")}
    assert found <= listed, (
        f"subpackages missing from pyproject.toml [tool.setuptools] packages: {sorted(found - listed)}"
    )
