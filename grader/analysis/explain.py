"""`grader explain`: what a submission's compiled code does that costs it, without running it.

Compiles the file with the backend's compiler (nvcc; nothing is run, so nothing is screened), reads its SASS, and
returns the launched kernels' costly instructions under the source lines they come from,
with the rubric's findings (without a GPU run there are no measured figures).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.analysis import findings, sass
from grader.core.backend import Backend
from grader.core.errors import InfrastructureError, UsageError
from grader.core.results import CountersSummary, FindingEntry
from grader.core.source import SourceProblem, read_submission
from grader.exercises.rubric import Rubric
from grader.toolchain.build import build_submission
from grader.toolchain.outcome import compile_message


@dataclass(frozen=True)
class Explanation:
    kernels: list[sass.KernelCode]
    findings: list[FindingEntry]
    source_lines: list[str]
    problem: str = ""            # why there is nothing to explain (a compile error), else empty


def explain_submission(path: Path, *, rubric: Rubric, backend: Backend, arch: str | None = None) -> Explanation:
    """backend: the one whose build holds the GPU code the findings read (the command line's CUDA);
    arch: what it is built for (the backend's default_arch when None)."""
    sub = read_submission(path, rubric.kernel.launcher_name, rubric.kernel.signature)
    if isinstance(sub, SourceProblem):
        raise UsageError(sub.message)
    build = build_submission(sub, rubric, backend=backend, arch=arch or backend.default_arch)
    lines = sub.text.splitlines()
    if not build.ok:
        return Explanation([], [], lines, problem=f"{path.name} did not compile:\n{compile_message(build, sub)}")
    kernels = sass.analyse(build.object, launcher=rubric.kernel.launcher_name if sub.has_launcher else None,
                           default_kernel=rubric.kernel.name, resources=build.resources, backend=backend)
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


def _num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def render_counters(counters: CountersSummary | None, found: list[FindingEntry], graded: str) -> str:
    """`grader explain --counters`: what the hardware counted on the timed call (the grade that read
    it says graded: its outcome and fraction), each kernel's figures, then the counters' findings;
    or why there are none."""
    if counters is None or not counters.kernels:
        why = counters.problem if counters is not None and counters.problem else "the grade read none"
        return f"\nNo counters ({graded}): {why}\n"
    out = [f"\nWhat the hardware counted ({counters.tool or 'Nsight Compute'}, the timed call replayed once more; "
           f"{graded}; never the fraction or the tier):"]
    for k in counters.kernels:
        out.append(f"  {k.kernel}: {k.dram_pct:.1f}% of DRAM peak ({k.dram_gbps:.0f} GB/s), "
                   f"{_num(k.load_sectors_per_request)} sectors per load request (ideal {_num(k.load_ideal)}), "
                   f"{_num(k.store_sectors_per_request)} per store (ideal {_num(k.store_ideal)}), warps active "
                   f"{_num(k.achieved_occupancy_pct)}% of {_num(k.theoretical_occupancy_pct)}% possible")
    if counters.dram_over_model is not None:
        out.append(f"  DRAM bytes: {counters.dram_over_model} x the byte model's")
    said = [fe for fe in found if fe.source == "counters"]
    if said:
        out.append("What the counters show:")
        for fe in said:
            out += [f"- {fe.code}: {fe.message}", f"  {fe.advice}"]
    else:
        out.append("Nothing the counters measured stands out: loads and stores use the sectors a warp needs, and "
                   "the SMs keep enough warps in flight.")
    return "\n".join(out) + "\n"
