"""The example of docs/detr.md ("Use from Hugging Face"): the section's first Python block, as written."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "detr.md"
SECTION = "## Use from Hugging Face"


def docs_example() -> str:
    """The code of the section's first Python block."""
    text = PAGE.read_text()
    section = text[text.index(SECTION) :]
    match = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert match, f"{PAGE}: no Python block after {SECTION!r}"
    return match.group(1)
