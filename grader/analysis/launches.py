"""The launch configuration each kernel actually got, and the occupancy it allowed.

The submission's library logs every launch (on the GPU the link wraps the runtime's launch
entry points; the emulator's shim logs its own launches), and the child sends the log of
each case and of the timed samples. This module turns the log of the timed launches (or,
without a timing, of the largest check) into results.Launch entries: the kernel's name (the
emulator knows a kernel only by its address, found here among the library's symbols), its
grid and block, and its occupancy: the runtime's figure on the GPU, else computed from
ptxas's registers and shared memory with the CUDA occupancy calculator's rules.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from grader.core.backend import BACKENDS, SmLimits
from grader.core.contract import CaseFrame, LaunchRecord, TimingFrame
from grader.core.objmemo import read_beside
from grader.core.results import Launch
from grader.toolchain import tools
from grader.toolchain.outcome import demangle

# Each architecture's multiprocessor limits, from every backend's table (core/backend.py): an
# architecture's name says its backend ("cpu", the emulator's target, has none).
ARCH_LIMITS: dict[str, SmLimits] = {arch: limits for b in BACKENDS.values() for arch, limits in b.architectures}


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def _warps(threads: int, limits: SmLimits) -> int:
    return -(-threads // limits.warp)


def blocks_per_sm(limits: SmLimits, *, threads: int, registers: int, shared_bytes: int) -> int:
    """How many blocks of `threads` threads fit on one SM at once: the least of the warp,
    block, register and shared-memory limits (0 when one block does not fit)."""
    if threads <= 0:
        return 0
    warps = _warps(threads, limits)
    by_warps = limits.max_warps // warps
    by_registers = limits.max_blocks
    if registers > 0:
        per_warp = _round_up(registers * limits.warp, limits.register_unit)
        if registers > limits.max_registers_per_thread or per_warp * _round_up(warps, limits.sub_partitions) > limits.registers:
            return 0
        warps_per_partition = (limits.registers // limits.sub_partitions) // per_warp
        by_registers = warps_per_partition * limits.sub_partitions // warps
    per_block = _round_up(shared_bytes + limits.shared_reserved_per_block, limits.shared_unit)
    by_shared = limits.shared_bytes // per_block
    return max(0, min(by_warps, limits.max_blocks, by_registers, by_shared))


def pick_log(frames: list, timed_cases: set[str]) -> tuple[list[LaunchRecord], bool]:
    """The launch log worth showing, and whether it is of the timed shape: the timed samples'
    (even empty: a kernel that skipped its timed launches shows none), else a check at the
    timed shape (the emulator's verification), else the largest check's. frames: the child's,
    typed (contract.py)."""
    timing = [f for f in frames if isinstance(f, TimingFrame)]
    if timing:
        return timing[-1].launches, True
    cases = [f for f in frames if isinstance(f, CaseFrame) and f.launches]
    at_timed = [f for f in cases if f.case in timed_cases]
    if at_timed:
        return at_timed[-1].launches, True
    if not cases:
        return [], False
    biggest = max(cases, key=lambda f: sum(r.launches * _threads(r.grid) * _threads(r.block) for r in f.launches))
    return biggest.launches, False


def _threads(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= max(int(d), 0)
    return n


def _symbols(library: Path | None) -> dict[int, str]:
    """The library's function symbols by address (static and anonymous-namespace kernels too)."""
    nm = tools.locate("nm")
    if library is None or nm is None:
        return {}

    def listed() -> list[tuple[int, str]]:
        out = subprocess.run([nm, "--defined-only", str(library)], capture_output=True, text=True).stdout
        return [(int(parts[0], 16), parts[2]) for parts in map(str.split, out.splitlines())
                if len(parts) == 3 and parts[1] in "tTwW"]

    found: dict[int, str] = {}
    for address, name in read_beside(library, "functions", listed):
        found.setdefault(address, name)
    return found


def resolve(log: list[LaunchRecord], *, timed_shape: bool, library: Path | None, resources: list, arch: str) -> list[Launch]:
    """results.Launch entries for a launch log: kernels named, occupancy filled in."""
    symbols = _symbols(library) if any(not r.kernel and r.offset for r in log) else {}
    by_name = {r.name: r for r in resources}
    limits = ARCH_LIMITS.get(arch)
    launches = []
    for r in log:
        mangled = r.kernel or symbols.get(int(r.offset), "")
        name = demangle(mangled) if mangled else "?"
        threads = _threads(r.block)
        res = by_name.get(name)
        registers = (res.registers or 0) if res else 0
        static_shared = (res.shared_bytes or 0) if res else 0
        per_sm, source = r.blocks_per_sm, "runtime"
        if per_sm is None and limits is not None and res is not None:
            per_sm, source = blocks_per_sm(limits, threads=threads, registers=registers,
                                           shared_bytes=static_shared + int(r.shared_bytes)), "computed"
        occupancy = None
        if per_sm is not None and limits is not None:
            occupancy = round(min(per_sm * _warps(threads, limits), limits.max_warps) / limits.max_warps, 4)
        launches.append(Launch(kernel=name, mangled=mangled, grid=[int(v) for v in r.grid],
                               block=[int(v) for v in r.block], shared_bytes=int(r.shared_bytes),
                               launches=int(r.launches), registers=registers or None,
                               blocks_per_sm=per_sm, occupancy=occupancy,
                               occupancy_source=source if per_sm is not None else None, timed_shape=timed_shape))
    return launches


def sm_count(arch: str, measured: int | None) -> int | None:
    """The GPU's SMs: as the run measured them, else the arch's flagship part."""
    if measured:
        return int(measured)
    limits = ARCH_LIMITS.get(arch)
    return limits.sms if limits else None


def launch_facts(launches: list[Launch], kernel: str, sms: int | None) -> dict:
    """The facts findings read about one kernel's launches, from the configuration launched most:
    threads_per_block, blocks, launch_configs, and with the occupancy blocks_per_sm, occupancy
    and gpu_fill (the share of the GPU's resident-block slots one launch fills, at most 1; only
    for launches at the timed shape, as a small check's grid says nothing of it)."""
    mine = [lc for lc in launches if lc.kernel == kernel]
    if not mine:
        return {}
    top = max(mine, key=lambda lc: (lc.launches, _threads(lc.grid)))
    facts = {"threads_per_block": _threads(top.block), "blocks": _threads(top.grid), "launch_configs": len(mine)}
    if top.blocks_per_sm is not None:
        facts["blocks_per_sm"] = top.blocks_per_sm
        if sms and top.blocks_per_sm > 0 and top.timed_shape:
            facts["gpu_fill"] = round(min(1.0, facts["blocks"] / (top.blocks_per_sm * sms)), 4)
    if top.occupancy is not None:
        facts["occupancy"] = top.occupancy
    return facts
