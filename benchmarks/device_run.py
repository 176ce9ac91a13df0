"""Every GPU figure of docs/performance.md from one call on a machine without network, in one report.

The machine needs python3 (3.10-3.13) with pip, torch (CUDA, any recent version), torchvision built for that torch
and numpy; everything else comes from ``device_bundle/`` (``tools/make_device_bundle.sh`` makes it here; the device
call carries it):

1. The machine: Python, torch, CUDA, the GPU, CPU cores, compilers, the installed versions of the bundle's packages
   (``environment.txt``, and the report's first section), recorded before anything is installed.
2. The packages of ``benchmarks/device_requirements.txt`` that are not installed, from the bundle's wheels
   (``pip install --no-index --no-deps --target``: the machine's own packages are left alone), and torchvision from a
   bundled wheel built for the machine's torch where it has none.
3. detectron2 from the vendored source in the bundle, used from its source tree. Without ``--build-ops`` its
   compiled operators are not built: the report needs none of them (detectron2's NMS and RoIAlign are torchvision's;
   its compiled operators are deformable convolution, rotated boxes and the fast COCO evaluation). With
   ``--build-ops`` they are built with all cores (``MAX_JOBS``) for the GPU's architecture; if the build fails or
   outlasts its time, the run goes on without them and the report says so.
4. ``benchmarks/gpu_report.py`` with every section, against the official loops and BRL from ``references/`` in the
   bundle; then ``benchmarks/op_count.py``, ``benchmarks/segmented_speed.py``, ``benchmarks/detr_loss_speed.py``,
   ``benchmarks/detr_switched_cost.py`` (the switched RT-DETR v2 R18's and D-FINE-S's loss function and step against
   the stock ones, 4 and 16 images of 640 px) and ``benchmarks/train_iter.py``'s RT-DETR v2 R18 and D-FINE-S pairs
   (4 images of 640 px) where the checkout has them (the DETR ones need the machine's scipy and transformers: the
   bundle does not carry them).

Writes ``report.md`` (one markdown report: the machine, the install, then each benchmark's output), ``device_run.log``
(every command's output) and ``environment.txt`` into ``--out`` (default ``$OUT``, else ``output/device_run``). Each
benchmark runs under a share of ``--budget`` seconds; one stopped at its limit keeps what it wrote.

    python3 benchmarks/device_run.py --out "$OUT"                  # on the GPU machine (docs/performance.md)
    python3 benchmarks/device_run.py --device cpu --quick --bundle B --out DIR    # the rehearsal on a CPU
    python3 benchmarks/device_run.py --dry-run       # what it would install and run; pip checks the bundle's wheels

Exit status: 0 when every benchmark that ran finished, 1 otherwise (the report says which), 2 on a bad bundle.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIREMENTS = os.path.join(ROOT, "benchmarks", "device_requirements.txt")
DETECTRON2_ARCHIVE = "detectron2-02b5c4e.tar.gz"
#: gpu_report.py's option -> the folder of references/ in the bundle (benchmarks/reference_losses.py's checkouts).
REFERENCE_OPTIONS = {"--official-repo": "aLRPLoss", "--ranksort-repo": "RankSortLoss", "--brl-repo": "BRL"}
Options = Tuple[Tuple[str, ...], ...]
#: benchmarks run after the report where the checkout has them: (title, script, seconds at most, the options always
#: added, the options added after them with --quick; each option only where the script has it).
EXTRA_BENCHMARKS: Tuple[Tuple[str, str, int, Options, Options], ...] = (
    ("Operations per call (`benchmarks/op_count.py`)", "benchmarks/op_count.py", 45, (), (("--cases", "32768:500"),)),
    (
        "A step's sets in one call (`benchmarks/segmented_speed.py`)",
        "benchmarks/segmented_speed.py",
        90,
        (),
        (("--sets", "5"), ("--repeats", "1")),
    ),
    (
        "DETR losses (`benchmarks/detr_loss_speed.py`)",
        "benchmarks/detr_loss_speed.py",
        90,
        (("--models",),),
        (("--quick",), ("--scales", "4:300"), ("--repeats", "1")),
    ),
    (
        "DETR: the switched model against the stock one, RT-DETR v2 R18 and D-FINE-S "
        "(`benchmarks/detr_switched_cost.py`)",
        "benchmarks/detr_switched_cost.py",
        45,
        (("--scales", "4:640", "16:640"), ("--repeats", "3")),
        (("--scales", "1:128"), ("--repeats", "1")),
    ),
    (
        "DETR training iteration, RT-DETR v2 R18 and D-FINE-S (`benchmarks/train_iter.py --pairs`)",
        "benchmarks/train_iter.py",
        60,
        (("--pairs", "rtdetr_v2_r18_rank_sort", "dfine_s_rank_sort"), ("--batch", "4"), ("--size", "640")),
        (("--batch", "1"), ("--size", "128"), ("--objects", "3"), ("--warmup", "0"), ("--iters", "1")),
    ),
)
_MISSING_MODULE = re.compile(r"^ModuleNotFoundError: No module named '([^']+)'", re.MULTILINE)
BUILD_OPS_SECONDS = 300
_MARKER = re.compile(r'^python_version\s*(<|<=|>|>=|==|!=)\s*"(\d+)\.(\d+)"$')


@dataclass(frozen=True)
class Requirement:
    name: str
    version: str
    marker: str = ""

    def applies(self, python: Tuple[int, int]) -> bool:
        """Whether the requirement's environment marker (``python_version <op> "X.Y"`` only) holds."""
        if not self.marker:
            return True
        match = _MARKER.match(self.marker)
        if match is None:
            raise ValueError(f"{REQUIREMENTS}: marker {self.marker!r} of {self.name}: only python_version is supported")
        op, major, minor = match.group(1), int(match.group(2)), int(match.group(3))
        bound = (major, minor)
        return {
            "<": python < bound,
            "<=": python <= bound,
            ">": python > bound,
            ">=": python >= bound,
            "==": python == bound,
            "!=": python != bound,
        }[op]


