"""Reading a submission's machine code (SASS): the facts behind its speed.

The nvcc object is split into its cubin (cuobjdump -xelf) and disassembled with line
information (nvdisasm -g), so every instruction carries the student's source line. For
each kernel this counts what costs an elementwise kernel: global loads and stores and their
width, 64-bit division or remainder subroutines, double-precision instructions, local
memory, barriers and shared memory. Which kernels a launcher actually launches is read
from the object's relocations, so a kernel the launcher never calls is not judged.

The tools and their arguments are the backend's (core/backend.py's Toolchain.disassembler; for
CUDA they come from the CUDA toolkit, or from the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm
packages on a machine without it). Without them there are no facts, and the report says so.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.core.backend import Backend, Disassembler
from grader.toolchain import gpuinfo
from grader.toolchain.outcome import KernelResources, demangle
from grader.toolchain.tools import locate

_FORMAT = 2                       # bump when the cached analysis changes shape


@dataclass
class Instruction:
    offset: int
    text: str
    line: int | None              # the student's source line, when the instruction comes from submission.cu

    @property
    def opcode(self) -> str:
        return self.text.split()[0] if self.text else ""


@dataclass
class KernelCode:
    mangled: str
    name: str                     # as the student wrote it
    launched: bool
    facts: dict = field(default_factory=dict)
    costly: list[tuple[str, Instruction]] = field(default_factory=list)     # (what it costs, the instruction)


def _width(opcode: str) -> int:
    parts = opcode.split(".")
    for p in parts:
        if p in ("128", "64"):
            return int(p) // 8
        if p in ("U8", "S8"):
            return 1
        if p in ("U16", "S16"):
            return 2
    return 4


def _cost(text: str) -> str | None:
    """What an instruction costs an elementwise kernel, or None (a CALL's text names its target)."""
    op = text.split()[0] if text else ""
    if op.startswith(("LDG", "LD.E")):
        return f"{_width(op)}-byte global load"
    if op.startswith(("STG", "ST.E")):
        return f"{_width(op)}-byte global store"
    if op.startswith("CALL") and re.search(r"__cuda_sm\d+_(rem|div)_[us]64", text):
        return "64-bit division subroutine"
    if op.startswith("I2F.U64.RP") or op.startswith("I2F.S64.RP"):
        return "64-bit division subroutine"
    if re.match(r"^(DFMA|DADD|DMUL|DSETP|DMNMX|DMMA)|^F2F\.F64|^F2F\.F32\.F64|^I2F\.F64|^F2I\.F64|^MUFU\.\w+64H", op):
        return "double precision"
    if op.startswith(("LDL", "STL")):
        return "local memory"
    if op.startswith("BAR"):
        return "barrier"
    if op.startswith(("LDS", "STS")):
        return "shared memory"
    return None


def _parse(listing: str) -> dict[str, list[Instruction]]:
    """Instructions of each kernel section of `nvdisasm -g` output, with source lines."""
    kernels: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    line: int | None = None
    for raw in listing.splitlines():
        m = re.match(r"^\s*\.text\.(\S+):\s*$", raw)
        if m:
            current = kernels.setdefault(m.group(1), [])
            line = None
            continue
        m = re.match(r'^\s*//## File "([^"]+)", line (\d+)', raw)
        if m:
            line = int(m.group(2)) if Path(m.group(1)).name == "submission.cu" else None
            continue
        m = re.match(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", raw)
        if m and current is not None:
            text = " ".join(re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip()).split())      # drop a predicate guard
            current.append(Instruction(int(m.group(1), 16), text, line))
    return kernels


def _facts(instructions: list[Instruction], resources: KernelResources | None) -> tuple[dict, list]:
    costly = []
    loads, stores = [], []
    counts = dict.fromkeys(("div64", "double_ops", "local_ops", "barriers", "shared_ops"), 0)
    for ins in instructions:
        what = _cost(ins.text)
        if what is None:
            continue
        costly.append((what, ins))
        if what.endswith("global load"):
            loads.append(_width(ins.opcode))
        elif what.endswith("global store"):
            stores.append(_width(ins.opcode))
        elif what == "64-bit division subroutine":
            counts["div64"] += 1
        elif what == "double precision":
            counts["double_ops"] += 1
        elif what == "local memory":
            counts["local_ops"] += 1
        elif what == "barrier":
            counts["barriers"] += 1
        elif what == "shared memory":
            counts["shared_ops"] += 1
    facts = {"global_loads": len(loads), "max_load_bytes": max(loads, default=0),
             "min_load_bytes": min(loads, default=0), "global_stores": len(stores),
             "max_store_bytes": max(stores, default=0), **counts,
             "registers": (resources.registers if resources else None) or 0,
             "spill_bytes": ((resources.spill_stores or 0) + (resources.spill_loads or 0)) if resources else 0}
    return facts, costly


def _demangled_base(mangled: str) -> str:
    return demangle(mangled)


def _launched(obj: Path, objdump: str, launcher: str | None, default_kernel: str,
              mangled_names: list[str]) -> set[str]:
    """The kernels the harness launches: the default kernel, or those reachable from the
    launcher through the object's calls (relocations inside each host function)."""
    if not launcher:
        return {m for m in mangled_names if _demangled_base(m) == default_kernel}
    listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True).stdout
    calls: dict[str, set[str]] = {}
    functions = []
    owner = None
    for row in listing.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", row)
        if m:
            owner = m.group(1)
            functions.append(owner)
            continue
        m = re.search(r"\b(call|jmp)\w*\s+[0-9a-f]+ <([^>+]+)(\+0x[0-9a-f]+)?>", row)
        if m and owner:
            calls.setdefault(owner, set()).add(m.group(2))
        for ref in re.findall(r"# [0-9a-f]+ <([^>+]+)", row):     # addresses taken (a kernel passed by pointer)
            if owner:
                calls.setdefault(owner, set()).add(ref)
    entry = next((name for name in functions if _demangled_base(name) == launcher or name == launcher), None)
    if entry is None:
        return set(mangled_names)
    seen, todo = set(), [entry]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo.extend(calls.get(f, ()))
    launched = set()
    for m in mangled_names:
        if any(s == m or ("__device_stub__" in s and m[2:] in s) for s in seen):
            launched.add(m)
    return launched or set(mangled_names)


