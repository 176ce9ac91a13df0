"""benchmarks/device_run.py, the one call for a GPU machine without network: its requirements file, what it would
install and run (its --dry-run plan), and that the report's code imports at module level only what the run installs
(the full rehearsal, tools/rehearse_device_run.sh, runs it on a CPU)."""

import argparse
import ast
import os
import sys
import zipfile

import pytest

from benchmarks import device_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT_PACKAGES = ("alrp_d2", "benchmarks", "tests")
#: what device_run.py assumes of the machine, besides benchmarks/device_requirements.txt
ASSUMED = {"torch", "torchvision", "numpy", "detectron2"}
#: the code the report runs (benchmarks/gpu_report.py imports the rest)
REPORT_ENTRY = "benchmarks/gpu_report.py"
#: the distribution of an imported module whose name differs from it
DISTRIBUTIONS = {"PIL": "pillow", "yaml": "pyyaml", "antlr4": "antlr4-python3-runtime"}


def test_requirements_are_pinned_and_unique():
    requirements = device_run.read_requirements()
    names = [r.name.lower() for r in requirements]
    assert len(names) == len(set(names)), names
    assert all(r.version[0].isdigit() for r in requirements)
    assert {"fvcore", "iopath", "pycocotools", "pytest"} <= set(names)
    # pytest's backports are needed on 3.10 only
    on_310 = {r.name for r in requirements if r.applies((3, 10))}
    on_312 = {r.name for r in requirements if r.applies((3, 12))}
    assert on_310 - on_312 == {"exceptiongroup", "tomli"}