def read_requirements(path: str = REQUIREMENTS) -> List[Requirement]:
    """``name==version[; marker]`` lines; ``#`` starts a comment."""
    requirements = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            spec, _, marker = (part.strip() for part in line.partition(";"))
            name, separator, version = spec.partition("==")
            if not separator or not name.strip() or not version.strip():
                raise ValueError(f"{path}:{number}: {line!r} is not name==version")
            requirements.append(Requirement(name.strip(), version.strip(), marker))
    return requirements


def is_installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def installed_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def missing_requirements(requirements: Sequence[Requirement], python: Tuple[int, int]) -> List[Requirement]:
    return [r for r in requirements if r.applies(python) and not is_installed(r.name)]


def torchvision_wheel(wheels: str, torch_version: str, python: Tuple[int, int]) -> Optional[str]:
    """A bundled torchvision wheel for this Python built for this torch's release (its ``Requires-Dist: torch``
    names the same major.minor: torchvision 0.26 with torch 2.11, 0.29 with 2.14)."""
    release = tuple(torch_version.split("+")[0].split(".")[:2])
    tag = f"cp{python[0]}{python[1]}"
    for name in sorted(os.listdir(wheels)) if os.path.isdir(wheels) else []:
        if not (name.startswith("torchvision-") and f"-{tag}-" in name and name.endswith(".whl")):
            continue
        with zipfile.ZipFile(os.path.join(wheels, name)) as wheel:
            metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            text = wheel.read(metadata).decode()
        required = re.search(r"^Requires-Dist: torch\s*\(?\s*(?:==|>=)\s*(\d+)\.(\d+)", text, re.MULTILINE)
        if required is not None and required.groups() == release:
            return os.path.join(wheels, name)
    return None


class BundleError(ValueError):
    """The bundle cannot serve this machine (a wheel, the torchvision, detectron2's source missing)."""


@dataclass
class Step:
    """A command of the run: its title, arguments, seconds at most (0: what the run's budget leaves), and where its
    output goes in the report."""

    title: str
    argv: List[str]
    timeout: int
    cwd: str = ROOT
    output: Optional[str] = None  # a file the command writes its report to; else its standard output is reported
    env: Dict[str, str] = field(default_factory=dict)


@dataclass
class Plan:
    notes: List[str]
    install: Optional[Step]
    detectron2_source: Optional[str]  # the source tree on PYTHONPATH, or None when detectron2 is installed
    build: Optional[Step]
    benchmarks: List[Step]
    pythonpath: List[str]


