"""What ``python -m alrp_d2.lrp`` prints: table cells, aligned rows, and JSON values with NaN as null."""

from __future__ import annotations

import math
from typing import Any, List


def cell(value: float, digits: int = 3) -> str:
    """A table cell: ``value`` with ``digits`` decimals, '-' where it is undefined (NaN)."""
    return "-" if isinstance(value, float) and math.isnan(value) else f"{value:.{digits}f}"


def rows_text(rows: List[List[str]]) -> str:
    """The rows as text, every column right-aligned to its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(text.rjust(width) for text, width in zip(row, widths)).rstrip() for row in rows)


def without_nan(value: Any) -> Any:
    """``value`` (a number or a list of them) with every NaN as None: JSON's null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return [without_nan(v) for v in value] if isinstance(value, list) else value
