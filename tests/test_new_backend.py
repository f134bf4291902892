"""A new GPU backend touches a known, short list of files (issue 62: the backend object owns every
GPU-specific fact).

Every fact that belongs to CUDA's GPU (the variable that picks its devices, the driver library, the
device files, the disassemblers, the architectures' names and limits, the profiler) is a field of
core/backend.py's Backend, and every other module asks the Backend it was handed. So a stand-in
GPU backend ("rocm-like" below) with its own facts reaches them through the same code, and a scan
of the package finds CUDA's names only in TOUCHED: the files a new backend changes, which
docs/architecture.md's "Adding a backend" names too. The scan reads the code's strings, not its
prose (docstrings, comments, help and doc_field texts), so explaining CUDA is free and assuming
it is not.
"""

import ast
import re
import shutil
import stat
from pathlib import Path

import pytest

from grader.core.backend import BACKENDS, Backend, ChildClasses, Disassembler, SmLimits, Toolchain

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "grader"

# The files a new GPU backend touches (besides the modules of its own it adds: its child classes
# under run/child/, its profiler's reader): at most 8, in docs/architecture.md's words too.
TOUCHED = {
    "grader/core/backend.py": "its Backend: every fact of its GPU as a field, and its entry in BACKENDS",
    "grader/toolchain/tools.py": "where its tools are found, their install hints and version lines",
    "grader/toolchain/gpuinfo.py": "its GPU's probe, where `--backend auto` should pick it",
    "grader/toolchain/build.py": "its compiler's build (the device code it leaves, the defaults)",
    "grader/toolchain/devicecode.py": "the reader of its device code's symbols (the statics a kernel keeps)",
    "grader/toolchain/faults.py": "its compiler's own error lines, told apart from the student's",
    "grader/toolchain/hostlibs.py": "the stand-in driver the recorder without a GPU loads",
    "grader/run/profiling.py": "its profiler's command line and counters (or a reader of its own beside it)",
}
# Files that still name a CUDA fact and are to ask the backend instead (each with the field it
# should read): the command line's and the grade's, being reworked beside this list (explain moves
# from cli/student.py to cli/review.py); to be emptied, not added to.
PENDING: dict[str, str] = {}

# The names that say CUDA: its device variable, driver, device files, management tool and library,
# toolkit home, compiler, disassemblers, profiler, and an architecture ("sm_90", not a header's
# "sm_20_atomic_functions.h").
CUDA_NAMES = re.compile(r"CUDA_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES|CUDA_HOME|libcuda|libnvidia-ml|/dev/nvidia|"
                        r"nvidia-smi|cuobjdump|nvdisasm|\bnvcc\b|\bncu\b|\bsm_\d+\b")
# Every call and type of CUDA's runtime and driver (cudaMalloc, cuLaunchKernel, cudaStream_t, the
# runtime's own __cudaRegisterFunction): cu or cuda, then a capital, where no letter or digit comes
# before (underscores may). Read in the code's strings (a regex's escapes, \bcudaMemset, blanked
# first) and in its identifiers (driver.cuInit, a def's name).
CUDA_CALLS = re.compile(r"(?<![A-Za-z0-9])_*cu(?:da)?[A-Z]\w*")
_ESCAPE = re.compile(r"\\[A-Za-z]")
# The modules that are a backend's own and may name its runtime's calls besides the files a new
# backend touches (TOUCHED): its child classes' (Backend.child), where the child drives its device
# through the driver. Every other call a step names is its Backend's api (core/backend.py's Api).
OWN = {f"grader/{m.removeprefix('grader.').replace('.', '/')}.py" for b in BACKENDS.values() for m in b.child.modules()}