def script_supports(path: str, option: str) -> bool:
    with open(path) as f:
        return f'"{option}"' in f.read()


def make_plan(args: argparse.Namespace, work: str, python: Tuple[int, int] = sys.version_info[:2]) -> Plan:
    """What the run installs and runs, from the bundle and what this interpreter (of version ``python``) has; raises
    ``BundleError`` naming what is missing when the bundle cannot serve it."""
    bundle = os.path.abspath(args.bundle)
    wheels = os.path.join(bundle, "wheels")
    problems: List[str] = []
    notes: List[str] = []

    site = os.path.join(work, "site")
    missing = missing_requirements(read_requirements(), python)
    to_install = [r.name for r in missing]
    if not importable("torchvision"):
        torch_version = installed_version("torch")
        wheel = torchvision_wheel(wheels, torch_version, python)
        if wheel is None:
            problems.append(
                f"torchvision is not installed and {wheels} holds no torchvision wheel for torch {torch_version} and "
                f"Python {python[0]}.{python[1]} (tools/make_device_bundle.sh --torchvision VERSION:PYTHON)"
            )
        else:
            to_install.append(wheel)
    install = None
    if to_install:
        notes.append("installed from the bundle: " + ", ".join(os.path.basename(n) for n in to_install))
        argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile"]
        argv += ["--disable-pip-version-check", "--find-links", wheels, "--target", site, *to_install]
        install = Step("install", argv, timeout=300)
    else:
        notes.append("installed from the bundle: nothing (every package was already there)")

    pythonpath = [site] if install else []
    source = None
    build = None
    if importable("detectron2"):
        notes.append(f"detectron2: the installed {installed_version('detectron2')}")
    else:
        archive = os.path.join(bundle, DETECTRON2_ARCHIVE)
        if not os.path.isfile(archive):
            problems.append(f"detectron2 is not installed and {archive} does not exist")
        source = os.path.join(work, "detectron2")
        pythonpath.append(source)
        if args.build_ops:
            jobs = str(os.cpu_count() or 1)
            env = {"MAX_JOBS": jobs}
            if args.device == "cuda":
                env["FORCE_CUDA"] = "1"
                if args.cuda_arch:
                    env["TORCH_CUDA_ARCH_LIST"] = args.cuda_arch
            argv = [sys.executable, "setup.py", "build_ext", "--inplace"]
            build = Step("detectron2's compiled operators", argv, BUILD_OPS_SECONDS, cwd=source, env=env)

    references = []
    for option, name in REFERENCE_OPTIONS.items():
        path = os.path.join(bundle, "references", name)
        if os.path.isdir(path):
            references += [option, path]
        else:
            notes.append(f"{path} does not exist: gpu_report.py reports its losses as not run")
    report = os.path.join(work, "gpu_report.md")
    argv = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_report.py"), "--device", args.device]
    argv += (["--quick", "--repeats", "1"] if args.quick else []) + references + ["--output", report]
    benchmarks = [Step("`benchmarks/gpu_report.py`", argv, timeout=0, output=report)]
    for title, script, seconds, options, quick_options in EXTRA_BENCHMARKS:
        path = os.path.join(ROOT, script)
        if not os.path.isfile(path):
            notes.append(f"{script}: not in this checkout, not run")
            continue
        argv = [sys.executable, path]
        if script_supports(path, "--device"):
            argv += ["--device", args.device]
        added = options + (quick_options if args.quick else ())
        argv += [word for option in added if script_supports(path, option[0]) for word in option]
        if script_supports(path, "--brl-repo") and os.path.isdir(os.path.join(bundle, "references", "BRL")):
            argv += ["--brl-repo", os.path.join(bundle, "references", "BRL")]
        benchmarks.append(Step(title, argv, timeout=seconds))
    if not os.path.isdir(bundle) and (install is not None or source is not None):
        problems.insert(0, f"the bundle {bundle} does not exist: make it with tools/make_device_bundle.sh")
    if problems:
        raise BundleError("\n".join(problems))
    return Plan(notes, install, source, build, benchmarks, pythonpath)


