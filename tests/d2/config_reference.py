"""The keys ``add_alrp_config`` adds and the keys ``docs/configuration.md`` documents, and their differences."""

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

from detectron2.config import CfgNode, get_cfg

from alrp_d2.config import add_alrp_config

REFERENCE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
#: The header of the tables that document keys of add_alrp_config (other tables of the page are not read).
KEY_TABLE_HEADER = ("key", "default", "rule")
_KEY = re.compile(r"^`([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)+)`$")
_DEFAULT = re.compile(r"^`(.+)`$")


def _leaves(node: CfgNode, prefix: str = "") -> Iterator[Tuple[str, object]]:
    for name, value in node.items():
        if isinstance(value, CfgNode):
            yield from _leaves(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def added_keys() -> Dict[str, object]:
    """Every key whose presence or default ``add_alrp_config`` changes in a fresh ``get_cfg()``, with its default."""
    detectron2_defaults = dict(_leaves(get_cfg()))
    cfg = get_cfg()
    add_alrp_config(cfg)
    return {
        key: value for key, value in _leaves(cfg) if key not in detectron2_defaults or detectron2_defaults[key] != value
    }


def _cells(line: str) -> List[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_default(text: str) -> object:
    """A default as the command line reads it (yacs): a Python literal, else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def documented_keys(page_text: str, page_name: str = "docs/configuration.md") -> Tuple[Dict[str, object], List[str]]:
    """The (key, default) rows of the page's ``| key | default | rule |`` tables, and the problems of its rows
    (a key not written in full, a default not in backticks, an empty rule, a key documented twice)."""
    documented: Dict[str, object] = {}
    problems: List[str] = []
    in_key_table = False
    for number, line in enumerate(page_text.splitlines(), start=1):
        if not line.lstrip().startswith("|"):
            in_key_table = False
            continue
        cells = _cells(line)
        if tuple(cell.lower() for cell in cells) == KEY_TABLE_HEADER:
            in_key_table = True
            continue
        if not in_key_table or set("".join(cells)) <= set("-: "):
            continue
        where = f"{page_name}, line {number}"
        key_match = _KEY.match(cells[0])
        default_match = _DEFAULT.match(cells[1]) if len(cells) == 3 else None
        if key_match is None or default_match is None or not cells[2]:
            problems.append(
                f"{where}: a row must be | `FULL.KEY.NAME` | `default` | rule |, with the key's full name, "
                f"the default in backticks and a non-empty rule; got {line.strip()!r}"
            )
            continue
        key = key_match.group(1)
        if key in documented:
            problems.append(f"{where}: {key} is documented twice")
        documented[key] = parse_default(default_match.group(1))
    return documented, problems


def _same(documented: object, default: object) -> bool:
    """Equal values of the same types (1 is not 1.0, a tuple is not a list), element by element."""
    if type(documented) is not type(default):
        return False
    if isinstance(default, (list, tuple)):
        assert isinstance(documented, (list, tuple))
        return len(documented) == len(default) and all(map(_same, documented, default))
    return documented == default


def reference_mismatches(
    documented: Dict[str, object], added: Dict[str, object], page_name: str = "docs/configuration.md"
) -> List[str]:
    """What the page must change to document exactly the keys and defaults of ``add_alrp_config``."""
    mismatches = [
        f"{key} (default `{default!r}`) is added by add_alrp_config but not documented in {page_name}: add the row "
        f"| `{key}` | `{default!r}` | <rule> |"
        for key, default in added.items()
        if key not in documented
    ]
    mismatches += [
        f"{key} is documented in {page_name} but add_alrp_config does not add it: remove its row"
        for key in documented
        if key not in added
    ]
    mismatches += [
        f"{key}: add_alrp_config's default is `{added[key]!r}`, {page_name} says `{documented[key]!r}`: "
        f"write `{added[key]!r}`"
        for key in documented
        if key in added and not _same(documented[key], added[key])
    ]
    return mismatches