def analyse(obj: Path, *, launcher: str | None, default_kernel: str,
            resources: list[KernelResources], backend: Backend | None = None) -> list[KernelCode] | str:
    """Every kernel's facts (cached beside the object); a string saying why when it cannot be done.
    backend: the one that built obj (its disassembler reads it); the GPU backend `auto` picks when None."""
    cache = obj.parent / "sass.json"
    if cache.exists():
        try:
            data = json.loads(cache.read_text())
            if data.get("format") == _FORMAT and data.get("launcher") == launcher:
                return [_kernel_from_json(k) for k in data["kernels"]]
        except (ValueError, KeyError, TypeError):
            pass
    reader = (backend or gpuinfo.GPU).toolchain.disassembler
    if reader is None:
        return f"the {backend} backend has no disassembler for its build"
    listing, why = _disassembled(obj, reader)
    if listing is None:
        return why
    objdump = locate("objdump")
    if not objdump:
        return "objdump is not installed (binutils): it tells which kernels the launcher launches"
    sections = _parse(listing)
    kernels_only = {m: ins for m, ins in sections.items() if not m.startswith("$")}
    by_name = {r.name: r for r in resources}
    launched = _launched(obj, objdump, launcher, default_kernel, list(kernels_only))
    result = []
    for mangled, instructions in kernels_only.items():
        name = _demangled_base(mangled)
        facts, costly = _facts(instructions, by_name.get(name))
        result.append(KernelCode(mangled, name, mangled in launched, facts, costly))
    try:
        cache.write_text(json.dumps({"format": _FORMAT, "launcher": launcher,
                                     "kernels": [_kernel_to_json(k) for k in result]}))
    except OSError:
        pass
    return result


def _disassembled(obj: Path, reader: Disassembler) -> tuple[str | None, str]:
    """(obj's GPU code as the backend's disassembler lists it, ""), or (None, why it cannot)."""
    extract, listing = (locate(tool) for tool in reader.tools)
    if not extract or not listing:
        return None, f"the GPU code's disassemblers ({', '.join(reader.tools)}) are not installed: {reader.install}"
    with tempfile.TemporaryDirectory(prefix="grader-sass-") as tmp:
        args = [extract, *(a.format(object=obj.resolve()) for a in reader.extract[1:])]
        got = subprocess.run(args, cwd=tmp, capture_output=True, text=True)
        files = sorted(Path(tmp).glob(reader.extracted))
        if got.returncode != 0 or not files:
            return None, f"{reader.tools[0]} found no GPU code in the object: {got.stderr.strip()[:300]}"
        listed = subprocess.run([listing, *(a.format(file=files[-1]) for a in reader.listing[1:])],
                                capture_output=True, text=True)
        if listed.returncode != 0:
            return None, f"{reader.tools[1]} failed: {listed.stderr.strip()[:300]}"
    return listed.stdout, ""


def _kernel_to_json(k: KernelCode) -> dict:
    return {"mangled": k.mangled, "name": k.name, "launched": k.launched, "facts": k.facts,
            "costly": [[what, asdict(ins)] for what, ins in k.costly]}


def _kernel_from_json(d: dict) -> KernelCode:
    return KernelCode(d["mangled"], d["name"], d["launched"], d["facts"],
                      [(what, Instruction(**ins)) for what, ins in d["costly"]])
