"""The examples of docs/detr.md ("Use from Hugging Face"): the section's Python blocks, as written, one per family."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

PAGE = Path(__file__).resolve().parents[2] / "docs" / "detr.md"
SECTION = "## Use from Hugging Face"


def docs_examples() -> List[str]:
    """The code of the section's Python blocks, in page order."""
    text = PAGE.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, f"{PAGE}: no Python block after {SECTION!r}"
    return blocks