def environment_report() -> str:
    """The machine, as found before anything is installed."""
    lines = [
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- python: {platform.python_version()} ({sys.executable})",
        f"- platform: {platform.platform()}; {os.cpu_count()} CPU cores",
    ]
    try:
        import torch

        lines.append(
            f"- torch {torch.__version__}, CUDA {torch.version.cuda}, cuda available: {torch.cuda.is_available()}"
        )
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            lines.append(
                f"- GPU: {props.name}, compute capability {props.major}.{props.minor}, "
                f"{props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} multiprocessors"
            )
    except ImportError as error:
        lines.append(f"- torch: not importable ({error})")
    for tool, flag in (("nvcc", "--version"), ("gcc", "--version"), ("nvidia-smi", "-L")):
        path = shutil.which(tool)
        if path is None:
            lines.append(f"- {tool}: not found")
            continue
        result = subprocess.run([path, flag], capture_output=True, text=True, timeout=30)
        text = (result.stdout or result.stderr).strip().splitlines()
        lines.append(f"- {tool}: {text[-1] if tool == 'nvcc' and text else '; '.join(text[:2])}")
    names = ["torchvision", "numpy", "detectron2", "transformers", "opencv-python", "opencv-python-headless"]
    names += [r.name for r in read_requirements()]
    versions = ", ".join(f"{name} {installed_version(name)}" for name in names)
    lines.append(f"- installed before the run: {versions}")
    return "\n".join(lines)


