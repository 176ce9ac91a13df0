"""Docs that run: every fenced block of README.md, DEVELOPERS.md and docs/*.md is marked (docs_blocks.py), the blocks
marked ``run`` run at small scale and the commands of every other block parse (DEVELOPERS.md, "Docs that run")."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest
from detectron2.config import CfgNode

from alrp_d2.config import setup_cfg
from alrp_d2.data.shapes import prepare_shapes_dataset
from alrp_d2.engine.lazy_run import load_lazy_config

from .docs_blocks import (
    GIVEN,
    MODES,
    PAGES,
    REPO_ROOT,
    Block,
    all_blocks,
    inline_commands,
    marking_problems,
    page_blocks,
)

SHIM = Path(__file__).resolve().parent / "docs_shim.py"
#: The tiny shapes dataset of the scratch HOME (~/.cache/alrp_d2/datasets, the quickstarts' default root).
TINY_SHAPES = {"train": 8, "val": 4}
#: Where the docs' YAML fragments are merged (after add_alrp_config).
FRAGMENT_BASE = "configs/quickstart/alrp_retinanet_shapes.yaml"


class Scratch:
    """A folder that holds every top-level entry of the repository as a link (not output/), a HOME whose
    ~/.cache/alrp_d2/datasets holds a tiny shapes dataset, the command shims and their log."""

    def __init__(self, root: Path):
        self.work, self.home, self.bin = root / "work", root / "home", root / "bin"
        for folder in (self.work, self.home, self.bin):
            folder.mkdir()
        for entry in REPO_ROOT.iterdir():
            if entry.name not in (".git", "output"):
                (self.work / entry.name).symlink_to(entry)
        prepare_shapes_dataset(str(self.home / ".cache" / "alrp_d2" / "datasets"), num_images=TINY_SHAPES)
        for name in ("python", "python3", "uv", "bash"):
            shim = self.bin / name
            shim.write_text(f'#!/bin/bash\nexec "{sys.executable}" "{SHIM}" {name} "$@"\n')
            shim.chmod(0o755)
        self.log = root / "commands.jsonl"
        self.log.touch()

    def environment(self, mode: str) -> Dict[str, str]:
        real_home = os.path.expanduser("~")
        env = dict(
            os.environ,
            HOME=str(self.home),
            XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME", os.path.join(real_home, ".cache")),  # matplotlib's fonts
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            PYTHONPATH=str(REPO_ROOT),
            DOCS_RUN_MODE=mode,
            DOCS_RUN_LOG=str(self.log),
            DOCS_RUN_PYTHON=sys.executable,
            # check: only the shims and bash's builtins; any other program is logged by command_not_found_handle
            PATH=str(self.bin) + ("" if mode == "check" else os.pathsep + os.environ["PATH"]),
        )
        env.pop("ALRP_D2_DATASETS", None)
        return env

    def bash(self, text: str, mode: str) -> subprocess.CompletedProcess:
        """A bash block, as written (``set -e``), in the scratch folder; returns the finished process."""
        prelude = "set -e -o pipefail\n"
        if mode == "check":  # any other program: logged by name, not run
            prelude += "command_not_found_handle() {\n"
            prelude += """  printf '{"program": "%s", "arguments": []}\\n' "$1" >> "$DOCS_RUN_LOG"\n}\n"""
        return subprocess.run(
            ["/bin/bash", "-c", prelude + text],
            cwd=self.work,
            env=self.environment(mode),
            capture_output=True,
            text=True,
            timeout=900,
        )

    def commands(self) -> List[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Scratch:
    return Scratch(tmp_path_factory.mktemp("docs_run"))


def test_every_block_is_marked():
    blocks = all_blocks()
    assert len(blocks) > 40
    problems = marking_problems(blocks)
    assert not problems, "\n".join(problems)


def test_a_bad_mark_is_named(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent("""\
        ```bash
        python train_net.py
        ```
        <!-- docs-run: needs-gpu -->
        ```bash
        python train_net.py --num-gpus 8
        ```

        <!-- docs-run: check covered-by=tests/d2/test_nothing.py id=a -->
        ```python
        print(1)
        ```
        <!-- docs-run: fast id=a -->
        ```yaml
        A: 1
        ```
        """)
    )
    problems = [problem.split(": ", 1)[1] for problem in marking_problems(list(page_blocks(page)))]
    assert problems == [
        "id=a is also page.md:10",
        "no mark (<!-- docs-run: MODE ... --> above the block; DEVELOPERS.md)",
        "mode needs-gpu needs cpu=",
        "covered-by=tests/d2/test_nothing.py does not exist",
        f"unknown mode 'fast', expected one of {sorted(MODES)}",
    ]


def run_python(block: Block, scratch: Scratch, monkeypatch) -> None:
    """A Python block in this process, from the scratch folder with its HOME; a ``given=`` block first runs the
    definitions it assumes (:data:`docs_blocks.GIVEN`)."""
    namespace: dict = {"__name__": "__docs__"}
    with monkeypatch.context() as patch:
        patch.chdir(scratch.work)
        patch.setenv("HOME", str(scratch.home))
        patch.delenv("ALRP_D2_DATASETS", raising=False)
        if "given" in block.attributes:
            exec(compile(GIVEN[block.attributes["given"]], f"GIVEN[{block.attributes['given']}]", "exec"), namespace)
        exec(compile(block.text, block.name, "exec"), namespace)


def merge_fragment(block: Block) -> None:
    cfg = setup_cfg(str(REPO_ROOT / FRAGMENT_BASE))
    cfg.merge_from_other_cfg(CfgNode.load_cfg(block.text))


def test_the_blocks_marked_run_run(scratch, monkeypatch):
    """In page order (README.md, docs/*.md, DEVELOPERS.md) in one scratch folder: a block may use what an earlier
    one made (the quickstart's model)."""
    failures, skipped = [], []
    for block in (block for block in all_blocks() if block.mode == "run"):
        try:
            if "transformers" in block.text and importlib.util.find_spec("transformers") is None:
                skipped.append(block.name)
            elif block.language == "bash":
                before = len(scratch.commands())
                result = scratch.bash(block.text, "run")
                output = f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
                assert result.returncode == 0, f"exit status {result.returncode}\n{output}"
                assert len(scratch.commands()) > before, "no python, uv or bash command ran"
            elif block.language == "python":
                run_python(block, scratch, monkeypatch)
            elif block.language == "yaml":
                merge_fragment(block)
            else:
                raise AssertionError(f"a block of language {block.language!r} cannot be run")
        except Exception as error:  # every failing block is reported, not only the first
            failures.append(f"{block.name}: {type(error).__name__}: {error}")
    assert not failures, "\n\n".join(failures)
    if skipped:
        pytest.skip(f"transformers (the detr extra) is not installed: {', '.join(skipped)} not run")


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_{Path(name).stem}", REPO_ROOT / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_python_command(arguments: List[str], cwd: Path, load_config: bool = True) -> None:
    """A ``python ...`` command of a docs block parses: code compiles, a test path exists, a script of this repository
    exists and knows the options given; train_net.py and demo.py parse their arguments and load their config with
    its overrides."""
    if arguments[0] == "-c":
        compile(arguments[1], "python -c", "exec")
        return
    if arguments[0] == "-m":
        if arguments[1] == "pytest":
            paths = [a.split("::")[0] for a in arguments[2:] if not a.startswith("-") and ("/" in a or ".py" in a)]
            for path in paths:
                assert (cwd / path).exists(), f"python -m pytest: no {path}"
        return
    script = arguments[0]
    if not (cwd / Path(script).parts[0]).exists():
        return  # another repository's script (e.g. a detectron2 clone's tools/)
    assert (cwd / script).is_file(), f"no script {script}"
    assert not any(a.startswith("[") for a in arguments), "[...] is no shell syntax: the script gets the brackets"
    if script == "train_net.py":
        args = load_script("train_net.py").get_parser().parse_args(arguments[1:])
        config = str(cwd / args.config_file)
        if load_config and config.endswith(".py"):
            load_lazy_config(config, args.opts)
        elif load_config:
            setup_cfg(config, args.opts)
    elif script == "demo.py":
        demo = load_script("demo.py")
        args = demo.get_parser().parse_args(arguments[1:])
        if load_config:
            demo.load_config(str(cwd / args.config_file), args.opts)
    else:
        check_options(cwd / script, arguments[1:])


def check_options(script: Path, arguments: List[str]) -> None:
    """Each ``--option`` given is a token of the script (its argparse definition or its shell ``case`` pattern)."""
    source = script.read_text()
    for option in (a.split("=")[0] for a in arguments if a.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", source), f"{script.name} has no option {option}"


def check_command(command: dict, cwd: Path, load_config: bool = True) -> None:
    program, arguments = command["program"], command["arguments"]
    if program == "python":
        check_python_command(arguments, cwd, load_config)
    elif program == "bash":
        assert (cwd / arguments[0]).is_file(), f"no script {arguments[0]}"
        check_options(cwd / arguments[0], arguments[1:])
    elif program == "uv":
        assert arguments[0] in ("run", "sync", "lock"), f"uv {arguments[0]}: not a uv command of this project"


def test_the_commands_of_every_other_block_parse(scratch):
    """Blocks not marked run: bash through the shims, logging the commands without running them; every logged
    command is then checked (:func:`check_command`); Python blocks compile, YAML fragments merge."""
    failures = []
    for block in (block for block in all_blocks() if block.mode not in (None, "run")):
        try:
            if block.language == "bash":
                before = len(scratch.commands())
                result = scratch.bash(block.text, "check")
                assert result.returncode == 0, f"exit status {result.returncode}\n{result.stderr[-3000:]}"
                for command in scratch.commands()[before:]:
                    try:
                        check_command(command, Path(command.get("cwd", scratch.work)))
                    except (AssertionError, SystemExit, ValueError, KeyError, FileNotFoundError) as error:
                        shown = " ".join([command["program"], *command["arguments"]])
                        raise AssertionError(f"{shown}: {error}") from error
            elif block.language == "python":
                compile(block.text, block.name, "exec")
            elif block.language == "yaml":
                merge_fragment(block)
        except Exception as error:
            failures.append(f"{block.name}: {type(error).__name__}: {error}")
    assert not failures, "\n\n".join(failures)


def test_the_inline_commands_parse(scratch):
    """Each inline command (docs_blocks.INLINE_COMMAND) through the shims like a block's, checked without loading its
    config."""
    failures = []
    for page in PAGES:
        for line, text in inline_commands(page):
            before = len(scratch.commands())
            result = scratch.bash(text, "check")
            try:
                assert result.returncode == 0, f"exit status {result.returncode}\n{result.stderr[-3000:]}"
                for command in scratch.commands()[before:]:
                    check_command(command, Path(command["cwd"]), load_config=False)
            except (AssertionError, SystemExit, ValueError, FileNotFoundError) as error:
                failures.append(f"{page.name}:{line}: {text}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)


def test_a_failing_command_fails_its_block(scratch):
    result = scratch.bash('python -c "import sys; sys.exit(3)"\necho not reached\n', "run")
    assert result.returncode == 3 and "not reached" not in result.stdout