def test_requirement_markers(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text('# comment\na==1.0\nb==2.0; python_version < "3.11"  # backport\nc==3; python_version >= "3.12"\n')
    a, b, c = device_run.read_requirements(str(path))
    assert (a.applies((3, 10)), b.applies((3, 10)), b.applies((3, 11)), c.applies((3, 11)), c.applies((3, 13))) == (
        True,
        True,
        False,
        False,
        True,
    )
    path.write_text("a>=1.0\n")
    with pytest.raises(ValueError, match="requirements.txt:1: 'a>=1.0' is not name==version"):
        device_run.read_requirements(str(path))
    with pytest.raises(ValueError, match="only python_version"):
        device_run.Requirement("d", "1", 'sys_platform == "linux"').applies((3, 11))


def make_wheel(folder, filename, requires_torch):
    dist_info = "-".join(filename.split("-")[:2]) + ".dist-info"
    with zipfile.ZipFile(folder / filename, "w") as wheel:
        wheel.writestr(f"{dist_info}/METADATA", f"Name: torchvision\nRequires-Dist: torch {requires_torch}\n")


def test_torchvision_wheel_matches_the_torch_release_and_python(tmp_path):
    make_wheel(tmp_path, "torchvision-0.26.0-cp312-cp312-manylinux_2_28_x86_64.whl", "(==2.11.0)")
    make_wheel(tmp_path, "torchvision-0.29.1-cp311-cp311-manylinux_2_28_x86_64.whl", "(>=2.14.0)")
    make_wheel(tmp_path, "torchvision-0.29.1-cp312-cp312-manylinux_2_28_x86_64.whl", "(>=2.14.0)")
    assert device_run.torchvision_wheel(str(tmp_path), "2.11.0+cu130", (3, 12)).endswith(
        "0.26.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    )
    assert "0.29.1-cp311" in device_run.torchvision_wheel(str(tmp_path), "2.14.1", (3, 11))
    assert device_run.torchvision_wheel(str(tmp_path), "2.11.0", (3, 11)) is None
    assert device_run.torchvision_wheel(str(tmp_path / "absent"), "2.11.0", (3, 12)) is None


def stand_in_bundle(tmp_path, references=("aLRPLoss", "RankSortLoss", "BRL")):
    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    (bundle / device_run.DETECTRON2_ARCHIVE).write_bytes(b"")
    for name in references:
        (bundle / "references" / name).mkdir(parents=True)
    make_wheel(bundle / "wheels", "torchvision-0.29.1-cp311-cp311-manylinux_2_28_x86_64.whl", "(>=2.14.0)")
    return bundle


def bare_machine(monkeypatch):
    """A machine with only torch 2.14.1 and numpy: nothing of the requirements, no torchvision, no detectron2."""
    monkeypatch.setattr(device_run, "is_installed", lambda name: False)
    monkeypatch.setattr(device_run, "importable", lambda module: False)
    monkeypatch.setattr(device_run, "installed_version", lambda name: "2.14.1" if name == "torch" else "-")


def plan_args(bundle, quick=False, build_ops=False):
    return argparse.Namespace(device="cpu", quick=quick, bundle=str(bundle), build_ops=build_ops, cuda_arch=None)


def test_plan_on_a_bare_machine(tmp_path, monkeypatch):
    bundle = stand_in_bundle(tmp_path)
    bare_machine(monkeypatch)
    monkeypatch.setattr(device_run, "EXTRA_BENCHMARKS", ())
    plan = device_run.make_plan(plan_args(bundle, quick=True), str(tmp_path / "work"), python=(3, 11))

    install = plan.install.argv
    assert install[1:4] == ["-m", "pip", "install"]
    assert {"--no-index", "--no-deps"} <= set(install)
    assert install[install.index("--find-links") + 1] == str(bundle / "wheels")
    assert install[install.index("--target") + 1] == str(tmp_path / "work" / "site")
    wanted = [r.name for r in device_run.read_requirements() if r.applies((3, 11))]
    assert install[-len(wanted) - 1 : -1] == wanted and "tomli" not in wanted
    assert install[-1].endswith("torchvision-0.29.1-cp311-cp311-manylinux_2_28_x86_64.whl")

    assert plan.pythonpath == [str(tmp_path / "work" / "site"), str(tmp_path / "work" / "detectron2")]
    assert plan.build is None
    (report,) = plan.benchmarks
    assert report.argv[1] == os.path.join(ROOT, "benchmarks", "gpu_report.py")
    options = report.argv[2:]
    assert options[:5] == ["--device", "cpu", "--quick", "--repeats", "1"]
    for option, name in device_run.REFERENCE_OPTIONS.items():
        assert options[options.index(option) + 1] == str(bundle / "references" / name)
    assert report.output == options[-1] == str(tmp_path / "work" / "gpu_report.md")


def test_plan_builds_the_operators_and_runs_the_other_benchmarks(tmp_path, monkeypatch):
    bundle = stand_in_bundle(tmp_path, references=("BRL",))
    bare_machine(monkeypatch)
    script = tmp_path / "op_count.py"
    script.write_text('parser.add_argument("--device")\nparser.add_argument("--scales")\n"--pairs" "--batch"\n')
    options = (("--pairs", "a", "b"), ("--batch", "4"), ("--absent",))
    quick_options = (("--quick",), ("--scales", "4:300"), ("--batch", "1"))
    extra = (("ops", str(script), 30, options, quick_options), ("absent", "absent.py", 30, (), ()))
    monkeypatch.setattr(device_run, "EXTRA_BENCHMARKS", extra)
    plan = device_run.make_plan(plan_args(bundle, build_ops=True), str(tmp_path / "work"), python=(3, 11))

    assert plan.build.argv[1:] == ["setup.py", "build_ext", "--inplace"]
    assert plan.build.cwd == str(tmp_path / "work" / "detectron2")
    assert plan.build.env["MAX_JOBS"] == str(os.cpu_count())
    report, ops = plan.benchmarks
    assert "--quick" not in report.argv and "--official-repo" not in report.argv and "--brl-repo" in report.argv
    assert ops.argv[1:] == [str(script), "--device", "cpu", "--pairs", "a", "b", "--batch", "4"] and ops.timeout == 30
    assert any("aLRPLoss does not exist" in note for note in plan.notes)
    assert "absent.py: not in this checkout, not run" in plan.notes
    quick = device_run.make_plan(plan_args(bundle, quick=True), str(tmp_path / "work"), python=(3, 11))
    quick_argv = [str(script), "--device", "cpu", "--pairs", "a", "b", "--batch", "4", "--scales", "4:300", "--batch"]
    assert quick.benchmarks[1].argv[1:] == quick_argv + ["1"]  # it has no --quick; the later --batch wins


def test_plan_names_what_the_bundle_lacks(tmp_path, monkeypatch):
    bundle = stand_in_bundle(tmp_path)
    (bundle / device_run.DETECTRON2_ARCHIVE).unlink()
    bare_machine(monkeypatch)
    with pytest.raises(device_run.BundleError) as error:  # the bundle's torchvision is for Python 3.11
        device_run.make_plan(plan_args(bundle), str(tmp_path / "work"), python=(3, 12))
    message = str(error.value)
    assert f"{bundle}/wheels holds no torchvision wheel for torch 2.14.1 and Python 3.12" in message
    assert f"{bundle}/{device_run.DETECTRON2_ARCHIVE} does not exist" in message


def module_file(module):
    base = os.path.join(ROOT, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def module_level_imports(path):
    """(absolute module, optional) of the imports that run when the file is imported: function bodies and
    ``if TYPE_CHECKING:`` blocks aside, and those inside a ``try`` that catches ImportError optional."""
    package = os.path.relpath(os.path.dirname(path), ROOT).replace(os.sep, ".")

    def visit(statements, optional):
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.Import):
                yield from ((alias.name, optional) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module
                yield base, optional
                yield from ((f"{base}.{alias.name}", optional) for alias in node.names)  # submodules
            elif isinstance(node, ast.If) and ast.unparse(node.test) in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}:
                yield from visit(node.orelse, optional)
            elif isinstance(node, ast.Try):
                catches = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
                guarded = optional or bool(catches & {"ImportError", "ModuleNotFoundError"})
                yield from visit(node.body, guarded)
                for handler in node.handlers:
                    yield from visit(handler.body, optional)
                yield from visit(node.orelse + node.finalbody, optional)
            else:
                for field in ("body", "orelse", "finalbody"):
                    yield from visit(getattr(node, field, None) or [], optional)

    with open(path) as f:
        yield from visit(ast.parse(f.read()).body, False)


def third_party_imports(entry):
    """{top-level module: a project file importing it} over the project modules that importing ``entry`` runs."""
    seen, found, queue = set(), {}, [entry]
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        for module, optional in module_level_imports(path):
            top = module.split(".")[0]
            if top in PROJECT_PACKAGES:
                parts = module.split(".")
                for depth in range(1, len(parts) + 1):  # the packages' __init__ run too
                    file = module_file(".".join(parts[:depth]))
                    if file is not None:
                        queue.append(file)
            elif not optional and top not in sys.stdlib_module_names:
                found.setdefault(top, os.path.relpath(path, ROOT))
    return found


def normalise(name):
    return name.lower().replace("_", "-")


def test_the_report_imports_only_what_the_device_run_installs():
    assert "cv2" in third_party_imports(os.path.join(ROOT, "tests", "d2", "test_augmentation.py"))  # it looks
    installed = {normalise(r.name) for r in device_run.read_requirements()}
    imports = third_party_imports(os.path.join(ROOT, REPORT_ENTRY))
    assert {"torch", "detectron2", "fvcore", "pytest"} <= set(imports)
    unserved = {
        module: path
        for module, path in imports.items()
        if module not in ASSUMED and normalise(DISTRIBUTIONS.get(module, module)) not in installed
    }
    assert not unserved, (
        f"imported at module level by the report's code, not installed by benchmarks/device_run.py: {unserved}. "
        "Import it where it is used, or add its package to benchmarks/device_requirements.txt (and to the bundle; "
        "DISTRIBUTIONS here where the module's name is not the package's)"
    )
