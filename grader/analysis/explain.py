"""`grader explain`: what a submission's compiled code does that costs it, without running it.

Compiles the file with nvcc (nothing is run, so nothing is screened), reads its SASS, and
returns the launched kernels' costly instructions under the source lines they come from,
with the rubric's findings (without a GPU run there are no measured figures).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.core.backend import Backend
from grader.analysis import findings, sass
from grader.toolchain.build import build_submission
from grader.toolchain.outcome import compile_message
from grader.core.errors import InfrastructureError, UsageError
from grader.core.results import FindingEntry
from grader.exercises.rubric import Rubric
from grader.core.source import SourceProblem, read_submission


@dataclass(frozen=True)
class Explanation:
    kernels: list[sass.KernelCode]
    findings: list[FindingEntry]
    source_lines: list[str]
    problem: str = ""            # why there is nothing to explain (a compile error), else empty


def explain_submission(path: Path, *, rubric: Rubric, backend: Backend, arch: str = "sm_90") -> Explanation:
    """backend: the one whose build holds the GPU code the findings read (the command line's CUDA)."""
    sub = read_submission(path, rubric.kernel.launcher_name, rubric.kernel.signature)
    if isinstance(sub, SourceProblem):
        raise UsageError(sub.message)
    build = build_submission(sub, rubric, backend=backend, arch=arch)
    lines = sub.text.splitlines()
    if not build.ok:
        return Explanation([], [], lines, problem=f"{path.name} did not compile:\n{compile_message(build, path)}")
    kernels = sass.analyse(build.object, launcher=rubric.kernel.launcher_name if sub.has_launcher else None,
                           default_kernel=rubric.kernel.name, resources=[vars(r) for r in build.resources])
    if isinstance(kernels, str):
        raise InfrastructureError(kernels)
    return Explanation(kernels, findings.explain(kernels, rubric, None, ""), lines)


def render(ex: Explanation, file_name: str) -> str:
    """Plain text: each launched kernel's costly instructions under their source lines, then the findings."""
    if ex.problem:
        return ex.problem + "\n"
    out = []
    for k in ex.kernels:
        f = k.facts
        state = "launched" if k.launched else "not launched by the launcher"
        out.append(f"{k.name} ({state}; {f.get('registers', '?')} registers, loads {f.get('global_loads')} x "
                   f"{f.get('max_load_bytes')} bytes, stores {f.get('global_stores')} x {f.get('max_store_bytes')} bytes)")
        last_line = object()
        pad = max((len(ins.text) for _, ins in k.costly), default=0)     # the column the longest instruction needs
        for what, ins in k.costly:
            if ins.line != last_line:
                src = ex.source_lines[ins.line - 1].strip() if ins.line and ins.line <= len(ex.source_lines) else ""
                out.append(f"  {file_name}:{ins.line}  {src}" if ins.line else "  (CUDA's own code)")
                last_line = ins.line
            out.append(f"      {ins.offset:04x}  {ins.text:<{pad}}  {what}")
        out.append("")
    if ex.findings:
        out.append("What the compiled code shows:")
        for fe in ex.findings:
            out += [f"- {fe.code}: {fe.message}", f"  {fe.advice}"]
    else:
        out.append("Nothing in the compiled code stands out: loads are wide, no 64-bit division, no double "
                   "precision, no local memory, no needless barrier.")
    return "\n".join(out) + "\n"
