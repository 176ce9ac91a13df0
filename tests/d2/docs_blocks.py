"""The fenced blocks of README.md, DEVELOPERS.md and docs/*.md and their marks (DEVELOPERS.md, "Docs that run").

Every fenced block follows a mark, an HTML comment on the nearest non-empty line above it::

    <!-- docs-run: run id=quickstart -->
    ```bash
    python train_net.py --config-file configs/quickstart/alrp_retinanet_shapes.yaml
    ```

The mode says what ``tests/d2/test_docs_run.py`` does with the block (:data:`MODES`); ``key=value`` attributes follow
it (:data:`ATTRIBUTES`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "DEVELOPERS.md"]

#: What the test does with a block of each mode; every mode but ``run`` also parses the block's commands.
MODES = {
    "run": "executed at small scale (bash through the command shims, Python in the test's process, YAML merged)",
    "check": "parsed, not run: a test named by covered-by runs the same at test scale",
    "needs-coco": "parsed, not run: needs COCO; cpu= names the CPU-sized variant",
    "needs-gpu": "parsed, not run: needs a GPU; cpu= names the CPU-sized variant",
    "needs-network": "parsed, not run: installs software or fetches code or weights (.ci/run sets up with uv)",
    "needs-reference": "parsed, not run: needs checkouts of the reference implementations",
    "benchmark": "parsed, not run: a measurement of benchmarks/ (minutes by design), its options checked",
    "ci": "parsed, not run: the project's checks, which .ci/run runs",
}
#: The attributes a mark may have, and the modes that need them.
ATTRIBUTES = {"id", "covered-by", "cpu", "given"}
REQUIRED = {"check": "covered-by", "needs-coco": "cpu", "needs-gpu": "cpu"}

#: Definitions that a ``given=NAME`` block assumes (a page that shows a call, not where its inputs come from); run
#: before the block.
GIVEN = {
    "detr-outputs": """
import torch

logits = torch.randn(2, 10, 3, requires_grad=True)  # [B, Q, C]
pred_boxes = torch.rand(2, 10, 4).mul(0.4).add(0.3).requires_grad_()  # [B, Q, 4] normalised cxcywh
indices = [(torch.tensor([1, 4]), torch.tensor([0, 1])), (torch.tensor([7]), torch.tensor([0]))]
targets = [
    {"class_labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.6, 0.6, 0.3, 0.2]])},
    {"class_labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.5, 0.4, 0.4]])},
]
""",
}

MARK = re.compile(r"<!--\s*docs-run:\s*(?P<body>.*?)\s*-->")
FENCE = re.compile(r"^```(?P<language>[\w-]*)\s*$")


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    language: str
    text: str
    mode: str | None  # None: no mark
    attributes: Dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        page = self.page.resolve()
        where = page.relative_to(REPO_ROOT) if page.is_relative_to(REPO_ROOT) else page.name
        return f"{where}:{self.line}"

    def covered_by(self) -> List[str]:
        return [path for path in self.attributes.get("covered-by", "").split(",") if path]


def page_blocks(page: Path) -> Iterator[Block]:
    """The fenced blocks of a page, with the mark above each (mode None where there is none)."""
    lines = page.read_text().splitlines()
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        end = next((i for i in range(number + 1, len(lines)) if lines[i].startswith("```")), len(lines))
        previous = next((lines[i] for i in range(number - 1, -1, -1) if lines[i].strip()), "")
        mark = MARK.fullmatch(previous.strip())
        mode, attributes = None, {}
        if mark is not None:
            mode, *pairs = mark.group("body").split()
            attributes = dict(pair.split("=", 1) if "=" in pair else (pair, "") for pair in pairs)
        text = "\n".join(lines[number + 1 : end]) + "\n"
        yield Block(page, number + 1, opening.group("language"), text, mode, attributes)
        number = end + 1


#: An inline code span that is a command: optional ``NAME=value`` settings, then python, python3 or uv run.
INLINE_COMMAND = re.compile(r"`((?:[A-Z_]+=\S+ )*(?:python3? |uv run )[^`]+)`")


def inline_commands(page: Path) -> Iterator[tuple[int, str]]:
    """(line, command) of every inline command of a page that is not a template (``<config>``, ``...``)."""
    text = page.read_text()
    for match in INLINE_COMMAND.finditer(text):
        command = " ".join(match.group(1).split())
        if "<" not in command and "..." not in command:
            yield text.count("\n", 0, match.start()) + 1, command


def all_blocks() -> List[Block]:
    return [block for page in PAGES for block in page_blocks(page)]


def marking_problems(blocks: List[Block]) -> List[str]:
    """What is wrong with the marks: a block without one, an unknown mode or attribute, a missing required
    attribute, a covered-by test that does not exist, a cpu= id that names no block to run
    or check, an id given twice."""
    ids: Dict[str, Block] = {}
    problems = []
    for block in blocks:
        if "id" in block.attributes:
            if block.attributes["id"] in ids:
                problems.append(f"{block.name}: id={block.attributes['id']} is also {ids[block.attributes['id']].name}")
            ids[block.attributes["id"]] = block
    for block in blocks:
        if block.mode is None:
            problems.append(f"{block.name}: no mark (<!-- docs-run: MODE ... --> above the block; DEVELOPERS.md)")
            continue
        if block.mode not in MODES:
            problems.append(f"{block.name}: unknown mode {block.mode!r}, expected one of {sorted(MODES)}")
        unknown = set(block.attributes) - ATTRIBUTES
        if unknown:
            expected = sorted(ATTRIBUTES)
            problems.append(f"{block.name}: unknown attribute(s) {sorted(unknown)}, expected some of {expected}")
        required = REQUIRED.get(block.mode)
        if required and not block.attributes.get(required):
            problems.append(f"{block.name}: mode {block.mode} needs {required}=")
        for test in block.covered_by():
            if not (REPO_ROOT / test).is_file():
                problems.append(f"{block.name}: covered-by={test} does not exist")
        variant = block.attributes.get("cpu")
        if variant is not None and (variant not in ids or ids[variant].mode not in ("run", "check")):
            problems.append(f"{block.name}: cpu={variant} names no block marked run or check with id={variant}")
    return problems
