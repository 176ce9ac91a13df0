"""The docs name only files that exist: every path of the repository (``alrp_d2/``, ``tests/``, ``tools/``,
``benchmarks/``, ``configs/``) named in README.md, DEVELOPERS.md and docs/*.md, and every file named by its bare name
after such a path on the same line (``alrp_d2/modeling/alrp_rpn.py``, ``alrp_roi_heads.py``), is in the checkout."""

import re
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
PAGES = sorted(REPOSITORY.glob("docs/*.md")) + [REPOSITORY / "README.md", REPOSITORY / "DEVELOPERS.md"]

#: A repository path (a sentence's full stop after it is not part of it; one followed by a pattern, ``*``, ``<name>``
#: or ``{a,b}``, is not a file name).
PATH = r"(?<![\w./-])((?:alrp_d2|tests|tools|benchmarks|configs)/[\w./-]*+)(?![*<{])"
#: A source or config file named by its bare name in backquotes (``alrp_rpn.py``).
BARE_NAME = r"`([\w-]+\.(?:py|yaml))`"

#: Paths of other repositories that the docs name as such (detectron2's tools, the official configs' folders).
ELSEWHERE = {
    "tools/lazyconfig_train_net.py",  # detectron2's
    "tools/convert-torchvision-to-d2.py",  # detectron2's
    "configs/alrp_loss/",  # kemaloksuz/aLRPLoss
    "configs/ranksort_loss/",  # kemaloksuz/RankSortLoss
    "configs/CorrLoss/",  # fehmikahraman/CorrLoss
}


def named_files(page: Path):
    """(line number, name, the folder it is relative to) of every file the page names."""
    for number, line in enumerate(page.read_text().splitlines(), 1):
        folder = None
        for token in re.finditer(f"{PATH}|{BARE_NAME}", line):
            path, bare = token.group(1), token.group(2)
            if path is not None:
                path = path.rstrip(".")
                folder = None if path in ELSEWHERE else path if path.endswith("/") else str(Path(path).parent)
                if path not in ELSEWHERE:
                    yield number, path, REPOSITORY
            elif folder is not None:
                yield number, bare, REPOSITORY / folder


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_named_file_exists(page):
    missing = [
        f"{page.name}:{number}: {name}"
        for number, name, folder in named_files(page)
        if not (folder / name).exists() and not (REPOSITORY / name).exists()
    ]
    assert not missing, "\n".join(missing)


def test_the_check_finds_a_dead_name(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("| concept | `alrp_d2/modeling/alrp_rpn.py`, `correlation_retinanet.py` |\n`tools/nothing.py`\n")
    assert [(number, name) for number, name, _ in named_files(page)] == [
        (1, "alrp_d2/modeling/alrp_rpn.py"),
        (1, "correlation_retinanet.py"),
        (2, "tools/nothing.py"),
    ]
    found = [name for _, name, folder in named_files(page) if not (folder / name).exists()]
    assert found == ["correlation_retinanet.py", "tools/nothing.py"]