def cuda_arch() -> Optional[str]:
    """The GPU's compute capability as TORCH_CUDA_ARCH_LIST writes it (9.0), or None without a GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(0)
    return f"{major}.{minor}"


class Runner:
    """Runs steps with a time limit each, their output into the log; keeps the run's deadline."""

    def __init__(self, log_path: str, env: Dict[str, str], budget: float):
        self.log = open(log_path, "a")
        self.env = env
        self.deadline = time.monotonic() + budget

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, step: Step, timeout: float) -> Tuple[Optional[int], float, str, str]:
        """(exit status or None when stopped at the limit, seconds, standard output, standard error)."""
        self.log.write(f"\n$ {shlex.join(step.argv)}  # cwd {step.cwd}, {timeout:.0f} s at most\n")
        self.log.flush()
        print(f"device_run: {step.title}: {timeout:.0f} s at most", flush=True)
        start = time.monotonic()
        process = subprocess.Popen(
            step.argv,
            cwd=step.cwd,
            env={**self.env, **step.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=max(timeout, 1))
            status: Optional[int] = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            status = None
        self.log.write(stdout + stderr)
        self.log.flush()
        return status, time.monotonic() - start, stdout, stderr


def tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def outcome(status: Optional[int], seconds: float) -> str:
    if status is None:
        return f"stopped at its time limit after {seconds:.0f} s"
    return f"finished in {seconds:.0f} s" if status == 0 else f"failed (exit status {status}) after {seconds:.0f} s"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="gpu_report.py's small sizes (a rehearsal)")
    parser.add_argument("--bundle", default=os.path.join(ROOT, "device_bundle"))
    parser.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "output", "device_run"))
    parser.add_argument("--work", help="where to install and unpack (default: a fresh folder under the temp dir)")
    parser.add_argument("--budget", type=float, default=450, help="seconds for the whole run")
    parser.add_argument("--build-ops", action="store_true", help="build detectron2's compiled operators")
    parser.add_argument("--dry-run", action="store_true", help="print the machine and the plan; install nothing")
    args = parser.parse_args(argv)
    started = time.monotonic()

    environment = environment_report()
    print(environment, flush=True)
    args.cuda_arch = cuda_arch()
    if args.device == "cuda" and args.cuda_arch is None and not args.dry_run:
        print("device_run: --device cuda but torch sees no CUDA device (--device cpu for a rehearsal)", file=sys.stderr)
        return 2
    work = os.path.abspath(args.work) if args.work else os.path.join(os.environ.get("TMPDIR", "/tmp"), "alrp_device")
    try:
        plan = make_plan(args, work)
    except BundleError as error:
        print("device_run: " + str(error).replace("\n", "\ndevice_run: "), file=sys.stderr)
        return 2
    pythonpath = os.pathsep.join(plan.pythonpath + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath}
    if args.dry_run:
        print("\n".join(["", *plan.notes, f"PYTHONPATH={pythonpath}"]))
        if plan.detectron2_source:
            print(f"unpack {os.path.join(args.bundle, DETECTRON2_ARCHIVE)} into {plan.detectron2_source}")
        for step in [plan.install, plan.build, *plan.benchmarks]:
            if step is not None:
                extra = " ".join(f"{k}={v}" for k, v in step.env.items())
                print(f"[{step.title}] (cd {step.cwd} && {extra + ' ' if extra else ''}{shlex.join(step.argv)})")
        if plan.install is not None:  # pip resolves every package from the bundle's wheels for this Python
            check = subprocess.run(plan.install.argv + ["--dry-run"], capture_output=True, text=True)
            if check.returncode != 0:
                print(f"device_run: the bundle cannot serve this Python:\n{check.stderr.strip()}", file=sys.stderr)
                return 2
            print("pip --dry-run: the bundle has a wheel of each package for this Python")
        return 0

    os.makedirs(args.out, exist_ok=True)
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    with open(os.path.join(args.out, "environment.txt"), "w") as f:
        f.write(environment + "\n")
    runner = Runner(os.path.join(args.out, "device_run.log"), env, args.budget)
    install_notes = list(plan.notes)
    if plan.install is not None:
        status, seconds, _, stderr = runner.run(plan.install, plan.install.timeout)
        if status != 0:
            print(f"{tail(stderr)}\ndevice_run: installing from the bundle {outcome(status, seconds)}", file=sys.stderr)
            return 2
        install_notes.append(f"pip install from the bundle {outcome(status, seconds)}")
    if plan.detectron2_source is not None:
        with tarfile.open(os.path.join(args.bundle, DETECTRON2_ARCHIVE)) as archive:
            archive.extractall(work, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        install_notes.append(f"detectron2: the vendored source ({DETECTRON2_ARCHIVE}), used from {work}/detectron2")
        if plan.build is None:
            install_notes.append("detectron2's compiled operators: not built (no --build-ops; the report needs none)")
        else:
            status, seconds, _, _ = runner.run(plan.build, min(plan.build.timeout, runner.remaining() / 3))
            check = subprocess.run([sys.executable, "-c", "from detectron2 import _C"], env=env, capture_output=True)
            compiled = "available" if check.returncode == 0 else "NOT available: the run goes on without them"
            install_notes.append(f"detectron2's compiled operators: build {outcome(status, seconds)}; {compiled}")

    sections = [
        f"# Device run ({args.device}{', --quick' if args.quick else ''})",
        "## The machine\n\n" + environment,
        "## Install\n\n" + "\n".join(f"- {note}" for note in install_notes),
    ]
    report_path = os.path.join(args.out, "report.md")

    def write_report() -> None:
        with open(report_path, "w") as f:
            f.write("\n\n".join(sections) + "\n")

    write_report()
    failures = 0
    reserved = sum(step.timeout for step in plan.benchmarks[1:])  # the report first, the others' shares kept
    for index, step in enumerate(plan.benchmarks):
        timeout = runner.remaining() - (reserved if index == 0 else 0)
        if timeout < 5:
            sections.append(f"## {step.title}\n\nnot run: the run's --budget of {args.budget:.0f} s was spent")
            failures += 1
            continue
        if step.timeout:
            timeout = min(timeout, step.timeout)
        status, seconds, stdout, stderr = runner.run(step, timeout)
        missing = _MISSING_MODULE.search(stderr)
        if index > 0 and status and missing is not None:  # not counted: what it needs is the machine's own
            module = missing.group(1)
            sections.append(f"## {step.title}\n\nnot run: it needs `{module}`, which this machine lacks (not carried)")
            write_report()
            continue
        failures += status != 0
        if step.output is not None:
            body = open(step.output).read().strip() if os.path.isfile(step.output) else "(no report written)"
            body = re.sub(r"^#", "##", body, flags=re.MULTILINE)  # its sections under this report's
        else:
            body = "```\n" + stdout.strip() + "\n```"
        if status != 0:
            body += (
                "\n\nIts last lines of standard error (all of them in device_run.log):\n\n```\n"
                + tail(stderr)
                + "\n```"
            )
        sections.append(f"## {step.title}: {outcome(status, seconds)}\n\n{body}")
        write_report()
    sections.append(f"Total: {time.monotonic() - started:.0f} s; every command's output is in device_run.log.")
    write_report()
    print(open(report_path).read())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
