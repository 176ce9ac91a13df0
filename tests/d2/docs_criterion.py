"""The criterion of docs/criteria.md ("Write your own criterion"), registered from a module outside the package:
the page's first Python block, run once as the module ``docs_user_criterion``."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "criteria.md"
MODULE = "docs_user_criterion"


def load_docs_criterion() -> types.ModuleType:
    """The module holding the page's example (registered in the criterion registry on first load)."""
    if MODULE not in sys.modules:
        module = types.ModuleType(MODULE)
        exec(compile(docs_criterion_code(), str(PAGE), "exec"), module.__dict__)
        sys.modules[MODULE] = module
    return sys.modules[MODULE]


def docs_criterion_code() -> str:
    """The page's first Python block."""
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)[:1]
    return code