def _prose(tree: ast.AST) -> set[int]:
    """The string constants that are prose: docstrings, and the texts of help=, doc= and doc_field."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            texts = list(node.args) if name in ("doc_field", "_doc") else []
            texts += [k.value for k in node.keywords if k.arg in ("help", "doc")]
            found |= {id(c) for t in texts for c in ast.walk(t)}
    return found


def cuda_names(root: Path) -> dict[str, list[str]]:
    """Each module under root/grader whose code (not its prose) names a CUDA fact: path -> 'line: name'."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "grader").rglob("*.py")):
        tree = ast.parse(path.read_text())
        prose = _prose(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                for name in sorted(set(CUDA_NAMES.findall(node.value))):
                    found.setdefault(path.relative_to(root).as_posix(), []).append(f"{node.lineno}: {name}")
    return found


def _identifiers(node: ast.AST) -> list[str]:
    """The names node gives or uses: a variable, an attribute, a def's, a parameter's, a keyword's, an import's."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg or ""]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    return []


def cuda_calls(root: Path) -> dict[str, list[str]]:
    """Each module under root/grader whose code (its strings but prose, its identifiers) names a call
    or type of CUDA's runtime or driver: path -> 'line: name', each name once a line."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "grader").rglob("*.py")):
        tree = ast.parse(path.read_text())
        prose = _prose(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                texts = [_ESCAPE.sub(" ", node.value)]
            else:
                texts = _identifiers(node)
            for name in sorted({n for t in texts for n in CUDA_CALLS.findall(t)}):
                found.setdefault(path.relative_to(root).as_posix(), []).append(f"{node.lineno}: {name}")
    return found


def test_a_new_backend_touches_at_most_eight_files():
    assert len(TOUCHED) <= 8


def test_cuda_is_named_only_in_the_files_a_new_backend_touches():
    found = cuda_names(ROOT)
    elsewhere = {f: names for f, names in found.items() if f not in TOUCHED and f not in PENDING}
    assert elsewhere == {}, "these modules assume CUDA: ask the Backend they are handed (core/backend.py)"
    # (a file not in this tree is not counted: the build's modules were being split out of build.py)
    gone = sorted(f for f in TOUCHED if f not in found and (ROOT / f).exists())
    assert gone == [], "no longer names a CUDA fact: take it off TOUCHED (and docs/architecture.md's list)"


def test_cuda_calls_are_named_only_in_the_backends_own_modules():
    """The screen's rules, the recorder's wrapped entry points, the replay's and the messages' calls
    are the Backend's api (core/backend.py); the driver's calls are its child classes'."""
    found = cuda_calls(ROOT)
    elsewhere = {f: names for f, names in found.items() if f not in TOUCHED and f not in OWN}
    assert elsewhere == {}, "these modules name CUDA's calls: read them from the Backend's api (core/backend.py)"
    assert "grader/core/backend.py" in found and "grader/run/child/measurer.py" in found    # the scan reads them


def _planted_copy(root, text: str) -> None:
    """A copy of the package under root with one module more, grader/verdict/planted.py, holding text."""
    shutil.copytree(PACKAGE, root / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "grader" / "verdict" / "planted.py").write_text(text)


def test_the_call_scan_finds_calls_planted_in_strings_patterns_and_identifiers(tmp_path):
    _planted_copy(tmp_path, '"""Refuses cudaStreamCreate (prose: not counted)."""\n'
                            "import re\n\n"
                            "# cudaMalloc in a comment: not counted\n"
                            'RULE = re.compile(r"\\bcudaMemset\\w*|cuGraphLaunch")\n'
                            "def f(driver):\n"
                            "    return driver.cuInit(0), '__cudaRegisterFunction', 'cuda_fp16.h', 'cuobjdump', 'curand'\n")
    found = cuda_calls(tmp_path)
    assert sorted(found["grader/verdict/planted.py"]) == ["5: cuGraphLaunch", "5: cudaMemset",
                                                          "7: __cudaRegisterFunction", "7: cuInit"]
    assert {f: n for f, n in found.items() if f != "grader/verdict/planted.py"} == cuda_calls(ROOT)


def test_the_scan_finds_a_cuda_name_planted_in_a_copy_and_lets_prose_be(tmp_path):
    _planted_copy(tmp_path, '"""Reads CUDA_VISIBLE_DEVICES, as nvcc and sm_90 do (prose: not counted)."""\n'
                            "import os\n\n"
                            "# the first GPU of /dev/nvidia0 (a comment: not counted)\n"
                            'DEVICE = os.environ.get("CUDA_VISIBLE_DEVICES", "0")\n'
                            'ARCH = f"sm_{9}0" if DEVICE else "sm_90"\n'
                            'HEADER = "sm_20_atomic_functions.h"\n')
    found = cuda_names(tmp_path)
    assert found["grader/verdict/planted.py"] == ["5: CUDA_VISIBLE_DEVICES", "6: sm_90"]
    assert {f: n for f, n in found.items() if f != "grader/verdict/planted.py"} == cuda_names(ROOT)


def _touched_in_the_docs() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Adding a backend", 1)[1].split("\n## ", 1)[0]
    listed = section.split("It touches these files", 1)[1].split("\n\n", 1)[0]
    return {"grader/" + p for p in re.findall(r"`([a-z_/]+\.py)`", listed) if not p.startswith("tests/")}


def test_the_docs_name_the_same_files():
    assert _touched_in_the_docs() == set(TOUCHED)


# The stand-in: a GPU with its own device variable, driver, device files, disassemblers and
# architectures; nothing of it is CUDA's.
ROCM_LIKE = Backend(
    "rocm-like", about="a stand-in GPU backend",
    toolchain=Toolchain(compiler="hipcc", flags=("-O3", "--offload-arch={arch}", "-fPIC"),
                        reference_flags=("-O3", "--offload-arch={arch}", "-fPIC"), library_flags=("-fPIC",),
                        alone_flags=("-fsyntax-only",), templates="hip", device_code="hsaco", profiler="rocprof",
                        disassembler=Disassembler(extract=("roc-obj", "-d", "{object}"), extracted="*.hsaco",
                                                  listing=("llvm-objdump", "-d", "-l", "{file}"),
                                                  install="install ROCm's llvm tools")),
    child=ChildClasses(run="test_replay:_Fake"), on_gpu=True, times=True,
    device_files=("/dev/kfd", "/dev/dri/renderD"), visible_devices="ROCR_VISIBLE_DEVICES",
    environment=("ROCR_VISIBLE_DEVICES", "ROCM_PATH"), driver_library="libhsa-runtime64.so.1",
    default_arch="gfx942", arch_name="gfx{major}{minor}2",
    architectures=(("gfx942", SmLimits(max_warps=32, max_blocks=32, sms=304, warp=64)),))


def test_a_gpu_backend_without_device_files_or_a_device_variable_is_refused_at_definition():
    """The recorder without a GPU is checked to hold none of its backend's device files: with none
    named, another vendor's GPU would pass that check without anything being checked."""
    fields = dict(name="other", about="x", toolchain=ROCM_LIKE.toolchain, child=ROCM_LIKE.child, on_gpu=True)
    with pytest.raises(ValueError, match="names no device_files"):
        Backend(**fields, visible_devices="OTHER_VISIBLE_DEVICES")
    with pytest.raises(ValueError, match="names no visible_devices"):
        Backend(**fields, device_files=("/dev/other",))
    assert Backend(name="cpu-like", about="x", toolchain=ROCM_LIKE.toolchain, child=ROCM_LIKE.child).device_files == ()
    assert all(b.device_files and b.visible_devices and b.driver_library for b in BACKENDS.values() if b.on_gpu)


def test_the_stand_ins_facts_are_what_the_lanes_the_child_and_the_architecture_read(monkeypatch):
    from grader.run import lanes, sandbox

    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "3,1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert lanes.default_device(ROCM_LIKE) == "3" and lanes.visible_devices(ROCM_LIKE) == ["3", "1"]
    env = sandbox._child_environment(ROCM_LIKE, None, home="/tmp", torch=False)     # its own children's
    assert env["ROCR_VISIBLE_DEVICES"] == "3,1" and "CUDA_VISIBLE_DEVICES" not in env
    assert ROCM_LIKE.arch_of(9, 4) == "gfx942" and ROCM_LIKE.limits("gfx942").warp == 64
    assert ROCM_LIKE.limits("sm_90") is None and ROCM_LIKE.target("gfx942") == "gfx942"


def test_the_recorders_check_reads_the_backends_device_files(tmp_path):
    from grader.run.child.walls import gpu_files_open

    held = tmp_path / "kfd"
    with open(held, "w"):
        assert gpu_files_open((str(held),)) == [str(held)]
        assert gpu_files_open((str(tmp_path / "other"),)) == []


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {folder / 'ran'}\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_the_disassembly_runs_the_backends_own_tools_with_their_arguments(tmp_path, monkeypatch):
    from grader.analysis import sass

    _tool(tmp_path, "roc-obj", "echo code > kernels.hsaco")
    _tool(tmp_path, "llvm-objdump", "exit 0")
    monkeypatch.setattr(sass, "locate", lambda name: "/bin/true" if name == "objdump" else
                        str(tmp_path / name) if (tmp_path / name).exists() else None)
    obj = tmp_path / "main.o"
    obj.write_bytes(b"o")
    assert sass.analyse(obj, launcher=None, default_kernel="k", resources=[], backend=ROCM_LIKE) == []
    ran = (tmp_path / "ran").read_text().splitlines()
    assert ran[0] == f"{tmp_path / 'roc-obj'} -d {obj}"
    assert ran[1].startswith(f"{tmp_path / 'llvm-objdump'} -d -l ") and ran[1].endswith("/kernels.hsaco")
    (tmp_path / "llvm-objdump").unlink()
    (tmp_path / "sass.json").unlink()
    said = sass.analyse(obj, launcher=None, default_kernel="k", resources=[], backend=ROCM_LIKE)
    assert said == "the GPU code's disassemblers (roc-obj, llvm-objdump) are not installed: install ROCm's llvm tools"
